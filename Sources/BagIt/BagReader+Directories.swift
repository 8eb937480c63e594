import ArchiveIO
import Foundation
import GRDB
import GRDBSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// Reading a directory bag: its files listed first, then read in byte order, each opened below
/// the root without following a link.
extension Scan {
    func readDirectory(_ path: String) throws {
        var root = path
        var inner: String?
        let manager = FileManager.default
        if !manager.fileExists(atPath: path + "/bagit.txt") {
            let children = (try? manager.contentsOfDirectory(atPath: path)) ?? []
            if children.count == 1, manager.fileExists(atPath: path + "/" + children[0] + "/bagit.txt") {
                root = path + "/" + children[0]  // the folder an archive was extracted into
                inner = children[0]
            }
        }
        directoryRoot = root
        do {
            directoryFD = try FileAccess.openDirectory(path)
            if let inner {
                let fd = try FileAccess.openDirectory(inner, beneath: directoryFD)
                close(directoryFD)
                directoryFD = fd
            }
        } catch {
            throw BagError(opening: inner ?? path, error)
        }
        // The paths go to the index, to be read in byte order: tag files first (the manifests
        // say which digests the payload needs), then the payload.
        try index.run { db in
            try db.inTransaction {
                try Self.walk(root, directoryFD) { relative, info in
                    switch info.st_mode & S_IFMT {
                    case S_IFDIR: break
                    case S_IFREG:
                        bytesTotal += Int64(info.st_size)
                        try db.run(
                            "INSERT OR IGNORE INTO walk(payload, path) VALUES (?, ?)",
                            [.integer(relative.hasBytePrefix("data/") ? 1 : 0), .text(relative)])
                        if db.changesCount != 1 { throw BagIndex.twin(relative) }
                    case S_IFLNK:
                        let target = (try? manager.destinationOfSymbolicLink(atPath: root + "/" + relative)) ?? "?"
                        let resolved = URL(fileURLWithPath: root + "/" + relative).resolvingSymlinksInPath().path
                        let inside = resolved.hasPrefix(
                            URL(fileURLWithPath: root).resolvingSymlinksInPath().path + "/")
                        throw BagError(
                            .hostileEntry, file: relative,
                            inside
                                ? "is a symbolic link (to \(target)); a bag holds regular files only"
                                : "is a symbolic link to \(target), outside the bag")
                    default:
                        throw BagError(
                            .hostileEntry, file: relative,
                            "is a device, FIFO or socket; a bag holds regular files only")
                    }
                }
                return .commit
            }
        }
        BagReader.afterListing?(root)
        for payload in [0, 1] {
            var after = ""
            while true {
                let page = try index.run { db in
                    try String.fetchAll(
                        db.cachedStatement(
                            sql: "SELECT path FROM walk WHERE payload = ? AND path > ? ORDER BY path LIMIT 1000"),
                        arguments: [payload, after])
                }
                for relative in page { try readFile(relative) }
                guard page.count == 1000, let last = page.last else { break }
                after = last
            }
        }
    }

    /// Calls `body` with the path, relative to `root` (open as `rootFD`), and the `lstat` of
    /// everything under `root`, each directory before what it holds. By `readdir`:
    /// FileManager's enumerator keeps about 130 bytes of every path it returns until the walk
    /// ends, on Linux. Each directory is opened below `rootFD` without following a link.
    ///
    /// - Throws: ``BagError`` `io` for a directory or file that cannot be read, and
    ///   `hostileEntry` for a name that is not UTF-8 (no manifest could list it) or a
    ///   directory that became a symbolic link.
    static func walk(
        _ root: String, _ rootFD: Int32, _ body: (_ relative: String, _ info: stat) throws -> Void
    ) throws {
        var pending = [""]
        while let directory = pending.popLast() {
            let fd: Int32
            do {
                // The root anew (not a dup: its position in the directory would be shared).
                fd =
                    directory.isEmpty
                    ? openat(rootFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    : try FileAccess.openDirectory(directory, beneath: rootFD)
            } catch {
                throw BagError(opening: directory, error)
            }
            guard fd >= 0, let handle = fdopendir(fd) else {
                let code = errno
                if fd >= 0 { close(fd) }
                throw BagError(
                    .io, file: directory.isEmpty ? root : directory,
                    "cannot be read: \(String(cString: strerror(code)))")
            }
            defer { closedir(handle) }
            let failure = try forEachDirectoryEntry(in: handle) { bytes in
                let name = String(decoding: bytes, as: UTF8.self)
                let relative = directory.isEmpty ? name : directory + "/" + name
                guard name.utf8.elementsEqual(bytes) else {
                    throw BagError(
                        .hostileEntry, file: relative, "has a name that is not UTF-8, which no manifest can list")
                }
                var info = stat()
                guard fstatat(dirfd(handle), name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw BagError(.io, file: relative, "cannot be read: \(String(cString: strerror(errno)))")
                }
                if info.st_mode & S_IFMT == S_IFDIR { pending.append(relative) }
                try body(relative, info)
            }
            guard failure == 0 else {
                throw BagError(
                    .io, file: directory.isEmpty ? root : directory,
                    "cannot be read: \(String(cString: strerror(failure)))")
            }
        }
    }

    func readFile(_ relative: String) throws {
        var total: Int64 = 0
        try consume(relative) { write in
            try hashFile(relative) { chunk in
                total += Int64(chunk.count)
                try write(chunk)
            }
        }
        report(bytes: total, file: true)
    }

    /// Pushes the bytes of a directory bag's file through `body`, a megabyte at a time. The
    /// file is opened below the bag's root without following a link, and must be a regular
    /// file: the walk checked it, but it may have been swapped since.
    func hashFile(_ relative: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let fd: Int32
        do {
            fd = try FileAccess.openRegularFile(relative, beneath: directoryFD).fd
        } catch {
            throw BagError(opening: relative, error)
        }
        defer { close(fd) }
        let size = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, size)
            if n < 0 {
                if errno == EINTR { continue }
                throw BagError(.io, file: relative, "cannot be read: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }
}
