public import Foundation
import Locking
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
    /// Delete rules (cascade, nullify, deny, `onDestinationDelete`), batch deletes and row
    /// deletions run in the store's transaction, by the same engine as on SQLite
    /// (`DeleteRules`), with the same messages.
    ///
    /// Tallies are kept by triggers (see `PostgreSQLTallies.swift` for how they differ:
    /// saves that write tallied entities run one at a time). Migrations of an existing store
    /// run in the open's transaction (`MigrationDatabase.dialect` is `.postgresql`; one
    /// statement an `execute`); a failed one changes nothing and nothing is quarantined. A
    /// read-only open sets `default_transaction_read_only` and needs a current store.
    /// `PersistentContainer.checkIntegrity()` checks that the store is the one this
    /// version makes (migrations, tables, columns, links, IDs, tally triggers); the server
    /// keeps its own pages.
    ///
    /// Where PostgreSQL behaves differently from SQLite: transactions are `READ COMMITTED`
    /// and several hosts write at once (a `beforeCommit` check does not hold other writers
    /// off, as SQLite's one writer does: saves that must not interleave take a named lock,
    /// `SaveEffects.lockFirst(_:shared:)` or `TransactionReader.lock(_:shared:)`, an advisory
    /// lock here); text cannot hold a NUL character (a save of one fails). A connection the
    /// server closes (a restart, a failover, an administrator, the network) is made again by
    /// the next save or fetch, tried again with backoff while the server cannot be reached,
    /// for up to `reconnect_timeout` seconds (a URL parameter; default 10, 0 for one try);
    /// past that the call throws `io`, naming the server. The save the connection was lost
    /// under throws, and nothing of it was committed — but for a loss while the server was
    /// committing, which the error says may or may not have committed; neither is retried. A
    /// session's connection (`PersistentContainer.openSession(label:)`) is made again only
    /// if its lock can be taken again and its row is still there (no other process reaped
    /// it); otherwise its loss ends the session and fences the container's saves.
    ///
    /// - Throws: `PersistenceError` with code `io` when the server cannot be reached (the
    ///   message names the host and port), `notFound` when the store has no schema and may
    ///   not create one, `misuse` for a URL it cannot read (an unknown parameter, `sslmode` or
    ///   `reconnect_timeout`, a root certificate file that is needed and missing),
    ///   `newerStore`, or what the SQLite open throws.
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
/// ``PostgreSQLConnection``. A store with a session has a third, the session's
/// (PostgreSQLSessions.swift).
final class PostgreSQLStore: PersistentStore {
    let url: URL
    let schema: Schema
    let location: PostgreSQLLocation
    /// Whether the store was opened read-only: both connections' transactions are read-only
    /// (`SET default_transaction_read_only`), and every save is refused before it starts.
    let isReadOnly: Bool
    let writer: PostgreSQLConnection
    let reader: PostgreSQLConnection
    /// Since when the server has not answered a reconnect, shared by the store's
    /// connections: a server down for good fails a command after one bound, not after one
    /// for each connection (``PostgreSQLLocation/reconnectTimeout``).
    let outage: ServerOutage
    let sql: EntityMap<EntitySQL>
    /// This store's row in the commit counters: ``externalChangeToken()`` sums the others.
    let writerID = UUID().uuidString
    let injectedFault = FaultSlot()
    /// The columns of each unique index, by index name, as SQLite names them in its
    /// messages (`Folder.name`): a constraint error reads the same on both stores.
    private let uniqueColumns: [String: String]
    let logger: Logger
    /// This store's session, if it opened one (PostgreSQLSessions.swift).
    let sessionSlot = Locked(SessionSlot())
    /// The `LISTEN` of ``startAnnouncements(_:)``, once started (PostgreSQLAnnouncements.swift).
    let listenerSlot = Locked<PostgreSQLListener?>(nil)

    static let sequenceTable = "_persistence_sequence"
    static let migrationsTable = "_persistence_migrations"
    static let commitsTable = "_persistence_commits"

    /// The statement that counts a commit of this store's writer, its ID bound as `parameter`.
    static func commitCount(_ parameter: String) -> String {
        """
        INSERT INTO \(commitsTable) (writer, commits) VALUES (\(parameter), 1) \
        ON CONFLICT (writer) DO UPDATE SET commits = \(commitsTable).commits + 1
        """
    }

    /// Counts the commit of the writer's transaction.
    func countCommit() throws {
        try writer.run(Self.commitCount("$1"), [.text(writerID)])
    }
    /// The to-one relationships with an `onDestinationDelete` rule, as in the SQLite store:
    /// an open without their entity still honours them (``ForeignLink``).
    static let linksTable = "_persistence_links"

    init(url: URL, schema: Schema, options: PersistentContainer.Options) throws {
        let location = try PostgreSQLLocation(url)
        self.location = location
        self.url = location.redacted
        self.schema = schema
        isReadOnly = options.readOnly
        sql = EntityMap(schema) { EntitySQL($0, dialect: .postgresql) }
        var unique: [String: String] = [:]
        for entity in schema.entities {
            for property in entity.storedProperties where property.isUnique {
                unique[entity.indexName(of: property)] = "\(entity.name).\(property.name)"
            }
            for composite in try entity.compositeIndexColumns() where composite.isUnique {
                unique[entity.indexName(columns: composite.columns, isUnique: true, filterColumn: nil)] =
                    composite.columns.map { "\(entity.name).\($0)" }.joined(separator: ", ")
            }
        }
        uniqueColumns = unique
        logger = options.logger
        for warning in location.warnings { options.logger.warning("\(warning)") }
        let outage = ServerOutage()
        self.outage = outage
        writer = try PostgreSQLConnection(location, logger: options.logger, outage: outage)
        reader = try PostgreSQLConnection(location, logger: options.logger, outage: outage)
        do {
            // A reaper's fence waits for this connection's transaction: a host cut off in the
            // middle of a save is let go by the server as soon as a session's would be.
            try writer.configure(PostgreSQLConnection.keepaliveSettings)
            if options.readOnly {
                for connection in [writer, reader] {
                    try connection.configure("SET default_transaction_read_only = on")
                }
                try writer.withLock { try transaction(writer) { try requireCurrent() } }
            } else {
                try writer.withLock {
                    // A store already as the schema declares it is only read: no DDL, no
                    // upsert, no lock that waits for another host's saves (CREATE INDEX
                    // takes a SHARE lock on its table even when the index is there).
                    try transaction(writer) {
                        guard try !schemaIsCurrent() else { return }
                        try createSchema(createsStore: options.createsStore)
                    }
                }
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
        try createSessionTables()
        let applied = try appliedMigrations()
        try refuseUnknown(applied)
        let pending = schema.migrations.filter { !applied.contains($0.id) }
        try runMigrations(pending, .beforeSchema, isNew: isNew)
        for entity in schema.entities {
            let table = sql[entity].table
            let dialect = StoreDialect.postgresql
            if try tableExists(entity.name) {
                let existing = Set(try columns(of: entity.name))
                for property in entity.storedProperties where !existing.contains(property.name) {
                    try writer.run("ALTER TABLE \(table) ADD COLUMN \(dialect.columnDefinition(property))", [])
                }
            } else {
                try writer.run("CREATE TABLE \(table) (\(dialect.tableColumns(entity).joined(separator: ", ")))", [])
            }
            for statement in try dialect.indexStatements(entity, table: table) { try writer.run(statement, []) }
            try writer.run(
                """
                INSERT INTO \(Self.sequenceTable) (entity, next) \
                VALUES ($1, (SELECT COALESCE(MAX("id"), 0) + 1 FROM \(table))) \
                ON CONFLICT (entity) DO UPDATE SET next = GREATEST(\(Self.sequenceTable).next, EXCLUDED.next)
                """, [.text(entity.name)])
        }
        try recordLinks()
        try installTallies(writer)
        try installSearchIndexes(writer)
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
        try runMigrations(pending, .afterSchema, isNew: isNew)
        // Rows a migration inserted named their IDs: the next ones come after them.
        for entity in schema.entities {
            try writer.run(
                """
                UPDATE \(Self.sequenceTable) SET next = GREATEST(next, (SELECT COALESCE(MAX("id"), 0) + 1 \
                FROM \(sql[entity].table))) WHERE entity = $1
                """, [.text(entity.name)])
        }
    }

    /// Whether the store already has everything ``createSchema(createsStore:)`` would make
    /// or record: every migration applied (and none unknown), the bookkeeping tables, each
    /// entity's table, columns, indexes, sequence row, links and tallies' functions. Reads
    /// the server's catalog and the store's own tables only, in a few statements, and takes
    /// no lock an ordinary save conflicts with. `false` sends the open to
    /// ``createSchema(createsStore:)``, which checks again under the schema lock.
    private func schemaIsCurrent() throws -> Bool {
        let name = location.schema
        var relations: [String: String] = [:]
        for row in try writer.run(
            """
            SELECT c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
            WHERE n.nspname = $1
            """, [.text(name)]
        ).rows {
            let (relation, kind) = try row.decode((String, String).self)
            relations[relation] = kind
        }
        let bookkeeping = [
            Self.migrationsTable, Self.sequenceTable, Self.commitsTable, Self.sessionsTable, Self.linksTable,
            Self.talliesTable,
        ]
        guard bookkeeping.allSatisfy({ relations[$0] == "r" }), relations[Self.sessionSequence] == "S" else {
            return false
        }
        let applied = try appliedMigrations()
        guard applied == Set(schema.migrations.map(\.id)) else { return false }
        var columns: [String: Set<String>] = [:]
        for row in try writer.run(
            """
            SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
            JOIN pg_namespace n ON n.oid = c.relnamespace \
            WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
            """, [.text(name)]
        ).rows {
            let (table, column) = try row.decode((String, String).self)
            columns[table, default: []].insert(column)
        }
        // The sessions' writers (a reap folds a dead session's count of commits).
        guard columns[Self.sessionsTable]?.contains("writer") == true else { return false }
        let constraints = Set(
            try writer.run(
                """
                SELECT c.conname FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
                WHERE n.nspname = $1
                """, [.text(name)]
            ).rows.map { try $0.decode(String.self) })
        let sequenced = Set(
            try writer.run("SELECT entity FROM \(Self.sequenceTable)", []).rows.map { try $0.decode(String.self) })
        var links: Set<[String]> = []
        for row in try writer.run("SELECT entity, property, destination, rule FROM \(Self.linksTable)", []).rows {
            let (entity, property, destination, rule) = try row.decode((String, String, String, String).self)
            guard schema.entity(named: entity) != nil else { continue }
            links.insert([entity, property, destination, rule])
        }
        var expectedLinks: Set<[String]> = []
        var functions: [String: String] = [:]
        for row in try writer.run(
            """
            SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
            WHERE n.nspname = $1
            """, [.text(name)]
        ).rows {
            let (function, body) = try row.decode((String, String).self)
            functions[function] = body
        }
        for entity in schema.entities {
            guard relations[entity.name] == "r", sequenced.contains(entity.name),
                let existing = columns[entity.name],
                entity.storedProperties.allSatisfy({ existing.contains($0.name) })
            else { return false }
            for property in entity.storedProperties {
                if property.isIndexed || property.isUnique || !property.isAttribute {
                    guard relations[entity.indexName(of: property)] == "i" else { return false }
                }
                guard case .toOne = property.kind else { continue }
                guard constraints.contains("\(entity.name)_\(property.name)_link") else { return false }
            }
            for property in entity.properties {
                guard case .toOne(let destination) = property.kind, let rule = property.destinationDeleteRule else {
                    continue
                }
                expectedLinks.insert([entity.name, property.name, destination, rule.rawValue])
            }
            for composite in try entity.compositeIndexDescriptions() {
                let index = entity.indexName(
                    columns: composite.columns, isUnique: composite.isUnique, filterColumn: composite.filter?.column)
                guard relations[index] == "i" else { return false }
            }
            for function in Self.functions(entity.name, try entity.resolvedTallies(), schema: name)
            where functions[function.name] != function.body {
                return false
            }
        }
        guard links == expectedLinks else { return false }
        // Each sequence ahead of its table's rows (rows written with their IDs by another
        // program, or copied in, are followed by the slow path's repair): a plain read.
        let behind = schema.entities.map { entity in
            "SELECT 1 FROM \(Self.sequenceTable) WHERE entity = \(StoreDialect.postgresql.literal(.text(entity.name))) "
                + "AND next <= (SELECT COALESCE(MAX(\"id\"), 0) FROM \(sql[entity].table))"
        }
        return try behind.isEmpty || writer.run(behind.joined(separator: " UNION ALL "), []).rows.isEmpty
    }

    /// Records the `onDestinationDelete` rules of the schema in ``linksTable``.
    private func recordLinks() throws {
        try writer.run(
            """
            CREATE TABLE IF NOT EXISTS \(Self.linksTable) (entity TEXT NOT NULL, property TEXT NOT NULL, \
            destination TEXT NOT NULL, rule TEXT NOT NULL, PRIMARY KEY (entity, property))
            """, [])
        for entity in schema.entities {
            try writer.run("DELETE FROM \(Self.linksTable) WHERE entity = $1", [.text(entity.name)])
            for property in entity.properties {
                guard case .toOne(let destination) = property.kind, let rule = property.destinationDeleteRule else {
                    continue
                }
                try writer.run(
                    "INSERT INTO \(Self.linksTable) (entity, property, destination, rule) VALUES ($1, $2, $3, $4)",
                    [.text(entity.name), .text(property.name), .text(destination), .text(rule.rawValue)])
            }
        }
    }

    /// The rules of ``linksTable`` recorded by entities the schema does not have (whose
    /// column is still there), by destination.
    fileprivate func foreignLinks(_ connection: PostgreSQLConnection) throws -> [String: [ForeignLink]] {
        let rows = try connection.run("SELECT entity, property, destination, rule FROM \(Self.linksTable)", []).rows
        var foreign: [String: [ForeignLink]] = [:]
        for row in rows {
            let (entity, property, destination, rule) = try row.decode((String, String, String, String).self)
            guard schema.entity(named: entity) == nil, schema.entity(named: destination) != nil else { continue }
            let present = try !connection.run(
                """
                SELECT 1 FROM information_schema.columns \
                WHERE table_schema = $1 AND table_name = $2 AND column_name = $3
                """, [.text(location.schema), .text(entity), .text(property)]
            ).rows.isEmpty
            guard present else { continue }
            foreign[destination, default: []].append(ForeignLink(entity: entity, property: property, rule: rule))
        }
        return foreign
    }

    /// The IDs of the migrations the store records as applied.
    private func appliedMigrations() throws -> Set<String> {
        Set(try writer.run("SELECT id FROM \(Self.migrationsTable)", []).rows.map { try $0.decode(String.self) })
    }

    /// Throws ``PersistenceError/Code/newerStore`` when the store records migrations the
    /// schema does not declare: a newer program wrote it.
    private func refuseUnknown(_ applied: Set<String>) throws {
        let unknown = applied.subtracting(schema.migrations.map(\.id)).sorted()
        guard !unknown.isEmpty else { return }
        throw PersistenceError(
            .newerStore,
            "Could not open the store \(url.absoluteString): it was written by a newer version of this program "
                + "(it has applied the migration\(unknown.count == 1 ? "" : "s") "
                + "\(unknown.map { "'\($0)'" }.joined(separator: ", ")), which this version does not know); "
                + "nothing was changed: upgrade to open it")
    }

    /// Runs the pending migrations of `phase` on an existing store (a new one records them
    /// only), each recorded as applied, in the open's transaction.
    private func runMigrations(_ pending: [Migration], _ phase: Migration.Phase, isNew: Bool) throws {
        for migration in pending where migration.phase == phase {
            if !isNew {
                do {
                    try migration.body(PostgreSQLMigrationDatabase(store: self))
                    // Links are checked at commit; the rows this migration wrote are checked
                    // now, so that a dangling link fails this migration by name, and no check
                    // left pending stops a later `ALTER TABLE` of the open ("pending trigger
                    // events"). Later statements are checked at commit again.
                    try writer.run("SET CONSTRAINTS ALL IMMEDIATE", [])
                    try writer.run("SET CONSTRAINTS ALL DEFERRED", [])
                } catch {
                    throw PersistenceError(
                        .migration,
                        "Could not open the store \(url.absoluteString): migration '\(migration.id)' failed: "
                            + "\(PostgreSQLConnection.describe(error)); nothing was changed", cause: error)
                }
            }
            try writer.run(
                "INSERT INTO \(Self.migrationsTable) (id, applied) VALUES ($1, $2)",
                [.text(migration.id), .real(Date().timeIntervalSince1970)])
        }
    }

    /// What a read-only open requires, since it can change nothing: a store with every
    /// migration applied, every table and column, and the tallies' triggers of this version.
    private func requireCurrent() throws {
        let schemaExists = try !writer.run(
            "SELECT 1 FROM pg_namespace WHERE nspname = $1", [.text(location.schema)]
        ).rows.isEmpty
        guard try schemaExists && tableExists(Self.sequenceTable) && tableExists(Self.migrationsTable) else {
            throw PersistenceError(.notFound, "There is no store at \(url.absoluteString)")
        }
        let applied = try appliedMigrations()
        try refuseUnknown(applied)
        let stale = PersistenceError(
            .migration,
            "Could not open the store \(url.absoluteString): the store needs migrating to this version, which a "
                + "read-only open cannot do; open it once where it can be written")
        guard schema.migrations.allSatisfy({ applied.contains($0.id) }) else { throw stale }
        for entity in schema.entities {
            guard try tableExists(entity.name) else { throw stale }
            let existing = Set(try columns(of: entity.name))
            guard entity.storedProperties.allSatisfy({ existing.contains($0.name) }) else { throw stale }
        }
        guard try talliesAreCurrent(writer) else {
            throw PersistenceError(
                .migration,
                "Could not open the store \(url.absoluteString): the store's counts need making for this version, "
                    + "which a read-only open cannot do; open it once where it can be written")
        }
        guard try searchIndexesAreCurrent(writer) else {
            throw PersistenceError(
                .migration,
                "Could not open the store \(url.absoluteString): the store's search index needs making for this "
                    + "version, which a read-only open cannot do; open it once where it can be written")
        }
    }

    /// Refuses a change to a store opened read-only, before anything runs.
    func requireWritable() throws {
        guard isReadOnly else { return }
        throw PersistenceError(
            .readOnly, "The store \(url.absoluteString) was opened read-only: it cannot be changed")
    }

    fileprivate func tableExists(_ table: String) throws -> Bool {
        try !writer.run(
            "SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2", [.text(location.schema), .text(table)]
        ).rows.isEmpty
    }

    fileprivate func columns(of table: String) throws -> [String] {
        try writer.run(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
            [.text(location.schema), .text(table)]
        ).rows.map { try $0.decode(String.self) }
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

    // MARK: - IDs

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

    // MARK: - Reading

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
    fileprivate func count(_ connection: PostgreSQLConnection, _ fetch: StoreFetch, locking: RowLock? = nil) throws
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

    func refuseDeletion(entity: EntityDescription, ids: [Int64]) throws {
        try mapErrors(nil) {
            try DeleteRules(
                schema: schema, statements: PostgreSQLStatements(store: self, connection: reader),
                effects: SaveEffects(commitsToStore: false)
            ).refuseDeletion(entity, ids)
        }
    }

    fileprivate func rows(_ connection: PostgreSQLConnection, _ entity: EntityDescription, ids: [Int64]) throws
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

    // MARK: - Writing

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

    /// `body` between `BEGIN` and `COMMIT` on `connection`, rolled back if it throws.
    func transaction<T>(_ connection: PostgreSQLConnection, _ body: () throws -> T) throws -> T {
        try connection.begin()
        let result: T
        do {
            result = try body()
        } catch {
            connection.rollback()
            throw error
        }
        try connection.commit()
        return result
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

    /// The objects' updates: each run of updates of one entity that change the same columns
    /// in one statement (chunked under the server's limit of bound values); returns the new
    /// versions of the rows written.
    fileprivate func updateObjects(_ updates: [StoreChanges.Update]) throws -> [ManagedObjectID: Int64] {
        var versions: [ManagedObjectID: Int64] = [:]
        for run in Self.runs(updates, by: { [$0.entity.name] + $0.slots.map(String.init) }) {
            let statements = sql[run[run.startIndex].entity]
            let chunk = max(1, 60_000 / (run[run.startIndex].slots.count + 2))  // the server's limit: 65,535
            for start in stride(from: run.startIndex, to: run.endIndex, by: chunk) {
                let part = run[start..<min(start + chunk, run.endIndex)]
                let written = try batched(
                    part, all: { try updateMany(statements, $0) },
                    one: { update in try updateOne(statements, update).map { [update.id: $0] } ?? [:] })
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
    private func batched<Row>(
        _ rows: ArraySlice<Row>, all: (ArraySlice<Row>) throws -> [Int64: Int64],
        one: (Row) throws -> [Int64: Int64]
    ) throws -> [Int64: Int64] {
        guard rows.count > 1 else { return try rows.first.map(one) ?? [:] }
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
        let slots = updates[updates.startIndex].slots
        let properties = statements.entity.storedProperties
        var arguments: [StoreValue] = []
        var tuples: [String] = []
        for update in updates {
            arguments.append(.integer(update.id))
            var marks = ["$\(arguments.count)::BIGINT"]
            arguments.append(update.expectedVersion.map(StoreValue.integer) ?? .null)
            marks.append("$\(arguments.count)::BIGINT")
            for (value, slot) in zip(update.values, slots) {
                arguments.append(value)
                marks.append("$\(arguments.count)::\(Self.castType(properties[slot]))")
            }
            tuples.append("(" + marks.joined(separator: ", ") + ")")
        }
        let table = statements.table
        let names = (["\"id\"", "\"_expected\""] + slots.map { "\"_c\($0)\"" }).joined(separator: ", ")
        var assignments = slots.map { "\(statements.columns[$0]) = \"_v\".\"_c\($0)\"" }
        assignments.append("\"_version\" = \(table).\"_version\" + 1")
        let query = """
            UPDATE \(table) SET \(assignments.joined(separator: ", ")) \
            FROM (VALUES \(tuples.joined(separator: ", "))) AS "_v"(\(names)) \
            WHERE \(table)."id" = "_v"."id" \
            AND ("_v"."_expected" IS NULL OR \(table)."_version" = "_v"."_expected") \
            RETURNING \(table)."id", \(table)."_version"
            """
        return Dictionary(
            uniqueKeysWithValues: try writer.run(query, arguments).rows.map { try $0.decode((Int64, Int64).self) })
    }

    /// The type a bound value of `property` is cast to in a `VALUES` list.
    static func castType(_ property: PropertyDescription) -> String {
        switch property.kind {
        case .attribute(.text), .attribute(.uuid): "TEXT"
        case .attribute(let attribute): columnType(attribute)
        default: "BIGINT"
        }
    }

    /// The rows of an insertion, one batch at a time, each followed by the rows its hooks
    /// planned.
    /// Claims rows in one transaction on the writer: `SELECT … FOR UPDATE SKIP LOCKED` (rows
    /// another transaction holds locked — another claim's, a save's — are passed over;
    /// under `READ COMMITTED` a row changed by a transaction that committed meanwhile is
    /// checked again against the predicate, and left if it no longer matches), then one
    /// `UPDATE … FROM (VALUES …)` for the rows that change the same slots, with `_version` + 1.
    /// Fenced and counted as a save is.
    func claimRows(_ fetch: StoreFetch, update: ([StoreRow]) -> [RowUpdate]) throws -> [StoreRow] {
        try requireWritable()
        try refuseIfSessionLost()
        let statements = sql[fetch.entity]
        var (query, arguments) = select(statements.selectList, fetch)
        query += " FOR UPDATE SKIP LOCKED"
        do {
            return try writer.withLock {
                try transaction(writer) {
                    try fenceSave(countingCommit: true)  // counted even if it claims nothing: rare
                    // A claim takes the first few of many candidates: walked along an index in
                    // the fetch's order, it stops at the limit. A planner without statistics (a
                    // table just filled: autovacuum analyzes it only after its nap) reads every
                    // candidate instead, with a bitmap, and sorts them all: each claim then costs
                    // as much as the queue is long. This transaction alone (`is_local`) turns
                    // sorting and bitmap scans off, so the claim walks the index that gives its
                    // order: the primary key's, or a partial index of the candidates' row IDs
                    // (``CompositeIndex/init(rowIDsWhere:is:)``).
                    try writer.run(
                        "SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)",
                        [])
                    let rows = try statements.decode(try writer.run(query, arguments).rows)
                    guard !rows.isEmpty else { return [] }
                    let updates = update(rows)
                    var versions: [Int64: Int64] = [:]
                    var groups: [[Int]: [Int]] = [:]  // the rows' indexes, by the slots they change
                    for (i, change) in updates.enumerated() { groups[change.slots, default: []].append(i) }
                    for (slots, indexes) in groups.sorted(by: { $0.value[0] < $1.value[0] }) {
                        let chunk = max(1, 60_000 / (slots.count + 1))  // the server's limit: 65,535 arguments
                        for start in stride(from: 0, to: indexes.count, by: chunk) {
                            let part = indexes[start..<min(start + chunk, indexes.count)]
                            for (id, version) in try updateClaimed(
                                statements, slots: slots, rows: part.map { (rows[$0].id, updates[$0].values) })
                            {
                                versions[id] = version
                            }
                        }
                    }
                    try injectedFault.run()
                    return zip(rows, updates).map { row, change in
                        change.applied(to: row, version: versions[row.id] ?? row.version + 1)
                    }
                }
            }
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw mapped(error, nil)
        }
    }

    /// One `UPDATE` of claimed rows that change the same slots; returns each row's new version.
    private func updateClaimed(
        _ statements: EntitySQL, slots: [Int], rows: [(id: Int64, values: [StoreValue])]
    ) throws -> [(Int64, Int64)] {
        let properties = statements.entity.storedProperties
        var arguments: [StoreValue] = []
        var tuples: [String] = []
        for row in rows {
            arguments.append(.integer(row.id))
            var marks = ["$\(arguments.count)::BIGINT"]
            for (value, slot) in zip(row.values, slots) {
                arguments.append(value)
                marks.append("$\(arguments.count)::\(Self.castType(properties[slot]))")
            }
            tuples.append("(" + marks.joined(separator: ", ") + ")")
        }
        let table = statements.table
        let names = (["\"id\""] + slots.map { "\"_c\($0)\"" }).joined(separator: ", ")
        var assignments = slots.map { "\(statements.columns[$0]) = \"_v\".\"_c\($0)\"" }
        assignments.append("\"_version\" = \(table).\"_version\" + 1")
        let query = """
            UPDATE \(table) SET \(assignments.joined(separator: ", ")) \
            FROM (VALUES \(tuples.joined(separator: ", "))) AS "_v"(\(names)) \
            WHERE \(table)."id" = "_v"."id" RETURNING \(table)."id", \(table)."_version"
            """
        return try mapErrors(nil) {
            try writer.run(query, arguments).rows.map { try $0.decode((Int64, Int64).self) }
        }
    }

    func failNextCommit(with error: any Error & Sendable) {
        injectedFault.set { throw error }
    }

    // MARK: - Not yet on PostgreSQL

    /// What the check means on PostgreSQL, whose server keeps its own pages sound: that the
    /// store is the one this version makes — no migration it does not know (a newer
    /// version's), none pending, every table and column, every link enforced by the server,
    /// every entity's next ID above its rows', and the tallies' triggers current (their
    /// counts: ``recountTallies(fix:)``). One finding a line; empty when sound.
    func checkIntegrity() throws -> [String] {
        try mapErrors(nil) {
            try writer.withLock {
                try transaction(writer) { try integrityFindings() }
            }
        }
    }

    private func integrityFindings() throws -> [String] {
        var findings: [String] = []
        let applied = try appliedMigrations()
        for id in applied.subtracting(schema.migrations.map(\.id)).sorted() {
            findings.append(
                "the store has applied the migration '\(id)', which this version does not know (a newer version wrote it)"
            )
        }
        for migration in schema.migrations where !applied.contains(migration.id) {
            findings.append("the migration '\(migration.id)' has not been applied")
        }
        for entity in schema.entities {
            guard try tableExists(entity.name) else {
                findings.append("the table \(quote(entity.name)) is missing")
                continue
            }
            let existing = Set(try columns(of: entity.name))
            for property in entity.storedProperties where !existing.contains(property.name) {
                findings.append("the column \(entity.name).\(property.name) is missing")
            }
            let rows = try writer.run(
                """
                SELECT (SELECT next FROM \(Self.sequenceTable) WHERE entity = $1), \
                (SELECT COALESCE(MAX("id"), 0) FROM \(sql[entity].table))
                """, [.text(entity.name)]
            ).rows
            if let row = rows.first {
                let (next, highest) = try row.decode((Int64?, Int64).self)
                if let next, next <= highest {
                    findings.append(
                        "the next ID of \(entity.name) (\(next)) is not above its highest row's (\(highest)): IDs would "
                            + "be handed out twice")
                } else if next == nil {
                    findings.append("\(entity.name) has no row in \(Self.sequenceTable)")
                }
            }
            for property in entity.storedProperties {
                guard case .toOne = property.kind else { continue }
                let validated = try writer.run(
                    """
                    SELECT c.convalidated FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
                    WHERE c.conname = $1 AND n.nspname = $2
                    """, [.text("\(entity.name)_\(property.name)_link"), .text(location.schema)]
                ).rows.first.map { try $0.decode(Bool.self) }
                if validated != true {
                    findings.append("the link \(entity.name).\(property.name) is not enforced by the server")
                }
            }
        }
        if try !talliesAreCurrent(writer) {
            findings.append("the tallies' triggers are not those this version declares")
        }
        if try !searchIndexesAreCurrent(writer) {
            findings.append("the search index is not the one this version declares")
        }
        if try !tableExists(Self.sessionsTable) {
            findings.append("the table \(quote(Self.sessionsTable)) is missing")
        }
        let sequence = "\(quote(location.schema)).\(quote(Self.sessionSequence))"
        if try writer.run("SELECT to_regclass($1) IS NULL", [.text(sequence)]).rows.first?.decode(Bool.self) != false {
            findings.append("the sequence \(quote(Self.sessionSequence)) is missing")
        }
        return findings
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

    /// The row that holds the commits of stores that have closed (see ``close()``).
    static let retiredWriter = "retired"

    /// Closes both connections. First, this store's row of commits is folded into the
    /// retired row, in one transaction: the sum every other store reads stays the same, and
    /// the table holds a row per open store rather than one for every store that ever
    /// committed. A store that cannot (the server gone) leaves its row: one more row in the
    /// sum, nothing else. Closing again (the container, then `deinit`) does nothing.
    func close() {
        stopAnnouncements()
        currentSession?.end()
        if !isReadOnly && !writer.isClosed {
            _ = try? writer.withLock {
                try transaction(writer) {
                    try writer.run(
                        """
                        WITH mine AS (DELETE FROM \(Self.commitsTable) WHERE writer = $1 RETURNING commits) \
                        INSERT INTO \(Self.commitsTable) (writer, commits) SELECT $2, commits FROM mine \
                        ON CONFLICT (writer) DO UPDATE SET commits = \(Self.commitsTable).commits + EXCLUDED.commits
                        """, [.text(writerID), .text(Self.retiredWriter)])
                }
            }
        }
        writer.close()
        reader.close()
    }

    // MARK: - Errors

    /// Turns driver errors into ``PersistenceError``s naming the object.
    func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch let error as PSQLError {
            throw mapped(error, id)
        }
    }

    func mapped(_ error: any Error, _ id: ManagedObjectID?) -> PersistenceError {
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
final class FaultSlot: @unchecked Sendable {
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

/// The database a ``Migration`` receives on PostgreSQL: the writer, inside the open's
/// transaction.
struct PostgreSQLMigrationDatabase: MigrationDatabase {
    let store: PostgreSQLStore

    var dialect: SQLDialect { .postgresql }

    func execute(_ sql: String) throws { try store.writer.run(sql, []) }

    func tableExists(_ name: String) throws -> Bool { try store.tableExists(name) }

    func columns(of table: String) throws -> [String] { try store.columns(of: table) }

    func integer(_ sql: String) throws -> Int64? {
        guard let row = try store.writer.run(sql, []).rows.first, let cell = row.first(where: { _ in true }) else {
            return nil
        }
        return try cell.decode(Int64?.self)
    }
}
