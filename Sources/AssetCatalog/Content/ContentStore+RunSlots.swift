import Foundation
import Locking

#if canImport(Glibc)
    import Glibc
#endif

/// The files by which processes tell each other what they hold: each process's lock file
/// (SQLite) or slots file (a shared store's session) beside its staging folder, which says
/// whether it lives and which of its job runs held a run slot when it died.
extension ContentStore {
    /// Whether the process that owns `owner`'s staging folder is alive (it holds its lock).
    /// This process is; a lock file that is gone means its owner is not; a lock file that
    /// cannot be opened (permissions, no descriptors left) is taken for alive.
    func isOwnerAlive(_ owner: String) -> Bool {
        if owner == self.owner { return true }
        let fd = open(staging + "/" + owner + ".lock", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno != ENOENT }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return true
    }

    /// Records in this process's lock file that the job run numbered `run` holds slot
    /// `slot` (0: the slot is free): the 8 bytes at `slot * 8`, little-endian. No sync:
    /// the file outlives a killed process (not a machine crash), and a process that finds
    /// this one dead reads it (``runsInSlots(of:)``) to tell the runs that started from
    /// those only claimed ahead.
    func markSlot(_ slot: Int, run: Int64) {
        guard !isReadOnly else { return }
        var value = run.littleEndian
        // Under the lock ``release()`` takes before it closes the file: never a descriptor
        // closed meanwhile and reused for another file.
        isClosed.withLock { closed in
            guard !closed else { return }
            _ = withUnsafeBytes(of: &value) { pwrite(lockDescriptor, $0.baseAddress, 8, off_t(slot * 8)) }
        }
    }

    /// The runs that held a slot when `owner`, a process that is gone, died: read from its
    /// lock file; nil when that file is gone or cannot be read (then every run it held
    /// is taken to have started).
    func runsInSlots(of owner: String) -> Set<Int64>? {
        Self.runsInSlots(file: staging + "/" + owner + slotsSuffix)
    }

    /// The runs a lock or slots file (``markSlot(_:run:)``) names; nil when it is gone or
    /// cannot be read.
    static func runsInSlots(file: String) -> Set<Int64>? {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= 1 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count == bytes.count else { return nil }
        var runs = Set<Int64>()
        for offset in stride(from: 0, to: count - count % 8, by: 8) {
            let run = bytes[offset..<offset + 8].reversed().reduce(Int64(0)) { $0 << 8 | Int64($1) }
            if run != 0 { runs.insert(run) }
        }
        return runs
    }

    /// Removes the staging folders of processes that are gone (``removeAbandonedStaging(in:)``).
    /// A catalog does this after its queue has recovered their jobs: their lock files say
    /// which of their runs had started.
    func removeAbandonedStaging() {
        guard !isReadOnly else { return }
        Self.removeAbandonedStaging(in: staging)
    }

    /// Removes the staging folders whose owner process is gone (its lock is
    /// free). A folder without a lock file is left alone unless it is older
    /// than ten minutes (its owner may be between creating the two).
    static func removeAbandonedStaging(in staging: String) {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []
        for entry in entries where entry.hasSuffix(".lock") {
            let lockPath = staging + "/" + entry
            let fd = open(lockPath, O_RDWR | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { continue }  // its owner is alive
            // The file we locked must still be the one at that path.
            var held = stat()
            var current = stat()
            guard fstat(fd, &held) == 0, stat(lockPath, &current) == 0, held.st_ino == current.st_ino else { continue }
            try? FileManager.default.removeItem(atPath: String(lockPath.dropLast(5)))
            unlink(lockPath)
        }
        for entry in entries
        where !entry.hasSuffix(".lock") && !entries.contains(entry + ".lock") && !entries.contains(entry + ".lock.new")
        {
            let path = staging + "/" + entry
            var info = stat()
            guard stat(path, &info) == 0, time(nil) - info.st_mtim.tv_sec > 600 else { continue }
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    /// Removes the staging folder of `owner`, a session that is gone (``SessionLiveness``),
    /// and its slots file: the folder first, so that a removal cut short leaves the file,
    /// and the next reaper of the session finds it.
    func removeStaging(ofSession owner: String) throws {
        let folder = staging + "/" + owner
        var info = stat()
        // Gone already: an earlier reaper removed it, or it was never made.
        if lstat(folder, &info) == 0 { try FileManager.default.removeItem(atPath: folder) }
        guard unlink(folder + ".slots") == 0 || errno == ENOENT else {
            throw CatalogError(.io, "Could not remove \(folder).slots: \(Self.errnoText())", path: folder)
        }
    }
}
