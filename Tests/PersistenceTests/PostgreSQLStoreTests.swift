import Foundation
import Persistence
import PersistencePostgreSQL
import Testing

/// What only the PostgreSQL store has: its URL, its server, and what it refuses to do yet.
@Suite struct PostgreSQLStoreTests {
    /// The test server's URL with `change` applied to its parts.
    func serverURL(_ change: (inout URLComponents) -> Void = { _ in }) throws -> URL {
        var components = URLComponents(
            url: try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/")), resolvingAgainstBaseURL: false)!
        change(&components)
        return components.url!
    }

    @Test func aServerThatIsDownFailsTheOpenWithOneLineNamingHostAndPort() throws {
        // Port 1 on loopback: nothing listens there.
        let url = URL(string: "postgresql://someone:secret@127.0.0.1:1/catalog")!
        let error = try #require(throws: PersistenceError.self) {
            try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        }
        #expect(error.code == .io)
        #expect(
            error.message.hasPrefix("Could not connect to PostgreSQL at 127.0.0.1:1 (database catalog, user someone): ")
        )
        #expect(!error.message.contains("\n"))
        #expect(!error.message.contains("secret"))
    }

    @Test func theStoreURLNeverHoldsThePassword() throws {
        let url = try serverURL()
        #expect(url.password != nil)
        let container = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { container.close() }
        #expect(container.storeURL.password == nil)
        #expect(container.storeURL.host == url.host)
    }

    @Test func aWrongPasswordIsAClearError() throws {
        let url = try serverURL { $0.password = "wrong" }
        let error = try #require(throws: PersistenceError.self) {
            try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        }
        #expect(error.code == .io)
        #expect(error.message.contains("password authentication failed"))
        #expect(!error.message.contains("wrong"))
    }

    @Test func aStoreThatMayNotBeCreatedIsNotFound() throws {
        var options = PersistentContainer.Options()
        options.createsStore = false
        let url = try serverURL()
        let error = try #require(throws: PersistenceError.self) {
            try PersistentContainer.open(url: url, schema: try Schema(allEntities), options: options)
        }
        #expect(error.code == .notFound)
        #expect(error.message.hasPrefix("There is no store at postgresql://assetcat@127.0.0.1:"))
    }

    @Test func twoContainersOnOneStoreSeeEachOthersCommitsAndIDsAreNeverShared() throws {
        let url = try serverURL()
        let first = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        let second = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer {
            first.close()
            second.close()
        }
        _ = try first.storeChangedExternally()
        _ = try second.storeChangedExternally()
        let a = first.newBackgroundContext()
        let noteA = Note(context: a)
        noteA.title = "from the first"
        try a.save()
        #expect(try second.storeChangedExternally())
        #expect(try !first.storeChangedExternally())
        let b = second.newBackgroundContext()
        let noteB = Note(context: b)
        noteB.title = "from the second"
        try b.save()
        #expect(noteA.objectID != noteB.objectID)
        #expect(try first.storeChangedExternally())
        let titles = try first.newBackgroundContext().fetch(FetchRequest<Note>()).map(\.title)
        #expect(titles == ["from the first", "from the second"])
    }

    @Test func theIntegrityCheckIsRefusedNotFaked() throws {
        let store = try TestStore(.postgresql)
        let error = try #require(throws: PersistenceError.self) { try store.container.checkIntegrity() }
        #expect(error.code == .unsupported)
    }
}
