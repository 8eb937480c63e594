import Foundation
import GRDB
import Locking

/// Opening the SQLite store: the checks of a file before the pool writes to it, the
/// signs of an unclean shutdown, read-only and immutable opens, and the full check.
extension SQLiteStore {
    /// A database with no schema, or with tables gone, where a schema was expected.
    struct SchemaMissing: Error {
        var reason = "it holds no schema (the file is empty, or its tables are gone)"
    }

    /// Throws ``SchemaMissing`` unless `db` has a schema and every table it ever made for an
    /// entity (each has a row in the sequence table) is still there.
    static func requireSchema(_ db: Database) throws {
        guard try db.tableExists(sequenceTable) else { throw SchemaMissing() }
        for entity in try String.fetchAll(db, sql: "SELECT entity FROM \(sequenceTable) ORDER BY entity")
        where try !db.tableExists(entity) {
            throw SchemaMissing(reason: "its table \(quote(entity)) is gone")
        }
    }

    /// When an open runs `PRAGMA quick_check` over the whole store.
    enum FullCheck {
        case always
        /// Only on a store of at most ``PersistentContainer/Options/smallStoreCheckLimit``
        /// bytes: the cost of an open is bounded, whatever the store's size.
        case ifSmall
    }

    /// Reads the file without writing to it: that it is a database whose header and schema
    /// SQLite can read (work that does not grow with the rows), that it passes
    /// `PRAGMA quick_check` as `fullCheck` says, and that it holds a schema when
    /// `needsSchema`, and that no newer program wrote it (its migrations are all in `schema`).
    static func check(
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
            try queue.read { db in try checkContents(db, fullCheck: fullCheck, needsSchema: needsSchema, schema: schema)
            }
        } catch {
            throw checkFailure(error, url: url)
        }
    }

    /// ``check(_:busyTimeout:fullCheck:needsSchema:schema:)``'s reads, on `db` (a connection
    /// that has read and written nothing yet, in a transaction).
    static func checkContents(_ db: Database, fullCheck: FullCheck, needsSchema: Bool, schema: Schema) throws {
        // The header (page 1) and the whole schema are read here: a file that is not a
        // database, or whose header or schema is damaged, fails.
        _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master")
        if needsSchema { try requireSchema(db) }
        // Before the pool writes to the file (GRDB makes sure of its WAL).
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

    /// What an error of the check means for the open: a store refused as damaged, a newer
    /// store, or one not available now.
    static func checkFailure(_ error: any Error, url: URL) -> StoreOpenFailure {
        switch error {
        case let failure as StoreOpenFailure: failure
        case let missing as SchemaMissing: .unreadable(missing.reason, cause: missing)
        case let newer as PersistenceError where newer.code == .newerStore: .unavailable(newer.message, cause: newer)
        default: classify(error, url: url, damaged: StoreOpenFailure.unreadable)
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
    static func leftByUncleanShutdown(_ url: URL) -> Bool {
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
    static func openReadOnly(_ url: URL, busyTimeout: TimeInterval) throws(StoreOpenFailure) -> DatabaseQueue {
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
    static func requireCurrent(_ db: Database, schema: Schema) throws {
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
}
