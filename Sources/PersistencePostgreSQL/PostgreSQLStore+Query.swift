import Foundation
import Persistence
import PostgresNIO

/// Reading: fetches, counts and rows by ID on the reader, their statements
/// (``PredicateSQL``), and the decoding of rows by each column's declared type.
extension PostgreSQLStore {
    func fetch(_ fetch: StoreFetch) throws -> [StoreRow] {
        let statements = sql[fetch.entity]
        let (query, arguments) = select(statements.selectList, fetch)
        return try mapErrors(nil) { try statements.decode(try reader.run(query, arguments).rows) }
    }

    func fetchIDs(_ fetch: StoreFetch) throws -> [Int64] {
        let (query, arguments) = select("\"id\"", fetch)
        return try mapErrors(nil) { try reader.run(query, arguments).rows.map { try $0.decode(Int64.self) } }
    }

    func count(_ fetch: StoreFetch) throws -> Int {
        try mapErrors(nil) { try count(reader, fetch) }
    }

    /// How many rows `fetch` matches; with `locking`, each row counted is locked so until
    /// the transaction ends (`FOR KEY SHARE`: a row being deleted is waited for, and not
    /// counted if it goes).
    func count(_ connection: PostgreSQLConnection, _ fetch: StoreFetch, locking: RowLock? = nil) throws
        -> Int
    {
        // Unordered, as the SQLite store counts (a limit and an offset change which rows are
        // counted, not how many), unless rows are locked (in ID order, as every locker takes
        // them).
        var (inner, arguments) = select("1", fetch, ordered: locking != nil)
        switch locking {
        case .keyShare?: inner += " FOR KEY SHARE"
        case nil: break
        }
        let rows = try connection.run("SELECT COUNT(*) FROM (\(inner)) AS \"_counted\"", arguments).rows
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    func rows(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        try mapErrors(nil) { try rows(reader, entity, ids: ids) }
    }

    func rows(_ connection: PostgreSQLConnection, _ entity: EntityDescription, ids: [Int64]) throws
        -> [StoreRow]
    {
        guard !ids.isEmpty else { return [] }
        let statements = sql[entity]
        var bindings = PostgresBindings()
        bindings.append(ids)
        let query = PostgresQuery(
            unsafeSQL: "SELECT \(statements.selectList) FROM \(statements.table) WHERE \"id\" = ANY($1)",
            binds: bindings)
        return try statements.decode(try connection.run(query).rows)
    }

    /// The statement of `fetch`, selecting `columns`, and its arguments.
    /// With `ordered` false, the rows come in no particular order (for a count).
    func select(_ columns: String, _ fetch: StoreFetch, ordered: Bool = true) -> (String, [StoreValue]) {
        if let driven = searchDrivenSelect(columns, fetch, ordered: ordered) { return driven }
        var statement = PredicateSQL(dialect: .postgresql)
        let query = statement.select(columns, from: sql[fetch.entity].table, fetch, ordered: ordered)
        return (query, statement.arguments)
    }
}

extension EntitySQL {
    /// Rows of ``selectList``, decoded by each column's declared type.
    func decode(_ rows: [PostgresRow]) throws -> [StoreRow] {
        try rows.map { row in
            var cells = row.makeIterator()
            guard let id = cells.next(), let version = cells.next() else {
                throw PersistenceError(.io, "A row of \(entity.name) came back without its ID and version")
            }
            var values: [StoreValue] = []
            values.reserveCapacity(columns.count)
            for property in entity.storedProperties {
                guard let cell = cells.next() else {
                    throw PersistenceError(.io, "A row of \(entity.name) came back without \(property.name)")
                }
                values.append(try Self.value(cell, property))
            }
            return StoreRow(id: try id.decode(Int64.self), version: try version.decode(Int64.self), values: values)
        }
    }

    private static func value(_ cell: PostgresCell, _ property: PropertyDescription) throws -> StoreValue {
        guard cell.bytes != nil else { return .null }
        switch property.kind {
        case .attribute(.integer), .attribute(.boolean), .toOne, .toMany: return .integer(try cell.decode(Int64.self))
        case .attribute(.real), .attribute(.date): return .real(try cell.decode(Double.self))
        case .attribute(.text), .attribute(.uuid): return .text(try cell.decode(String.self))
        case .attribute(.blob): return .blob(try cell.decode(Data.self))
        }
    }
}
