import Foundation
import Persistence
import PostgresNIO

/// Writing: IDs, a save (``SavePipeline`` in the writer's transaction, fenced and counted),
/// rows written a run at a time in multi-row statements, and the statements the pipeline
/// runs (``PostgreSQLStatements``).
extension PostgreSQLStore {
    func reserveIDs(entity: EntityDescription, count: Int) throws -> ClosedRange<Int64> {
        try requireWritable()
        return try mapErrors(nil) { try reserve(entity: entity.name, count: count) }
    }

    /// On the reader, in a transaction of its own: never rolled back with a save, so an ID
    /// once handed out is never handed out again.
    fileprivate func reserve(entity: String, count: Int) throws -> ClosedRange<Int64> {
        let rows = try reader.run(
            "UPDATE \(Self.sequenceTable) SET next = next + $1 WHERE entity = $2 RETURNING next",
            [.integer(Int64(count)), .text(entity)]
        ).rows
        guard let next = try rows.first?.decode(Int64.self) else {
            throw PersistenceError(.misuse, "\(entity) is not an entity of this store")
        }
        return (next - Int64(count))...(next - 1)
    }

    func releaseIDs(entity: EntityDescription, unused: ClosedRange<Int64>) {
        guard !isReadOnly else { return }
        _ = try? reader.run(
            "UPDATE \(Self.sequenceTable) SET next = $1 WHERE entity = $2 AND next = $3",
            [.integer(unused.lowerBound), .text(entity.name), .integer(unused.upperBound + 1)])
    }

    func refuseDeletion(entity: EntityDescription, ids: [Int64]) throws {
        try mapErrors(nil) {
            try DeleteRules(
                schema: schema, statements: PostgreSQLStatements(store: self, connection: reader),
                effects: SaveEffects(commitsToStore: false)
            ).refuseDeletion(entity, ids)
        }
    }

    func save(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult {
        try requireWritable()
        try refuseIfSessionLost()
        return try changes.committing({
            try writer.withLock { try transaction(writer) { try write(changes, effects: effects) } }
        }) { error in
            if error is PSQLError { return mapped(error, nil) }
            guard changes.wrapsCommitFailures else { return error }
            return PersistenceError(.io, "Could not commit to \(url.absoluteString): \(error)", cause: error)
        }
    }

    private func write(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult {
        // Every write of the store is a save, and every save begins here: fenced first, and
        // counted (the commit counter other connections poll: ``externalChangeToken()``).
        try fenceSave(countingCommit: true)
        for lock in effects.locksToTakeFirst { try takeNamedLock(lock.name, shared: lock.shared, on: writer) }
        let result = try SavePipeline(
            schema: schema, statements: PostgreSQLStatements(store: self, connection: writer), effects: effects
        ).write(changes)
        try notify(effects.announcements)
        try injectedFault.run()
        return result
    }

    /// The objects' updates: each group of ``StoreChanges/groupedByColumns(_:)`` in one
    /// statement (chunked under the server's limit of bound values); returns the new versions
    /// of the rows written.
    fileprivate func updateObjects(_ updates: [StoreChanges.Update]) throws -> [ManagedObjectID: Int64] {
        var versions: [ManagedObjectID: Int64] = [:]
        for group in StoreChanges.groupedByColumns(updates) {
            let (entity, slots) = (group[0].entity, group[0].slots)
            let statements = sql[entity]
            let chunk = max(1, 60_000 / (slots.count + 2))  // the server's limit: 65,535
            for start in stride(from: 0, to: group.count, by: chunk) {
                let part = group[start..<min(start + chunk, group.count)]
                let written = try batched(
                    part, all: { try updateMany(statements, $0) },
                    one: { update in try updateOne(statements, update).map { [update.id: $0] } ?? [:] },
                    refusable: Self.mayRefuse(
                        slots: slots, values: part.map(\.values), of: entity, constrained: constrainedSlots[entity]))
                for update in part {
                    if let version = written[update.id] {
                        versions[ManagedObjectID(entityName: update.entity.name, rowID: update.id)] = version
                    }
                }
            }
        }
        return versions
    }

    /// Inserts `rows` in their order: each run of rows of one entity in multi-row `INSERT`s
    /// (a statement a row would cost a round trip a row, and fire the statement triggers of
    /// the tallies once a row).
    fileprivate func insert(_ rows: [StoreChanges.Insert]) throws {
        for row in rows where row.id <= 0 {
            let id = ManagedObjectID(entityName: row.entity.name, rowID: row.id)
            throw PersistenceError(
                .io, "\(id) has no ID: the store could not reserve one when it was inserted", objectIDs: [id])
        }
        for run in Self.runs(rows, by: { [$0.entity.name] }) {
            let statements = sql[run[run.startIndex].entity]
            let chunk = max(1, 60_000 / (statements.columns.count + 1))  // the server's limit: 65,535
            for start in stride(from: run.startIndex, to: run.endIndex, by: chunk) {
                _ = try batched(
                    run[start..<min(start + chunk, run.endIndex)],
                    all: { part in
                        var arguments: [StoreValue] = []
                        var tuples: [String] = []
                        for row in part {
                            let first = arguments.count
                            arguments.append(.integer(row.id))
                            arguments.append(contentsOf: row.values)
                            tuples.append(
                                "(" + (first + 1...arguments.count).map { "$\($0)" }.joined(separator: ", ") + ")")
                        }
                        try writer.run(
                            "INSERT INTO \(statements.table) (\(statements.insertColumns)) VALUES "
                                + tuples.joined(separator: ", "), arguments)
                        return [:]
                    },
                    one: { row in
                        let id = ManagedObjectID(entityName: row.entity.name, rowID: row.id)
                        _ = try mapErrors(id) { try writer.run(statements.insert, [.integer(row.id)] + row.values) }
                        return [:]
                    })
            }
        }
    }

    /// The runs of consecutive elements with the same `key`, in order.
    static func runs<T>(_ elements: [T], by key: (T) -> [String]) -> [ArraySlice<T>] {
        var runs: [ArraySlice<T>] = []
        var start = elements.startIndex
        while start < elements.endIndex {
            let first = key(elements[start])
            var end = start + 1
            while end < elements.endIndex, key(elements[end]) == first { end += 1 }
            runs.append(elements[start..<end])
            start = end
        }
        return runs
    }

    /// Writes `rows` with one statement (`all`) inside a savepoint; if it fails, undoes it and
    /// writes them one at a time (`one`), in order, so that a failure names the row that
    /// caused it as a statement a row did. Returns the rows' new versions by ID.
    ///
    /// Rows the server cannot refuse for their values (not `refusable`: ``mayRefuse(slots:values:of:constrained:)``)
    /// are written without the savepoint, which costs two round trips: the statement's failure
    /// (a deadlock, a lost connection) is then the save's.
    private func batched<Row>(
        _ rows: ArraySlice<Row>, all: (ArraySlice<Row>) throws -> [Int64: Int64],
        one: (Row) throws -> [Int64: Int64], refusable: Bool = true
    ) throws -> [Int64: Int64] {
        guard rows.count > 1 else { return try rows.first.map(one) ?? [:] }
        guard refusable else { return try all(rows) }
        _ = try mapErrors(nil) { try writer.run("SAVEPOINT \"_persistence_rows\"", []) }
        let written: [Int64: Int64]
        do {
            written = try all(rows)
        } catch {
            // A lost connection (the connection's own error) is the save's failure; the
            // server's refusal of a statement, one of the rows'.
            if let error = error as? PersistenceError { throw error }
            guard !PostgreSQLConnection.endsTheConnection(error), !writer.isClosed else { throw mapped(error, nil) }
            _ = try mapErrors(nil) { try writer.run("ROLLBACK TO SAVEPOINT \"_persistence_rows\"", []) }
            var written: [Int64: Int64] = [:]
            for row in rows { written.merge(try one(row)) { $1 } }
            return written
        }
        _ = try mapErrors(nil) { try writer.run("RELEASE SAVEPOINT \"_persistence_rows\"", []) }
        return written
    }

    /// The slots of `entity` whose columns a constraint checks: a unique column, a link (a
    /// foreign key), a column of a unique composite index or of its filter.
    static func constrainedSlots(of entity: EntityDescription) throws -> Set<Int> {
        var names: Set<String> = []
        for composite in try entity.compositeIndexDescriptions() where composite.isUnique {
            names.formUnion(composite.columns)
            if let filter = composite.filter { names.insert(filter.column) }
        }
        return Set(
            entity.storedProperties.indices.filter { slot in
                let property = entity.storedProperties[slot]
                return property.isUnique || !property.isAttribute || names.contains(property.name)
            })
    }

    /// Whether the server could refuse an update of `slots` of `entity` to `values` (a row's
    /// values each) for the values themselves: a slot among `constrained`
    /// (``constrainedSlots(of:)``), NULL for a column that takes none, or a text with a NUL
    /// character (PostgreSQL's `text` holds none). Only such an update needs the savepoint
    /// that lets its rows be written again one at a time, to name the one refused.
    static func mayRefuse(
        slots: [Int], values: [[StoreValue]], of entity: EntityDescription, constrained: Set<Int>
    ) -> Bool {
        if slots.contains(where: constrained.contains) { return true }
        let properties = slots.map { entity.storedProperties[$0] }
        for row in values {
            for (value, property) in zip(row, properties) {
                switch value {
                case .null where !property.isOptional: return true
                case .text(let text) where text.utf8.contains(0): return true
                default: continue
                }
            }
        }
        return false
    }

    /// One row's update; its new version, or `nil` when its expected version is not the
    /// stored one (a conflict).
    private func updateOne(_ statements: EntitySQL, _ update: StoreChanges.Update) throws -> Int64? {
        let id = ManagedObjectID(entityName: update.entity.name, rowID: update.id)
        let (query, arguments) = statements.update(
            slots: update.slots, values: update.values, id: update.id, expectedVersion: update.expectedVersion)
        return try mapErrors(id) { try writer.run(query, arguments).rows.first?.decode(Int64.self) }
    }

    /// Updates of rows that change the same slots, in one `UPDATE … FROM (VALUES …)`; each
    /// changes only if its expected version (if any) is the stored one. Returns the new
    /// versions of the rows changed.
    private func updateMany(_ statements: EntitySQL, _ updates: ArraySlice<StoreChanges.Update>) throws
        -> [Int64: Int64]
    {
        let rows = updates.map { (id: $0.id, expected: $0.expectedVersion, values: $0.values) }
        return Dictionary(
            uniqueKeysWithValues: try updateFromValues(
                statements, slots: updates[updates.startIndex].slots, rows: rows, versioned: true))
    }

    /// One `UPDATE … FROM (VALUES …)` of `rows`, which change the same `slots`, each with
    /// `_version` + 1; with `versioned`, a row with an expected version changes only if it is
    /// the stored one. Returns the ID and new version of each row changed; the server's
    /// errors are thrown as they come.
    func updateFromValues(
        _ statements: EntitySQL, slots: [Int], rows: [(id: Int64, expected: Int64?, values: [StoreValue])],
        versioned: Bool
    ) throws -> [(Int64, Int64)] {
        let properties = statements.entity.storedProperties
        var arguments: [StoreValue] = []
        var tuples: [String] = []
        for row in rows {
            arguments.append(.integer(row.id))
            var marks = ["$\(arguments.count)::BIGINT"]
            if versioned {
                arguments.append(row.expected.map(StoreValue.integer) ?? .null)
                marks.append("$\(arguments.count)::BIGINT")
            }
            for (value, slot) in zip(row.values, slots) {
                arguments.append(value)
                marks.append("$\(arguments.count)::\(Self.castType(properties[slot]))")
            }
            tuples.append("(" + marks.joined(separator: ", ") + ")")
        }
        let table = statements.table
        let names = (["\"id\""] + (versioned ? ["\"_expected\""] : []) + slots.map { "\"_c\($0)\"" })
            .joined(separator: ", ")
        var assignments = slots.map { "\(statements.columns[$0]) = \"_v\".\"_c\($0)\"" }
        assignments.append("\"_version\" = \(table).\"_version\" + 1")
        let expected =
            versioned ? "AND (\"_v\".\"_expected\" IS NULL OR \(table).\"_version\" = \"_v\".\"_expected\") " : ""
        let query = """
            UPDATE \(table) SET \(assignments.joined(separator: ", ")) \
            FROM (VALUES \(tuples.joined(separator: ", "))) AS "_v"(\(names)) \
            WHERE \(table)."id" = "_v"."id" \(expected)RETURNING \(table)."id", \(table)."_version"
            """
        return try writer.run(query, arguments).rows.map { try $0.decode((Int64, Int64).self) }
    }

    /// The type a bound value of `property` is cast to in a `VALUES` list.
    static func castType(_ property: PropertyDescription) -> String {
        switch property.kind {
        case .attribute(.text), .attribute(.uuid): "TEXT"
        case .attribute(let attribute): columnType(attribute)
        default: "BIGINT"
        }
    }
}

/// The PostgreSQL statements of the delete-rule engine (``DeleteRules``), on the writer,
/// inside one save's transaction. Lists of IDs are bound as one array each (`= ANY($1)`).
struct PostgreSQLStatements: SaveStatements {
    let store: PostgreSQLStore
    let connection: PostgreSQLConnection

    var sql: EntityMap<EntitySQL> { store.sql }

    func run(_ statement: (String, [StoreValue]), for id: ManagedObjectID) throws -> Int {
        try store.mapErrors(id) { try connection.run(statement.0, statement.1) }.metadata.rows ?? 0
    }

    func updateObjects(_ updates: [StoreChanges.Update]) throws -> [ManagedObjectID: Int64] {
        try store.updateObjects(updates)
    }

    func insertBatch(_ entity: EntityDescription, _ rows: [StoreChanges.Insert]) throws { try store.insert(rows) }

    func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T { try store.mapErrors(id, body) }

    var transactionReader: TransactionReader {
        TransactionReader(
            countRows: { fetch, locking in try store.count(connection, fetch, locking: locking) },
            lock: { name, shared in try store.takeNamedLock(name, shared: shared, on: connection) })
    }

    func rows(_ entity: EntityDescription, ids: ArraySlice<Int64>) throws -> [StoreRow] {
        try store.rows(connection, entity, ids: Array(ids))
    }

    func members(
        _ entity: EntityDescription, link: PropertyDescription, owners: ArraySlice<Int64>, limit: Int, after: Int64?
    ) throws -> [StoreRow] {
        let statements = store.sql[entity]
        var bindings = PostgresBindings()
        bindings.append(Array(owners))
        bindings.append(Int64(limit))
        var above = ""
        if let after {
            bindings.append(after)
            above = " AND \"id\" > $3"
        }
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT \(statements.selectList) FROM \(statements.table) WHERE \(quote(link.name)) = ANY($1)\(above) \
                ORDER BY "id" LIMIT $2
                """, binds: bindings)
        return try statements.decode(try connection.run(query).rows)
    }

    func fetchRows(_ fetch: StoreFetch) throws -> [StoreRow] {
        let statements = store.sql[fetch.entity]
        let (query, arguments) = store.select(statements.selectList, fetch)
        return try statements.decode(try connection.run(query, arguments).rows)
    }

    func fetchIDs(_ fetch: StoreFetch) throws -> [Int64] {
        let (query, arguments) = store.select("\"id\"", fetch)
        return try connection.run(query, arguments).rows.map { try $0.decode(Int64.self) }
    }

    func nullify(_ entity: EntityDescription, link: PropertyDescription, owners: ArraySlice<Int64>) throws -> [Int64] {
        var bindings = PostgresBindings()
        bindings.append(Array(owners))
        let column = quote(link.name)
        let query = PostgresQuery(
            unsafeSQL: """
                UPDATE \(store.sql[entity].table) SET \(column) = NULL, "_version" = "_version" + 1 \
                WHERE \(column) = ANY($1) RETURNING "id"
                """, binds: bindings)
        return try connection.run(query).rows.map { try $0.decode(Int64.self) }
    }

    func delete(_ entity: EntityDescription, ids: ArraySlice<Int64>) throws {
        var bindings = PostgresBindings()
        bindings.append(Array(ids))
        _ = try connection.run(
            PostgresQuery(
                unsafeSQL: "DELETE FROM \(store.sql[entity].table) WHERE \"id\" = ANY($1)", binds: bindings))
    }

    func reserve(entity: String, count: Int) throws -> ClosedRange<Int64> {
        try store.reserve(entity: entity, count: count)
    }

    func insert(_ rows: [StoreChanges.Insert]) throws { try store.insert(rows) }

    func foreignLinks() throws -> [String: [ForeignLink]] { try store.foreignLinks(connection) }

    func firstLinked(table: String, column: String, targets: ArraySlice<Int64>) throws -> (row: Int64, target: Int64)? {
        var bindings = PostgresBindings()
        bindings.append(Array(targets))
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT "id", \(quote(column)) FROM \(quote(table)) WHERE \(quote(column)) = ANY($1) \
                ORDER BY "id" LIMIT 1
                """, binds: bindings)
        guard let row = try connection.run(query).rows.first else { return nil }
        let (id, target) = try row.decode((Int64, Int64).self)
        return (id, target)
    }
}
