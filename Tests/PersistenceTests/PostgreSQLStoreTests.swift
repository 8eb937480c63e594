import Foundation
import Logging
import Persistence
import PostgresNIO
import Testing

@testable import PersistencePostgreSQL

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

    /// A store that closes folds its count of commits into one row: the others see no change
    /// from it, and the table (which every look for others' changes sums) holds a row per
    /// open store, not one for every store that ever committed.
    @Test func aClosedStoresCommitsAreFoldedIntoOneRowOthersSeeNoChangeFrom() throws {
        let url = try serverURL()
        let watcher = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { watcher.close() }
        _ = try watcher.storeChangedExternally()  // the first look sets where later ones start
        for round in 1...3 {
            let writer = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
            let context = writer.newBackgroundContext()
            Note(context: context).title = "round \(round)"
            try context.save()
            #expect(try watcher.storeChangedExternally())
            writer.close()
            #expect(try !watcher.storeChangedExternally())  // closing is not a change
        }
        let connection = try PostgreSQLConnection(try PostgreSQLLocation(url), logger: Logger(label: "test"))
        defer { connection.close() }
        let rows = try connection.run("SELECT writer, commits FROM _persistence_commits", []).rows
        let counts = try rows.map { try $0.decode((String, Int64).self) }
        #expect(counts.map(\.0) == ["retired"] && counts.map(\.1) == [3], "\(counts)")
    }

    /// The check means "the store this version makes": here, a link the server no longer
    /// enforces (dropped by a migration after the schema was made).
    @Test func theIntegrityCheckFindsWhatThisVersionWouldNotHaveMade() throws {
        let url = try serverURL()
        let fresh = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        #expect(try fresh.checkIntegrity() == [])
        fresh.close()
        let drop = Migration("drop-a-link", phase: .afterSchema) { db in
            try db.execute(#"ALTER TABLE "Note" DROP CONSTRAINT "Note_folder_link""#)
        }
        let tampered = try PersistentContainer.open(url: url, schema: try Schema(allEntities, migrations: [drop]))
        defer { tampered.close() }
        #expect(try tampered.checkIntegrity() == ["the link Note.folder is not enforced by the server"])
    }

    /// A migration that fails leaves the store as it was: its DDL ran in the open's
    /// transaction, and it is not recorded as applied. Nothing is quarantined.
    @Test func aFailingMigrationChangesNothing() throws {
        let url = try serverURL()
        do {
            let v1 = try PersistentContainer.open(url: url, schema: try Schema([JournalV1.self]))
            let context = v1.newBackgroundContext()
            JournalV1(context: context).text = "kept"
            try context.save()
            v1.close()
        }
        let broken = Migration("broken") { db in
            try db.execute(#"ALTER TABLE "Journal" ADD COLUMN "extra" TEXT"#)
            try db.execute(#"ALTER TABLE "Nowhere" ADD COLUMN x TEXT"#)
        }
        let error = try #require(throws: PersistenceError.self) {
            try PersistentContainer.open(url: url, schema: try Schema([JournalV2.self], migrations: [broken]))
        }
        #expect(error.code == .migration)
        var redacted = URLComponents(url: url, resolvingAgainstBaseURL: false)!
        redacted.password = nil
        #expect(
            error.message
                == "Could not open the store \(redacted.url!.absoluteString): migration 'broken' failed: "
                + #"relation "Nowhere" does not exist; nothing was changed"#)
        // The old program still opens it as it was (a recorded 'broken' would make it newer).
        let again = try PersistentContainer.open(url: url, schema: try Schema([JournalV1.self]))
        defer { again.close() }
        #expect(try again.newBackgroundContext().fetch(FetchRequest<JournalV1>()).map(\.text) == ["kept"])
        #expect(try again.checkIntegrity() == [])
    }

    /// A read-only open reads, and refuses every change before it starts; one that would
    /// need a migration fails.
    @Test func aReadOnlyOpenReadsAndRefusesEveryChange() throws {
        let url = try serverURL()
        do {
            let writable = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
            let context = writable.newBackgroundContext()
            Note(context: context).title = "kept"
            try context.save()
            writable.close()
        }
        var options = PersistentContainer.Options()
        options.readOnly = true
        let reader = try PersistentContainer.open(url: url, schema: try Schema(allEntities), options: options)
        defer { reader.close() }
        let context = reader.newBackgroundContext()
        let notes = try context.fetch(FetchRequest<Note>())
        #expect(notes.map(\.title) == ["kept"])
        notes[0].title = "changed"
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .readOnly)
        #expect(
            error.message == "The store \(reader.storeURL.absoluteString) was opened read-only: it cannot be changed")
        #expect(throws: PersistenceError.self) { try context.batchDelete(FetchRequest<Note>()) }
        #expect(try reader.checkIntegrity() == [])

        let newer = Migration("2099-later") { _ in }
        let stale = try #require(throws: PersistenceError.self) {
            try PersistentContainer.open(
                url: url, schema: try Schema(allEntities, migrations: [newer]), options: options)
        }
        #expect(stale.code == .migration)
        #expect(
            stale.message.hasSuffix(
                "the store needs migrating to this version, which a read-only open cannot do; open it once where it can be written"
            ))
    }

    /// PostgreSQL's text cannot hold a NUL character, which SQLite's can (and
    /// `everyAttributeTypeRoundTripsExactly` keeps): the save fails, naming the object, and
    /// writes nothing.
    @Test func textWithANULIsRefused() throws {
        let store = try TestStore(.postgresql)
        let context = store.context()
        let note = Note(context: context)
        note.title = "nul\u{0}inside"
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.message.hasPrefix("Could not save \(note.objectID): "))
        #expect(error.message.contains("0x00"))
        #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    }
}
