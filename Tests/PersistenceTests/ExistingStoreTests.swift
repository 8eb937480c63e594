import Foundation
import GRDB
import TestScratch
import Testing

@testable import Persistence

/// A store that must already exist (`createsStore: false`) is never given a
/// fresh schema, and a read-only open writes nothing.
@Suite struct ExistingStoreTests {
    /// A store with one note, closed.
    func storeWithANote() throws -> TestStore {
        let store = try TestStore()
        let context = store.container.newBackgroundContext()
        Note(context: context).title = "kept"
        try context.save()
        store.container.close()
        return store
    }

    func existingOnly() -> PersistentContainer.Options {
        var options = PersistentContainer.Options()
        options.createsStore = false
        return options
    }

    func readOnly() -> PersistentContainer.Options {
        var options = PersistentContainer.Options()
        options.readOnly = true
        return options
    }

    func quarantineFolder(_ store: TestStore) throws -> URL {
        let quarantine = store.directory.appending(path: "quarantine")
        let entries = try FileManager.default.contentsOfDirectory(atPath: quarantine.path)
        #expect(entries.count == 1)
        return quarantine.appending(path: try #require(entries.first))
    }

    @Test func anEmptiedStoreIsQuarantinedNotGivenANewSchema() throws {
        let store = try storeWithANote()
        try Data().write(to: store.storeURL)
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.storeURL.path + suffix) }
        let error = #expect(throws: Persistence.PersistenceError.self) { try store.reopen(options: existingOnly()) }
        let folder = try quarantineFolder(store)
        let reason = "it holds no schema (the file is empty, or its tables are gone)"
        #expect(error?.code == .storeUnreadable)
        #expect(error?.quarantine == .init(folder: folder, reason: reason))
        #expect(
            error?.message
                == "The store \(store.storeURL.path) is unusable (\(reason)); it was moved to \(folder.path). "
                + "Restore it from a backup, or open with onUnreadableStore: .recreate to start with an empty store")
        // Moved as it was (still empty), and no new store took its place.
        #expect(try Data(contentsOf: folder.appending(path: "store.sqlite")).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: store.storeURL.path))
        // The next open says where it went, and still creates nothing.
        let again = #expect(throws: Persistence.PersistenceError.self) { try store.reopen(options: existingOnly()) }
        #expect(again?.quarantine == .init(folder: folder, reason: nil))
        #expect(!FileManager.default.fileExists(atPath: store.storeURL.path))
    }

    @Test func aStoreWhoseTableWasDroppedIsQuarantined() throws {
        let store = try storeWithANote()
        let queue = try DatabaseQueue(path: store.storeURL.path)
        try queue.write { try $0.execute(sql: "DROP TABLE \"Note\"") }
        try queue.close()
        let error = #expect(throws: Persistence.PersistenceError.self) { try store.reopen(options: existingOnly()) }
        #expect(error?.code == .storeUnreadable)
        #expect(error?.quarantine?.reason == "its table \"Note\" is gone")
        #expect(!FileManager.default.fileExists(atPath: store.storeURL.path))
    }

    @Test func aStoreWithNoSchemaAtAllIsQuarantined() throws {
        let store = try storeWithANote()
        let queue = try DatabaseQueue(path: store.storeURL.path)
        try queue.write { db in
            for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") {
                try db.execute(sql: "DROP TABLE \"\(table)\"")
            }
        }
        try queue.close()
        let error = #expect(throws: Persistence.PersistenceError.self) { try store.reopen(options: existingOnly()) }
        #expect(error?.quarantine?.reason == "it holds no schema (the file is empty, or its tables are gone)")
    }

    @Test func aMissingStoreIsNotCreated() throws {
        let store = try storeWithANote()
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.storeURL.path + suffix) }
        let error = #expect(throws: Persistence.PersistenceError.self) { try store.reopen(options: existingOnly()) }
        #expect(error?.code == .notFound)
        #expect(error?.message == "There is no store at \(store.storeURL.path)")
        #expect(!FileManager.default.fileExists(atPath: store.storeURL.path))
    }

    @Test func anExistingStoreOpensAsBefore() throws {
        let store = try storeWithANote()
        let container = try store.reopen(options: existingOnly())
        defer { container.close() }
        #expect(try container.newBackgroundContext().count(for: FetchRequest<Note>()) == 1)
    }

    @Test func aReadOnlyOpenReadsAndRefusesEveryChange() throws {
        let store = try storeWithANote()
        let before = try Data(contentsOf: store.storeURL)
        let container = try store.reopen(options: readOnly())
        #expect(container.isReadOnly)
        let context = container.newBackgroundContext()
        let notes = try context.fetch(FetchRequest<Note>())
        #expect(notes.map(\.title) == ["kept"])
        notes[0].title = "changed"
        let error = #expect(throws: Persistence.PersistenceError.self) { try context.save() }
        #expect(error?.code == .readOnly)
        #expect(error?.message == "The store \(store.storeURL.path) was opened read-only: it cannot be changed")
        container.close()
        #expect(try Data(contentsOf: store.storeURL) == before)
    }

    @Test func aReadOnlyOpenOfADamagedStoreMovesNothing() throws {
        let store = try storeWithANote()
        try Data().write(to: store.storeURL)
        var options = readOnly()
        options.createsStore = false
        let error = #expect(throws: Persistence.PersistenceError.self) { try store.reopen(options: options) }
        #expect(error?.code == .storeUnreadable)
        #expect(error?.quarantine == nil)
        #expect(FileManager.default.fileExists(atPath: store.storeURL.path))
        #expect(!FileManager.default.fileExists(atPath: store.directory.appending(path: "quarantine").path))
    }

    @Test func aReadOnlyOpenOfAStoreThatNeedsMigratingFails() throws {
        let store = try storeWithANote()
        let queue = try DatabaseQueue(path: store.storeURL.path)
        try queue.write { try $0.execute(sql: "DELETE FROM _persistence_migrations") }
        try queue.close()
        // A schema whose migration the store has not run.
        let schema = try Schema(allEntities, migrations: [Migration("later") { _ in }])
        var options = readOnly()
        options.createsStore = false
        let error = #expect(throws: Persistence.PersistenceError.self) {
            try PersistentContainer(storeURL: store.storeURL, schema: schema, options: options)
        }
        #expect(error?.code == .migration)
        #expect(
            error?.message
                == "Could not open the store \(store.storeURL.path): the store needs migrating to this version, "
                + "which a read-only open cannot do; open it once where it can be written")
        #expect(!FileManager.default.fileExists(atPath: store.directory.appending(path: "quarantine").path))
    }
}
