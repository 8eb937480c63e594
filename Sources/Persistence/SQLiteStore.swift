import CSQLiteConfig
import Foundation
import GRDB
import GRDBSQLite
import Locking
import Logging

/// The SQLite store: GRDB's `DatabasePool` in WAL mode with
/// `synchronous=FULL` (a committed deletion survives power loss) and a busy
/// timeout, so that several processes can write one store in turn. A
/// read-only store is one read-only connection; on a read-only or full file system
/// whose store has no `-wal` file to read it reads the file as immutable.
final class SQLiteStore: PersistentStore {
    let url: URL
    let isReadOnly: Bool
    let pool: any DatabaseWriter
    let sql: EntityMap<EntitySQL>
    let schema: Schema
    /// Where the store logs what no caller is told of (a watch of its `-wal` that failed).
    let logger: Logger
    private let injectedFault = Locked<(@Sendable () throws -> Void)?>(nil)
    /// The to-one relationships with an `onDestinationDelete` rule of entities this store
    /// holds but whose schema does not have, by destination: their rules cannot be applied.
    /// Read again when the database's schema changes (another process may open the store
    /// with such an entity for the first time while this one has it open).
    private let foreignLinks = Locked<(schemaVersion: Int64, links: [String: [ForeignLink]])>((-1, [:]))

    /// Where the store records the to-one relationships that have an `onDestinationDelete`
    /// rule, so that an open without their entity knows of them.
    static let linksTable = "_persistence_links"

    /// Whether ``close()`` ran: the store no longer counts as open in this process.
    private let closed = Locked(false)
    /// Whether ``close()`` was called.
    var isClosed: Bool { closed.withLock { $0 } }
    /// Where announcements go, and the watch that hears other connections' commits
    /// (SQLiteAnnouncements.swift).
    let announcer = Locked(SQLiteAnnouncer())

    /// How many stores of this process have each file open (by path): a `-wal` one of them
    /// keeps is no sign of an unclean shutdown.
    private static let openInProcess = Locked<[String: Int]>([:])

    /// The table every store with a schema has: its absence means the
    /// database was never given one, or lost it.
    static let sequenceTable = "_persistence_sequence"

    init(
        url: URL, schema: Schema, busyTimeout: TimeInterval, checksIntegrity: Bool, mode: StoreOpenMode = .init(),
        logger: Logger
    ) throws(StoreOpenFailure) {
        self.url = url
        self.logger = logger
        isReadOnly = mode.readOnly
        let exists = FileManager.default.fileExists(atPath: url.path)
        if !exists && (!mode.createsSchema || mode.readOnly) { throw .missing }
        if exists {
            // Checked before the pool switches the file to WAL, which rewrites
            // its header: a store that ends in quarantine is left untouched.
            try Self.check(
                url, busyTimeout: busyTimeout,
                fullCheck: checksIntegrity ? .always : Self.leftByUncleanShutdown(url) ? .always : .ifSmall,
                needsSchema: !mode.createsSchema, schema: schema)
        }
        sql = EntityMap(schema) { EntitySQL($0, dialect: .sqlite) }
        self.schema = schema
        if mode.readOnly {
            pool = try Self.openReadOnly(url, busyTimeout: busyTimeout)
            let sql = sql
            do {
                try pool.read { db in
                    try Self.requireCurrent(db, schema: schema)
                    guard try Self.talliesAreCurrent(db, schema: schema, sql: sql) else {
                        throw PersistenceError(
                            .migration,
                            "the store's counts need making for this version, which a read-only open cannot do; "
                                + "open it once where it can be written")
                    }
                    guard try Self.searchIndexesAreCurrent(db, schema: schema, sql: sql) else {
                        throw PersistenceError(
                            .migration,
                            "the store's search index needs making for this version, which a read-only open cannot "
                                + "do; open it once where it can be written")
                    }
                }
            } catch {
                try? pool.close()
                throw Self.classify(error, url: url, damaged: StoreOpenFailure.unavailable)
            }
            Self.openInProcess.withLock { $0[url.path, default: 0] += 1 }
            return
        }
        var config = Configuration()
        config.busyMode = .timeout(busyTimeout)
        config.label = "Persistence"
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // The writer's statement journals (every insert that fires a tally's triggers has
            // one) stay in memory: past 64 KiB they spilled to a temporary file, about nine
            // writes a row of an add.
            // Its page cache holds 16 MiB (SQLite's default: 2 MiB): a large save's random
            // inserts into an index (a digest, a name) otherwise spill pages to the `-wal` and
            // read them back before the commit.
            if !db.configuration.readonly {
                try db.execute(sql: "PRAGMA temp_store = MEMORY")
                try db.execute(sql: "PRAGMA cache_size = -16384")
                // Deleted rows are still overwritten with zeros within their pages, but pages a
                // deletion frees are no longer written out zeroed as well (Debian's SQLite
                // defaults to `secure_delete = ON`): a deletion of 10,000 rows wrote 11% fewer
                // pages to the `-wal`, and 16% fewer at the checkpoint.
                try db.execute(sql: "PRAGMA secure_delete = FAST")
            }
        }
        do {
            pool = try DatabasePool(path: url.path, configuration: config)
        } catch {
            throw Self.classify(error, url: url, damaged: StoreOpenFailure.unreadable)
        }
        let sql = sql
        do {
            try pool.write { db in
                if !mode.createsSchema { try Self.requireSchema(db) }
                try Self.migrate(db, schema: schema, sql: sql)
                try Self.recordLinks(db, schema: schema)
                try Self.installTallies(db, schema: schema, sql: sql)
                try Self.installSearchIndexes(db, schema: schema, sql: sql)
            }
            // Opening the pool wrote to an empty `-wal` (GRDB makes sure of one): copied into
            // the file now, so that this process, killed before it commits anything, leaves
            // no commit in the `-wal` that the next open would take for a crash. Never waits.
            try? pool.writeWithoutTransaction { db in
                sqlite3_busy_timeout(db.sqliteConnection, 0)
                defer { sqlite3_busy_timeout(db.sqliteConnection, Int32(busyTimeout * 1000)) }
                _ = try db.checkpoint(.passive)
            }
        } catch let missing as SchemaMissing {
            try? pool.close()
            throw .unreadable(missing.reason, cause: missing)
        } catch let newer as PersistenceError where newer.code == .newerStore {
            try? pool.close()
            throw .unavailable(newer.message, cause: newer)
        } catch {
            try? pool.close()
            throw Self.classify(error, url: url, damaged: StoreOpenFailure.migration)
        }
        Self.openInProcess.withLock { $0[url.path, default: 0] += 1 }
    }

    /// A database with no schema, or with tables gone, where a schema was expected.
    private struct SchemaMissing: Error {
        var reason = "it holds no schema (the file is empty, or its tables are gone)"
    }

    /// Throws ``SchemaMissing`` unless `db` has a schema and every table it ever made for an
    /// entity (each has a row in the sequence table) is still there.
    private static func requireSchema(_ db: Database) throws {
        guard try db.tableExists(sequenceTable) else { throw SchemaMissing() }
        for entity in try String.fetchAll(db, sql: "SELECT entity FROM \(sequenceTable) ORDER BY entity")
        where try !db.tableExists(entity) {
            throw SchemaMissing(reason: "its table \(quote(entity)) is gone")
        }
    }

    /// When an open runs `PRAGMA quick_check` over the whole store.
    private enum FullCheck {
        case always
        /// Only on a store of at most ``PersistentContainer/Options/smallStoreCheckLimit``
        /// bytes: the cost of an open is bounded, whatever the store's size.
        case ifSmall
    }

    /// Reads the file without writing to it: that it is a database whose header and schema
    /// SQLite can read (work that does not grow with the rows), that it passes
    /// `PRAGMA quick_check` as `fullCheck` says, and that it holds a schema when
    /// `needsSchema`, and that no newer program wrote it (its migrations are all in `schema`).
    private static func check(
        _ url: URL, busyTimeout: TimeInterval, fullCheck: FullCheck, needsSchema: Bool, schema: Schema
    ) throws(StoreOpenFailure) {
        do {
            var checkConfig = Configuration()
            checkConfig.busyMode = .timeout(busyTimeout)
            checkConfig.readonly = true
            let queue: DatabaseQueue
            do {
                queue = try DatabaseQueue(path: url.path, configuration: checkConfig)
            } catch let error as DatabaseError where Self.mayReadImmutable(after: error, url) {
                // A read-only or full file system, with no -wal to read beside the file.
                guard let immutable = try immutableQueue(url, configuration: checkConfig) else { throw error }
                queue = immutable
            }
            defer { try? queue.close() }
            try queue.read { db in
                // The header (page 1) and the whole schema are read here: a file that is
                // not a database, or whose header or schema is damaged, fails.
                _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master")
                if needsSchema { try requireSchema(db) }
                // Before the pool opens the file, which writes to it (GRDB makes sure of its WAL).
                if try db.tableExists("_persistence_migrations") {
                    try refuseUnknown(
                        Set(try String.fetchAll(db, sql: "SELECT id FROM _persistence_migrations")), schema: schema)
                }
                if fullCheck == .ifSmall {
                    let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                    let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0
                    guard pages * pageSize <= PersistentContainer.Options.smallStoreCheckLimit else { return }
                }
                let result = try String.fetchAll(db, sql: "PRAGMA quick_check")
                if result != ["ok"] {
                    let findings = result.flatMap { $0.split(separator: "\n") }.filter { !$0.hasPrefix("***") }
                    let detail = findings.first.map(String.init) ?? "unknown damage"
                    throw PersistenceError(.storeUnreadable, "quick_check failed: \(detail)")
                }
            }
        } catch let missing as SchemaMissing {
            throw .unreadable(missing.reason, cause: missing)
        } catch let newer as PersistenceError where newer.code == .newerStore {
            throw .unavailable(newer.message, cause: newer)
        } catch {
            throw classify(error, url: url, damaged: StoreOpenFailure.unreadable)
        }
    }

    /// Whether the store was left by an unclean shutdown: its `-wal` holds commits that are
    /// not in the file yet (a clean close of the last connection checkpoints it and empties
    /// it; an open checkpoints what it wrote itself, so a reader killed later leaves none),
    /// and no connection, of this process or another, has the store open now. SQLite's
    /// unix VFS has every connection hold a read lock on byte 128 of the `-shm` (its "dead
    /// man switch") for as long as it is open; `F_GETLK` sees other processes' locks, and
    /// this process's stores are counted in ``openInProcess``. Then the `-shm`'s index says
    /// how many frames the `-wal` holds and how many are in the file
    /// (``walHoldsUncheckpointedCommits(_:shm:)``). A few small reads: no work that grows
    /// with the store.
    private static func leftByUncleanShutdown(_ url: URL) -> Bool {
        var info = stat()
        guard stat(url.path + "-wal", &info) == 0, info.st_size > 0 else { return false }
        guard openInProcess.withLock({ $0[url.path, default: 0] == 0 }) else { return false }
        let fd = open(url.path + "-shm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return true }  // no -shm: no connection has the store open
        defer { _ = Glibc.close(fd) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 128
        lock.l_len = 1
        guard fcntl(fd, F_GETLK, &lock) == 0 else { return false }
        guard lock.l_type == Int16(F_UNLCK) else { return false }
        return walHoldsUncheckpointedCommits(url.path + "-wal", shm: fd)
    }

    /// Whether the `-wal` at `wal` holds frames that are not in the database file, as the
    /// `-shm` (open as `shm`) left by its last connection says: its WAL-index header (the
    /// first of its two copies; native byte order) counts the frames (`mxFrame`, at byte 16)
    /// and its checkpoint record those copied into the file (`nBackfill`, at byte 96). A
    /// commit whose frames reached the `-wal` but not the index would follow the last
    /// indexed frame with the `-wal`'s salt (big-endian, at byte 16 of the `-wal` header and
    /// byte 8 of a frame header). Anything unreadable or inconsistent counts as holding some.
    private static func walHoldsUncheckpointedCommits(_ wal: String, shm: Int32) -> Bool {
        var index = [UInt8](repeating: 0, count: 136)
        guard index.withUnsafeMutableBytes({ pread(shm, $0.baseAddress, 136, 0) }) == 136,
            index[12] == 1, index[0..<48] == index[48..<96]
        else { return true }
        func native(_ offset: Int) -> UInt32 {
            index.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) }
        }
        let (frames, backfilled) = (native(16), native(96))
        guard frames == backfilled else { return true }
        let fd = open(wal, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return true }
        defer { _ = Glibc.close(fd) }
        var header = [UInt8](repeating: 0, count: 32)
        guard header.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 32, 0) }) == 32 else {
            return frames != 0  // no header: no commit, unless the index counts some
        }
        func bigEndian(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
            bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
        }
        let pageSize = Int(bigEndian(header, 8))
        var next = [UInt8](repeating: 0, count: 24)
        let offset = off_t(32 + Int(frames) * (24 + pageSize))
        guard next.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 24, offset) }) == 24 else { return false }
        return bigEndian(next, 8) == bigEndian(header, 16) && bigEndian(next, 12) == bigEndian(header, 20)
    }

    /// One read-only connection; where the file system refuses the `-shm`
    /// a WAL reader needs (read-only, or full) and there is no `-wal` to read, the file
    /// opened as immutable (nothing else can write it).
    private static func openReadOnly(_ url: URL, busyTimeout: TimeInterval) throws(StoreOpenFailure) -> DatabaseQueue {
        var config = Configuration()
        config.readonly = true
        config.busyMode = .timeout(busyTimeout)
        config.label = "Persistence"
        do {
            do {
                return try DatabaseQueue(path: url.path, configuration: config)
            } catch let error as DatabaseError where Self.mayReadImmutable(after: error, url) {
                guard let immutable = try immutableQueue(url, configuration: config) else { throw error }
                return immutable
            }
        } catch {
            throw classify(error, url: url, damaged: StoreOpenFailure.unreadable)
        }
    }

    /// Whether a read-only open that failed with `error` may read the file as immutable
    /// instead (``immutableQueue(_:configuration:)`` says whether it can): SQLite could not
    /// open the `-shm` a WAL reader needs (a read-only file system), or could not size it (a
    /// full one).
    private static func mayReadImmutable(after error: DatabaseError, _ url: URL) -> Bool {
        error.resultCode == .SQLITE_CANTOPEN
            || (error.resultCode.primaryResultCode == .SQLITE_IOERR && hasNoSpace(url.deletingLastPathComponent()))
    }

    /// `url` opened as immutable, when nothing can be writing it: its folder is on a
    /// read-only file system, or on one with no space left (where no writer can start a
    /// log), and there is no `-wal` holding commits that the file does not have yet. `nil`
    /// otherwise.
    private static func immutableQueue(_ url: URL, configuration: Configuration) throws -> DatabaseQueue? {
        var fs = statvfs()
        let folder = url.deletingLastPathComponent()
        guard statvfs(folder.path, &fs) == 0 else { return nil }
        let readOnly = fs.f_flag & UInt(ST_RDONLY) != 0
        guard readOnly || hasNoSpace(folder) else { return nil }
        var info = stat()
        if stat(url.path + "-wal", &info) == 0, info.st_size > 0 {
            throw PersistenceError(
                .io,
                "The store \(url.path) is on a \(readOnly ? "read-only" : "full") file system and has commits not yet "
                    + "written into it (\(url.lastPathComponent)-wal); open it once where it can be written")
        }
        var components = URLComponents()
        components.scheme = "file"
        components.path = url.path
        components.queryItems = [URLQueryItem(name: "immutable", value: "1")]
        guard let uri = components.string else { return nil }
        return try DatabaseQueue(path: uri, configuration: configuration)
    }

    /// Throws unless the store's schema is the one `schema` describes, with
    /// every migration applied: a read-only open cannot migrate.
    private static func requireCurrent(_ db: Database, schema: Schema) throws {
        let stale = PersistenceError(
            .migration,
            "the store needs migrating to this version, which a read-only open cannot do; "
                + "open it once where it can be written")
        guard try db.tableExists("_persistence_migrations") else { throw stale }
        let applied = Set(try String.fetchAll(db, sql: "SELECT id FROM _persistence_migrations"))
        try refuseUnknown(applied, schema: schema)
        guard schema.migrations.allSatisfy({ applied.contains($0.id) }) else { throw stale }
        for entity in schema.entities {
            guard try db.tableExists(entity.name) else { throw stale }
            let existing = Set(try db.columns(in: entity.name).map(\.name))
            guard entity.storedProperties.allSatisfy({ existing.contains($0.name) }) else { throw stale }
        }
    }

    /// Only a file that is not a database, is corrupt, fails its check or
    /// cannot be migrated is quarantined. A busy or locked store, or one that
    /// cannot be opened or read for reasons outside the file (permissions, a
    /// full disk), fails the open and is left exactly where it is.
    private static func classify(
        _ error: any Error, url: URL, damaged: (String, any Error) -> StoreOpenFailure
    ) -> StoreOpenFailure {
        let transient: [ResultCode] = [
            .SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_CANTOPEN, .SQLITE_IOERR, .SQLITE_READONLY, .SQLITE_PERM,
            .SQLITE_FULL, .SQLITE_NOMEM, .SQLITE_INTERRUPT, .SQLITE_AUTH,
        ]
        if let error = error as? DatabaseError, transient.contains(error.resultCode) {
            return .unavailable(describe(error), cause: error)
        }
        return damaged(describe(error), error)
    }

    private static func describe(_ error: any Error) -> String {
        if let e = error as? DatabaseError { return e.message ?? "\(e.resultCode)" }
        return "\(error)"
    }

    // MARK: - Schema

    /// Throws ``PersistenceError/Code/newerStore`` when the store records migrations that
    /// `schema` does not declare: a newer program wrote it, and this one would not know its
    /// schema. Called before anything is written.
    private static func refuseUnknown(_ applied: Set<String>, schema: Schema) throws {
        let unknown = applied.subtracting(schema.migrations.map(\.id)).sorted()
        guard !unknown.isEmpty else { return }
        throw PersistenceError(
            .newerStore,
            "it was written by a newer version of this program (it has applied the migration"
                + "\(unknown.count == 1 ? "" : "s") \(unknown.map { "'\($0)'" }.joined(separator: ", ")), which this "
                + "version does not know); nothing was changed: upgrade to open it")
    }

    private static func migrate(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws {
        let isNew = try !db.tableExists("_persistence_sequence")
        if try db.tableExists("_persistence_migrations") {
            try refuseUnknown(
                Set(try String.fetchAll(db, sql: "SELECT id FROM _persistence_migrations")), schema: schema)
        }
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS _persistence_migrations (id TEXT PRIMARY KEY NOT NULL, applied REAL NOT NULL);
                CREATE TABLE IF NOT EXISTS _persistence_sequence (entity TEXT PRIMARY KEY NOT NULL, next INTEGER NOT NULL);
                """)
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
                try db.execute(
                    sql: "INSERT INTO _persistence_migrations (id, applied) VALUES (?, ?)",
                    arguments: [migration.id, Date().timeIntervalSince1970])
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
    private static func recordLinks(_ db: Database, schema: Schema) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS \(linksTable) (entity TEXT NOT NULL, property TEXT NOT NULL, \
                destination TEXT NOT NULL, rule TEXT NOT NULL, PRIMARY KEY (entity, property));
                """)
        for entity in schema.entities {
            var wanted: [[String]] = []
            for property in entity.properties {
                guard case .toOne(let destination) = property.kind, let rule = property.destinationDeleteRule else {
                    continue
                }
                wanted.append([property.name, destination, rule.rawValue])
            }
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

    // MARK: - IDs

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

    // MARK: - Reading

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

    fileprivate func count(_ db: Database, _ fetch: StoreFetch) throws -> Int {
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

    fileprivate static func rows(_ db: Database, _ entitySQL: EntitySQL, ids: [Int64]) throws -> [StoreRow] {
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

    // MARK: - Writing

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

    /// Inserts rows with one prepared statement per entity, binding values
    /// directly (the hot path of a large save).
    fileprivate static func insertRows(_ db: Database, _ rows: [StoreChanges.Insert], sql: EntityMap<EntitySQL>) throws
    {
        var statements: [ObjectIdentifier: Statement] = [:]
        for row in rows {
            guard row.id > 0 else {
                let id = ManagedObjectID(entityName: row.entity.name, rowID: row.id)
                throw PersistenceError(
                    .io, "\(id) has no ID: the store could not reserve one when it was inserted", objectIDs: [id])
            }
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
            sqlite3_bind_int64(handle, 1, row.id)
            for (i, value) in row.values.enumerated() { bind(value, to: handle, at: Int32(i + 2)) }
            let code = sqlite3_step(handle)
            sqlite3_reset(handle)
            guard code == SQLITE_DONE else {
                let id = ManagedObjectID(entityName: row.entity.name, rowID: row.id)
                let message = String(cString: sqlite3_errmsg(db.sqliteConnection))
                let what = "Could not save \(id): \(message)"
                let error = DatabaseError(resultCode: ResultCode(rawValue: code), message: message)
                if code & 0xff == SQLITE_CONSTRAINT {
                    throw PersistenceError(.constraint, what, objectIDs: [id], cause: error)
                }
                if isDamage(error.resultCode) {
                    let path = String(cString: sqlite3_db_filename(db.sqliteConnection, "main"))
                    throw PersistenceError(
                        .storeDamaged, "The store \(path) is damaged (\(message)); nothing was changed",
                        objectIDs: [id], cause: error)
                }
                throw PersistenceError(.io, what, objectIDs: [id], cause: error)
            }
        }
        for statement in statements.values { sqlite3_clear_bindings(statement.sqliteStatement) }
    }

    /// Writes the rows of an insertion one batch at a time: only one batch's values are alive,
    /// and the rows its entity's `willInsertRows` hook plans for a batch are written with it.
    /// Inserts `rows` of `entity`, whose IDs are consecutive. A batch of at least
    /// ``rangeTallyMinimum`` rows of an entity with tallies is written with the connection's
    /// triggers off, then added to the tallies with one aggregate statement a tally over the
    /// rows' IDs (``rangeTallySQL(_:table:)``): a tally trigger fired for each row (a statement
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
        let statements =
            try SQLiteStore.rangeTallySQL(entity, table: table)
            + [try SQLiteStore.rangeSearchSQL(entity, table: table)].compactMap { $0 }
        guard !statements.isEmpty else { return try Self.insertRows(db, rows, sql: sql) }
        guard try !Self.hasOthersTriggers(db, entity) else { return try Self.insertRows(db, rows, sql: sql) }
        let connection = db.sqliteConnection
        guard persistence_set_triggers_enabled(connection, 0) == 0 else {
            return try Self.insertRows(db, rows, sql: sql)
        }
        do {
            defer { _ = persistence_set_triggers_enabled(connection, 1) }
            try Self.insertRows(db, rows, sql: sql)
        }
        for statement in statements {
            try db.execute(sql: statement, arguments: [first, last])
        }
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

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

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

    /// Claims rows in one write transaction. Its `BEGIN IMMEDIATE` holds the store's one
    /// write lock, so no other transaction holds a row it selects: "skip locked" has nothing
    /// to skip, and a second claim selects after the first committed.
    func claimRows(_ fetch: StoreFetch, update: ([StoreRow]) -> [RowUpdate]) throws -> [StoreRow] {
        let entitySQL = sql[fetch.entity]
        let (query, arguments) = select(entitySQL.selectList, fetch)
        return try mapErrors(nil) {
            try writing { db in
                let rows = try Self.readRows(db, query, arguments, entitySQL)
                guard !rows.isEmpty else { return [] }
                let updates = update(rows)
                var claimed: [StoreRow] = []
                claimed.reserveCapacity(rows.count)
                for (row, change) in zip(rows, updates) {
                    let (statement, arguments) = entitySQL.update(
                        slots: change.slots, values: change.values, id: row.id, expectedVersion: nil)
                    let id = ManagedObjectID(entityName: fetch.entity.name, rowID: row.id)
                    let version = try mapErrors(id) {
                        try Self.query(db, statement, arguments) { sqlite3_column_int64($0, 0) }
                    }
                    claimed.append(change.applied(to: row, version: version.first ?? row.version + 1))
                }
                try runInjectedFault()
                return claimed
            }
        }
    }

    /// Makes the next commit fail with `error` after every statement ran and
    /// before `COMMIT`: nothing is written. For tests of failure paths.
    func failNextCommit(with error: any Error & Sendable) {
        injectedFault.withLock { $0 = { throw error } }
    }

    func runInjectedFault() throws {
        if let fault = injectedFault.withLock({ f in
            defer { f = nil }; return f
        }) {
            try fault()
        }
    }

    /// The foreign links (``ForeignLink``) of the store, read again when its schema changed.
    fileprivate func currentForeignLinks(_ db: Database) throws -> [String: [ForeignLink]] {
        let version = try Int64.fetchOne(db, sql: "PRAGMA schema_version") ?? 0
        if let known = foreignLinks.withLock({ $0.schemaVersion == version ? $0.links : nil }) { return known }
        let links = try Self.readForeignLinks(db, schema: schema)
        foreignLinks.withLock { $0 = (version, links) }
        return links
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

    /// `body` in a write transaction; a read-only store refuses at once.
    func writing<T>(_ body: (Database) throws -> T) throws -> T {
        guard !isReadOnly else {
            throw PersistenceError(.readOnly, "The store \(url.path) was opened read-only: it cannot be changed")
        }
        return try pool.write(body)
    }

    func externalChangeToken() throws -> Int64 {
        try mapErrors(nil) {
            try pool.writeWithoutTransaction { try Int64.fetchOne($0, sql: "PRAGMA data_version") ?? 0 }
        }
    }

    func close() {
        let first = closed.withLock { closed in
            defer { closed = true }
            return !closed
        }
        guard first else { return }
        stopAnnouncements()
        if !isReadOnly {
            // Commits moved into the file and the -wal emptied, if no other connection is
            // reading: a -wal with frames at the next open then means a crash. Never waits.
            try? pool.writeWithoutTransaction { db in
                sqlite3_busy_timeout(db.sqliteConnection, 0)
                _ = try db.checkpoint(.truncate)
            }
        }
        do {
            try pool.close()
            Self.openInProcess.withLock { $0[url.path, default: 1] -= 1 }
        } catch {
            // A connection is still in use: it closes when released, and until then the
            // store counts as open here (its -wal is no sign of a crash).
        }
    }

    func checkIntegrity() throws -> [String] {
        let stopped: DatabaseError
        do {
            let result = try pool.read { db in try String.fetchAll(db, sql: "PRAGMA integrity_check") }
            guard result != ["ok"] else { return [] }
            return result.flatMap { $0.split(separator: "\n") }.filter { !$0.hasPrefix("***") }.map(String.init)
        } catch let error as DatabaseError where Self.isDamage(error.resultCode) {
            stopped = error
        } catch {
            return try mapErrors(nil) { throw error }
        }
        // SQLite stops at a page it cannot read at all: say which tables it is in.
        var findings = ["the full check stopped at damage it cannot read past (\(Self.describe(stopped)))"]
        guard
            let tables = try? pool.read({ db in
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            })
        else { return findings }
        for table in tables {
            do {
                _ = try pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM (SELECT * FROM \(quote(table)) NOT INDEXED)")
                }
            } catch {
                findings.append("table \(quote(table)) cannot be read whole (\(Self.describe(error)))")
            }
        }
        return findings
    }

    /// Whether `error` (or the error it wraps) is a write the file system of `directory` had
    /// no space for: SQLite's "database or disk is full", or — on a file system with no space
    /// left — the I/O error of a write that could not start (the shared memory of the log
    /// cannot be sized, its header cannot be written) or of a file that could not be made.
    static func isDiskFull(_ error: any Error, in directory: URL) -> Bool {
        if let error = error as? PersistenceError {
            return error.code == .diskFull || error.cause.map { isDiskFull($0, in: directory) } == true
        }
        guard let error = error as? DatabaseError else { return false }
        switch error.resultCode.primaryResultCode {
        case .SQLITE_FULL: return true
        case .SQLITE_IOERR, .SQLITE_CANTOPEN: return hasNoSpace(directory)
        default: return false
        }
    }

    /// Whether the file system of `directory` has (almost) no space left for this process: less
    /// than a few pages, counting the blocks kept for root when it is root.
    static func hasNoSpace(_ directory: URL) -> Bool {
        var stats = statvfs()
        guard statvfs(directory.path, &stats) == 0 else { return false }
        let blocks = geteuid() == 0 ? stats.f_bfree : stats.f_bavail
        return UInt64(blocks) * UInt64(stats.f_frsize) < 64 * 1024
    }

    /// Whether SQLite's result says the file is damaged.
    private static func isDamage(_ code: ResultCode) -> Bool {
        code == .SQLITE_CORRUPT || code == .SQLITE_NOTADB
    }

    /// Turns driver errors into ``PersistenceError``s naming the object.
    func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError {
            let what = id.map { "Could not save \($0)" } ?? "The store at \(url.path) failed"
            let message = error.message ?? "\(error.resultCode)"
            if error.resultCode == .SQLITE_CONSTRAINT {
                throw PersistenceError(
                    .constraint, "\(what): \(message)", objectIDs: id.map { [$0] } ?? [], cause: error)
            }
            if error.resultCode == .SQLITE_READONLY {
                throw PersistenceError(
                    .readOnly, "\(what): \(message)", objectIDs: id.map { [$0] } ?? [], cause: error)
            }
            if Self.isDiskFull(error, in: url.deletingLastPathComponent()) {
                throw PersistenceError(
                    .diskFull, "\(what): \(message)", objectIDs: id.map { [$0] } ?? [], cause: error)
            }
            if Self.isDamage(error.resultCode) {
                throw PersistenceError(
                    .storeDamaged, "The store \(url.path) is damaged (\(message)); nothing was changed",
                    objectIDs: id.map { [$0] } ?? [], cause: error)
            }
            throw PersistenceError(.io, "\(what): \(message)", objectIDs: id.map { [$0] } ?? [], cause: error)
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

private struct GRDBMigrationDatabase: MigrationDatabase {
    let db: Database
    var dialect: SQLDialect { .sqlite }
    func execute(_ sql: String) throws { try db.execute(sql: sql) }
    func tableExists(_ name: String) throws -> Bool { try db.tableExists(name) }
    func columns(of table: String) throws -> [String] { try db.columns(in: table).map(\.name) }
    func integer(_ sql: String) throws -> Int64? { try Int64.fetchOne(db, sql: sql) }
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

    func updateObjects(_ updates: [StoreChanges.Update]) throws -> [ManagedObjectID: Int64] {
        var versions: [ManagedObjectID: Int64] = [:]
        for update in updates {
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
