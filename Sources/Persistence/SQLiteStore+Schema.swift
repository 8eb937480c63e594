import Foundation
import GRDB
import Locking

/// The store's schema: migrations, the tables, columns and indexes the entities declare,
/// and the links other programs' entities recorded.
extension SQLiteStore {
    /// Throws ``PersistenceError/Code/newerStore`` when the store records migrations that
    /// `schema` does not declare: a newer program wrote it, and this one would not know its
    /// schema. Called before anything is written.
    static func refuseUnknown(_ applied: Set<String>, schema: Schema) throws {
        let unknown = applied.subtracting(schema.migrations.map(\.id)).sorted()
        guard !unknown.isEmpty else { return }
        throw PersistenceError(
            .newerStore,
            "it was written by a newer version of this program (it has applied the migration"
                + "\(unknown.count == 1 ? "" : "s") \(unknown.map { "'\($0)'" }.joined(separator: ", ")), which this "
                + "version does not know); nothing was changed: upgrade to open it")
    }

    /// The store's own tables: the migrations applied, and the next ID of each entity.
    static let bookkeepingTables = """
        CREATE TABLE IF NOT EXISTS _persistence_migrations (id TEXT PRIMARY KEY NOT NULL, applied REAL NOT NULL);
        CREATE TABLE IF NOT EXISTS _persistence_sequence (entity TEXT PRIMARY KEY NOT NULL, next INTEGER NOT NULL);
        """

    /// Records the migration `id` as applied.
    static func recordMigration(_ db: Database, _ id: String) throws {
        try db.execute(
            sql: "INSERT INTO _persistence_migrations (id, applied) VALUES (?, ?)",
            arguments: [id, Date().timeIntervalSince1970])
    }

    static func migrate(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws {
        let isNew = try !db.tableExists("_persistence_sequence")
        if try db.tableExists("_persistence_migrations") {
            try refuseUnknown(
                Set(try String.fetchAll(db, sql: "SELECT id FROM _persistence_migrations")), schema: schema)
        }
        try db.execute(sql: bookkeepingTables)
        let applied = Set(try String.fetchAll(db, sql: "SELECT id FROM _persistence_migrations"))
        func run(_ phase: Migration.Phase) throws -> Bool {
            var ran = false
            for migration in schema.migrations where migration.phase == phase && !applied.contains(migration.id) {
                if !isNew {
                    ran = true
                    do {
                        try migration.body(GRDBMigrationDatabase(db: db))
                    } catch {
                        throw PersistenceError(
                            .migration, "Migration '\(migration.id)' failed: \(describe(error))", cause: error)
                    }
                }
                try recordMigration(db, migration.id)
            }
            return ran
        }
        _ = try run(.beforeSchema)
        try extendSchema(db, schema: schema, sql: sql)
        guard try run(.afterSchema) else { return }
        // Rows a migration inserted took their IDs from SQLite: the next ones come after them.
        for entity in schema.entities {
            try db.execute(
                sql: """
                    UPDATE _persistence_sequence SET next = max(next, (SELECT IFNULL(MAX(id), 0) + 1 FROM \(
                        sql[entity].table)))
                    WHERE entity = ?;
                    """, arguments: [entity.name])
        }
    }

    /// Whether the store holds everything an open's migration, links, tallies and search
    /// indexes would make, as they would make it (``SchemaObjects`` and one statement of
    /// its bookkeeping rows), so that the open of a current store takes no write lock and
    /// writes nothing. Any difference, or anything missing, is `false`: the slow path then
    /// makes it (or refuses the store), as every open did.
    static func schemaIsCurrent(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws -> Bool {
        let objects = try SchemaObjects(db, columnsOf: schema.entities.map(\.name))
        guard [migrationsTable, sequenceTable, linksTable].allSatisfy(objects.hasTable),
            try talliesAreCurrent(objects, schema: schema, sql: sql),
            try schema.entities.allSatisfy({ try searchIndexIsCurrent($0, table: sql[$0].table, in: objects) })
        else { return false }
        for entity in schema.entities {
            guard let columns = objects.columns[entity.name],
                entity.storedProperties.allSatisfy({ columns.contains($0.name) }),
                try entity.indexNames().allSatisfy({ objects.sql(of: $0, type: "index") != nil })
            else { return false }
        }
        // Each sequence ahead of its table's rows (rows given IDs by another program, or by a
        // migration, are followed by the slow path's repair).
        let behind = schema.entities.map { entity in
            "SELECT 'b', entity, NULL, NULL, NULL FROM \(sequenceTable) WHERE entity = "
                + "\(StoreDialect.sqlite.literal(.text(entity.name))) "
                + "AND next < (SELECT IFNULL(MAX(\"id\"), 0) + 1 FROM \(sql[entity].table))"
        }
        let rows = try Row.fetchAll(
            db,
            sql: ([
                "SELECT 'm', id, NULL, NULL, NULL FROM \(migrationsTable)",
                "SELECT 's', entity, NULL, NULL, NULL FROM \(sequenceTable)",
                "SELECT 'l', entity, property, destination, rule FROM \(linksTable)",
            ] + behind).joined(separator: " UNION ALL "))
        var applied: Set<String> = []
        var sequenced: Set<String> = []
        var links: Set<[String]> = []
        for row in rows {
            let (kind, entity): (String, String) = (row[0], row[1])
            switch kind {
            case "m": applied.insert(entity)
            case "s": sequenced.insert(entity)
            case "l": if schema.entity(named: entity) != nil { links.insert([entity, row[2], row[3], row[4]]) }
            default: return false
            }
        }
        // Every sequenced table there (a store missing one is refused by the slow path).
        guard applied == Set(schema.migrations.map(\.id)), sequenced.allSatisfy(objects.hasTable),
            schema.entities.allSatisfy({ sequenced.contains($0.name) })
        else { return false }
        return links == Set(schema.entities.flatMap(wantedLinks))
    }

    /// Makes the tables, columns and indexes of `schema` that the store lacks.
    private static func extendSchema(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws {
        let dialect = StoreDialect.sqlite
        for entity in schema.entities {
            let table = sql[entity].table
            if try db.tableExists(entity.name) {
                let existing = Set(try db.columns(in: entity.name).map(\.name))
                for property in entity.storedProperties where !existing.contains(property.name) {
                    try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN \(dialect.columnDefinition(property))")
                }
            } else {
                try db.execute(sql: "CREATE TABLE \(table) (\(dialect.tableColumns(entity).joined(separator: ", ")))")
            }
            // A partial index's condition is written with `IS`, as predicates and tallies
            // compile `==`, so that the planner sees a fetch's `column IS ?` (bound to the
            // value) imply it.
            for statement in try dialect.indexStatements(entity, table: table) { try db.execute(sql: statement) }
            try db.execute(
                sql: """
                    INSERT INTO _persistence_sequence (entity, next) VALUES (?, 1) ON CONFLICT (entity) DO NOTHING;
                    UPDATE _persistence_sequence SET next = (SELECT IFNULL(MAX(id), 0) + 1 FROM \(table))
                    WHERE entity = ? AND next < (SELECT IFNULL(MAX(id), 0) + 1 FROM \(table));
                    """, arguments: [entity.name, entity.name])
        }
    }

    /// Records the `onDestinationDelete` rules of the schema in ``linksTable``.
    static func recordLinks(_ db: Database, schema: Schema) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS \(linksTable) (entity TEXT NOT NULL, property TEXT NOT NULL, \
                destination TEXT NOT NULL, rule TEXT NOT NULL, PRIMARY KEY (entity, property));
                """)
        for entity in schema.entities {
            let wanted = wantedLinks(entity).map { Array($0.dropFirst()) }
            // Written only when they changed: an open that changes nothing writes nothing, so a
            // reader killed later leaves no frames in the `-wal` (which the next open would
            // take for an unclean shutdown, and check the whole store for).
            let recorded = try Row.fetchAll(
                db, sql: "SELECT property, destination, rule FROM \(linksTable) WHERE entity = ? ORDER BY property",
                arguments: [entity.name]
            ).map { row -> [String] in [row[0], row[1], row[2]] }
            guard recorded != wanted.sorted(by: { $0[0] < $1[0] }) else { continue }
            try db.execute(sql: "DELETE FROM \(linksTable) WHERE entity = ?", arguments: [entity.name])
            for link in wanted {
                try db.execute(
                    sql: "INSERT INTO \(linksTable) (entity, property, destination, rule) VALUES (?, ?, ?, ?)",
                    arguments: [entity.name, link[0], link[1], link[2]])
            }
        }
    }

    /// The rows of ``linksTable`` that `entity`'s links make: its name, the property's, the
    /// destination's and the rule.
    private static func wantedLinks(_ entity: EntityDescription) -> [[String]] {
        entity.properties.compactMap { property in
            guard case .toOne(let destination) = property.kind, let rule = property.destinationDeleteRule else {
                return nil
            }
            return [entity.name, property.name, destination, rule.rawValue]
        }
    }

    /// The rules of ``linksTable`` recorded by entities `schema` does not have (whose table
    /// is still there), by destination.
    private static func readForeignLinks(_ db: Database, schema: Schema) throws -> [String: [ForeignLink]] {
        // Straight from the database: GRDB's schema cache does not see another connection's
        // new tables.
        let tables = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
        guard tables.contains(linksTable) else { return [:] }
        var foreign: [String: [ForeignLink]] = [:]
        let rows = try Row.fetchAll(db, sql: "SELECT entity, property, destination, rule FROM \(linksTable)")
        for row in rows {
            let (entity, property, destination): (String, String, String) = (row[0], row[1], row[2])
            guard schema.entity(named: entity) == nil, schema.entity(named: destination) != nil,
                tables.contains(entity),
                try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [entity])
                    .contains(property)
            else { continue }
            foreign[destination, default: []].append(ForeignLink(entity: entity, property: property, rule: row[3]))
        }
        return foreign
    }

    /// The foreign links (``ForeignLink``) of the store, read again when its schema changed.
    func currentForeignLinks(_ db: Database) throws -> [String: [ForeignLink]] {
        let version = try Int64.fetchOne(db, sql: "PRAGMA schema_version") ?? 0
        if let known = foreignLinks.withLock({ $0.schemaVersion == version ? $0.links : nil }) { return known }
        let links = try Self.readForeignLinks(db, schema: schema)
        foreignLinks.withLock { $0 = (version, links) }
        return links
    }
}

private struct GRDBMigrationDatabase: MigrationDatabase {
    let db: Database
    var dialect: SQLDialect { .sqlite }
    func execute(_ sql: String) throws { try db.execute(sql: sql) }
    func tableExists(_ name: String) throws -> Bool { try db.tableExists(name) }
    func columns(of table: String) throws -> [String] { try db.columns(in: table).map(\.name) }
    func integer(_ sql: String) throws -> Int64? { try Int64.fetchOne(db, sql: sql) }
}

/// The objects of a store's schema as `sqlite_master` lists them, and the columns of each
/// table: read with one statement, for the decisions of an open (what is current, what to
/// make again).
struct SchemaObjects {
    /// Each object's type (`table`, `index`, `trigger`) and SQL, by name.
    private var objects: [String: (type: String, sql: String?)] = [:]
    /// Each table's columns, by its name.
    private(set) var columns: [String: Set<String>] = [:]

    /// Reads the objects, and the columns of `tables` (the entities' tables: not an FTS5
    /// table, which would be connected to for its columns).
    init(_ db: Database, columnsOf tables: [String] = []) throws {
        var query = "SELECT type, name, sql FROM sqlite_master"
        if !tables.isEmpty {
            let names = tables.map { StoreDialect.sqlite.literal(.text($0)) }.joined(separator: ", ")
            query +=
                " UNION ALL SELECT 'column', m.name, p.name FROM sqlite_master AS m "
                + "JOIN pragma_table_info(m.name) AS p WHERE m.type = 'table' AND m.name IN (\(names))"
        }
        for row in try Row.fetchAll(db, sql: query) {
            let (type, name): (String, String) = (row[0], row[1])
            if type == "column" {
                columns[name, default: []].insert(row[2])
            } else {
                objects[name] = (type, row[2])
            }
        }
    }

    /// The SQL of the object `name` (of `type`, if given); `nil` when there is none.
    func sql(of name: String, type: String? = nil) -> String? {
        guard let object = objects[name], type == nil || object.type == type else { return nil }
        return object.sql
    }

    func hasTable(_ name: String) -> Bool { objects[name]?.type == "table" }

    /// The names of the triggers of `entity`'s search index: `_persistence_search_<entity>_`
    /// followed by `insert`, `delete`, `update` or `related_<n>` — not those of an entity whose
    /// name extends it (`Card_archive`'s are not `Card`'s).
    func searchTriggers(of entity: String) -> [String] {
        let prefix = "_persistence_search_\(entity)_"
        return objects.compactMap { name, object in
            guard object.type == "trigger", name.hasPrefix(prefix) else { return nil }
            let suffix = name.dropFirst(prefix.count)
            let related = suffix.hasPrefix("related_") && suffix.count > 8
            guard
                ["insert", "delete", "update"].contains(suffix)
                    || related && suffix.dropFirst(8).allSatisfy({ ("0"..."9").contains($0) })
            else { return nil }
            return name
        }
    }
}
