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
            Persistence.Tally("states", by: \DigestedItem.state, summing: \DigestedItem.size),
            .distinct(
                "digests", of: \DigestedItem.digest, summing: \DigestedItem.size, where: \DigestedItem.state,
                is: "stored"),
        ]
    }

    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\DigestedItem.digest, where: \DigestedItem.state, is: "stored")]
    }
}

/// A parcel and the items on it, deleted with it: an archive and its members.
final class Parcel: ManagedObject {
    @Attribute var label = ""
    @ToMany(inverse: \ParcelItem.parcel, deleteRule: .cascade) var items: [ParcelItem]
}

final class ParcelItem: ManagedObject {
    @Attribute var label = ""
    @ToOne var parcel: Parcel?
}

/// What a store's connections read from the server, counted by the server itself: an
/// admin connection of the test's own (named as another store's, so not among those it
/// ends) reads the statistics the store's connections report as they end.
struct ServerReads {
    let url: URL
    let location: PostgreSQLLocation
    let admin: PostgreSQLConnection

    init() throws {
        url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        location = try PostgreSQLLocation(url)
        admin = try PostgreSQLConnection(
            try PostgreSQLLocation(try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))),
            logger: Logger(label: "test"))
    }

    /// The store's table `table`, quoted with its schema.
    func table(_ table: String) -> String { "\"\(location.schema)\".\"\(table)\"" }

    /// Closes `container`, waits until the server has let its connections go, and returns
    /// the index entries read from every index of `table`, and its rows read (by index or
    /// sequential scans), since the store was made.
    func afterClosing(_ container: PersistentContainer, table: String) throws -> (entries: Int64, rows: Int64) {
        container.close()
        _ = try endServerConnections(named: "persistence \(location.schema)", from: admin)
        let row = try admin.run(
            """
            SELECT COALESCE(idx_tup_fetch, 0) + seq_tup_read, \
            COALESCE((SELECT SUM(idx_tup_read) FROM pg_stat_user_indexes WHERE relid = t.relid), 0)::BIGINT \
            FROM pg_stat_user_tables t WHERE schemaname = $1 AND relname = $2
            """, [.text(location.schema), .text(table)]
        ).rows.first
        let (rows, entries) = try #require(try row?.decode((Int64, Int64).self))
        return (entries, rows)
    }

    func close() { admin.close() }
}

/// What a statement costs the PostgreSQL store grows with the statement, not with the table
/// or the transaction:
/// - its lookups go through the indexes: an equality PostgreSQL cannot look up in a B-tree
///   (`IS NOT DISTINCT FROM`) reads the whole table each time, so every add and every tally
///   of a large catalog cost as much as the catalog;
/// - its counts are written once a statement: a count row updated once a row is stepped
///   over by every later update in the transaction (n² for n rows).
///
/// Each case reads the server's own counts of the statement's work (`pg_stat_xact_user_tables`)
/// before and after it, in one transaction (they are not flushed inside one).
@Suite struct PostgreSQLStatementCostTests {
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

        /// The rows of the counts' table inserted and updated that the connection has not
        /// reported yet.
        func countWrites() throws -> Int64 {
            try connection.run(
                """
                SELECT n_tup_ins + n_tup_upd FROM pg_stat_xact_user_tables \
                WHERE relname = '_persistence_tallies' AND schemaname = current_schema()
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
        var compiler = PredicateSQL(dialect: .postgresql)
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

    /// Counts the `event` statements (`UPDATE`, `DELETE`…) run on `table` of the store
    /// `admin` is connected to from now on, by a statement trigger of the test's; returns the
    /// count so far.
    static func countStatements(_ event: String, on table: String, _ admin: PostgreSQLConnection) throws
        -> () throws -> Int64
    {
        let counts = "\"statements_\(table)\""
        try admin.run("CREATE TABLE \(counts) (n INTEGER)", [])
        try admin.run(
            """
            CREATE FUNCTION "count_\(table)"() RETURNS trigger LANGUAGE plpgsql AS \
            $$ BEGIN INSERT INTO \(counts) VALUES (1); RETURN NULL; END $$
            """, [])
        try admin.run(
            "CREATE TRIGGER \"count\" AFTER \(event) ON \"\(table)\" FOR EACH STATEMENT EXECUTE FUNCTION \"count_\(table)\"()",
            [])
        return { try admin.run("SELECT count(*) FROM \(counts)", []).rows.first!.decode(Int64.self) }
    }

    /// A store of the three entities above, twelve of each saved (items d0…, parcels p0…, their
    /// unlinked items m0…), and an admin connection of the test's to its schema.
    struct Parcels {
        let container: PersistentContainer
        let admin: PostgreSQLConnection
        let context: ManagedObjectContext
        let rows: [(item: DigestedItem, parcel: Parcel, member: ParcelItem)]

        init() throws {
            let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
            container = try PersistentContainer.open(
                url: url, schema: try Schema([DigestedItem.self, Parcel.self, ParcelItem.self]))
            admin = try PostgreSQLConnection(try PostgreSQLLocation(url), logger: Logger(label: "test"))
            let context = container.newBackgroundContext()
            rows = (0..<12).map { i in
                let item = DigestedItem(context: context)
                item.digest = "d\(i)"
                let parcel = Parcel(context: context)
                parcel.label = "p\(i)"
                let member = ParcelItem(context: context)
                member.label = "m\(i)"
                return (item, parcel, member)
            }
            try context.save()
            self.context = context
        }

        func close() {
            admin.close()
            container.close()
        }
    }

    /// A save's updates of one entity and the same columns are one statement wherever they
    /// are among the save's changes: a job's result updates its job and its asset, so a group
    /// of results alternates between the two (counted by a statement trigger of the test's).
    @Test func aSavesUpdatesOfOneEntityAreOneStatementEvenInterleaved() throws {
        let stored = try Parcels()
        defer { stored.close() }
        let (container, admin, context) = (stored.container, stored.admin, stored.context)
        let counters = try ["DigestedItem", "Parcel"].map { try Self.countStatements("UPDATE", on: $0, admin) }
        for (item, parcel, _) in stored.rows {  // item, parcel, item, parcel…
            item.state = "dropped"
            parcel.label += " sent"
        }
        try context.save()
        #expect(try counters.map { try $0() } == [1, 1])  // one statement each
        let items = try container.newBackgroundContext().fetch(FetchRequest<DigestedItem>())
        #expect(items.count == 12 && items.allSatisfy { $0.state == "dropped" })
        #expect(
            try container.newBackgroundContext().fetch(FetchRequest<Parcel>()).allSatisfy {
                $0.label.hasSuffix(" sent")
            })
    }

    /// A grouped update the server cannot refuse for its values is written without a
    /// savepoint (two round trips each); one it could refuse (here a link, a foreign key)
    /// keeps it, so that a refused row is named. Told apart by the rows' `xmin`: a row
    /// written inside a savepoint carries the savepoint's own transaction ID.
    @Test func onlyAnUpdateTheServerCouldRefuseIsWrittenInASavepoint() throws {
        let stored = try Parcels()
        defer { stored.close() }
        let (admin, context) = (stored.admin, stored.context)
        for (item, parcel, member) in stored.rows {
            item.state = "dropped"
            parcel.label += " sent"
            member.parcel = parcel
        }
        try context.save()
        func xmins(_ table: String) throws -> Set<String> {
            Set(try admin.run("SELECT xmin::text FROM \"\(table)\"", []).rows.map { try $0.decode(String.self) })
        }
        let (items, parcels, members) = (try xmins("DigestedItem"), try xmins("Parcel"), try xmins("ParcelItem"))
        #expect(items.count == 1 && items == parcels, "the unrefusable updates were not in the save's own transaction")
        #expect(members.count == 1 && members != items, "the links were not written inside a savepoint")
        let linked = try admin.run("SELECT count(*) FROM \"ParcelItem\" WHERE \"parcel\" IS NOT NULL", [])
        #expect(try linked.rows.first?.decode(Int64.self) == 12)
        #expect(try admin.run("SELECT 1 FROM \"DigestedItem\" WHERE \"state\" <> 'dropped'", []).rows.isEmpty)
    }

    @Test func whatTheServerCouldRefuseIsToldFromTheValues() throws {
        let schema = try Schema([DigestedItem.self, Parcel.self, ParcelItem.self])
        func mayRefuse(_ entity: EntityDescription, _ slot: Int, _ values: [[StoreValue]]) throws -> Bool {
            PostgreSQLStore.mayRefuse(
                slots: [slot], values: values, of: entity, constrained: try PostgreSQLStore.constrainedSlots(of: entity)
            )
        }
        let item = try #require(schema.entity(named: "DigestedItem"))
        let state = try #require(item.storedProperties.firstIndex { $0.name == "state" })
        #expect(try !mayRefuse(item, state, [[.text("dropped")], [.text("x")]]))
        #expect(try mayRefuse(item, state, [[.text("a\u{0}b")]]))  // text holds no NUL
        #expect(try mayRefuse(item, state, [[.null]]))  // NOT NULL
        let member = try #require(schema.entity(named: "ParcelItem"))
        let link = try #require(member.storedProperties.firstIndex { $0.name == "parcel" })
        #expect(try mayRefuse(member, link, [[.integer(1)]]))  // a foreign key
    }

    /// A store that only read has no commits to fold into the retired row at its close, and
    /// writes nothing then (a `show` took a write transaction at its close); one that saved folds
    /// its commits as before (counted by a statement trigger of the test's).
    @Test func aStoreThatOnlyReadWritesNothingAtItsClose() throws {
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        try PersistentContainer.open(url: url, schema: try Schema([DigestedItem.self])).close()  // made
        let admin = try PostgreSQLConnection(try PostgreSQLLocation(url), logger: Logger(label: "test"))
        defer { admin.close() }
        let folds = try Self.countStatements("DELETE", on: "_persistence_commits", admin)
        let reading = try PersistentContainer.open(url: url, schema: try Schema([DigestedItem.self]))
        #expect(try reading.newBackgroundContext().fetch(FetchRequest<DigestedItem>()).isEmpty)
        reading.close()
        #expect(try folds() == 0)

        let saving = try PersistentContainer.open(url: url, schema: try Schema([DigestedItem.self]))
        let context = saving.newBackgroundContext()
        _ = DigestedItem(context: context)
        try context.save()
        saving.close()
        #expect(try folds() == 1)
        let retired = try admin.run("SELECT commits FROM _persistence_commits WHERE writer = 'retired'", [])
        #expect(try retired.rows.first?.decode(Int64.self) ?? 0 >= 1)
    }

    @Test func aStatementOfManyRowsWritesEachCountOnce() throws {
        let store = try Store()
        defer { store.close() }
        _ = try store.connection.run("BEGIN", [])
        defer { _ = try? store.connection.run("ROLLBACK", []) }
        let before = try store.countWrites()
        // 1,000 rows in one statement, of two states, all stored values distinct.
        _ = try store.connection.run(
            """
            INSERT INTO "DigestedItem" ("id", "_version", "digest", "state", "size") \
            SELECT g, 1, 'n' || g, CASE WHEN g % 2 = 0 THEN 'stored' ELSE 'dropped' END, 1 \
            FROM generate_series(30001, 31000) AS g
            """, [])
        // The two states' counts and the distinct count: three rows written.
        #expect(try store.countWrites() - before == 3)
        let states = try store.connection.run(
            "SELECT key, n FROM _persistence_tallies WHERE entity = 'DigestedItem' AND tally = 'states' ORDER BY key",
            []
        ).rows.map { try $0.decode((String, Int64).self) }
        #expect(states.map(\.0) == ["dropped", "stored"])
        #expect(states.map(\.1) == [19_800 + 500, 200 + 500])
        // An update of no counted column writes no count, and a statement of no rows neither.
        _ = try store.connection.run("UPDATE \"DigestedItem\" SET \"_version\" = 2 WHERE \"id\" > 30500", [])
        _ = try store.connection.run("DELETE FROM \"DigestedItem\" WHERE \"id\" < 0", [])
        #expect(try store.countWrites() - before == 3)
    }

    /// A store whose counts by key were kept by the row trigger of earlier versions (named as
    /// its function) is moved to the statement triggers at its next open, its counts made
    /// again: the old trigger would otherwise keep the function from being replaced.
    @Test func aStoreOfTheOldRowTriggerIsMovedToTheStatementTriggers() throws {
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        let connection: PostgreSQLConnection
        do {
            let first = try PersistentContainer.open(url: url, schema: try Schema([DigestedItem.self]))
            defer { first.close() }
            connection = try PostgreSQLConnection(try PostgreSQLLocation(url), logger: Logger(label: "test"))
            // What an earlier version left: the function counting each row on its own, and its
            // row trigger under the function's name.
            for suffix in ["insert", "delete", "update"] {
                _ = try connection.run(
                    "DROP TRIGGER \"_persistence_tally_DigestedItem_\(suffix)\" ON \"DigestedItem\"", [])
            }
            _ = try connection.run(
                """
                CREATE OR REPLACE FUNCTION "_persistence_tally_DigestedItem"() RETURNS trigger LANGUAGE plpgsql AS \
                $f$ BEGIN IF TG_OP IN ('INSERT', 'UPDATE') THEN \
                INSERT INTO _persistence_tallies (entity, tally, key, n, total) \
                VALUES ('DigestedItem', 'states', NEW."state", 1, NEW."size") ON CONFLICT (entity, tally, key) \
                DO UPDATE SET n = _persistence_tallies.n + 1, total = _persistence_tallies.total + EXCLUDED.total; \
                END IF; RETURN NULL; END; $f$
                """, [])
            _ = try connection.run(
                """
                CREATE TRIGGER "_persistence_tally_DigestedItem" AFTER INSERT OR DELETE OR UPDATE ON "DigestedItem" \
                FOR EACH ROW EXECUTE FUNCTION "_persistence_tally_DigestedItem"()
                """, [])
            let context = first.newBackgroundContext()
            for state in ["stored", "stored", "dropped"] { DigestedItem(context: context).state = state }
            try context.save()
        }
        defer { connection.close() }
        let later = try PersistentContainer.open(url: url, schema: try Schema([DigestedItem.self]))
        defer { later.close() }
        let triggers = try connection.run(
            """
            SELECT tgname FROM pg_trigger WHERE tgrelid = '"DigestedItem"'::regclass AND NOT tgisinternal \
            ORDER BY tgname
            """, []
        ).rows.map { try $0.decode(String.self) }
        #expect(
            triggers
                == ["insert", "delete", "update"].flatMap { suffix in
                    ["_persistence_tally_DigestedItem", "_persistence_tally_DigestedItem_distinct"].map {
                        "\($0)_\(suffix)"
                    }
                }.sorted())
        let context = later.newBackgroundContext()
        DigestedItem(context: context).state = "dropped"
        try context.save()
        #expect(
            try later.tally("states", of: DigestedItem.self).map { "\($0.key)=\($0.count)" } == [
                "dropped=2", "stored=2",
            ])
    }

    /// A claim walks its candidates in ID order along the index of the queued rows' IDs and
    /// stops at its limit, even on a table the planner has no statistics of (just filled,
    /// before autovacuum's nap ends). Without the claim's own planner settings, PostgreSQL
    /// read every queued row's entry, with a bitmap, to sort them all; without that index,
    /// it walked the primary key past every row already done. A count with a limit (is there
    /// one?) reads no more rows than that: unordered, it sorted every match for the first.
    /// With a session, the settings ride on the statement that fences the claim; without one,
    /// they have their own.
    @Test(arguments: [false, true]) func aClaimAndALookForCandidatesReadNoMoreRowsThanTheyNeed(withSession: Bool)
        throws
    {
        let server = try ServerReads()
        defer { server.close() }
        let first = try PersistentContainer.open(url: server.url, schema: try Schema([QueuedRow.self]))
        if withSession { _ = try #require(try first.openSession(label: "claimer")) }
        // 20,000 rows done, then 20,000 queued; no ANALYZE.
        _ = try server.admin.run(
            """
            INSERT INTO \(server.table("QueuedRow")) ("id", "_version", "state", "kind") \
            SELECT g, 1, CASE WHEN g <= 20000 THEN 'done' ELSE 'queued' END, 'work' \
            FROM generate_series(1, 40000) AS g
            """, [])
        // As a job queue asks: queued, and of a kind it takes.
        let candidates: FetchPredicate<QueuedRow> = \.state == "queued" && .in(\.kind, ["work", "other"])
        let claimed = try first.newBackgroundContext().claimRows(FetchRequest(predicate: candidates), limit: 10) {
            _, row in row[\.state] = "taken"
        }
        #expect(claimed.map(\.objectID.rowID) == Array(20_001...20_010))
        let claim = try server.afterClosing(first, table: "QueuedRow")
        #expect(claim.entries < 1_000 && claim.rows < 1_000, "the claim read \(claim)")

        let second = try PersistentContainer.open(url: server.url, schema: try Schema([QueuedRow.self]))
        let found = try second.newBackgroundContext().count(
            for: FetchRequest(predicate: candidates, limit: 1))
        #expect(found == 1)
        let look = try server.afterClosing(second, table: "QueuedRow")
        #expect(look.rows - claim.rows < 1_000, "the count read \(look.rows - claim.rows) rows")
    }

    /// A save's grouped update (`UPDATE … FROM (VALUES …)`) finds its rows by their IDs, even
    /// in a table the planner has no statistics of (just filled, before autovacuum analyzes
    /// it): it joined the rows to a scan of the whole table, 20,000 rows read for 200 updated.
    @Test func aGroupedUpdateReadsItsRowsByTheirIDs() throws {
        let server = try ServerReads()
        defer { server.close() }
        let container = try PersistentContainer.open(url: server.url, schema: try Schema([QueuedRow.self]))
        _ = try server.admin.run(
            """
            INSERT INTO \(server.table("QueuedRow")) ("id", "_version", "state", "kind") \
            SELECT g, 1, 'queued', 'work' FROM generate_series(1, 20000) AS g
            """, [])
        let context = container.newBackgroundContext()
        let ids = (5_001...5_200).map { ManagedObjectID(entityName: QueuedRow.entityName, rowID: $0) }
        let rows = try context.fetch(FetchRequest<QueuedRow>(predicate: .objectIDs(ids)))
        #expect(rows.count == 200)
        for row in rows { row.state = "done" }
        try context.save()
        let read = try server.afterClosing(container, table: "QueuedRow")
        #expect(read.rows < 1_000, "the save read \(read)")
    }

    /// Every connection of the store plans with a page read out of order costing 1.1 (solid
    /// state, or cached), unless the server set its own cost: the stock 4 is replaced, any
    /// other value kept.
    @Test func aReadOutOfOrderCostsWhatCachedStorageCostsUnlessTheServerSaysOtherwise() throws {
        let server = try ServerReads()
        defer { server.close() }
        let connection = server.admin
        let schema = StoreValue.text(quote(connection.location.schema))
        func cost() throws -> String? {
            try connection.run("SELECT current_setting('random_page_cost')", []).rows.first?.decode(String.self)
        }
        #expect(try cost() == "1.1")
        _ = try connection.run("RESET random_page_cost", [])
        #expect(try cost() == "4")
        _ = try connection.run(PostgreSQLConnection.sessionSettings, [schema])
        #expect(try cost() == "1.1")
        _ = try connection.run("SET random_page_cost = 2", [])
        _ = try connection.run(PostgreSQLConnection.sessionSettings, [schema])
        #expect(try cost() == "2")
    }

    /// Deleting a parcel of 5,000 items deletes them a page of 500 at a time, each page read
    /// on from the last one's end: the index entries read grow with the items, not with their
    /// square. Read again from the first, each page stepped over every item deleted before
    /// it (PostgreSQL keeps them in its indexes until the transaction ends) and, walking the
    /// primary key, over every item before the parcel's: an archive of a million members took
    /// 2,000 pages of ever longer walks.
    @Test func deletingAParcelReadsEachOfItsItemsOnce() throws {
        let server = try ServerReads()
        defer { server.close() }
        let container = try PersistentContainer.open(
            url: server.url, schema: try Schema([Parcel.self, ParcelItem.self]))
        // Parcels 2...21 hold 1,000 items each, then parcel 1 holds items 20,001...25,000.
        _ = try server.admin.run(
            "INSERT INTO \(server.table("Parcel")) (\"id\", \"_version\", \"label\") SELECT g, 1, 's' FROM generate_series(1, 21) AS g",
            [])
        _ = try server.admin.run(
            """
            INSERT INTO \(server.table("ParcelItem")) ("id", "_version", "label", "parcel") \
            SELECT g, 1, 'i', CASE WHEN g > 20000 THEN 1 ELSE 2 + (g - 1) / 1000 END \
            FROM generate_series(1, 25000) AS g
            """, [])
        _ = try server.admin.run("ANALYZE \(server.table("Parcel")), \(server.table("ParcelItem"))", [])
        // Deleted without objects, as `rm` deletes assets: the cascade reads the members.
        _ = try container.newBackgroundContext().batchDelete(
            FetchRequest<Parcel>(predicate: .objectIDs([ManagedObjectID(entityName: "Parcel", rowID: 1)])))
        #expect(try container.newBackgroundContext().count(for: FetchRequest<ParcelItem>()) == 20_000)
        let read = try server.afterClosing(container, table: "ParcelItem").entries
        // The first page walks the primary key to the parcel's first item (20,000 entries:
        // the planner's choice for so common a parcel); then each item is read about three
        // times (by its page, its deletion, the check of the parcel's): 35,000. Each page read
        // again from the first took 262,500.
        #expect(read >= 15_000 && read < 50_000, "index entries read: \(read)")
    }
}
