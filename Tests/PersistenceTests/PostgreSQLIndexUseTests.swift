import Foundation
import Logging
import PostgresNIO
import Testing

@testable import Persistence
@testable import PersistencePostgreSQL

/// Items whose digest is indexed, and counted once per distinct value, only while stored:
/// the shape of the catalog's assets (their content's digest, managed ones only).
final class DigestedItem: ManagedObject {
    @Attribute var digest = ""
    @Attribute var state = "stored"
    @Attribute var size: Int64 = 0

    override class var tallies: [Persistence.Tally] {
        [
            .distinct(
                "digests", of: \DigestedItem.digest, summing: \DigestedItem.size, where: \DigestedItem.state,
                is: "stored")
        ]
    }

    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\DigestedItem.digest, where: \DigestedItem.state, is: "stored")]
    }
}

/// The SQL the PostgreSQL store writes lets the server use its indexes: an equality that
/// PostgreSQL cannot look up in a B-tree (`IS NOT DISTINCT FROM`) reads the whole table for
/// each lookup, so every add and every tally of a large catalog cost as much as the catalog.
/// Each case reads the server's own count of the table's sequential scans
/// (`pg_stat_xact_user_tables`) before and after the statement, in one transaction (the
/// counts are not flushed inside one): it may not grow.
@Suite struct PostgreSQLIndexUseTests {
    /// A store of 20,000 items, 200 of them stored, and its table's statistics made: the
    /// planner then knows that the index finds a digest in a few rows.
    struct Store {
        let container: PersistentContainer
        let connection: PostgreSQLConnection

        init() throws {
            let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
            container = try PersistentContainer.open(url: url, schema: try Schema([DigestedItem.self]))
            connection = try PostgreSQLConnection(try PostgreSQLLocation(url), logger: Logger(label: "test"))
            _ = try connection.run(
                """
                INSERT INTO "DigestedItem" ("id", "_version", "digest", "state", "size") \
                SELECT g, 1, md5(g::TEXT), CASE WHEN g % 100 = 0 THEN 'stored' ELSE 'dropped' END, g \
                FROM generate_series(1, 20000) AS g
                """, [])
            _ = try connection.run("ANALYZE \"DigestedItem\"", [])
        }

        /// The sequential scans of the items' table the connection has not reported yet.
        func sequentialScans() throws -> Int64 {
            try connection.run(
                """
                SELECT seq_scan FROM pg_stat_xact_user_tables \
                WHERE relname = 'DigestedItem' AND schemaname = current_schema()
                """, []
            ).rows.first?.decode(Int64.self) ?? 0
        }

        func close() {
            connection.close()
            container.close()
        }
    }

    @Test func aFetchByAnIndexedEqualityReadsTheIndexNotTheTable() throws {
        let store = try Store()
        defer { store.close() }
        let predicate: FetchPredicate<DigestedItem> =
            \.digest == "d41d8cd98f00b204e9800998ecf8427e" && \.state == "stored"
        var compiler = PredicateCompiler()
        let condition = compiler.compile(predicate.node)
        _ = try store.connection.run("BEGIN", [])
        defer { _ = try? store.connection.run("ROLLBACK", []) }
        let before = try store.sequentialScans()
        let rows = try store.connection.run(
            "SELECT \"id\" FROM \"DigestedItem\" WHERE \(condition)", compiler.arguments)
        #expect(rows.rows.isEmpty)
        #expect(try store.sequentialScans() == before, "the lookup read the table: \(condition)")
    }

    @Test func theDistinctTallyFindsAValuesOtherHoldersThroughTheIndex() throws {
        let store = try Store()
        defer { store.close() }
        _ = try store.connection.run("BEGIN", [])
        defer { _ = try? store.connection.run("ROLLBACK", []) }
        let before = try store.sequentialScans()
        // A new stored value, and one that stored rows hold already: the tally's trigger asks,
        // for each, whether another stored row holds it.
        _ = try store.connection.run(
            """
            INSERT INTO "DigestedItem" ("id", "_version", "digest", "state", "size") \
            VALUES (30001, 1, 'new', 'stored', 5), (30002, 1, md5('100'), 'stored', 100)
            """, [])
        #expect(try store.sequentialScans() == before)
        let counts = try store.connection.run(
            "SELECT n, total FROM _persistence_tallies WHERE entity = 'DigestedItem' AND tally = 'digests'", []
        ).rows.first?.decode((Int64, Int64).self)
        // 200 stored values before (counted when the open made the tally: the rows were not
        // there yet, so the trigger counted the 20,000), and one new one.
        let storedSizes: Int64 = 100 * (1...200).reduce(0, +)
        #expect(counts?.0 == 201)
        #expect(counts?.1 == storedSizes + 5)
    }
}
