import Foundation
import Persistence
import Testing

@Suite struct BatchTests {
    @Test func batchInsertReturnsIDsAndSkipsAwakeFromInsert() throws {
        let store = try TestStore()
        let context = store.context()
        let ids = try context.batchInsert(Note.self, count: 100) { i, row in
            row[\.title] = "n\(i)"
            row[\.priority] = i % 3
        }
        #expect(ids.count == 100)
        #expect(Set(ids).count == 100)
        #expect(store.log.events.isEmpty)
        #expect(try context.count(for: FetchRequest<Note>(predicate: \.priority == 2)) == 33)
        let inserted = try context.existingObject(with: ids[5], as: Note.self)
        #expect(inserted.title == "n5")
        // IDs continue after the batch.
        let next = Note(context: context)
        #expect(next.objectID.rowID > ids.last!.rowID)
    }

    @Test func batchDeleteReturnsIDsAndCallsTheDeletionHook() throws {
        let store = try TestStore()
        let context = store.context()
        let prefix = UUID().uuidString
        for name in ["a", "b", "c"] { Doc(context: context).path = "\(prefix)/\(name)" }
        try context.save()
        let result = try context.batchDelete(FetchRequest<Doc>(predicate: \.path != "\(prefix)/b"))
        #expect(result.deletedObjectIDs.map(\.description).sorted() == ["Doc 1", "Doc 3"])
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["\(prefix)/b"])
        #expect(
            try store.stored(FetchRequest<Plan>(sortBy: [.init(\.path)])).map(\.path) == ["\(prefix)/a", "\(prefix)/c"])
        #expect(
            BatchLog.shared.events.filter { $0.contains(prefix) } == [
                "afterCommit \(prefix)/a", "afterCommit \(prefix)/c",
            ])
        // Objects already in memory are stale until the context merges the result.
        let stale = try #require(context.registeredObjects.first { ($0 as? Doc)?.path == "\(prefix)/a" })
        #expect(stale.managedObjectContext === context)
        context.mergeChanges(from: result)
        #expect(stale.managedObjectContext == nil)
        #expect(try context.fetch(FetchRequest<Doc>()).map(\.path) == ["\(prefix)/b"])
    }

    @Test func batchDeleteAppliesDeleteRules() throws {
        let store = try TestStore()
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "f"
        Note(context: context).folder = folder
        Note(context: context).folder = folder
        let sticker = Sticker(context: context)
        sticker.folder = folder
        let vault = Vault(context: context)
        Item(context: context).vault = vault
        try context.save()

        let result = try context.batchDelete(FetchRequest<Folder>())
        #expect(result.deletedObjectIDs.map(\.description).sorted() == ["Folder 1", "Note 1", "Note 2"])
        #expect(result.updatedObjectIDs == [sticker.objectID])
        #expect(try store.stored(FetchRequest<Sticker>())[0].folder == nil)

        let error = #expect(throws: PersistenceError.self) { try context.batchDelete(FetchRequest<Vault>()) }
        #expect(error?.message == "Vault 1 cannot be deleted: its relationship 'items' is not empty (deny rule)")
        #expect(try store.stored(FetchRequest<Vault>()).count == 1)
    }

    @Test func aFailedBatchDeleteWritesNothingAndRunsNoAfterCommitWork() throws {
        let store = try TestStore()
        let context = store.context()
        let prefix = UUID().uuidString
        Doc(context: context).path = "\(prefix)/x"
        try context.save()
        struct Injected: Error {}
        store.container.failNextCommit(with: Injected())
        #expect(throws: (any Error).self) { try context.batchDelete(FetchRequest<Doc>()) }
        #expect(try store.stored(FetchRequest<Doc>()).count == 1)
        #expect(try store.stored(FetchRequest<Plan>()).isEmpty)
        #expect(BatchLog.shared.events.filter { $0.contains(prefix) }.isEmpty)
    }
}
