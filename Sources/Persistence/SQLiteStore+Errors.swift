import Foundation
import GRDB

/// How SQLite's errors become ``PersistenceError``s and open failures.
extension SQLiteStore {
    /// Only a file that is not a database, is corrupt, fails its check or
    /// cannot be migrated is quarantined. A busy or locked store, or one that
    /// cannot be opened or read for reasons outside the file (permissions, a
    /// full disk), fails the open and is left exactly where it is.
    static func classify(
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

    static func describe(_ error: any Error) -> String {
        if let e = error as? DatabaseError { return e.message ?? "\(e.resultCode)" }
        return "\(error)"
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
    static func isDamage(_ code: ResultCode) -> Bool {
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
