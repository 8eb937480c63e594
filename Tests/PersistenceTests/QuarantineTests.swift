import Foundation
import Persistence
import TestScratch
import Testing

@Suite struct QuarantineTests {
    func directory(with fixture: String) throws -> (URL, URL, Data) {
        let directory = ScratchDirectory.path("quarantine")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = directory.appending(path: "store.sqlite")
        let bytes = try Data(contentsOf: testAsset("stores/\(fixture)"))
        try bytes.write(to: store)
        return (directory, store, bytes)
    }

    func quarantined(_ directory: URL) throws -> URL {
        let entries = try FileManager.default.contentsOfDirectory(atPath: directory.appending(path: "quarantine").path)
        #expect(entries.count == 1)
        return directory.appending(path: "quarantine").appending(path: try #require(entries.first))
    }

    @Test(arguments: [
        ("not-a-database.sqlite", "file is not a database"),
        ("damaged-pages.sqlite", "quick_check failed: On tree page 5 cell 23: Offset 42699 out of range 88..1020"),
    ])
    func failingOpenQuarantinesAndSaysWhatToDo(fixture: String, reason: String) throws {
        let (directory, store, bytes) = try directory(with: fixture)
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: store, schema: try Schema(allEntities))
        }
        let target = try quarantined(directory)
        #expect(error?.code == .storeUnreadable)
        #expect(
            error?.message
                == "The store \(store.path) is unusable (\(reason)); it was moved to \(target.path). Restore it from a "
                + "backup, or open with onUnreadableStore: .recreate to start with an empty store")
        // Moved, never deleted: the bytes are intact, and no file of the store
        // (-wal, -shm) is left behind.
        #expect(try Data(contentsOf: target.appending(path: "store.sqlite")) == bytes)
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
            $0.hasPrefix("store.sqlite")
        }
        #expect(left.isEmpty)
        // A later open does not silently start an empty store in its place.
        let again = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: store, schema: try Schema(allEntities))
        }
        #expect(
            again?.message
                == "The store \(store.path) was quarantined to \(target.path) by an earlier open; restore it from a "
                + "backup, or open with onUnreadableStore: .recreate to start with an empty store")
        #expect(!FileManager.default.fileExists(atPath: store.path))
    }

    @Test func recreateQuarantinesAndReportsThenStartsEmpty() throws {
        let (directory, store, bytes) = try directory(with: "not-a-database.sqlite")
        var options = PersistentContainer.Options()
        options.onUnreadableStore = .recreate
        let container = try PersistentContainer(storeURL: store, schema: try Schema(allEntities), options: options)
        let target = try quarantined(directory)
        #expect(container.storeWasResetOnLoad)
        #expect(container.quarantinedStoreURL == target)
        #expect(try Data(contentsOf: target.appending(path: "store.sqlite")) == bytes)
        let context = container.newBackgroundContext()
        Note(context: context).title = "fresh"
        try context.save()
        #expect(try context.count(for: FetchRequest<Note>()) == 1)
    }

    @Test func aHealthyStoreIsNotReset() throws {
        let store = try TestStore()
        #expect(!store.container.storeWasResetOnLoad)
        #expect(store.container.quarantinedStoreURL == nil)
    }
}

/// An open that must write (its schema gained an entity) while another connection holds the
/// write lock for longer than the busy timeout fails, and moves nothing. (An open of a
/// current store only reads: ``SQLiteSchemaCurrentTests``.)
@Test func aBusyStoreFailsTheOpenAndIsNeverQuarantined() throws {
    let store = try TestStore()
    var options = PersistentContainer.Options()
    options.busyTimeout = 0.1
    let holder = store.context("holder")
    holder.userInfo["beforeCommit"] = { (_: TransactionReader) in
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(
                storeURL: store.storeURL, schema: try Schema(allEntities + [AddedOpenItem.self]), options: options)
        }
        #expect(error?.code == .io)
        #expect(error?.message == "Could not open the store \(store.storeURL.path): database is locked")
    }
    Checked(context: holder).label = "hold"
    try holder.save()
    #expect(!FileManager.default.fileExists(atPath: store.directory.appending(path: "quarantine").path))
    #expect(try store.stored(FetchRequest<Checked>()).count == 1)
}
