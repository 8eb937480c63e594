import Foundation
import Persistence
import TestScratch
import Testing

enum Mood: String, AttributeValue {
    case calm, busy
}

final class Everything: ManagedObject {
    @Attribute var text = ""
    @Attribute var int = 0
    @Attribute var int64: Int64 = 0
    @Attribute var int32: Int32 = 0
    @Attribute var double = 0.0
    @Attribute var flag = false
    @Attribute var date = Date(timeIntervalSince1970: 0)
    @Attribute var data = Data()
    @Attribute var uuid = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    @Attribute var mood = Mood.calm
    @Attribute var optional: String?
}

@Test(arguments: [
    ("", Data()),
    ("naïve café 日本語 🎨", Data([0, 1, 2, 255])),
    ("nul\u{0}inside", Data(repeating: 7, count: 100_000)),
    ("a\u{301}ccent (NFD)", Data([0])),
])
func everyAttributeTypeRoundTripsExactly(text: String, data: Data) throws {
    let directory = ScratchDirectory.path("types")
    let url = directory.appending(path: "store.sqlite")
    let id: ManagedObjectID
    let uuid = UUID()
    let date = Date(timeIntervalSince1970: 1_700_000_000.123)
    do {
        let container = try PersistentContainer(storeURL: url, schema: try Schema([Everything.self]))
        let context = container.newBackgroundContext()
        let e = Everything(context: context)
        e.text = text
        e.int = -42
        e.int64 = .max
        e.int32 = .min
        e.double = -0.5
        e.flag = true
        e.date = date
        e.data = data
        e.uuid = uuid
        e.mood = .busy
        e.optional = nil
        try context.save()
        id = e.objectID
        container.close()
    }
    let container = try PersistentContainer(storeURL: url, schema: try Schema([Everything.self]))
    let e = try container.newBackgroundContext().existingObject(with: id, as: Everything.self)
    #expect(Array(e.text.utf8) == Array(text.utf8))  // byte-exact: NFD stays NFD
    #expect(e.int == -42 && e.int64 == .max && e.int32 == .min)
    #expect(e.double == -0.5 && e.flag && e.date == date)
    #expect(e.data == data && e.uuid == uuid && e.mood == .busy && e.optional == nil)
}
