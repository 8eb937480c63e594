public import Foundation
import Logging
import NIOCore
public import Persistence
import PostgresNIO

extension PersistentContainer {
    /// Opens a container on the store `url` names: a PostgreSQL database for a
    /// `postgresql://` (or `postgres://`) URL, else the SQLite file at `url`.
    ///
    /// A PostgreSQL URL is `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME]`;
    /// the password may come from `PGPASSWORD` instead, and is never part of
    /// `storeURL` or of a message. `schema` (default `public`) is the PostgreSQL schema
    /// that holds the store's tables. Opening creates the tables, indexes and links the
    /// entities declare, unless `Options.createsStore` is `false`.
    ///
    /// What the PostgreSQL store does not do yet fails with
    /// `PersistenceError.Code.unsupported` and a message naming it, never silently:
    /// tallies, migrations of an existing store, read-only opens, integrity checks, batch and
    /// row deletions, and a cascade that reaches rows the saving context never read.
    ///
    /// - Throws: `PersistenceError` with code `io` when the server cannot be reached (the
    ///   message names the host and port), `notFound` when the store has no schema and may
    ///   not create one, `unsupported` as above, `newerStore`, or what the SQLite open throws.
    public static func open(url: URL, schema: Schema, options: Options = Options()) throws -> PersistentContainer {
        guard PostgreSQLLocation.names(url) else {
            return try PersistentContainer(storeURL: url, schema: schema, options: options)
        }
        let store = try PostgreSQLStore(url: url, schema: schema, options: options)
        return PersistentContainer(store: store, storeURL: store.url, schema: schema, options: options)
    }
}

/// The PostgreSQL store: the tables of a ``Schema`` in one PostgreSQL schema, read and
/// written through postgres-nio.
///
/// Two connections per store: the writer, which holds a save's transaction (`READ
/// COMMITTED`; optimistic versions make a concurrent change a conflict) and the reader,
/// for fetches and for ID reservations (each its own short transaction, so that a long save
/// never holds other hosts' reservations). Both are used synchronously: see
/// ``PostgreSQLConnection``.
final class PostgreSQLStore: PersistentStore {
    let url: URL
    let schema: Schema
    private let location: PostgreSQLLocation
    private let writer: PostgreSQLConnection
    private let reader: PostgreSQLConnection
    private let sql: [String: EntityStatements]
    /// This store's row in the commit counters: ``externalChangeToken()`` sums the others.
    private let writerID = UUID().uuidString
    private let injectedFault = FaultSlot()
    /// The columns of each unique index, by index name, as SQLite names them in its
    /// messages (`Folder.name`): a constraint error reads the same on both stores.
    private let uniqueColumns: [String: String]

    static let sequenceTable = "_persistence_sequence"
    static let migrationsTable = "_persistence_migrations"
    static let commitsTable = "_persistence_commits"

    init(url: URL, schema: Schema, options: PersistentContainer.Options) throws {
        let location = try PostgreSQLLocation(url)
        self.location = location
        self.url = location.redacted
        self.schema = schema
        guard !options.readOnly else {
            throw PersistenceError(
                .unsupported, "The PostgreSQL store \(location.redacted.absoluteString) cannot be opened read-only yet")
        }
        for entity in schema.entities where !entity.objectType.tallies.isEmpty {
            throw PersistenceError(
                .unsupported,
                "The PostgreSQL store cannot keep tallies yet (\(entity.name) declares "
                    + "\(entity.objectType.tallies.count)): open this schema with a SQLite store")
        }
        sql = Dictionary(uniqueKeysWithValues: schema.entities.map { ($0.name, EntityStatements($0)) })
        var unique: [String: String] = [:]
        for entity in schema.entities {
            for property in entity.storedProperties where property.isUnique {
                unique["\(entity.name)_\(property.name)_unique"] = "\(entity.name).\(property.name)"
            }
            for composite in try entity.compositeIndexColumns() where composite.isUnique {
                unique["\(entity.name)_\(composite.columns.joined(separator: "_"))_unique"] =
                    composite.columns.map { "\(entity.name).\($0)" }.joined(separator: ", ")
            }
        }
        uniqueColumns = unique
        writer = try PostgreSQLConnection(location, logger: options.logger)
        reader = try PostgreSQLConnection(location, logger: options.logger)
        do {
            try writer.withLock {
                try transaction(writer) { try createSchema(createsStore: options.createsStore) }
            }
        } catch let error as PersistenceError {
            close()
            throw error
        } catch {
            close()
            throw mapped(error, nil)
        }
    }

    deinit { close() }

    // MARK: - Schema

    /// Makes the tables, columns, indexes and links the schema declares that the store
    /// lacks, and records the migrations of a new store as applied.
    private func createSchema(createsStore: Bool) throws {
        let name = location.schema
        let schemaExists = try !writer.run(
            "SELECT 1 FROM pg_namespace WHERE nspname = $1", [.text(name)]
        ).rows.isEmpty
        let isNew = try !schemaExists || !tableExists(Self.sequenceTable)
        if isNew && !createsStore {
            throw PersistenceError(.notFound, "There is no store at \(url.absoluteString)")
        }
        // One open at a time makes or extends the schema (two hosts opening a new store).
        try writer.run("SELECT pg_advisory_xact_lock(hashtext($1))", [.text("persistence-schema:" + name)])
        if !schemaExists { try writer.run("CREATE SCHEMA IF NOT EXISTS \(quote(name))", []) }
        try writer.run(
            """
            CREATE TABLE IF NOT EXISTS \(Self.migrationsTable) (id TEXT PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)
            """, [])
        try writer.run(
            "CREATE TABLE IF NOT EXISTS \(Self.sequenceTable) (entity TEXT PRIMARY KEY, next BIGINT NOT NULL)", [])
        try writer.run(
            "CREATE TABLE IF NOT EXISTS \(Self.commitsTable) (writer TEXT PRIMARY KEY, commits BIGINT NOT NULL)", [])
        let applied = Set(
            try writer.run("SELECT id FROM \(Self.migrationsTable)", []).rows.map { try $0.decode(String.self) })
        let unknown = applied.subtracting(schema.migrations.map(\.id)).sorted()
        if !unknown.isEmpty {
            throw PersistenceError(
                .newerStore,
                "Could not open the store \(url.absoluteString): it was written by a newer version of this program "
                    + "(it has applied the migration\(unknown.count == 1 ? "" : "s") "
                    + "\(unknown.map { "'\($0)'" }.joined(separator: ", ")), which this version does not know); "
                    + "nothing was changed: upgrade to open it")
        }
        let pending = schema.migrations.filter { !applied.contains($0.id) }
        if !isNew, let first = pending.first {
            throw PersistenceError(
                .unsupported,
                "The PostgreSQL store \(url.absoluteString) needs the migration '\(first.id)', and the PostgreSQL "
                    + "store cannot run migrations yet; nothing was changed")
        }
        for migration in pending {
            try writer.run(
                "INSERT INTO \(Self.migrationsTable) (id, applied) VALUES ($1, $2)",
                [.text(migration.id), .real(Date().timeIntervalSince1970)])
        }
        for entity in schema.entities {
            let table = sql[entity.name]!.table
            if try tableExists(entity.name) {
                let existing = Set(try columns(of: entity.name))
                for property in entity.storedProperties where !existing.contains(property.name) {
                    try writer.run("ALTER TABLE \(table) ADD COLUMN \(Self.columnDefinition(property))", [])
                }
            } else {
                let columns =
                    ["\"id\" BIGINT PRIMARY KEY NOT NULL", "\"_version\" BIGINT NOT NULL DEFAULT 1"]
                    + entity.storedProperties.map(Self.columnDefinition)
                try writer.run("CREATE TABLE \(table) (\(columns.joined(separator: ", ")))", [])
            }
            for property in entity.storedProperties {
                guard property.isIndexed || property.isUnique || !property.isAttribute else { continue }
                let unique = property.isUnique ? "UNIQUE " : ""
                let index = quote("\(entity.name)_\(property.name)_\(property.isUnique ? "unique" : "index")")
                try writer.run("CREATE \(unique)INDEX IF NOT EXISTS \(index) ON \(table) (\(quote(property.name)))", [])
            }
            for composite in try entity.compositeIndexColumns() {
                let unique = composite.isUnique ? "UNIQUE " : ""
                let index = quote(
                    "\(entity.name)_\(composite.columns.joined(separator: "_"))_\(composite.isUnique ? "unique" : "index")"
                )
                try writer.run(
                    "CREATE \(unique)INDEX IF NOT EXISTS \(index) ON \(table) "
                        + "(\(composite.columns.map(quote).joined(separator: ", ")))", [])
            }
            try writer.run(
                """
                INSERT INTO \(Self.sequenceTable) (entity, next) \
                VALUES ($1, (SELECT COALESCE(MAX("id"), 0) + 1 FROM \(table))) \
                ON CONFLICT (entity) DO UPDATE SET next = GREATEST(\(Self.sequenceTable).next, EXCLUDED.next)
                """, [.text(entity.name)])
        }
        // A to-one relationship is a link the server keeps: a committed row never points at
        // a row that is gone. Checked at commit (the delete rules run as statements inside
        // the save, in an order that may leave a link dangling for a moment).
        for entity in schema.entities {
            for property in entity.storedProperties {
                guard case .toOne(let destination) = property.kind else { continue }
                let constraint = "\(entity.name)_\(property.name)_link"
                let exists = try !writer.run(
                    """
                    SELECT 1 FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
                    WHERE c.conname = $1 AND n.nspname = $2
                    """, [.text(constraint), .text(name)]
                ).rows.isEmpty
                guard !exists else { continue }
                try writer.run(
                    """
                    ALTER TABLE \(quote(entity.name)) ADD CONSTRAINT \(quote(constraint)) \
                    FOREIGN KEY (\(quote(property.name))) REFERENCES \(quote(destination)) ("id") \
                    DEFERRABLE INITIALLY DEFERRED
                    """, [])
            }
        }
    }

    private func tableExists(_ table: String) throws -> Bool {
        try !writer.run(
            "SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2", [.text(location.schema), .text(table)]
        ).rows.isEmpty
    }

    private func columns(of table: String) throws -> [String] {
        try writer.run(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
            [.text(location.schema), .text(table)]
        ).rows.map { try $0.decode(String.self) }
    }

    private static func columnDefinition(_ property: PropertyDescription) -> String {
        let type: String
        switch property.kind {
        case .attribute(let t): type = columnType(t)
        default: type = "BIGINT"
        }
        let null = property.isOptional ? "" : " NOT NULL"
        return "\(quote(property.name)) \(type)\(null) DEFAULT \(literal(property.defaultValue, type: type))"
    }

    /// The column type of an attribute: text compares by its bytes (`C`), as in SQLite.
    static func columnType(_ type: AttributeType) -> String {
        switch type {
        case .integer, .boolean: "BIGINT"
        case .real, .date: "DOUBLE PRECISION"
        case .text, .uuid: "TEXT COLLATE \"C\""
        case .blob: "BYTEA"
        }
    }

    private static func literal(_ value: StoreValue, type: String) -> String {
        switch value {
        case .null: "NULL"
        case .integer(let v): String(v)
        case .real(let v): v.isFinite ? "\(v)" : "NULL"
        case .text(let v): "'\(v.replacingOccurrences(of: "'", with: "''"))'"
        case .blob(let v): "'\\x\(v.map { String(format: "%02x", $0) }.joined())'::bytea"
        }
    }

    // MARK: - IDs

    func reserveIDs(entity: EntityDescription, count: Int) throws -> ClosedRange<Int64> {
        try mapErrors(nil) { try reserve(entity: entity.name, count: count) }
    }

    /// On the reader, in a transaction of its own: never rolled back with a save, so an ID
    /// once handed out is never handed out again.
    private func reserve(entity: String, count: Int) throws -> ClosedRange<Int64> {
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
        _ = try? reader.run(
            "UPDATE \(Self.sequenceTable) SET next = $1 WHERE entity = $2 AND next = $3",
            [.integer(unused.lowerBound), .text(entity.name), .integer(unused.upperBound + 1)])
    }

    // MARK: - Reading

    func fetch(_ fetch: StoreFetch) throws -> [StoreRow] {
        let statements = sql[fetch.entity.name]!
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

    private func count(_ connection: PostgreSQLConnection, _ fetch: StoreFetch) throws -> Int {
        let (inner, arguments) = select("1", fetch)
        let rows = try connection.run("SELECT COUNT(*) FROM (\(inner)) AS \"_counted\"", arguments).rows
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    func rows(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        try mapErrors(nil) { try rows(reader, entity, ids: ids) }
    }

    private func rows(_ connection: PostgreSQLConnection, _ entity: EntityDescription, ids: [Int64]) throws
        -> [StoreRow]
    {
        guard !ids.isEmpty else { return [] }
        let statements = sql[entity.name]!
        var bindings = PostgresBindings()
        bindings.append(ids)
        let query = PostgresQuery(
            unsafeSQL: "SELECT \(statements.selectList) FROM \(statements.table) WHERE \"id\" = ANY($1)",
            binds: bindings)
        return try statements.decode(try connection.run(query).rows)
    }

    /// The statement of `fetch`, selecting `columns`, and its arguments.
    func select(_ columns: String, _ fetch: StoreFetch) -> (String, [StoreValue]) {
        var compiler = PredicateCompiler()
        var query = "SELECT \(columns) FROM \(sql[fetch.entity.name]!.table)"
        if let predicate = fetch.predicate { query += " WHERE " + compiler.compile(predicate) }
        // SQLite's order: NULL before every value, ascending.
        var order = fetch.sort.map { key in
            (key.property.map { quote($0.column) } ?? "\"id\"")
                + (key.ascending ? " ASC NULLS FIRST" : " DESC NULLS LAST")
        }
        if !fetch.sort.contains(where: { $0.property == nil }) { order.append("\"id\" ASC") }
        query += " ORDER BY " + order.joined(separator: ", ")
        if let limit = fetch.limit { query += " LIMIT \(compiler.argument(.integer(Int64(limit))))" }
        if fetch.offset > 0 { query += " OFFSET \(compiler.argument(.integer(Int64(fetch.offset))))" }
        return (query, compiler.arguments)
    }

    // MARK: - Writing

    func save(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult {
        do {
            return try writer.withLock { try transaction(writer) { try write(changes, effects: effects) } }
        } catch let error as StoreConflict {
            throw error
        } catch let failure as StreamFailure {
            throw failure.error
        } catch let error as PersistenceError {
            throw error
        } catch let error as PSQLError {
            throw mapped(error, nil)
        } catch {
            guard changes.wrapsCommitFailures else { throw error }
            throw PersistenceError(.io, "Could not commit to \(url.absoluteString): \(error)", cause: error)
        }
    }

    /// `body` between `BEGIN` and `COMMIT` on `connection`, rolled back if it throws.
    private func transaction<T>(_ connection: PostgreSQLConnection, _ body: () throws -> T) throws -> T {
        try connection.run("BEGIN", [])
        let result: T
        do {
            result = try body()
        } catch {
            _ = try? connection.run("ROLLBACK", [])
            throw error
        }
        try connection.run("COMMIT", [])
        return result
    }

    private func write(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult {
        guard changes.rows.deletions.isEmpty else {
            let names = changes.rows.deletions.map(\.entity.name)
            throw PersistenceError(
                .unsupported,
                "The PostgreSQL store cannot delete rows without objects yet (batch delete or deleteRows of "
                    + "\(names.joined(separator: ", "))); nothing was changed")
        }
        var versions: [ManagedObjectID: Int64] = [:]
        var conflicts: [ManagedObjectID] = []
        // Deletes first: a save may delete a row and insert another with its unique value.
        for delete in changes.deletes {
            let statements = sql[delete.entity.name]!
            var query = "DELETE FROM \(statements.table) WHERE \"id\" = $1"
            var arguments: [StoreValue] = [.integer(delete.id)]
            if let expected = delete.expectedVersion {
                query += " AND \"_version\" = $2"
                arguments.append(.integer(expected))
            }
            let id = ManagedObjectID(entityName: delete.entity.name, rowID: delete.id)
            let result = try mapErrors(id) { try writer.run(query, arguments) }
            if result.metadata.rows == 0, delete.expectedVersion != nil { conflicts.append(id) }
        }
        for update in changes.updates {
            let id = ManagedObjectID(entityName: update.entity.name, rowID: update.id)
            let statements = sql[update.entity.name]!
            var arguments = update.values
            var assignments = update.slots.enumerated().map { i, slot in "\(statements.columns[slot]) = $\(i + 1)" }
            assignments.append("\"_version\" = \"_version\" + 1")
            arguments.append(.integer(update.id))
            var query =
                "UPDATE \(statements.table) SET \(assignments.joined(separator: ", ")) WHERE \"id\" = $\(arguments.count)"
            if let expected = update.expectedVersion {
                arguments.append(.integer(expected))
                query += " AND \"_version\" = $\(arguments.count)"
            }
            query += " RETURNING \"_version\""
            let rows = try mapErrors(id) { try writer.run(query, arguments).rows }
            if let version = try rows.first?.decode(Int64.self) { versions[id] = version } else { conflicts.append(id) }
        }
        if !conflicts.isEmpty { throw StoreConflict(objectIDs: conflicts) }
        try insert(changes.inserts)
        for insertion in changes.rows.insertions { try insertRows(insertion, effects) }
        var result = StoreSaveResult(versions: versions)
        if !changes.deletes.isEmpty {
            let completed = try completeDeleteRules(changes.deletes)
            result.nullified += completed
        }
        try insertEffectRows(effects)
        if !effects.beforeCommitWork.isEmpty {
            let reader = TransactionReader { fetch in try self.count(self.writer, fetch) }
            for work in effects.beforeCommitWork { try work(reader) }
        }
        try writer.run(
            """
            INSERT INTO \(Self.commitsTable) (writer, commits) VALUES ($1, 1) \
            ON CONFLICT (writer) DO UPDATE SET commits = \(Self.commitsTable).commits + 1
            """, [.text(writerID)])
        try injectedFault.run()
        return result
    }

    /// A context applies delete rules to the members it knew of at `delete()`; another may
    /// have committed more since. Inside the transaction, nullify clears their links and deny
    /// refuses the save, as in SQLite; a cascade that reaches such rows is refused (it needs
    /// the rows' own rules and `willBatchDelete` hooks, which this store does not run yet).
    /// Returns the rows whose link was cleared.
    private func completeDeleteRules(_ deletes: [StoreChanges.Delete]) throws -> [ManagedObjectID] {
        var nullified: [ManagedObjectID] = []
        let groups = Dictionary(grouping: deletes, by: { $0.entity.name }).values.map { ($0[0].entity, $0.map(\.id)) }
        for (entity, ids) in groups {
            // Each relationship that reaches other rows: its to-many name (nil for a to-one's
            // `onDestinationDelete` rule), the rows' entity, their link, and the rule.
            var reaching:
                [(toMany: String?, destination: EntityDescription, link: PropertyDescription, rule: DeleteRule)] =
                    []
            for property in entity.properties {
                guard case .toMany(let destinationName) = property.kind,
                    let destination = schema.entity(named: destinationName)
                else { continue }
                let inverse = try entity.inverse(of: property)
                reaching.append((property.name, destination, inverse, property.deleteRule))
            }
            for link in schema.incomingLinks(into: entity) {
                reaching.append((nil, link.source, link.property, link.rule))
            }
            for (toMany, destination, link, rule) in reaching {
                let table = sql[destination.name]!.table
                let column = quote(link.name)
                var bindings = PostgresBindings()
                bindings.append(ids)
                switch rule {
                case .nullify:
                    let rows = try writer.run(
                        PostgresQuery(
                            unsafeSQL: """
                                UPDATE \(table) SET \(column) = NULL, "_version" = "_version" + 1 \
                                WHERE \(column) = ANY($1) RETURNING "id"
                                """, binds: bindings)
                    ).rows
                    nullified += try rows.map {
                        ManagedObjectID(entityName: destination.name, rowID: try $0.decode(Int64.self))
                    }
                case .deny, .cascade:
                    let rows = try writer.run(
                        PostgresQuery(
                            unsafeSQL: """
                                SELECT "id", \(column) FROM \(table) WHERE \(column) = ANY($1) ORDER BY "id" LIMIT 1
                                """, binds: bindings)
                    ).rows
                    guard let row = rows.first else { continue }
                    let (member, target) = try row.decode((Int64, Int64).self)
                    let targetID = ManagedObjectID(entityName: entity.name, rowID: target)
                    let memberID = ManagedObjectID(entityName: destination.name, rowID: member)
                    let owner = "\(toMany.map { "\(entity.name).\($0)" } ?? "\(destination.name).\(link.name)")"
                    if rule == .deny, let toMany {
                        // The words of the SQLite store.
                        throw PersistenceError(
                            .validation,
                            "\(targetID) cannot be deleted: its relationship '\(toMany)' gained members meanwhile "
                                + "(deny rule)", objectIDs: [targetID])
                    }
                    if rule == .deny { throw PersistenceError.linkDenial(targetID, memberID, link) }
                    throw PersistenceError(
                        .unsupported,
                        "\(targetID) cannot be deleted on the PostgreSQL store yet: its cascade rule (\(owner)) "
                            + "reaches \(memberID), which was added after the deleting context read it, and this "
                            + "store cannot cascade in the store yet; nothing was changed",
                        objectIDs: [targetID])
                }
            }
        }
        return nullified
    }

    private func insert(_ rows: [StoreChanges.Insert]) throws {
        for row in rows {
            let id = ManagedObjectID(entityName: row.entity.name, rowID: row.id)
            guard row.id > 0 else {
                throw PersistenceError(
                    .io, "\(id) has no ID: the store could not reserve one when it was inserted", objectIDs: [id])
            }
            _ = try mapErrors(id) {
                try writer.run(sql[row.entity.name]!.insert, [.integer(row.id)] + row.values)
            }
        }
    }

    /// The rows of an insertion, one batch at a time, each followed by the rows its hooks
    /// planned.
    private func insertRows(_ insertion: RowChanges.Insertion, _ effects: SaveEffects) throws {
        for start in stride(from: 0, to: insertion.ids.count, by: insertion.batchSize) {
            let indexes = start..<min(start + insertion.batchSize, insertion.ids.count)
            let planned = effects.rows.count
            let rows: [[StoreValue]]
            do {
                rows = try insertion.rows(indexes)
            } catch {
                throw StreamFailure(error: error)
            }
            try insert(
                zip(indexes, rows).map { i, values in
                    StoreChanges.Insert(
                        entity: insertion.entity, id: insertion.ids.lowerBound + Int64(i), values: values)
                })
            try insertEffectRows(effects, from: planned)
        }
    }

    /// Inserts the rows of save effects from index `start` on, with IDs reserved for them
    /// now, one block per entity. With `start` given (rows planned batch by batch), they
    /// leave `effects` and are kept as ranges.
    private func insertEffectRows(_ effects: SaveEffects, from start: Int? = nil) throws {
        let first = start ?? 0
        guard first < effects.rows.count else { return }
        var counts: [String: Int] = [:]
        var order: [String] = []
        for row in effects.rows[first...] {
            if counts[row.entity.name] == nil { order.append(row.entity.name) }
            counts[row.entity.name, default: 0] += 1
        }
        var next: [String: Int64] = [:]
        for name in order {
            let ids = try reserve(entity: name, count: counts[name]!)
            next[name] = ids.lowerBound
            if start != nil { effects.rowRanges[name, default: RowIDSet()].insert(ids.lowerBound..<ids.upperBound + 1) }
        }
        for i in first..<effects.rows.count {
            let name = effects.rows[i].entity.name
            effects.rows[i].id = next[name]!
            next[name]! += 1
        }
        try insert(Array(effects.rows[first...]))
        if start != nil { effects.rows.removeSubrange(first...) }
    }

    /// The error of an insertion's rows or a hook, carried out of the transaction to be
    /// thrown as it is.
    private struct StreamFailure: Error {
        var error: any Error
    }

    func failNextCommit(with error: any Error & Sendable) {
        injectedFault.set { throw error }
    }

    // MARK: - Not yet on PostgreSQL

    func checkIntegrity() throws -> [String] {
        throw PersistenceError(
            .unsupported, "The PostgreSQL store \(url.absoluteString) has no integrity check yet (use amcheck)")
    }

    func tally(entity: EntityDescription, name: String) throws -> [TallyCount] {
        throw PersistenceError(.unsupported, "The PostgreSQL store cannot keep tallies yet (\(entity.name).\(name))")
    }

    func recountTallies(fix: Bool) throws -> [TallyDiscrepancy] {
        throw PersistenceError(.unsupported, "The PostgreSQL store cannot keep tallies yet")
    }

    // MARK: - Changes of others

    /// The commits of every other store on these tables (other connections, processes and
    /// hosts), summed: each save counts its own in its transaction.
    func externalChangeToken() throws -> Int64 {
        try mapErrors(nil) {
            let rows = try reader.run(
                "SELECT COALESCE(SUM(commits), 0)::BIGINT FROM \(Self.commitsTable) WHERE writer <> $1",
                [.text(writerID)]
            ).rows
            return try rows.first?.decode(Int64.self) ?? 0
        }
    }

    func close() {
        writer.close()
        reader.close()
    }

    // MARK: - Errors

    /// Turns driver errors into ``PersistenceError``s naming the object.
    private func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch let error as PSQLError {
            throw mapped(error, id)
        }
    }

    private func mapped(_ error: any Error, _ id: ManagedObjectID?) -> PersistenceError {
        let what = id.map { "Could not save \($0)" } ?? "The store at \(url.absoluteString) failed"
        var message = PostgreSQLConnection.describe(error)
        let ids = id.map { [$0] } ?? []
        let info = (error as? PSQLError)?.serverInfo
        let state = PostgreSQLConnection.sqlState(error)
        if state == "23505", let name = info?[.constraintName], let columns = uniqueColumns[name] {
            message = "UNIQUE constraint failed: \(columns)"
        } else if state == "23502", let table = info?[.tableName], let column = info?[.columnName] {
            message = "NOT NULL constraint failed: \(table).\(column)"
        }
        switch state {
        case let state? where state.hasPrefix("23"):
            return PersistenceError(.constraint, "\(what): \(message)", objectIDs: ids, cause: error)
        case "25006":
            return PersistenceError(.readOnly, "\(what): \(message)", objectIDs: ids, cause: error)
        default:
            return PersistenceError(.io, "\(what): \(message)", objectIDs: ids, cause: error)
        }
    }
}

/// The fault ``PostgreSQLStore/failNextCommit(with:)`` plants, run once before a commit.
private final class FaultSlot: @unchecked Sendable {
    private let lock = NSLock()
    private var fault: (@Sendable () throws -> Void)?

    func set(_ fault: @escaping @Sendable () throws -> Void) {
        lock.lock()
        defer { lock.unlock() }
        self.fault = fault
    }

    func run() throws {
        lock.lock()
        let fault = self.fault
        self.fault = nil
        lock.unlock()
        try fault?()
    }
}

/// The SQL of one entity, built once when the store opens.
struct EntityStatements {
    let entity: EntityDescription
    let table: String
    /// Quoted column names, by slot.
    let columns: [String]
    let selectList: String
    let insert: String

    init(_ entity: EntityDescription) {
        self.entity = entity
        table = quote(entity.name)
        columns = entity.storedProperties.map { quote($0.name) }
        selectList = (["\"id\"", "\"_version\""] + columns).joined(separator: ", ")
        let names = (["\"id\""] + columns).joined(separator: ", ")
        let marks = (1...columns.count + 1).map { "$\($0)" }.joined(separator: ", ")
        insert = "INSERT INTO \(table) (\(names)) VALUES (\(marks))"
    }

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
