import Foundation
import Persistence
import PostgresNIO

/// The tallies (``Tally``) on PostgreSQL: one table of counts, kept by PL/pgSQL triggers
/// on each tallied entity's table, as the SQLite store keeps them with its triggers.
/// Triggers rather than statements the store issues: every statement that writes rows — a
/// save, a cascade of the delete-rule engine, a migration's raw SQL, another program — keeps
/// the counts, in its own transaction, so a rollback undoes them with the rows.
///
/// Where PostgreSQL differs from SQLite:
/// - after-row triggers fire when the statement ends, not row by row: a distinct count
///   (``Tally/distinct(_:of:summing:where:is:)``) is kept by a statement trigger that looks
///   at all of the statement's old and new rows at once (transition tables);
/// - several hosts write at once, where SQLite has one writer at a time. The counts are
///   rows updated in place, and a distinct count asks whether another row holds a value,
///   which another transaction's uncommitted row does not show. So every tally trigger
///   first takes one transaction-scoped advisory lock of the store (its PostgreSQL schema):
///   from their first tallied row to their commit, saves that write tallied entities run
///   one at a time (as every save does on SQLite), never deadlock on the counts' rows, and
///   each sees the rows the one before it committed. Saves that write no tallied entity
///   are not held. Counts kept as rows of deltas would lift this; they are not built.
/// - a `NULL` value of a distinct count is not counted by the trigger;
/// - a key is the column's value as PostgreSQL writes it as text (`''` for `NULL`): the same
///   as SQLite's for text and integers; a `real` key is written the shorter way (`1`, where
///   SQLite writes `1.0`).
extension PostgreSQLStore {
    static let talliesTable = TallySQL.table

    /// Makes the tallies' table and each entity's trigger as the schema declares them. An
    /// entity whose trigger changes (new tallies, changed ones, a store that had none) has
    /// its counts made again from its rows, in this transaction.
    func installTallies(_ connection: PostgreSQLConnection) throws {
        try connection.run(
            """
            CREATE TABLE IF NOT EXISTS \(Self.talliesTable) (entity TEXT NOT NULL, tally TEXT NOT NULL, \
            key TEXT COLLATE "C" NOT NULL, n BIGINT NOT NULL, total BIGINT NOT NULL, PRIMARY KEY (entity, tally, key))
            """, [])
        for entity in schema.entities {
            let tallies = try entity.resolvedTallies()
            let table = quote(entity.name)
            let functions = Self.functions(entity.name, tallies, schema: location.schema)
            var changed = false
            for function in functions where try existingBody(connection, function.name) != function.body {
                changed = true
            }
            guard changed else { continue }
            for function in functions {
                // The row trigger the counts by key once had was named as its function.
                for trigger in [function.name] + function.triggers.map(\.name) {
                    try connection.run("DROP TRIGGER IF EXISTS \(quote(trigger)) ON \(table)", [])
                }
                try connection.run("DROP FUNCTION IF EXISTS \(quote(function.name))()", [])
            }
            try connection.run("DELETE FROM \(Self.talliesTable) WHERE entity = $1", [.text(entity.name)])
            for function in functions { try function.create(on: table, connection) }
            for select in Self.counts.expected(entity.name, table: table, tallies) {
                try connection.run("INSERT INTO \(Self.talliesTable) (entity, tally, key, n, total) \(select)", [])
            }
        }
    }

    /// The body of the function `name` in the store's schema, if there is one.
    func existingBody(_ connection: PostgreSQLConnection, _ name: String) throws -> String? {
        try connection.run(
            """
            SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
            WHERE p.proname = $1 AND n.nspname = $2
            """, [.text(name), .text(location.schema)]
        ).rows.first.map { try $0.decode(String.self) }
    }

    /// Whether the store's tally triggers are those the schema declares (a read-only open
    /// cannot make them).
    func talliesAreCurrent(_ connection: PostgreSQLConnection) throws -> Bool {
        for entity in schema.entities {
            for function in Self.functions(entity.name, try entity.resolvedTallies(), schema: location.schema)
            where try existingBody(connection, function.name) != function.body {
                return false
            }
        }
        return true
    }

    func tally(entity: EntityDescription, name: String) throws -> [TallyCount] {
        try mapErrors(nil) {
            try reader.run(
                "SELECT key, n, total FROM \(Self.talliesTable) WHERE entity = $1 AND tally = $2 ORDER BY key",
                [.text(entity.name), .text(name)]
            ).rows.map { row in
                let (key, n, total) = try row.decode((String, Int64, Int64).self)
                return TallyCount(key: key, count: Int(n), total: total)
            }
        }
    }

    /// Counts every tally again from the rows (aggregates in the server: memory stays
    /// flat), compares with what the store recorded, and with `fix` replaces the counts that
    /// were wrong, in one transaction.
    func recountTallies(fix: Bool) throws -> [TallyDiscrepancy] {
        let fix = fix && !isReadOnly
        if fix { try refuseIfSessionLost() }
        return try mapErrors(nil) {
            try writer.withLock {
                try transaction(writer) {
                    if fix { try fenceSave() }  // a write, fenced as a save is
                    try writer.run(
                        """
                        CREATE TEMP TABLE _persistence_counted (entity TEXT NOT NULL, tally TEXT NOT NULL, \
                        key TEXT COLLATE "C" NOT NULL, n BIGINT NOT NULL, total BIGINT NOT NULL) ON COMMIT DROP
                        """, [])
                    var found: [TallyDiscrepancy] = []
                    for entity in schema.entities {
                        let tallies = try entity.resolvedTallies()
                        guard !tallies.isEmpty else { continue }
                        for select in Self.counts.expected(entity.name, table: quote(entity.name), tallies) {
                            try writer.run(
                                "INSERT INTO _persistence_counted (entity, tally, key, n, total) \(select)", [])
                        }
                        let rows = try writer.run(
                            """
                            SELECT COALESCE(s.tally, c.tally), COALESCE(s.key, c.key), s.n, s.total, c.n, c.total \
                            FROM (SELECT * FROM \(Self.talliesTable) WHERE entity = $1) AS s \
                            FULL OUTER JOIN (SELECT * FROM _persistence_counted WHERE entity = $1) AS c \
                            ON s.tally = c.tally AND s.key = c.key \
                            WHERE s.n IS DISTINCT FROM c.n OR s.total IS DISTINCT FROM c.total \
                            ORDER BY 1, 2
                            """, [.text(entity.name)]
                        ).rows
                        for row in rows {
                            let (tally, key, sn, st, cn, ct) = try row.decode(
                                (String, String, Int64?, Int64?, Int64?, Int64?).self)
                            found.append(
                                TallyDiscrepancy(
                                    entity: entity.name, tally: tally, key: key,
                                    recorded: sn.map { TallyCount(key: key, count: Int($0), total: st ?? 0) },
                                    counted: cn.map { TallyCount(key: key, count: Int($0), total: ct ?? 0) }))
                        }
                        guard fix, found.contains(where: { $0.entity == entity.name }) else { continue }
                        try writer.run("DELETE FROM \(Self.talliesTable) WHERE entity = $1", [.text(entity.name)])
                        try writer.run(
                            """
                            INSERT INTO \(Self.talliesTable) (entity, tally, key, n, total) \
                            SELECT entity, tally, key, n, total FROM _persistence_counted WHERE entity = $1
                            """, [.text(entity.name)])
                    }
                    return found
                }
            }
        }
    }

    // MARK: - SQL

    /// A trigger function of an entity's tallies: its body (`nil`: none wanted) and its
    /// triggers (name, the event that fires it, and how).
    struct TriggerFunction {
        var name: String
        var body: String?
        var triggers: [(name: String, event: String, then: String)]

        /// Makes the function and its triggers on `table` (quoted); nothing without a body.
        func create(on table: String, _ connection: PostgreSQLConnection) throws {
            guard let body else { return }
            try connection.run(
                "CREATE FUNCTION \(quote(name))() RETURNS trigger LANGUAGE plpgsql AS $persistence$\(body)$persistence$",
                [])
            for trigger in triggers {
                try connection.run(
                    "CREATE TRIGGER \(quote(trigger.name)) \(trigger.event) ON \(table) \(trigger.then) "
                        + "EXECUTE FUNCTION \(quote(name))()", [])
            }
        }
    }

    /// The two trigger functions of an entity, both run once a statement, on its old and new
    /// rows together (transition tables): one for the counts by key, one for the distinct
    /// counts.
    ///
    /// - The counts by key change once a statement for each key, by the statement's net
    ///   difference. A trigger for each row would update the same few count rows once a row:
    ///   within one transaction each update leaves a version the next one must step over (none
    ///   can be pruned before the commit), so a transaction of n rows cost n² — a million-row
    ///   copy into the store never finished.
    /// - PostgreSQL fires after-row triggers at the end of the statement anyway, when every
    ///   row the statement deleted is gone: "is another row holding this value?" must be asked
    ///   of the statement's rows together.
    ///
    /// A trigger with transition tables fires for one event only, hence three of each. Before
    /// the counts by key were kept this way, they had one row trigger, named as its function:
    /// ``installTallies(_:)`` drops it too.
    static func functions(_ entity: String, _ tallies: [ResolvedTally], schema: String) -> [TriggerFunction] {
        let byKey = tallies.filter { $0.distinct == nil }
        let distinct = tallies.filter { $0.distinct != nil }
        func statementTriggers(_ name: String) -> [(name: String, event: String, then: String)] {
            [
                (name + "_insert", "AFTER INSERT", "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"),
                (name + "_delete", "AFTER DELETE", "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT"),
                (
                    name + "_update",
                    "AFTER UPDATE", "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT"
                ),
            ]
        }
        let byKeyName = "_persistence_tally_\(entity)"
        let distinctName = "_persistence_tally_\(entity)_distinct"
        return [
            // For each key, the statement's new rows counted and its old rows uncounted, once.
            TriggerFunction(
                name: byKeyName,
                body: byKey.isEmpty
                    ? nil : functionBody(byKey, schema: schema) { keyedDelta(entity, $0, old: $1, new: $2) },
                triggers: statementTriggers(byKeyName)),
            // For each value the statement's old or new rows hold (not `NULL`), whether a row
            // held it before the statement and whether one holds it now; the count and total
            // change by the difference.
            TriggerFunction(
                name: distinctName,
                body: distinct.isEmpty
                    ? nil : functionBody(distinct, schema: schema) { distinctDelta(entity, $0, old: $1, new: $2) },
                triggers: statementTriggers(distinctName)),
        ]
    }

    /// An empty select of the columns of the transition table `table`: what a branch reads
    /// for the transition table its event does not have.
    private static func none(_ table: String) -> String { "(SELECT * FROM \(table) WHERE FALSE)" }

    /// The PL/pgSQL body of a statement trigger of `tallies`: `delta` writes one tally's change
    /// by a statement whose old rows are `old` and new rows `new` (transition tables, or an
    /// empty select), for each event.
    static func functionBody(
        _ tallies: [ResolvedTally], schema: String, delta: (ResolvedTally, _ old: String, _ new: String) -> String
    ) -> String {
        func branch(old: String, new: String) -> String { tallies.map { delta($0, old, new) }.joined() }
        return """

            BEGIN
            \(returnUnlessCounted(tallies))
            \(lock(schema))
            IF TG_OP = 'INSERT' THEN\(branch(old: none("new_rows"), new: "new_rows"))
            ELSIF TG_OP = 'DELETE' THEN\(branch(old: "old_rows", new: none("old_rows")))
            ELSE\(branch(old: "old_rows", new: "new_rows"))
            END IF;
            RETURN NULL;
            END;

            """
    }

    /// The start of a tally trigger's body: it returns, before it takes the lock, when the
    /// statement wrote no row, or updated none of the columns `tallies` read. A statement
    /// trigger fires even for a statement of no rows, and every save's `UPDATE` of other
    /// columns would otherwise wait for the lock.
    private static func returnUnlessCounted(_ tallies: [ResolvedTally]) -> String {
        var columns: [String] = []
        for tally in tallies {
            for column in [tally.key, tally.sum, tally.filter?.column, tally.distinct].compactMap({ $0 })
            where !columns.contains(column) {
                columns.append(column)
            }
        }
        let changed =
            columns.isEmpty
            ? "FALSE" : columns.map { "o.\(quote($0)) IS DISTINCT FROM n.\(quote($0))" }.joined(separator: " OR ")
        return """
            IF TG_OP = 'INSERT' THEN
              IF NOT EXISTS (SELECT 1 FROM new_rows) THEN RETURN NULL; END IF;
            ELSIF TG_OP = 'DELETE' THEN
              IF NOT EXISTS (SELECT 1 FROM old_rows) THEN RETURN NULL; END IF;
            ELSIF NOT EXISTS (SELECT 1 FROM old_rows AS o JOIN new_rows AS n ON n."id" = o."id" WHERE \(changed)) THEN
              RETURN NULL;
            END IF;
            """
    }

    /// The statements that apply one count by key's change by a statement whose old rows are
    /// `old` and new rows `new`: one upsert of each key's net difference, then the keys no
    /// row holds any more taken out.
    private static func keyedDelta(_ entity: String, _ tally: ResolvedTally, old: String, new: String) -> String {
        let t = talliesTable
        let e = counts.literal(.text(entity))
        let name = counts.literal(.text(tally.name))
        func rows(_ table: String, sign: String) -> String {
            "SELECT \(counts.key(tally.key, row: "o")) AS k, \(sign)1 AS n, \(sign)(\(counts.sum(tally, row: "o"))) AS t "
                + "FROM \(table) AS o WHERE \(counts.condition(tally, row: "o"))"
        }
        return """

              INSERT INTO \(t) (entity, tally, key, n, total) \
            SELECT \(e), \(name), d.k, sum(d.n), sum(d.t)::BIGINT \
            FROM (\(rows(new, sign: "")) UNION ALL \(rows(old, sign: "-"))) AS d \
            GROUP BY d.k HAVING sum(d.n) <> 0 OR sum(d.t) <> 0 \
            ON CONFLICT (entity, tally, key) DO UPDATE SET n = \(t).n + EXCLUDED.n, total = \(t).total + EXCLUDED.total;
              DELETE FROM \(t) WHERE entity = \(e) AND tally = \(name) AND n = 0;
            """
    }

    /// The statements that apply one distinct tally's change by a statement whose old rows
    /// are `old` and new rows `new` (transition tables, or an empty select).
    private static func distinctDelta(_ entity: String, _ tally: ResolvedTally, old: String, new: String) -> String {
        let t = talliesTable
        let table = quote(entity)
        let column = quote(tally.distinct!)
        let e = counts.literal(.text(entity))
        let name = counts.literal(.text(tally.name))
        func cond(_ row: String) -> String { counts.condition(tally, row: row) }
        func sum(_ row: String) -> String { counts.sum(tally, row: row) }
        let values =
            "SELECT o.\(column) AS v FROM \(old) AS o WHERE \(cond("o")) AND o.\(column) IS NOT NULL "
            + "UNION SELECT o.\(column) FROM \(new) AS o WHERE \(cond("o")) AND o.\(column) IS NOT NULL"
        let now = "FROM \(table) AS o WHERE o.\(column) = x.v AND \(cond("o"))"
        let before =
            "FROM \(table) AS o WHERE o.\(column) = x.v AND \(cond("o")) AND o.\"id\" NOT IN (SELECT n.\"id\" FROM \(new) AS n)"
        let was = "FROM \(old) AS o WHERE o.\(column) = x.v AND \(cond("o"))"
        return """

              INSERT INTO \(t) (entity, tally, key, n, total) \
            SELECT \(e), \(name), '', COALESCE(sum(d.after_n - d.before_n), 0), \
            COALESCE(sum(d.after_t - d.before_t), 0)::BIGINT FROM (SELECT \
            (CASE WHEN EXISTS (SELECT 1 \(now)) THEN 1 ELSE 0 END) AS after_n, \
            COALESCE((SELECT max(\(sum("o"))) \(now)), 0) AS after_t, \
            (CASE WHEN EXISTS (SELECT 1 \(was)) OR EXISTS (SELECT 1 \(before)) THEN 1 ELSE 0 END) AS before_n, \
            COALESCE(GREATEST((SELECT max(\(sum("o"))) \(was)), (SELECT max(\(sum("o"))) \(before))), 0) AS before_t \
            FROM (\(values)) AS x) AS d \
            ON CONFLICT (entity, tally, key) DO UPDATE SET n = \(t).n + EXCLUDED.n, total = \(t).total + EXCLUDED.total;
              DELETE FROM \(t) WHERE entity = \(e) AND tally = \(name) AND key = '' AND n = 0;
            """
    }

    /// The lock every tally trigger of the store takes first, held to the end of the
    /// transaction: the counts' rows are then only ever locked by one transaction at a time.
    private static func lock(_ schema: String) -> String {
        "PERFORM pg_advisory_xact_lock(hashtext(\(counts.literal(.text("persistence-tallies:" + schema)))));"
    }

    /// The tallies' expressions in PostgreSQL's dialect.
    private static let counts = TallySQL(dialect: .postgresql)
}
