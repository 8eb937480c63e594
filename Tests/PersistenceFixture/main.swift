import Persistence

print(StoreValue.null)
