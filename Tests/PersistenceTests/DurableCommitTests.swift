import Foundation
import GRDB
import Testing

@testable import Persistence

/// Every commit of the SQLite store is durable when it returns (DESIGN §2.8): the connection
/// that writes runs with `synchronous = FULL`, so a deletion that committed does not come back
/// after a power cut, when its files are already gone.
@Suite struct DurableCommitTests {
    /// The `synchronous` level of the store's writing connection (2 is FULL).
    func writerSynchronous(_ container: PersistentContainer) throws -> Int? {
        let store = try #require(container.core.store as? SQLiteStore)
        return try store.pool.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA synchronous") }
    }

    @Test func theConnectionThatWritesANewStoreSyncsEveryCommit() throws {
        let store = try TestStore()
        defer { store.container.close() }
        #expect(try writerSynchronous(store.container) == 2)
    }

    @Test func theConnectionThatWritesAnExistingStoreSyncsEveryCommit() throws {
        let store = try TestStore()
        let context = store.container.newBackgroundContext()
        Note(context: context).title = "kept"
        try context.save()
        store.container.close()

        let reopened = try PersistentContainer(storeURL: store.storeURL, schema: try Schema(allEntities))
        defer { reopened.close() }
        #expect(try writerSynchronous(reopened) == 2)
    }
}
