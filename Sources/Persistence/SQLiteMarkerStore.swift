import Foundation
import GRDB
import GRDBSQLite

/// A SQLite store file that holds nothing but the record of one applied migration — a
/// marker no program that lacks that migration opens: it refuses the store as written by
/// a newer program (``PersistenceError/Code/newerStore``) and changes nothing. For a file
/// left where a store used to be, saying that the records live elsewhere.
public enum SQLiteMarkerStore {
    /// Writes the marker store to `path`, a new file: the store's own tables (empty), the
    /// migration `marker` recorded as applied, and the header's write version set to 3, which
    /// SQLite libraries open read-only — so that a program too old to refuse newer stores
    /// fails at its first write instead. The file is synced before this returns.
    ///
    /// - Throws: ``PersistenceError/Code/io`` when the file cannot be written (it may be left
    ///   partly written: write it under a temporary name, and rename it once this returns).
    public static func write(to path: String, recording marker: String) throws {
        do {
            let queue = try DatabaseQueue(path: path)
            try queue.write { db in
                try db.execute(sql: SQLiteStore.bookkeepingTables)
                try SQLiteStore.recordMigration(db, marker)
            }
            try queue.close()
        } catch {
            throw PersistenceError(.io, "Could not write \(path): \(error)", cause: error)
        }
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            throw PersistenceError(.io, "Could not open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        // The header's "file format write version" (offset 18): above 2, SQLite opens the
        // file read-only.
        var version: UInt8 = 3
        guard pwrite(fd, &version, 1, 18) == 1, fsync(fd) == 0 else {
            throw PersistenceError(.io, "Could not write \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Whether the file at `path` is a SQLite store that records the migration `marker` as
    /// applied; opened read-only, once. `false` for any other file, or none.
    public static func records(_ marker: String, at path: String) -> Bool {
        var configuration = Configuration()
        configuration.readonly = true
        guard let queue = try? DatabaseQueue(path: path, configuration: configuration) else { return false }
        defer { try? queue.close() }
        let marked = try? queue.read { db in
            try Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM _persistence_migrations WHERE id = ?)", arguments: [marker])
        }
        return marked == true
    }
}

extension PersistentContainer {
    /// The version of the SQLite library loaded at run time, such as `"3.40.1"`.
    public static var sqliteVersion: String { String(cString: sqlite3_libversion()) }
}
