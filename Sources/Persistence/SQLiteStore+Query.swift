import Foundation
import GRDB
import GRDBSQLite

/// Reading: fetches, counts and rows by ID, their statements (``PredicateSQL``, and the
/// forms an index drives), and SQLite's own binding and decoding of values.
extension SQLiteStore {
    func fetch(_ fetch: StoreFetch) throws -> [StoreRow] {
        let entitySQL = sql[fetch.entity]
        let (query, arguments) = select(entitySQL.selectList, fetch)
        return try mapErrors(nil) {
            try pool.read { db in try Self.readRows(db, query, arguments, entitySQL) }
        }
    }

    func fetchIDs(_ fetch: StoreFetch) throws -> [Int64] {
        let (query, arguments) = select("\"id\"", fetch)
        return try mapErrors(nil) {
            try pool.read { db in try Self.query(db, query, arguments) { sqlite3_column_int64($0, 0) } }
        }
    }

    func count(_ fetch: StoreFetch) throws -> Int {
        try mapErrors(nil) { try pool.read { db in try count(db, fetch) } }
    }

    func count(_ db: Database, _ fetch: StoreFetch) throws -> Int {
        let (query, arguments) = countStatement(fetch)
        return try Self.query(db, query, arguments) { Int(sqlite3_column_int64($0, 0)) }.first ?? 0
    }

    /// The statement that counts `fetch`'s rows, and its arguments (internal: tests read its
    /// query plan). Unordered, even with a limit or an offset: they change which rows are
    /// counted, not how many. Given `ORDER BY "id"`, SQLite scans the whole table in ID
    /// order rather than sort the rows an index finds — a count of 10,000 digests took a
    /// third of a second in a million assets — and a count with a limit of 1 (is there
    /// one?) would sort every match to find the first.
    func countStatement(_ fetch: StoreFetch) -> (String, [StoreValue]) {
        let (inner, arguments) = select("1", fetch, ordered: false)
        return ("SELECT COUNT(*) FROM (\(inner))", arguments)
    }

    func rows(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        let entitySQL = sql[entity]
        return try mapErrors(nil) {
            try pool.read { db in
                try Self.rows(db, entitySQL, ids: ids)
            }
        }
    }

    static func rows(_ db: Database, _ entitySQL: EntitySQL, ids: [Int64]) throws -> [StoreRow] {
        var result: [StoreRow] = []
        result.reserveCapacity(ids.count)
        for chunk in ids.chunked(500) {
            let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
            let query = "SELECT \(entitySQL.selectList) FROM \(entitySQL.table) WHERE \"id\" IN (\(marks))"
            result += try readRows(db, query, chunk.map { .integer($0) }, entitySQL)
        }
        return result
    }

    /// Runs a query and decodes its rows straight from SQLite (text by its
    /// byte length: a string with a NUL inside comes back whole).
    static func readRows(_ db: Database, _ query: String, _ arguments: [StoreValue], _ entitySQL: EntitySQL)
        throws -> [StoreRow]
    {
        try Self.query(db, query, arguments) { entitySQL.decode($0) }
    }

    /// Runs one statement with its arguments bound by byte length (GRDB
    /// binds text as C strings, which would cut it at a NUL) and decodes each
    /// result row with `row`.
    static func query<T>(
        _ db: Database, _ query: String, _ arguments: [StoreValue], row: (OpaquePointer) -> T
    ) throws -> [T] {
        let statement = try db.cachedStatement(sql: query)
        let handle = statement.sqliteStatement
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        defer { sqlite3_reset(handle) }
        for (i, value) in arguments.enumerated() { Self.bind(value, to: handle, at: Int32(i + 1)) }
        var rows: [T] = []
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return rows }
            guard code == SQLITE_ROW else {
                let message = String(cString: sqlite3_errmsg(db.sqliteConnection))
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: query)
            }
            rows.append(row(handle))
        }
    }

    /// The statement of `fetch`, selecting `columns`, and its arguments (internal: tests read
    /// its query plan).
    /// With `ordered` false, the rows come in no particular order (for a count).
    func select(_ columns: String, _ fetch: StoreFetch, ordered: Bool = true) -> (String, [StoreValue]) {
        if let driven = searchDrivenSelect(columns, fetch, ordered: ordered) { return driven }
        if let driven = relatedDrivenSelect(columns, fetch) { return driven }
        var statement = PredicateSQL(dialect: .sqlite)
        let query = statement.select(columns, from: sql[fetch.entity].table, fetch, ordered: ordered)
        return (query, statement.arguments)
    }

    /// A fetch in ID order (a page of a listing: IDs after the last page's, a limit) that
    /// requires a related row with `value` in the first column of a unique index on (column,
    /// link) — `related(Tag.self, via: \.asset, where: \.tag == t, …)` — is driven by that
    /// index: the related rows with `value` come in link order from `after` on, each joined to
    /// its object by ID, and the limit stops the walk. O(page + log n) per page. The `IN`
    /// form would build the whole list of matches for every page (quadratic over a listing).
    /// `nil` for any other fetch.
    private func relatedDrivenSelect(_ columns: String, _ fetch: StoreFetch) -> (String, [StoreValue])? {
        guard fetch.sort.allSatisfy({ $0.isRowID && $0.ascending }), let predicate = fetch.predicate else {
            return nil
        }
        var conjuncts: [PredicateNode] = []
        func flatten(_ node: PredicateNode) {
            if case .and(let nodes) = node { nodes.forEach(flatten) } else { conjuncts.append(node) }
        }
        flatten(predicate)
        let drivers = conjuncts.indices.filter { i in
            guard case .related(let table, let column, .compare(let p, .equal, let value), _) = conjuncts[i],
                !value.isNull, let related = schema.entity(named: table),
                let indexes = try? related.compositeIndexColumns()
            else { return false }
            return indexes.contains { $0.isUnique && $0.columns == [p.column, column] }
        }
        guard let first = drivers.first,
            case .related(let table, let column, .compare(let p, _, let value), _) = conjuncts[first]
        else { return nil }
        conjuncts.remove(at: first)
        let entitySQL = sql[fetch.entity]
        let outer = entitySQL.table
        let link = "\"_related\".\(quote(column))"
        let list = entitySQL.qualified(columns)
        var statement = PredicateSQL(dialect: .sqlite)
        var query =
            "SELECT \(list) FROM \(quote(table)) AS \"_related\" CROSS JOIN \(outer) ON \(outer).\"id\" = \(link) "
            + "WHERE \"_related\".\(quote(p.column)) = \(statement.argument(value))"
        for case .rowIDAbove(let bound) in conjuncts {
            query += " AND \(link) > \(statement.argument(.integer(bound)))"
        }
        for node in conjuncts { query += " AND " + statement.compile(node, qualifier: outer) }
        query += " ORDER BY \(link) ASC" + statement.window(fetch)
        return (query, statement.arguments)
    }

    /// SQLite copies a value bound or returned with this destructor (`SQLITE_TRANSIENT`).
    static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    static func bind(_ value: StoreValue, to handle: OpaquePointer, at index: Int32) {
        switch value {
        case .null: sqlite3_bind_null(handle, index)
        case .integer(let v): sqlite3_bind_int64(handle, index, v)
        case .real(let v): sqlite3_bind_double(handle, index, v)
        case .text(var v):
            v.withUTF8 { bytes in
                if let base = bytes.baseAddress {
                    base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                        _ = sqlite3_bind_text(handle, index, $0, Int32(bytes.count), transient)
                    }
                } else {
                    sqlite3_bind_text(handle, index, "", 0, transient)
                }
            }
        case .blob(let v):
            _ = v.withUnsafeBytes { bytes in
                if let base = bytes.baseAddress {
                    sqlite3_bind_blob(handle, index, base, Int32(bytes.count), transient)
                } else {
                    sqlite3_bind_zeroblob(handle, index, 0)
                }
            }
        }
    }
}

extension EntitySQL {
    /// The row at `handle`, a statement of ``selectList``, read straight from SQLite.
    func decode(_ handle: OpaquePointer) -> StoreRow {
        var values: [StoreValue] = []
        values.reserveCapacity(columns.count)
        for i in 0..<Int32(columns.count) {
            values.append(Self.value(handle, i + 2))
        }
        return StoreRow(id: sqlite3_column_int64(handle, 0), version: sqlite3_column_int64(handle, 1), values: values)
    }

    static func value(_ handle: OpaquePointer, _ column: Int32) -> StoreValue {
        switch sqlite3_column_type(handle, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, column))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(handle, column))
            guard let text = sqlite3_column_text(handle, column) else { return .text("") }
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, column))
            guard count > 0, let blob = sqlite3_column_blob(handle, column) else { return .blob(Data()) }
            return .blob(Data(bytes: blob, count: count))
        default: return .null
        }
    }
}

extension StoreValue {
    var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case .integer(let v): v.databaseValue
        case .real(let v): v.databaseValue
        case .text(let v): v.databaseValue
        case .blob(let v): v.databaseValue
        }
    }

    init(_ value: DatabaseValue) {
        switch value.storage {
        case .null: self = .null
        case .int64(let v): self = .integer(v)
        case .double(let v): self = .real(v)
        case .string(let v): self = .text(v)
        case .blob(let v): self = .blob(v)
        }
    }
}

extension Array {
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
