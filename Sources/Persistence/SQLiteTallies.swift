import Foundation
import GRDB

/// The tallies (``Tally``) in SQLite: one table of counts, kept by triggers on each
/// entity's table, so that every statement that writes rows — whoever issues it — keeps
/// them, in its own transaction.
extension SQLiteStore {
    static let talliesTable = TallySQL.table

    /// Makes the tallies' table and each entity's triggers as `schema` declares them.
    /// An entity whose triggers change (new tallies, changed ones, a store that had none)
    /// has its counts made again from its rows, in this transaction.
    static func installTallies(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS \(talliesTable) (entity TEXT NOT NULL, tally TEXT NOT NULL, \
                key TEXT NOT NULL, n INTEGER NOT NULL, total INTEGER NOT NULL, \
                PRIMARY KEY (entity, tally, key)) WITHOUT ROWID
                """)
        let objects = try SchemaObjects(db)
        for entity in schema.entities {
            let tallies = try entity.resolvedTallies()
            let wanted = triggers(entity.name, table: sql[entity].table, tallies)
            guard !talliesAreCurrent(wanted, in: objects) else { continue }
            for (name, _) in wanted { try db.execute(sql: "DROP TRIGGER IF EXISTS \(quote(name))") }
            try db.execute(sql: "DELETE FROM \(talliesTable) WHERE entity = ?", arguments: [entity.name])
            for (_, text) in wanted where !text.isEmpty { try db.execute(sql: text) }
            for select in counts.expected(entity.name, table: sql[entity].table, tallies) {
                try db.execute(sql: "INSERT INTO \(talliesTable) (entity, tally, key, n, total) \(select)")
            }
        }
    }

    /// Whether `objects` hold exactly the triggers `wanted` (an empty text wants no trigger:
    /// an entity without tallies is current when it has none).
    private static func talliesAreCurrent(_ wanted: [(String, String)], in objects: SchemaObjects) -> Bool {
        wanted.allSatisfy { name, text in objects.sql(of: name, type: "trigger") == (text.isEmpty ? nil : text) }
    }

    /// Whether every entity's tally triggers in `objects` are those `schema` declares.
    static func talliesAreCurrent(_ objects: SchemaObjects, schema: Schema, sql: EntityMap<EntitySQL>) throws -> Bool {
        try objects.hasTable(talliesTable)
            && schema.entities.allSatisfy { entity in
                talliesAreCurrent(
                    triggers(entity.name, table: sql[entity].table, try entity.resolvedTallies()), in: objects)
            }
    }

    /// Whether the store's tally triggers are those `schema` declares (a read-only open
    /// of a store that has not been opened for writing since its tallies changed: no).
    static func talliesAreCurrent(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws -> Bool {
        let objects = try SchemaObjects(db)
        guard objects.hasTable(talliesTable) else {
            return try schema.entities.allSatisfy { try $0.resolvedTallies().isEmpty }
        }
        return try talliesAreCurrent(objects, schema: schema, sql: sql)
    }

    /// The counts of the tally `name` of `entity`, by key.
    func tally(entity: EntityDescription, name: String) throws -> [TallyCount] {
        try mapErrors(nil) {
            try pool.read { db in
                guard try db.tableExists(Self.talliesTable) else { return [] }
                return try Row.fetchAll(
                    db,
                    sql: "SELECT key, n, total FROM \(Self.talliesTable) WHERE entity = ? AND tally = ? ORDER BY key",
                    arguments: [entity.name, name]
                ).map { TallyCount(key: $0[0], count: $0[1], total: $0[2]) }
            }
        }
    }

    /// Counts every tally again from the rows (SQL aggregates: memory stays flat), compares
    /// with what the store recorded, and with `fix` (a writable store) replaces the counts
    /// that were wrong, in one transaction.
    func recountTallies(fix: Bool) throws -> [TallyDiscrepancy] {
        let schema = schema
        let sql = sql
        let work = { (db: Database) throws -> [TallyDiscrepancy] in
            guard try db.tableExists(Self.talliesTable) else { return [] }
            try db.execute(sql: "DROP TABLE IF EXISTS temp._persistence_counted")
            try db.execute(
                sql: """
                    CREATE TEMP TABLE _persistence_counted (entity TEXT NOT NULL, tally TEXT NOT NULL, \
                    key TEXT NOT NULL, n INTEGER NOT NULL, total INTEGER NOT NULL, \
                    PRIMARY KEY (entity, tally, key)) WITHOUT ROWID
                    """)
            defer { try? db.execute(sql: "DROP TABLE IF EXISTS temp._persistence_counted") }
            var found: [TallyDiscrepancy] = []
            for entity in schema.entities {
                let tallies = try entity.resolvedTallies()
                guard !tallies.isEmpty else { continue }
                for select in Self.counts.expected(entity.name, table: sql[entity].table, tallies) {
                    try db.execute(
                        sql: "INSERT INTO temp._persistence_counted (entity, tally, key, n, total) \(select)")
                }
                let stored = "(SELECT * FROM main.\(Self.talliesTable) WHERE entity = ?)"
                let counted = "(SELECT * FROM temp._persistence_counted WHERE entity = ?)"
                // One by one: tallies have few keys.
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT IFNULL(s.tally, c.tally), IFNULL(s.key, c.key), s.n, s.total, c.n, c.total
                        FROM \(stored) AS s FULL OUTER JOIN \(counted) AS c ON s.tally = c.tally AND s.key = c.key
                        WHERE (s.n IS NOT c.n OR s.total IS NOT c.total)
                        ORDER BY 1, 2
                        """, arguments: [entity.name, entity.name])
                for row in rows {
                    let sn: Int? = row[2]
                    let st: Int64? = row[3]
                    let cn: Int? = row[4]
                    let ct: Int64? = row[5]
                    found.append(
                        TallyDiscrepancy(
                            entity: entity.name, tally: row[0], key: row[1],
                            recorded: sn.map { TallyCount(key: row[1], count: $0, total: st ?? 0) },
                            counted: cn.map { TallyCount(key: row[1], count: $0, total: ct ?? 0) }))
                }
                guard fix, found.contains(where: { $0.entity == entity.name }) else { continue }
                try db.execute(sql: "DELETE FROM main.\(Self.talliesTable) WHERE entity = ?", arguments: [entity.name])
                try db.execute(
                    sql:
                        "INSERT INTO main.\(Self.talliesTable) SELECT * FROM temp._persistence_counted WHERE entity = ?",
                    arguments: [entity.name])
            }
            return found
        }
        return try mapErrors(nil) {
            if fix && !isReadOnly { return try pool.write(work) }
            return try pool.read { db in
                // A read-only connection still has a writable temp schema.
                try work(db)
            }
        }
    }

    /// The statements that add the rows of `entity` whose IDs are in `?1...?2`, all inserted
    /// by the current statement's transaction with the triggers off, to its tallies: one
    /// statement a tally, each counting the range with an aggregate, as the insert trigger
    /// would have counted its rows one by one. Empty when the entity has no tallies.
    static func rangeTallySQL(_ entity: EntityDescription, table: String) throws -> [String] {
        try entity.resolvedTallies().map { rangeTallySQL($0, of: entity, table: table) }
    }

    /// What an insert of counts does with a key already counted: adds to it.
    private static let addedToCounts =
        "ON CONFLICT (entity, tally, key) DO UPDATE SET n = n + excluded.n, total = total + excluded.total"

    /// ``rangeTallySQL(_:table:)``'s statement for the one tally `tally` of `entity`.
    static func rangeTallySQL(_ tally: ResolvedTally, of entity: EntityDescription, table: String) -> String {
        let e = counts.literal(.text(entity.name))
        let upsert = " " + addedToCounts
        let range = "\(table).\"id\" BETWEEN ?1 AND ?2"
        let name = counts.literal(.text(tally.name))
        let sum = counts.sum(tally, row: table)
        let cond = counts.condition(tally, row: table)
        guard let distinct = tally.distinct else {
            let key = counts.key(tally.key, row: table)
            return "INSERT INTO \(talliesTable) (entity, tally, key, n, total) SELECT \(e), \(name), \(key), "
                + "count(*), IFNULL(sum(\(sum)), 0) FROM \(table) WHERE \(range) AND \(cond) GROUP BY 3" + upsert
        }
        // Each value the range holds counts once, unless a row outside the range holds it
        // (that row counted it). A NULL counts once a row, as the trigger counts it.
        let column = "\(table).\(quote(distinct))"
        let filter = tally.filter.map { " AND o.\(quote($0.column)) IS \(counts.literal($0.value))" } ?? ""
        let values =
            "SELECT \(column) AS v, max(\(sum)) AS total, sum(\(sum)) AS totals, count(*) AS rows FROM \(table) "
            + "WHERE \(range) AND \(cond) GROUP BY \(column)"
        let alone =
            "NOT EXISTS (SELECT 1 FROM \(table) AS o WHERE o.\(quote(distinct)) = g.v\(filter) "
            + "AND (o.\"id\" < ?1 OR o.\"id\" > ?2))"
        return "INSERT INTO \(talliesTable) (entity, tally, key, n, total) SELECT \(e), \(name), '', "
            + "IFNULL(sum(IIF(g.v IS NULL, g.rows, 1)), 0), IFNULL(sum(IIF(g.v IS NULL, g.totals, g.total)), 0) "
            + "FROM (\(values)) AS g WHERE \(alone) HAVING count(*) > 0" + upsert
    }

    /// Adds `counts` (a tally's ``BatchTallyCounts``) to the tally `tally` of `entity`: one
    /// upsert a key.
    static func add(_ counts: BatchTallyCounts, to tally: ResolvedTally, of entity: EntityDescription, _ db: Database)
        throws
    {
        let upsert = try db.cachedStatement(
            sql: "INSERT INTO \(talliesTable) (entity, tally, key, n, total) VALUES (?, ?, ?, ?, ?) \(addedToCounts)")
        for key in counts.keys {
            try upsert.execute(arguments: [entity.name, tally.name, key.text, key.count, key.total])
        }
    }

    /// A `SELECT` of what deleting the rows whose IDs are bound to `marks` takes from
    /// `tally`, read before they go: `(key, rows, total)` a key of a tally by key;
    /// `(value, rows, largest sum, sum)` a value of a distinct tally, which counts off only
    /// if no row is left with it (``deletionProbeSQL(_:_:table:)``, asked after the deletion).
    static func deletionTallySQL(_ tally: ResolvedTally, table: String, marks: String) -> String {
        let sum = counts.sum(tally, row: table)
        let rows =
            "FROM \(table) WHERE \(table).\"id\" IN (\(marks)) AND \(counts.condition(tally, row: table)) GROUP BY 1"
        guard let distinct = tally.distinct else {
            return "SELECT \(counts.key(tally.key, row: table)), count(*), IFNULL(sum(\(sum)), 0) \(rows)"
        }
        return "SELECT \(table).\(quote(distinct)), count(*), IFNULL(max(\(sum)), 0), IFNULL(sum(\(sum)), 0) \(rows)"
    }

    /// A `SELECT` of whether a row holds the value bound to `?` of a distinct tally's
    /// column, among the rows its filter selects.
    static func deletionProbeSQL(_ tally: ResolvedTally, _ column: String, table: String) -> String {
        let filter = tally.filter.map { " AND o.\(quote($0.column)) IS \(counts.literal($0.value))" } ?? ""
        return "SELECT 1 FROM \(table) AS o WHERE o.\(quote(column)) = ?\(filter) LIMIT 1"
    }

    /// Takes `count` rows and `total` from `key`'s count in `tally`, and drops the count
    /// when no row is left, as the delete trigger does a row at a time.
    static func subtract(
        _ db: Database, _ entity: EntityDescription, _ tally: ResolvedTally, key: String, count: Int64, total: Int64
    ) throws {
        let here = "entity = ? AND tally = ? AND key = ?"
        try db.execute(
            sql: "UPDATE \(talliesTable) SET n = n - ?, total = total - ? WHERE \(here)",
            arguments: [count, total, entity.name, tally.name, key])
        try db.execute(
            sql: "DELETE FROM \(talliesTable) WHERE \(here) AND n = 0", arguments: [entity.name, tally.name, key])
    }

    // MARK: - SQL

    /// The triggers of `entity`'s tallies, by name (an empty text: none wanted).
    private static func triggers(_ entity: String, table: String, _ tallies: [ResolvedTally]) -> [(String, String)] {
        let names = ["insert", "delete", "update"].map { "_persistence_tally_\(entity)_\($0)" }
        guard !tallies.isEmpty else { return names.map { ($0, "") } }
        let add = tallies.map { addSQL(entity, $0, table: table, row: "NEW") }.joined()
        let remove = tallies.map { removeSQL(entity, $0, table: table, row: "OLD") }.joined()
        var columns: [String] = []
        for tally in tallies {
            for column in [tally.key, tally.sum, tally.distinct, tally.filter?.column].compactMap({ $0 })
            where !columns.contains(column) {
                columns.append(column)
            }
        }
        let changed = columns.map { "OLD.\(quote($0)) IS NOT NEW.\(quote($0))" }.joined(separator: " OR ")
        return [
            (names[0], "CREATE TRIGGER \(quote(names[0])) AFTER INSERT ON \(table) BEGIN\(add) END"),
            (names[1], "CREATE TRIGGER \(quote(names[1])) AFTER DELETE ON \(table) BEGIN\(remove) END"),
            (
                names[2],
                "CREATE TRIGGER \(quote(names[2])) AFTER UPDATE OF \(columns.map(quote).joined(separator: ", ")) "
                    + "ON \(table) WHEN \(changed) BEGIN\(remove)\(add) END"
            ),
        ]
    }

    /// The tallies' expressions in SQLite's dialect.
    private static let counts = TallySQL(dialect: .sqlite)

    /// Whether no other row than `row` holds `row`'s value of a distinct tally's column
    /// among the rows its filter selects: a probe of the entity's own table (of the index
    /// on that column, which a distinct tally needs).
    private static func alone(_ tally: ResolvedTally, _ column: String, table: String, row: String) -> String {
        let filter = tally.filter.map { " AND o.\(quote($0.column)) IS \(counts.literal($0.value))" } ?? ""
        return "NOT EXISTS (SELECT 1 FROM \(table) AS o WHERE o.\(quote(column)) = \(row).\(quote(column))\(filter) "
            + "AND o.\"id\" <> \(row).\"id\")"
    }

    private static func addSQL(_ entity: String, _ tally: ResolvedTally, table: String, row: String) -> String {
        let t = talliesTable
        let e = counts.literal(.text(entity))
        let name = counts.literal(.text(tally.name))
        let sum = counts.sum(tally, row: row)
        var cond = counts.condition(tally, row: row)
        var key = counts.key(tally.key, row: row)
        if let distinct = tally.distinct {
            // Counted by the first row with the value.
            cond += " AND " + alone(tally, distinct, table: table, row: row)
            key = "''"
        }
        return """
             INSERT INTO \(t) (entity, tally, key, n, total) SELECT \(e), \(name), \(key), 1, \(sum) WHERE \(cond) \
            ON CONFLICT (entity, tally, key) DO UPDATE SET n = n + 1, total = total + excluded.total;
            """
    }

    private static func removeSQL(_ entity: String, _ tally: ResolvedTally, table: String, row: String) -> String {
        let t = talliesTable
        let e = counts.literal(.text(entity))
        let name = counts.literal(.text(tally.name))
        var cond = counts.condition(tally, row: row)
        var key = counts.key(tally.key, row: row)
        if let distinct = tally.distinct {
            // Uncounted by the last row with the value.
            cond += " AND " + alone(tally, distinct, table: table, row: row)
            key = "''"
        }
        let here = "entity = \(e) AND tally = \(name) AND key = \(key)"
        return """
             UPDATE \(t) SET n = n - 1, total = total - \(counts.sum(tally, row: row)) WHERE \(here) AND \(cond); \
            DELETE FROM \(t) WHERE \(here) AND n = 0;
            """
    }
}
