import CSQLiteConfig
import Foundation
import GRDB
import GRDBSQLite

/// Writing: IDs, a save (``SavePipeline`` inside one write transaction), the inserts and
/// deletes that count their tallies once a batch, and the statements the pipeline runs
/// (``SQLiteStatements``).
extension SQLiteStore {
    func reserveIDs(entity: EntityDescription, count: Int) throws -> ClosedRange<Int64> {
        try mapErrors(nil) {
            try writing { db in try Self.reserve(db, entity: entity.name, count: count) }
        }
    }

    fileprivate static func reserve(_ db: Database, entity: String, count: Int) throws -> ClosedRange<Int64> {
        let next = try Int64.fetchOne(
            db, sql: "UPDATE _persistence_sequence SET next = next + ? WHERE entity = ? RETURNING next",
            arguments: [count, entity])
        guard let next else { throw PersistenceError(.misuse, "\(entity) is not an entity of this store") }
        return (next - Int64(count))...(next - 1)
    }

    func releaseIDs(entity: EntityDescription, unused: ClosedRange<Int64>) {
        _ = try? writing { db in
            try db.execute(
                sql: "UPDATE _persistence_sequence SET next = ? WHERE entity = ? AND next = ?",
                arguments: [unused.lowerBound, entity.name, unused.upperBound + 1])
        }
    }

    func refuseDeletion(entity: EntityDescription, ids: [Int64]) throws {
        try mapErrors(nil) {
            try pool.read { db in
                try DeleteRules(
                    schema: schema, statements: SQLiteStatements(store: self, db: db),
                    effects: SaveEffects(commitsToStore: false)
                ).refuseDeletion(entity, ids)
            }
        }
    }

    func save(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult {
        let result = try changes.committing({ try write(changes, effects: effects) }) { error in
            guard changes.wrapsCommitFailures else { return error }
            return PersistenceError(
                Self.isDiskFull(error, in: url.deletingLastPathComponent()) ? .diskFull : .io,
                "Could not commit to \(url.path): \(error)", cause: error)
        }
        announceCommitted(effects.announcements)
        return result
    }

    private func write(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult {
        try mapErrors(nil) {
            try writing { db in
                let result = try SavePipeline(
                    schema: schema, statements: SQLiteStatements(store: self, db: db), effects: effects
                ).write(changes)
                try runInjectedFault()
                return result
            }
        }
    }

    /// Inserts rows, binding values directly (the hot path of a large save): a run of
    /// ``rowsAStatement(_:)`` rows of one entity by one multi-row `INSERT` (one statement's
    /// start, cursors on the table and each of its indexes, for them all: 4.6 µs a row of a
    /// catalog's assets alone, 3.0 µs in runs of 64), the rest one at a time. Each multi-row
    /// statement runs in a savepoint: should it fail, what it wrote is undone (whatever the
    /// conflict clause or trigger), and its rows are inserted again one at a time, so that an
    /// error names the row that caused it, as for any other row. Should SQLite have ended the
    /// transaction itself (a trigger's `RAISE(ROLLBACK)`, some I/O errors), nothing is tried
    /// again: the error names the statement's rows.
    fileprivate static func insertRows(_ db: Database, _ rows: [StoreChanges.Insert], sql: EntityMap<EntitySQL>) throws
    {
        var statements: [ObjectIdentifier: Statement] = [:]
        var start = rows.startIndex
        while start < rows.endIndex {
            let entity = rows[start].entity
            let run = rows[start...].prefix { $0.entity === entity }.count
            let perStatement = rowsAStatement(sql[entity])
            let multiRow = run / perStatement * perStatement
            if multiRow > 0 {
                let statement = try db.cachedStatement(sql: sql[entity].insert(rows: perStatement))
                let savepoint = try db.cachedStatement(sql: "SAVEPOINT _persistence_rows")
                let release = try db.cachedStatement(sql: "RELEASE _persistence_rows")
                for chunk in stride(from: start, to: start + multiRow, by: perStatement) {
                    let chunkRows = rows[chunk..<(chunk + perStatement)]
                    if let row = chunkRows.first(where: { $0.id <= 0 }) { throw missingID(row) }
                    try savepoint.execute()
                    if let failure = insert(chunkRows, with: statement) {
                        guard sqlite3_get_autocommit(db.sqliteConnection) == 0 else {
                            throw rowsFailure(failure.code, failure.message, chunkRows, db)
                        }
                        try db.execute(sql: "ROLLBACK TO _persistence_rows")
                        try release.execute()
                        try insertEach(chunkRows, db, sql: sql, statements: &statements)
                    } else {
                        try release.execute()
                    }
                }
                sqlite3_clear_bindings(statement.sqliteStatement)
            }
            try insertEach(rows[(start + multiRow)..<(start + run)], db, sql: sql, statements: &statements)
            start += run
        }
        for statement in statements.values { sqlite3_clear_bindings(statement.sqliteStatement) }
    }

    /// How many rows of an entity with `sql`'s columns one multi-row `INSERT` takes: 64, or
    /// fewer for an entity so wide that 64 rows' values would pass SQLite's limit of bound
    /// parameters (32,766).
    static func rowsAStatement(_ sql: EntitySQL) -> Int {
        min(64, 32_766 / (sql.columns.count + 1))
    }

    /// Inserts `rows` (of one entity, as many as `statement` inserts, each with its ID) with
    /// the multi-row `statement`; SQLite's result code and message when it fails.
    private static func insert(_ rows: ArraySlice<StoreChanges.Insert>, with statement: Statement) -> (
        code: Int32, message: String
    )? {
        let handle = statement.sqliteStatement
        sqlite3_reset(handle)
        var parameter: Int32 = 1
        for row in rows { parameter = bind(row, to: handle, from: parameter) }
        let code = sqlite3_step(handle)
        guard code != SQLITE_DONE else {
            sqlite3_reset(handle)
            return nil
        }
        let message = String(cString: sqlite3_errmsg(sqlite3_db_handle(handle)))
        sqlite3_reset(handle)
        return (code, message)
    }

    /// Inserts `rows` one at a time, with one prepared statement per entity (in `statements`).
    private static func insertEach(
        _ rows: ArraySlice<StoreChanges.Insert>, _ db: Database, sql: EntityMap<EntitySQL>,
        statements: inout [ObjectIdentifier: Statement]
    ) throws {
        for i in rows.indices {
            let row = rows[i]
            guard row.id > 0 else { throw missingID(row) }
            let key = ObjectIdentifier(row.entity)
            let statement: Statement
            if let cached = statements[key] {
                statement = cached
            } else {
                statement = try db.cachedStatement(sql: sql[row.entity].insert)
                statements[key] = statement
            }
            let handle = statement.sqliteStatement
            sqlite3_reset(handle)
            bind(row, to: handle, from: 1)
            let code = sqlite3_step(handle)
            sqlite3_reset(handle)
            guard code == SQLITE_DONE else {
                let message = String(cString: sqlite3_errmsg(db.sqliteConnection))
                throw rowsFailure(code, message, rows[i...i], db)
            }
        }
    }

    /// Binds `row`'s ID, then its values by slot, to `handle`'s parameters from `first` on;
    /// the parameter after them.
    @discardableResult
    private static func bind(_ row: StoreChanges.Insert, to handle: OpaquePointer, from first: Int32) -> Int32 {
        sqlite3_bind_int64(handle, first, row.id)
        var parameter = first + 1
        for value in row.values {
            bind(value, to: handle, at: parameter)
            parameter += 1
        }
        return parameter
    }

    /// The error of `rows` that SQLite refused with `code` and `message`: named by their IDs
    /// (one row: "Could not save Folder 7: …").
    private static func rowsFailure(
        _ code: Int32, _ message: String, _ rows: ArraySlice<StoreChanges.Insert>, _ db: Database
    ) -> PersistenceError {
        let ids = rows.map { ManagedObjectID(entityName: $0.entity.name, rowID: $0.id) }
        let named =
            ids.count == 1 ? "\(ids[0])" : "\(ids.count) rows of \(ids[0].entityName) (\(ids[0]) to \(ids.last!))"
        let what = "Could not save \(named): \(message)"
        let error = DatabaseError(resultCode: ResultCode(rawValue: code), message: message)
        if code & 0xff == SQLITE_CONSTRAINT {
            return PersistenceError(.constraint, what, objectIDs: ids, cause: error)
        }
        if isDamage(error.resultCode) {
            let path = String(cString: sqlite3_db_filename(db.sqliteConnection, "main"))
            return PersistenceError(
                .storeDamaged, "The store \(path) is damaged (\(message)); nothing was changed", objectIDs: ids,
                cause: error)
        }
        return PersistenceError(.io, what, objectIDs: ids, cause: error)
    }

    /// The refusal of a row the store could not reserve an ID for.
    private static func missingID(_ row: StoreChanges.Insert) -> PersistenceError {
        let id = ManagedObjectID(entityName: row.entity.name, rowID: row.id)
        return PersistenceError(
            .io, "\(id) has no ID: the store could not reserve one when it was inserted", objectIDs: [id])
    }

    /// Writes the rows of an insertion one batch at a time: only one batch's values are alive,
    /// and the rows its entity's `willInsertRows` hook plans for a batch are written with it.
    /// Inserts `rows` of `entity`, whose IDs are consecutive. A batch of at least
    /// ``rangeTallyMinimum`` rows of an entity with tallies is written with the connection's
    /// triggers off, then added to the tallies once for the batch: a tally by key from the
    /// values written (``BatchTallyCounts``), any other with one aggregate statement over the
    /// rows' IDs (``rangeTallySQL(_:table:)``). A tally trigger fired for each row (a statement
    /// journal, a sub-program, an upsert a tally) costs more than writing the row. The counts
    /// come out as the triggers would have made them, in the same transaction: a rollback or
    /// a killed process discards them with the rows. A table with a trigger the store did not
    /// make keeps its triggers.
    fileprivate func insertTallyingOnce(_ db: Database, _ entity: EntityDescription, _ rows: [StoreChanges.Insert])
        throws
    {
        guard rows.count >= Self.rangeTallyMinimum, let first = rows.first?.id, let last = rows.last?.id,
            last - first == Int64(rows.count - 1)
        else { return try Self.insertRows(db, rows, sql: sql) }
        let table = sql[entity].table
        let tallies = try entity.resolvedTallies()
        let search = try SQLiteStore.rangeSearchSQL(entity, table: table)
        guard !tallies.isEmpty || search != nil else { return try Self.insertRows(db, rows, sql: sql) }
        guard try !Self.hasOthersTriggers(db, entity) else { return try Self.insertRows(db, rows, sql: sql) }
        let connection = db.sqliteConnection
        guard persistence_set_triggers_enabled(connection, 0) == 0 else {
            return try Self.insertRows(db, rows, sql: sql)
        }
        do {
            defer { _ = persistence_set_triggers_enabled(connection, 1) }
            try Self.insertRows(db, rows, sql: sql)
        }
        // The table as it stands: a column a migration declared otherwise is left to SQLite.
        let declared =
            try String.fetchOne(
                db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [entity.name])
            ?? ""
        for tally in tallies {
            // A tally by key is counted from the values just written (an aggregate over
            // the rows read them back and sorted them: 0.3 µs a row a tally); the others,
            // and values it does not read as SQLite does, by the aggregate, unless the
            // tally's filter passes none of the rows.
            if let counts = BatchTallyCounts(tally, of: entity, table: declared, rows: rows) {
                try Self.add(counts, to: tally, of: entity, db)
            } else if !BatchTallyCounts.filterPassesNone(tally, of: entity, table: declared, rows: rows) {
                try db.execute(sql: Self.rangeTallySQL(tally, of: entity, table: table), arguments: [first, last])
            }
        }
        if let search { try db.execute(sql: search, arguments: [first, last]) }
    }

    /// The fewest rows of one batch whose tallies are counted for the batch rather than by
    /// a trigger a row.
    static let rangeTallyMinimum = 32

    /// Whether `entity`'s table has a trigger the store did not make (its triggers then stay on).
    static func hasOthersTriggers(_ db: Database, _ entity: EntityDescription) throws -> Bool {
        try Int.fetchOne(
            db,
            sql: """
                SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? COLLATE NOCASE \
                AND NOT (name GLOB '_persistence_tally_*' OR name GLOB '_persistence_search_*')
                """, arguments: [entity.name]) != 0
    }

    /// Deletes the rows of `entity` whose IDs are `ids`. A page of at least
    /// ``rangeTallyMinimum`` rows of an entity with tallies is deleted with the connection's
    /// triggers off, and taken from the tallies once for the page: what each tally loses is
    /// read from the rows with one aggregate a tally before they go
    /// (``deletionTallySQL(_:table:marks:)``), and each value of a distinct tally is looked
    /// up once after, where the triggers ran two statements a tally, and a probe, for each
    /// row. The counts come out as the triggers would have made them, in the same
    /// transaction. A table with a trigger the store did not make keeps its triggers.
    fileprivate func deleteTallyingOnce(_ db: Database, _ entity: EntityDescription, ids: ArraySlice<Int64>) throws {
        let table = sql[entity].table
        let marks = Array(repeating: "?", count: ids.count).joined(separator: ",")
        let arguments = StatementArguments(Array(ids))
        let delete = "DELETE FROM \(table) WHERE \"id\" IN (\(marks))"
        let tallies = try entity.resolvedTallies()
        let search = try Self.deletionSearchSQL(entity, marks: marks)
        guard ids.count >= Self.rangeTallyMinimum, !tallies.isEmpty || search != nil,
            try !Self.hasOthersTriggers(db, entity)
        else {
            return try db.execute(sql: delete, arguments: arguments)
        }
        let lost = try tallies.map { tally in
            (
                tally,
                try Row.fetchAll(
                    db, sql: Self.deletionTallySQL(tally, table: table, marks: marks), arguments: arguments)
            )
        }
        let connection = db.sqliteConnection
        guard persistence_set_triggers_enabled(connection, 0) == 0 else {
            return try db.execute(sql: delete, arguments: arguments)
        }
        do {
            defer { _ = persistence_set_triggers_enabled(connection, 1) }
            try db.execute(sql: delete, arguments: arguments)
        }
        if let search { try db.execute(sql: search, arguments: arguments) }
        for (tally, rows) in lost {
            guard let distinct = tally.distinct else {
                for row in rows {
                    try Self.subtract(db, entity, tally, key: row[0], count: row[1], total: row[2])
                }
                continue
            }
            // A value counts off when no row is left with it; a NULL counts once a row.
            let probe = try db.cachedStatement(sql: Self.deletionProbeSQL(tally, distinct, table: table))
            var count: Int64 = 0
            var total: Int64 = 0
            for row in rows {
                let value: DatabaseValue = row[0]
                if value.isNull {
                    count += row[1]
                    total += row[3]
                } else if try Int.fetchOne(probe, arguments: [value]) == nil {
                    count += 1
                    total += row[2]
                }
            }
            if count > 0 { try Self.subtract(db, entity, tally, key: "", count: count, total: total) }
        }
    }

    fileprivate static func members(
        _ db: Database, _ entitySQL: EntitySQL, inverse: PropertyDescription, owners: ArraySlice<Int64>, limit: Int,
        after: Int64?
    ) throws -> [StoreRow] {
        let marks = Array(repeating: "?", count: owners.count).joined(separator: ",")
        var arguments: [StoreValue] = owners.map { .integer($0) }
        var above = ""
        if let after {
            above = " AND \"id\" > ?"
            arguments.append(.integer(after))
        }
        let query = """
            SELECT \(entitySQL.selectList) FROM \(entitySQL.table) WHERE \(quote(inverse.name)) IN (\(marks))\(above) \
            ORDER BY "id" LIMIT \(limit)
            """
        return try readRows(db, query, arguments, entitySQL)
    }
}

/// The SQLite statements of the delete-rule engine (``DeleteRules``), on the connection of
/// one save's transaction.
struct SQLiteStatements: SaveStatements {
    let store: SQLiteStore
    let db: Database

    var sql: EntityMap<EntitySQL> { store.sql }

    func run(_ statement: (String, [StoreValue]), for id: ManagedObjectID) throws -> Int {
        _ = try store.mapErrors(id) { try SQLiteStore.query(db, statement.0, statement.1) { _ in () } }
        return db.changesCount
    }

    /// Writes updates of the same entity and columns (and with or without an expected
    /// version) with one statement a group of up to ``groupedUpdateRows`` rows
    /// (``EntitySQL/update(slots:rows:versioned:)``), others one statement a row. One statement
    /// for many rows is cheaper by itself, and much cheaper where a trigger writes a search
    /// index: FTS5 flushes what it holds into a segment of its own at each statement's
    /// savepoint (10,000 rows of an indexed text cost 100 µs a row through their
    /// statements, against 27 µs in one). A group that breaks a constraint changes nothing —
    /// the statement is undone — and is written again a row at a time, which names the row at
    /// fault as before; any other error ends the save.
    func updateObjects(_ updates: [StoreChanges.Update]) throws -> [ManagedObjectID: Int64] {
        var versions: [ManagedObjectID: Int64] = [:]
        var single: [StoreChanges.Update] = []
        for group in StoreChanges.groupedByColumns(updates) {
            let versioned = group[0].expectedVersion != nil
            // Statements of 4, 8, 16 … rows (a few statements to prepare and keep an entity),
            // the largest that fits what is left; the last three or fewer a row at a time.
            let most = min(Self.groupedUpdateRows, 30_000 / (group[0].slots.count + 2))
            var start = 0
            while group.count - start >= Self.groupedUpdateMinimum {
                var size = Self.groupedUpdateMinimum
                while size * 2 <= min(most, group.count - start) { size *= 2 }
                let part = group[start..<start + size]
                start += size
                do {
                    versions.merge(try updateGroup(part, versioned: versioned)) { $1 }
                } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                    single += part  // undone; a row at a time names the row at fault
                } catch {
                    try store.mapErrors(nil) { throw error }
                }
            }
            single += group[start...]
        }
        for update in single {
            let id = ManagedObjectID(entityName: update.entity.name, rowID: update.id)
            let (query, arguments) = store.sql[update.entity].update(
                slots: update.slots, values: update.values, id: update.id, expectedVersion: update.expectedVersion)
            let version = try store.mapErrors(id) {
                try SQLiteStore.query(db, query, arguments) { sqlite3_column_int64($0, 0) }
            }
            versions[id] = version.first
        }
        return versions
    }

    /// The fewest updates of one group written with one statement.
    static let groupedUpdateMinimum = 4
    /// The most rows of one statement of a group (and its arguments at most 30,000, under
    /// SQLite's limit of 32,766).
    static let groupedUpdateRows = 1_024

    /// Writes `group` (updates of one entity and the same columns) with one statement;
    /// returns the new versions of the rows written.
    private func updateGroup(_ group: ArraySlice<StoreChanges.Update>, versioned: Bool) throws -> [ManagedObjectID:
        Int64]
    {
        let first = group[group.startIndex]
        let entity = first.entity
        let query = store.sql[entity].update(slots: first.slots, rows: group.count, versioned: versioned)
        var arguments: [StoreValue] = []
        arguments.reserveCapacity(group.count * (first.slots.count + 2))
        for update in group {
            arguments.append(.integer(update.id))
            if let version = update.expectedVersion { arguments.append(.integer(version)) }
            arguments += update.values
        }
        let written = try SQLiteStore.query(db, query, arguments) {
            (sqlite3_column_int64($0, 0), sqlite3_column_int64($0, 1))
        }
        var versions: [ManagedObjectID: Int64] = [:]
        for (id, version) in written { versions[ManagedObjectID(entityName: entity.name, rowID: id)] = version }
        return versions
    }

    func insertBatch(_ entity: EntityDescription, _ rows: [StoreChanges.Insert]) throws {
        try store.insertTallyingOnce(db, entity, rows)
    }

    func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T { try store.mapErrors(id, body) }

    /// A named lock is held already: this write transaction (`BEGIN IMMEDIATE`) holds the
    /// store's one write lock, which excludes every other writer until it ends. So are the
    /// locks of `SaveEffects.lockFirst`, which this store therefore does not read, and the
    /// rows a count locks: no other writer can delete them before the commit.
    var transactionReader: TransactionReader {
        TransactionReader(countRows: { fetch, _ in try store.count(db, fetch) }, lock: { _, _ in })
    }

    func rows(_ entity: EntityDescription, ids: ArraySlice<Int64>) throws -> [StoreRow] {
        try SQLiteStore.rows(db, store.sql[entity], ids: Array(ids))
    }

    func members(
        _ entity: EntityDescription, link: PropertyDescription, owners: ArraySlice<Int64>, limit: Int, after: Int64?
    ) throws -> [StoreRow] {
        try SQLiteStore.members(db, store.sql[entity], inverse: link, owners: owners, limit: limit, after: after)
    }

    func fetchRows(_ fetch: StoreFetch) throws -> [StoreRow] {
        let entitySQL = store.sql[fetch.entity]
        let (query, arguments) = store.select(entitySQL.selectList, fetch)
        return try SQLiteStore.readRows(db, query, arguments, entitySQL)
    }

    func fetchIDs(_ fetch: StoreFetch) throws -> [Int64] {
        let (query, arguments) = store.select("\"id\"", fetch)
        return try SQLiteStore.query(db, query, arguments) { sqlite3_column_int64($0, 0) }
    }

    func nullify(_ entity: EntityDescription, link: PropertyDescription, owners: ArraySlice<Int64>) throws -> [Int64] {
        let marks = Array(repeating: "?", count: owners.count).joined(separator: ",")
        return try SQLiteStore.query(
            db,
            """
            UPDATE \(store.sql[entity].table) SET \(quote(link.name)) = NULL, \
            "_version" = "_version" + 1 WHERE \(quote(link.name)) IN (\(marks)) RETURNING "id"
            """, owners.map { .integer($0) }
        ) { sqlite3_column_int64($0, 0) }
    }

    func delete(_ entity: EntityDescription, ids: ArraySlice<Int64>) throws {
        try store.deleteTallyingOnce(db, entity, ids: ids)
    }

    func reserve(entity: String, count: Int) throws -> ClosedRange<Int64> {
        try SQLiteStore.reserve(db, entity: entity, count: count)
    }

    func insert(_ rows: [StoreChanges.Insert]) throws {
        try SQLiteStore.insertRows(db, rows, sql: store.sql)
    }

    func foreignLinks() throws -> [String: [ForeignLink]] { try store.currentForeignLinks(db) }

    func firstLinked(table: String, column: String, targets: ArraySlice<Int64>) throws -> (row: Int64, target: Int64)? {
        let marks = Array(repeating: "?", count: targets.count).joined(separator: ",")
        return try SQLiteStore.query(
            db,
            "SELECT \"id\", \(quote(column)) FROM \(quote(table)) WHERE \(quote(column)) IN (\(marks)) "
                + "ORDER BY \"id\" LIMIT 1", targets.map { .integer($0) }
        ) { (row: sqlite3_column_int64($0, 0), target: sqlite3_column_int64($0, 1)) }.first
    }
}
