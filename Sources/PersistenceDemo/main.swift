import Persistence

print("persistence demo: \(StoreValue.text("starting"))")
