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
    let foreignLinks = Locked<(schemaVersion: Int64, links: [String: [ForeignLink]])>((-1, [:]))

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
    static let openInProcess = Locked<[String: Int]>([:])

    /// The table every store with a schema has: its absence means the
    /// database was never given one, or lost it.
    static let sequenceTable = "_persistence_sequence"
    /// The table of the migrations applied.
    static let migrationsTable = "_persistence_migrations"

    init(
        url: URL, schema: Schema, busyTimeout: TimeInterval, checksIntegrity: Bool, mode: StoreOpenMode = .init(),
        logger: Logger, beforeUpkeep: (@Sendable () -> Void)? = nil
    ) throws(StoreOpenFailure) {
        self.url = url
        self.logger = logger
        isReadOnly = mode.readOnly
        let exists = FileManager.default.fileExists(atPath: url.path)
        if !exists && (!mode.createsSchema || mode.readOnly) { throw .missing }
        // Checked before anything writes to the file (the pool switches it to WAL, which
        // rewrites its header): a store that ends in quarantine is left untouched. A writable
        // open checks on its writer's connection, before GRDB's set-up of the WAL; a read-only
        // one on a connection of its own.
        let fullCheck: FullCheck =
            checksIntegrity ? .always : exists && Self.leftByUncleanShutdown(url) ? .always : .ifSmall
        if exists && mode.readOnly {
            try Self.check(
                url, busyTimeout: busyTimeout, fullCheck: fullCheck, needsSchema: !mode.createsSchema, schema: schema)
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
        // The writer's connection is made first: it is checked before GRDB sets up the WAL.
        let pendingCheck = Locked(exists)
        let needsSchema = !mode.createsSchema
        config.prepareDatabase { db in
            try Self.addPathExtensionFunction(db)
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
            // After the pragmas: setting `temp_store` once the schema is read makes SQLite read
            // it again.
            if !db.configuration.readonly,
                pendingCheck.withLock({ pending in
                    defer { pending = false }; return pending
                })
            {
                do {
                    try db.inTransaction(.deferred) {
                        try Self.checkContents(db, fullCheck: fullCheck, needsSchema: needsSchema, schema: schema)
                        return .commit
                    }
                } catch {
                    throw Self.checkFailure(error, url: url)
                }
                // GRDB never asks whether another process changed the schema under the writer:
                // what the check read of it is forgotten.
                db.clearSchemaCache()
            }
        }
        do {
            pool = try DatabasePool(path: url.path, configuration: config)
        } catch let failure as StoreOpenFailure {
            throw failure
        } catch {
            throw Self.classify(error, url: url, damaged: StoreOpenFailure.unreadable)
        }
        do {
            // Here, not in `prepareDatabase`: GRDB turns WAL on after that ran, and sets its
            // writer to `synchronous = NORMAL` as it does. A commit would then be durable only
            // once checkpointed, and a power cut could bring back a deletion whose files are gone.
            try pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA synchronous = FULL") }
        } catch {
            try? pool.close()
            throw Self.classify(error, url: url, damaged: StoreOpenFailure.unreadable)
        }
        let sql = sql
        do {
            // A current store is only read (no write lock taken, so no wait for another
            // process's transaction); any other is brought up to date in one transaction.
            let current = try pool.read { db in
                try Self.requireSearch(db, schema: schema)
                return try Self.schemaIsCurrent(db, schema: schema, sql: sql)
            }
            if !current {
                beforeUpkeep?()
                try pool.write { db in
                    // Read again under the lock: another process may have changed the schema
                    // since the check and the look above.
                    db.clearSchemaCache()
                    if !mode.createsSchema { try Self.requireSchema(db) }
                    try Self.migrate(db, schema: schema, sql: sql)
                    try Self.recordLinks(db, schema: schema)
                    try Self.installTallies(db, schema: schema, sql: sql)
                    try Self.installSearchIndexes(db, schema: schema, sql: sql)
                }
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
}
