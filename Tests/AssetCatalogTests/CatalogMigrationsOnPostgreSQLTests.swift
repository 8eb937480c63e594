import Foundation
import Persistence
import PersistencePostgreSQL
import Synchronization
import TestScratch
import Testing

@testable import AssetCatalog

/// The catalog's migrations (``Catalog/migrations``) on a PostgreSQL store: every one runs
/// there and does what it does on SQLite.
@Suite struct CatalogMigrationsOnPostgreSQLTests {
    /// A new schema of its own in the test server's database; cancels the test when there is
    /// no server.
    static func newStoreURL() throws -> URL {
        try PostgreSQLTestServer.newSchema().url!
    }

    /// A store holding what release 0.1.0 held — tags only in `tagText`, indexes on it and
    /// on every digest — opened with the catalog's migrations pending: they all run (a new
    /// store would only record them), the old indexes go, the tag rows are filled on both
    /// sides of a 10,000-asset page, the counts follow them, and the store is sound.
    @Test func everyMigrationOfTheCatalogRunsOnPostgreSQL() throws {
        let url = try Self.newStoreURL()
        try PersistentContainer.open(url: url, schema: try Schema(Catalog.entities)).close()
        // The rows are written as release 0.1.0 wrote them: in SQL, with no tag rows.
        let release010 = Migration("test-release-0.1.0-rows", phase: .afterSchema) { db in
            try db.execute(#"CREATE INDEX "Asset_tagText_index" ON "Asset" ("tagText")"#)
            try db.execute(#"CREATE INDEX "Asset_sha256_index" ON "Asset" ("sha256")"#)
            try db.execute(
                #"""
                INSERT INTO "Asset" ("id", "name", "tagText") VALUES (1, 'one', E'\nblue\nred\n'), (2, 'two', E'\n'),
                    (3, 'three', E'\nred\nunicode-é\n'), (7, 'seven', E'\nblue\nblue\n'),
                    (10005, 'far', E'\ngreen\n')
                """#)
            try db.execute(#"INSERT INTO "AssetTag" ("id", "tag", "asset") VALUES (40, 'red', 1)"#)
        }
        try PersistentContainer.open(url: url, schema: try Schema(Catalog.entities, migrations: [release010])).close()

        // Run last, it finds what is left of the old indexes.
        let oldIndexes = Mutex<Int64?>(nil)
        let probe = Migration("test-probe", phase: .afterSchema) { db in
            let count = try db.integer(
                """
                SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() \
                AND indexname IN ('Asset_tagText_index', 'Asset_sha256_index')
                """)
            oldIndexes.withLock { $0 = count }
        }
        let container = try PersistentContainer.open(
            url: url, schema: try Schema(Catalog.entities, migrations: [release010] + Catalog.migrations + [probe]))
        defer { container.close() }
        #expect(oldIndexes.withLock { $0 } == 0)
        let context = container.newBackgroundContext()
        let tags = try context.fetch(FetchRequest<AssetTag>())
        let rows = tags.map { "\($0.asset?.objectID.rowID ?? -1):\($0.tag)" }
        #expect(rows.sorted() == ["10005:green", "1:blue", "1:red", "3:red", "3:unicode-\u{e9}", "7:blue"])
        #expect(tags.first { $0.objectID.rowID == 40 }?.tag == "red")  // the row that was there is kept
        let counts = try container.tally(AssetTag.tagTally, of: AssetTag.self).map { "\($0.key)=\($0.count)" }
        #expect(counts.sorted() == ["blue=2", "green=1", "red=2", "unicode-\u{e9}=1"])
        #expect(try container.checkIntegrity() == [])
    }

    /// ``PendingTemporary/hostOfEarlierRows(_:)``, on both stores: the rows made before
    /// temporaries named their host get the host of the process that opens first, and rows
    /// that name one keep it.
    @Test(arguments: [false, true])
    func temporariesMadeBeforeHostsGetTheHostThatOpensFirst(onPostgreSQL: Bool) throws {
        let url =
            onPostgreSQL
            ? try Self.newStoreURL() : try ScratchDirectory.make("migration").appending(path: "catalog.sqlite")
        let made = try PersistentContainer.open(url: url, schema: try Schema(Catalog.entities))
        let context = made.newBackgroundContext()
        try context.performAndWait {
            for (owner, host) in [("123-abcdef12", ""), ("s7", "h2")] {
                let row = PendingTemporary(context: context)
                row.owner = owner
                row.path = "/out/.b.partial-\(owner.count)"
                row.host = host
            }
            try context.save()
        }
        made.close()
        let container = try PersistentContainer.open(
            url: url, schema: try Schema(Catalog.entities, migrations: [PendingTemporary.hostOfEarlierRows { "h'9" }]))
        defer { container.close() }
        let reader = container.newBackgroundContext()
        let rows = try reader.performAndWait {
            try reader.fetch(FetchRequest<PendingTemporary>()).map { "\($0.owner) \($0.host)" }.sorted()
        }
        #expect(rows == ["123-abcdef12 h'9", "s7 h2"])
    }
}
