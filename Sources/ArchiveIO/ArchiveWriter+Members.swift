import CArchive
import CFileSync
import FoundationEssentials
import Glibc

// Adding members: from memory, from a stream of chunks, from disk (a file, a link, a
// directory, a whole tree), each as a header, its data in chunks, and a check of its size.
extension ArchiveWriter {
    /// Writes a member whose data is `contents`.
    ///
    /// `entry.size` is set from `contents.count` for a regular file.
    ///
    /// - Parameters:
    ///   - entry: The member's header.
    ///   - contents: The member's data (regular files only).
    /// - Throws: ``ArchiveError`` with code `writeFailed`, `unsupportedEntry` (a type the
    ///   format cannot hold), `invalidArgument` or `misuse` after ``finish()``.
    public func writeEntry(_ entry: ArchiveEntry, contents: [UInt8] = []) throws(ArchiveError) {
        var entry = entry
        if entry.kind == .file { entry.size = Int64(contents.count) }
        var pending: [UInt8]? = contents
        try writeEntry(entry) { () -> [UInt8]? in
            defer { pending = nil }
            return pending
        }
    }

    /// Writes a member whose data comes from a stream of chunks.
    ///
    /// A tar header holds the size before the data, so `entry.size` must be set for a regular
    /// file, and the chunks must add up to exactly that many bytes; otherwise the writer fails
    /// (code `invalidArgument`) and the archive cannot be finished.
    ///
    /// ```swift
    /// var remaining = 1 << 30
    /// try writer.writeEntry(ArchiveEntry(path: "big.bin", kind: .file, size: Int64(remaining))) {
    ///     guard remaining > 0 else { return nil }
    ///     remaining -= 1 << 20
    ///     return [UInt8](repeating: 7, count: 1 << 20)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - entry: The member's header.
    ///   - nextChunk: Returns the next chunk of data, or `nil` at its end.
    /// - Throws: ``ArchiveError`` with code `invalidArgument` (no size, or a size that the
    ///   chunks do not match), `callbackFailed` if `nextChunk` throws, `writeFailed`,
    ///   `unsupportedEntry` or `misuse`.
    public func writeEntry(_ entry: ArchiveEntry, nextChunk: () throws -> [UInt8]?) throws(ArchiveError) {
        try writeEntry(entry) { write in
            while let chunk = try nextChunk() { try chunk.withUnsafeBytes { try write($0) } }
        }
    }

    /// Writes a member whose data `produce` pushes, chunk by chunk, through the function it
    /// is given — for a source that reads into its own buffer (a file, a decompressor, a
    /// hash-as-you-go copy), with no copy into an array per chunk.
    ///
    /// As with ``writeEntry(_:nextChunk:)``, `entry.size` must be set for a regular file and
    /// the chunks must add up to exactly that many bytes.
    ///
    /// ```swift
    /// try writer.writeEntry(ArchiveEntry(path: "copy.bin", kind: .file, size: size)) { write in
    ///     try source.read { chunk in try write(chunk) }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - entry: The member's header.
    ///   - produce: Called once; calls its argument with each chunk in order. The chunk
    ///     need only be valid during that call.
    /// - Throws: ``ArchiveError`` with code `invalidArgument` (no size, or a size that the
    ///   chunks do not match), `callbackFailed` if `produce` throws an error of its own,
    ///   `writeFailed`, `unsupportedEntry` or `misuse`.
    public func writeEntry(
        _ entry: ArchiveEntry, producing produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws(ArchiveError) {
        try writeHeader(entry)
        guard entry.kind == .file else { return try finishEntry(entry) }
        let expected = entry.size ?? 0
        var written: Int64 = 0
        do {
            try produce { chunk in
                try self.checkSize(entry, written: written + Int64(chunk.count), expected: expected, ended: false)
                try self.writeData(chunk, member: entry.path)
                written += Int64(chunk.count)
            }
        } catch let error as ArchiveError {
            throw poisonIfOpen(error)
        } catch {
            throw poison(
                ArchiveError(
                    code: .callbackFailed,
                    message: "Cannot write '\(archivePath)', member '\(displayName(entry.path))': "
                        + "the chunk source threw: \(error)",
                    archivePath: archivePath, member: entry.path, cause: error))
        }
        try checkSize(entry, written: written, expected: expected, ended: true)
        try finishEntry(entry)
    }

    /// Adds the file, directory or symbolic link at `diskPath` as the member `memberPath`,
    /// with its size, modification date and permissions. A directory is added alone (see
    /// ``addTree(at:as:)`` for its contents); a symbolic link is stored as a link, never
    /// followed.
    ///
    /// - Parameters:
    ///   - diskPath: The file on disk.
    ///   - memberPath: The member's path inside the archive.
    /// - Throws: ``ArchiveError`` with code `io` if the file cannot be read or changes size
    ///   while being read, `unsupportedEntry` for a device, FIFO or socket, or any error of
    ///   ``writeEntry(_:nextChunk:)``.
    public func addFile(at diskPath: String, as memberPath: String) throws(ArchiveError) {
        try addItem(directoryFD: AT_FDCWD, name: diskPath, diskPath: diskPath, memberPath: memberPath, recurse: false)
    }

    /// Adds the directory at `diskPath` and everything below it, in byte order of names, as
    /// members under `memberPath` (or at the top level when `memberPath` is empty). Symbolic
    /// links are stored as links, never followed.
    ///
    /// ```swift
    /// try writer.addTree(at: "/data/photos", as: "photos")   // photos/, photos/a.jpg, …
    /// ```
    ///
    /// - Parameters:
    ///   - diskPath: The directory on disk.
    ///   - memberPath: The path of the directory's member inside the archive.
    /// - Throws: Like ``addFile(at:as:)``.
    public func addTree(at diskPath: String, as memberPath: String) throws(ArchiveError) {
        try addItem(directoryFD: AT_FDCWD, name: diskPath, diskPath: diskPath, memberPath: memberPath, recurse: true)
    }

    private func addItem(
        directoryFD: Int32, name: String, diskPath: String, memberPath: String, recurse: Bool
    ) throws(ArchiveError) {
        var info = stat()
        guard fstatat(directoryFD, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw ioError("lstat", path: diskPath, member: memberPath)
        }
        let date = Date(
            timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
        let permissions = UInt16(info.st_mode & 0o7777)
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            let fd = openat(directoryFD, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw ioError("open", path: diskPath, member: memberPath) }
            defer { close(fd) }
            try addOpenFile(fd: fd, diskPath: diskPath, memberPath: memberPath, date: date, permissions: permissions)
        case S_IFDIR:
            if !memberPath.isEmpty {
                try writeHeader(
                    ArchiveEntry(path: memberPath, kind: .directory, modificationDate: date, permissions: permissions))
            }
            guard recurse else { return }
            let fd = openat(directoryFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { throw ioError("open", path: diskPath, member: memberPath) }
            guard let directory = fdopendir(fd) else {
                close(fd)
                throw ioError("fdopendir", path: diskPath, member: memberPath)
            }
            defer { closedir(directory) }
            var names: [[UInt8]] = []
            let failure = forEachDirectoryEntry(in: directory) { names.append(Array($0)) }
            if failure != 0 {
                errno = failure
                throw ioError("readdir", path: diskPath, member: memberPath)
            }
            names.sort { $0.lexicographicallyPrecedes($1) }
            for childBytes in names {
                let child = String(decoding: childBytes, as: UTF8.self)
                try addItem(
                    directoryFD: dirfd(directory), name: child, diskPath: diskPath + "/" + child,
                    memberPath: memberPath.isEmpty ? child : memberPath + "/" + child, recurse: true)
            }
        case S_IFLNK:
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlinkat(directoryFD, name, &target, target.count - 1)
            guard count >= 0 else { throw ioError("readlink", path: diskPath, member: memberPath) }
            let linkTarget = String(decoding: target[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            try writeHeader(
                ArchiveEntry(path: memberPath, kind: .symlink, modificationDate: date, linkTarget: linkTarget))
        default:
            throw ArchiveError(
                code: .unsupportedEntry,
                message: "Cannot add '\(diskPath)' to '\(archivePath)': it is a device, FIFO or socket; "
                    + "only regular files, directories and symbolic links can be added",
                archivePath: archivePath, member: memberPath)
        }
    }

    private func addOpenFile(
        fd: Int32, diskPath: String, memberPath: String, date: Date, permissions: UInt16
    ) throws(ArchiveError) {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw ioError("fstat", path: diskPath, member: memberPath) }
        let entry = ArchiveEntry(
            path: memberPath, kind: .file, size: Int64(info.st_size), modificationDate: date, permissions: permissions)
        try writeHeader(entry)
        let buffer = readBuffer()
        var written: Int64 = 0
        while true {
            let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if count < 0 {
                if Glibc.errno == EINTR { continue }
                throw poison(ioError("read", path: diskPath, member: memberPath))
            }
            if count == 0 { break }
            guard written + Int64(count) <= Int64(info.st_size) else { break }
            try writeData(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), member: memberPath)
            written += Int64(count)
        }
        guard written == Int64(info.st_size) else {
            throw poison(
                ArchiveError(
                    code: .io,
                    message: "Cannot add '\(diskPath)' to '\(archivePath)': the file changed size while it was "
                        + "being read (\(info.st_size) bytes expected, \(written == info.st_size ? "more" : "\(written)") read)",
                    archivePath: archivePath, member: memberPath))
        }
        try finishEntry(entry)
    }

    private func readBuffer() -> UnsafeMutableRawBufferPointer {
        if let buffer { return buffer }
        let made = UnsafeMutableRawBufferPointer.allocate(byteCount: max(options.readBufferSize, 4096), alignment: 64)
        buffer = made
        return made
    }

    private func writeHeader(_ entry: ArchiveEntry) throws(ArchiveError) {
        try ensureOpen()
        guard let raw = archive_entry_new2(handle) else {
            throw poison(fail("archive_entry_new2", member: entry.path, code: .outOfMemory))
        }
        defer { archive_entry_free(raw) }
        if entry.kind == .file && entry.size == nil {
            throw ArchiveError(
                code: .invalidArgument,
                message: "Cannot write member '\(displayName(entry.path))' to '\(archivePath)': a regular file "
                    + "needs its size before its data",
                archivePath: archivePath, member: entry.path)
        }
        let status = locale.run { () -> Int32 in
            // Names go in as bytes of the (UTF-8) locale, not through `_utf8` setters: libarchive
            // would convert those "from UTF-8" and normalise them to NFC on the way.
            archive_entry_copy_pathname(raw, entry.path)
            let type: UInt32
            switch entry.kind {
            case .file, .hardlink: type = CARCHIVE_AE_IFREG
            case .directory: type = CARCHIVE_AE_IFDIR
            case .symlink: type = CARCHIVE_AE_IFLNK
            case .characterDevice: type = CARCHIVE_AE_IFCHR
            case .blockDevice: type = CARCHIVE_AE_IFBLK
            case .fifo: type = CARCHIVE_AE_IFIFO
            case .socket: type = CARCHIVE_AE_IFSOCK
            case .other: type = 0
            }
            archive_entry_set_filetype(raw, type)
            archive_entry_set_perm(raw, mode_t(entry.permissions & 0o7777))
            archive_entry_set_size(raw, entry.kind == .file ? (entry.size ?? 0) : 0)
            if let date = entry.modificationDate {
                let seconds = date.timeIntervalSince1970.rounded(.down)
                let nanoseconds = Int((date.timeIntervalSince1970 - seconds) * 1e9)
                archive_entry_set_mtime(raw, time_t(seconds), min(max(nanoseconds, 0), 999_999_999))
            } else {
                archive_entry_set_mtime(raw, 0, 0)
            }
            if entry.kind == .symlink { archive_entry_copy_symlink(raw, entry.linkTarget ?? "") }
            if entry.kind == .hardlink { archive_entry_copy_hardlink(raw, entry.linkTarget ?? "") }
            return archive_write_header(handle, raw)
        }
        if status == ARCHIVE_WARN { warn("archive_write_header", member: entry.path) }
        if status == ARCHIVE_FAILED {
            throw fail("archive_write_header", member: entry.path, code: .unsupportedEntry)
        }
        if status < ARCHIVE_FAILED { throw poison(fail("archive_write_header", member: entry.path)) }
    }

    private func writeData(_ bytes: UnsafeRawBufferPointer, member: String) throws(ArchiveError) {
        var remaining = bytes
        while !remaining.isEmpty {
            let count = archive_write_data(handle, remaining.baseAddress, remaining.count)
            guard count > 0 else {
                if count == 0 { continue }
                throw poison(fail("archive_write_data", member: member))
            }
            remaining = UnsafeRawBufferPointer(rebasing: remaining[count...])
        }
    }

    private func finishEntry(_ entry: ArchiveEntry) throws(ArchiveError) {
        let status = archive_write_finish_entry(handle)
        if status == ARCHIVE_WARN { warn("archive_write_finish_entry", member: entry.path) }
        if status < ARCHIVE_WARN { throw poison(fail("archive_write_finish_entry", member: entry.path)) }
    }

    private func checkSize(_ entry: ArchiveEntry, written: Int64, expected: Int64, ended: Bool) throws(ArchiveError) {
        guard written > expected || (ended && written < expected) else { return }
        throw poison(
            ArchiveError(
                code: .invalidArgument,
                message: "Cannot write member '\(displayName(entry.path))' to '\(archivePath)': its header declares "
                    + "\(expected) bytes but its chunks \(ended ? "hold" : "hold at least") \(written)",
                archivePath: archivePath, member: entry.path))
    }
}
