import CSQLiteConfig
import Foundation
import GRDB

// The two ends of `PersistentContainer.copyAll(to:progress:beforeCommit:)` on SQLite.
extension SQLiteStore {
    /// In a write transaction (`BEGIN IMMEDIATE`): one state of the file, and every other
    /// writer, in any process, waits for the store's one write lock until `body` returns.
    func holdingStill<T>(_ body: (any StoreRowSource) throws -> T) throws -> T {
        try mapErrors(nil) { try writing { db in try body(SQLiteRowSource(db: db, sql: sql)) } }
    }

    /// One write transaction.
    func load(
        _ entities: [EntityDescription], from source: any StoreRowSource, progress: (Int) -> Void,
        beforeCommit: () throws -> Void
    ) throws {
        try mapErrors(nil) {
            try writing { db in
                for entity in entities {
                    let table = sql[entity].table
                    if try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \(table))") == true {
                        throw PersistenceError(
                            .misuse,
                            "\(url.path) already holds rows of \(entity.name): a copy goes into an empty store; "
                                + "nothing was copied")
                    }
                }
                for entity in entities {
                    let entitySQL = sql[entity]
                    let names = (["\"id\"", "\"_version\""] + entitySQL.columns).joined(separator: ", ")
                    let marks = Array(repeating: "?", count: entitySQL.columns.count + 2).joined(separator: ", ")
                    let statement = try db.makeStatement(
                        sql: "INSERT INTO \(entitySQL.table) (\(names)) VALUES (\(marks))")
                    let handle = statement.sqliteStatement
                    // The tallies are counted once the rows are in, by the aggregate a large
                    // insertion uses (as a recount counts them), with the connection's triggers
                    // off meanwhile: a trigger a row would count a distinct value's total from
                    // the first row in ID order, which need not be what the source holds.
                    // The search index likewise, with one statement over every row copied.
                    let tallies =
                        try SQLiteStore.rangeTallySQL(entity, table: entitySQL.table)
                        + [try SQLiteStore.rangeSearchSQL(entity, table: entitySQL.table)].compactMap { $0 }
                    let othersTriggers = try Self.hasOthersTriggers(db, entity)
                    let counting =
                        !tallies.isEmpty && !othersTriggers
                        && persistence_set_triggers_enabled(db.sqliteConnection, 0) == 0
                    defer { if counting { _ = persistence_set_triggers_enabled(db.sqliteConnection, 1) } }
                    var after = Int64.min
                    while true {
                        let page = try source.page(entity, after: after, limit: PersistentContainer.copyPageSize)
                        guard let last = page.last else { break }
                        for row in page {
                            sqlite3_reset(handle)
                            sqlite3_bind_int64(handle, 1, row.id)
                            sqlite3_bind_int64(handle, 2, row.version)
                            for (i, value) in row.values.enumerated() { Self.bind(value, to: handle, at: Int32(i + 3)) }
                            let code = sqlite3_step(handle)
                            guard code == SQLITE_DONE else {
                                let message = String(cString: sqlite3_errmsg(db.sqliteConnection))
                                sqlite3_reset(handle)
                                throw PersistenceError(
                                    .io, "Could not copy \(entity.name) \(row.id) into \(url.path): \(message)")
                            }
                        }
                        sqlite3_reset(handle)
                        sqlite3_clear_bindings(handle)
                        after = last.id
                        progress(page.count)
                    }
                    if counting {
                        _ = persistence_set_triggers_enabled(db.sqliteConnection, 1)
                        for statement in tallies {
                            try db.execute(sql: statement, arguments: [Int64.min, Int64.max])
                        }
                    }
                    try db.execute(
                        sql: """
                            INSERT INTO _persistence_sequence (entity, next) VALUES (?, ?) \
                            ON CONFLICT (entity) DO UPDATE SET next = max(next, excluded.next)
                            """, arguments: [entity.name, try source.nextID(entity)])
                }
                try beforeCommit()
                try runInjectedFault()
            }
        }
    }

    func tableNames() throws -> [String] {
        try mapErrors(nil) {
            try pool.read { db in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") }
        }
    }
}

/// Rows read on the connection that holds the write transaction.
private struct SQLiteRowSource: StoreRowSource {
    let db: Database
    let sql: EntityMap<EntitySQL>

    func page(_ entity: EntityDescription, after: Int64, limit: Int) throws -> [StoreRow] {
        let entitySQL = sql[entity]
        return try SQLiteStore.readRows(
            db, "SELECT \(entitySQL.selectList) FROM \(entitySQL.table) WHERE \"id\" > ? ORDER BY \"id\" LIMIT ?",
            [.integer(after), .integer(Int64(limit))], entitySQL)
    }

    func nextID(_ entity: EntityDescription) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT next FROM _persistence_sequence WHERE entity = ?", arguments: [entity.name])
            ?? 1
    }

    func count(_ entity: EntityDescription) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT count(*) FROM \(sql[entity].table)") ?? 0
    }
}
