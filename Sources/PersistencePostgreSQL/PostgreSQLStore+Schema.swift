import Foundation
import Persistence
import PostgresNIO

/// The store's schema: the tables, columns, indexes, links and migrations the entities
/// declare, made or checked in the open's transaction, and the check of a store against them.
extension PostgreSQLStore {
    /// Makes the tables, columns, indexes and links the schema declares that the store
    /// lacks, and records the migrations of a new store as applied.
    func createSchema(createsStore: Bool) throws {
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
    /// entity's table, columns, indexes, sequence row, links and tallies' functions. Two
    /// statements, each a round trip: what the server's catalog lists in the store's schema
    /// (relations, columns, constraints, functions), then — once that shows every table there
    /// — what the store's own tables record (migrations, sequences, links, and whether a
    /// sequence is behind its table's rows). Takes no lock an ordinary save conflicts with.
    /// `false` sends the open to ``createSchema(createsStore:)``, which checks again under the
    /// schema lock.
    func schemaIsCurrent() throws -> Bool {
        var relations: [String: String] = [:]
        var columns: [String: Set<String>] = [:]
        var constraints: Set<String> = []
        var functions: [String: String] = [:]
        var options: [String: String] = [:]
        for row in try writer.run(
            """
            SELECT 'r', c.relname::text, c.relkind::text FROM pg_class c \
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 \
            UNION ALL SELECT 'o', c.relname::text, array_to_string(c.reloptions, ',') FROM pg_class c \
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.reloptions IS NOT NULL \
            UNION ALL SELECT 'a', c.relname::text, a.attname::text FROM pg_attribute a \
            JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
            WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped \
            UNION ALL SELECT 'c', c.conname::text, '' FROM pg_constraint c \
            JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 \
            UNION ALL SELECT 'f', p.proname::text, p.prosrc FROM pg_proc p \
            JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
            """, [.text(location.schema)]
        ).rows {
            let (kind, name, detail) = try row.decode((String, String, String).self)
            switch kind {
            case "r": relations[name] = detail
            case "a": columns[name, default: []].insert(detail)
            case "c": constraints.insert(name)
            case "o": options[name] = detail
            default: functions[name] = detail
            }
        }
        let bookkeeping = [
            Self.migrationsTable, Self.sequenceTable, Self.commitsTable, Self.sessionsTable, Self.linksTable,
            Self.talliesTable,
        ]
        guard bookkeeping.allSatisfy({ relations[$0] == "r" }), relations[Self.sessionSequence] == "S",
            // Every table there with its ID, which the second statement reads.
            schema.entities.allSatisfy({ relations[$0.name] == "r" && columns[$0.name]?.contains("id") == true }),
            // The sessions' writers (a reap folds a dead session's count of commits).
            columns[Self.sessionsTable]?.contains("writer") == true
        else { return false }

        var applied: Set<String> = []
        var sequenced: Set<String> = []
        var links: Set<[String]> = []
        var behind = false
        // Each sequence ahead of its table's rows (rows written with their IDs by another
        // program, or copied in, are followed by the slow path's repair).
        let sequencesBehind = schema.entities.map { entity in
            "SELECT 'b', '', '', '', '' FROM \(Self.sequenceTable) WHERE entity = "
                + "\(StoreDialect.postgresql.literal(.text(entity.name))) "
                + "AND next <= (SELECT COALESCE(MAX(\"id\"), 0) FROM \(sql[entity].table))"
        }
        let recorded =
            [
                "SELECT 'm', id, '', '', '' FROM \(Self.migrationsTable)",
                "SELECT 's', entity, '', '', '' FROM \(Self.sequenceTable)",
                "SELECT 'l', entity, property, destination, rule FROM \(Self.linksTable)",
            ] + sequencesBehind
        for row in try writer.run(recorded.joined(separator: " UNION ALL "), []).rows {
            let (kind, a, b, c, d) = try row.decode((String, String, String, String, String).self)
            switch kind {
            case "m": applied.insert(a)
            case "s": sequenced.insert(a)
            case "l": if schema.entity(named: a) != nil { links.insert([a, b, c, d]) }
            default: behind = true
            }
        }
        guard applied == Set(schema.migrations.map(\.id)), !behind else { return false }
        var expectedLinks: Set<[String]> = []
        for entity in schema.entities {
            guard sequenced.contains(entity.name), let existing = columns[entity.name],
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
            for function in Self.functions(entity.name, try entity.resolvedTallies(), schema: location.schema)
            where functions[function.name] != function.body {
                return false
            }
            // The search index's functions: one written by another version is made again.
            if let index = try entity.resolvedSearchIndex() {
                guard relations[Self.searchTableName(entity.name)] == "r",
                    options[Self.searchDocIndexName(entity.name)] == Self.searchIndexStorage
                else { return false }
                for (_, function) in searchFunctions(index) where functions[function.name] != function.body {
                    return false
                }
            }
        }
        return links == expectedLinks
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
    func foreignLinks(_ connection: PostgreSQLConnection) throws -> [String: [ForeignLink]] {
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
    func requireCurrent() throws {
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
