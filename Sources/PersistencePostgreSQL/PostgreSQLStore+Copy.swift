import Foundation
import Persistence
import PostgresNIO

// The two ends of `PersistentContainer.copyAll(to:progress:beforeCommit:)` on PostgreSQL.
extension PostgreSQLStore {
    /// A `REPEATABLE READ` transaction on the writer that first locks every entity's table
    /// `IN SHARE MODE`: one state of the rows, read after every earlier write committed, and
    /// every other writer (a save, a claim, a batch delete, on any host) waits until `body`
    /// returns. Readers go on.
    func holdingStill<T>(_ body: (any StoreRowSource) throws -> T) throws -> T {
        try writer.withLock {
            try transaction(writer) {
                try mapErrors(nil) {
                    try writer.run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", [])
                    let tables = schema.entities.map { sql[$0].table }.joined(separator: ", ")
                    try writer.run("LOCK TABLE \(tables) IN SHARE MODE", [])
                }
                return try body(PostgreSQLRowSource(store: self))
            }
        }
    }

    /// One transaction on the writer, rows in multi-row `INSERT`s; the tally triggers count
    /// them as they go in. The tables are analyzed before the commit.
    func load(
        _ entities: [EntityDescription], from source: any StoreRowSource, progress: (Int) -> Void,
        beforeCommit: () throws -> Void
    ) throws {
        try requireWritable()
        try refuseIfSessionLost()
        try writer.withLock {
            try transaction(writer) {
                try fenceSave(countingCommit: true)  // a write, fenced and counted as a save is
                for entity in entities {
                    let table = sql[entity].table
                    let any = try mapErrors(nil) { try writer.run("SELECT 1 FROM \(table) LIMIT 1", []).rows }
                    guard any.isEmpty else {
                        throw PersistenceError(
                            .misuse,
                            "\(url.absoluteString) already holds rows of \(entity.name): a copy goes into an empty "
                                + "store; nothing was copied")
                    }
                }
                for entity in entities {
                    let statements = sql[entity]
                    let width = statements.columns.count + 2
                    // The protocol allows 65,535 parameters a statement.
                    let perStatement = max(1, 60_000 / width)
                    let names = (["\"id\"", "\"_version\""] + statements.columns).joined(separator: ", ")
                    var after = Int64.min
                    while true {
                        let page = try source.page(entity, after: after, limit: PersistentContainer.copyPageSize)
                        guard let last = page.last else { break }
                        for start in stride(from: 0, to: page.count, by: perStatement) {
                            let rows = page[start..<min(start + perStatement, page.count)]
                            var arguments: [StoreValue] = []
                            arguments.reserveCapacity(rows.count * width)
                            var tuples: [String] = []
                            tuples.reserveCapacity(rows.count)
                            for row in rows {
                                let first = arguments.count
                                arguments.append(.integer(row.id))
                                arguments.append(.integer(row.version))
                                arguments.append(contentsOf: row.values)
                                tuples.append("(" + (1...width).map { "$\(first + $0)" }.joined(separator: ", ") + ")")
                            }
                            _ = try mapErrors(nil) {
                                try writer.run(
                                    "INSERT INTO \(statements.table) (\(names)) VALUES \(tuples.joined(separator: ", "))",
                                    arguments)
                            }
                        }
                        after = last.id
                        progress(page.count)
                    }
                    _ = try mapErrors(nil) {
                        try writer.run(
                            """
                            INSERT INTO \(Self.sequenceTable) (entity, next) VALUES ($1, $2) \
                            ON CONFLICT (entity) DO UPDATE SET next = GREATEST(\(Self.sequenceTable).next, EXCLUDED.next)
                            """, [.text(entity.name), .integer(try source.nextID(entity))])
                    }
                }
                // The planner's statistics of the tables just filled, in the same transaction (it
                // sees its own rows): without them, until autovacuum's nap ends, it takes every
                // equality for a common one, and walked the primary key of 10,000,000 assets to
                // find that one had no archive members (1.3 s for the `rm` of one asset).
                // The search indexes' tables too: without their statistics, a word in every name
                // was taken for a rare one, and its GIN index read whole (a third of a second).
                let searched = try entities.filter { try $0.resolvedSearchIndex() != nil }
                let tables = (entities.map { sql[$0].table } + searched.map { quote(Self.searchTableName($0.name)) })
                    .joined(separator: ", ")
                _ = try mapErrors(nil) { try writer.run("ANALYZE \(tables)", []) }
                // The rows' entries in each search index's GIN index, waiting in its pending list
                // (up to 4 MB, which every search reads whole until a vacuum merges it: a rare word
                // 5.9 ms instead of 0.03), merged now — by the index's owner only, as PostgreSQL
                // allows (another role's copy leaves them to autovacuum rather than fail).
                for entity in searched {
                    _ = try mapErrors(nil) {
                        try writer.run(
                            "SELECT gin_clean_pending_list(c.oid) FROM pg_class AS c "
                                + "WHERE c.oid = $1::regclass AND pg_has_role(c.relowner, 'USAGE')",
                            [.text(quote(Self.searchDocIndexName(entity.name)))])
                    }
                }
                try beforeCommit()
                try injectedFault.run()
            }
        }
    }

    func tableNames() throws -> [String] {
        try mapErrors(nil) {
            try reader.run(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", [.text(location.schema)]
            ).rows.map { try $0.decode(String.self) }
        }
    }
}

/// Rows read in the transaction that holds the tables.
private struct PostgreSQLRowSource: StoreRowSource {
    let store: PostgreSQLStore

    func page(_ entity: EntityDescription, after: Int64, limit: Int) throws -> [StoreRow] {
        let statements = store.sql[entity]
        return try store.mapErrors(nil) {
            try statements.decode(
                try store.writer.run(
                    "SELECT \(statements.selectList) FROM \(statements.table) WHERE \"id\" > $1 ORDER BY \"id\" LIMIT $2",
                    [.integer(after), .integer(Int64(limit))]
                ).rows)
        }
    }

    func nextID(_ entity: EntityDescription) throws -> Int64 {
        try store.mapErrors(nil) {
            try store.writer.run(
                "SELECT next FROM \(PostgreSQLStore.sequenceTable) WHERE entity = $1", [.text(entity.name)]
            ).rows.first?.decode(Int64.self) ?? 1
        }
    }

    func count(_ entity: EntityDescription) throws -> Int {
        try store.mapErrors(nil) {
            Int(
                try store.writer.run("SELECT count(*) FROM \(store.sql[entity].table)", []).rows.first?.decode(
                    Int64.self) ?? 0)
        }
    }
}
