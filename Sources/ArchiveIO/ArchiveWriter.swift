import CArchive
import CFileSync
import FoundationEssentials
import Glibc

/// Options for an ``ArchiveWriter``.
public struct ArchiveWriteOptions: Sendable, Hashable {
    /// The compression level, or `nil` for the format's default (gzip 6, zstd 3, xz 6,
    /// deflate 6). Must lie in the format's ``ArchiveFormat/compressionLevels``.
    public var compressionLevel: Int?
    /// Whether ``ArchiveWriter/finish()`` flushes a file archive to stable storage (`fsync`
    /// of the file and its directory) before returning.
    public var synchronizesOnFinish: Bool
    /// How many bytes to read at a time from files added with
    /// ``ArchiveWriter/addFile(at:as:)``.
    public var readBufferSize: Int
    /// Whether ``ArchiveWriter/finish()`` replaces a file already at the archive's path;
    /// when `false` it fails with `alreadyExists` instead, and the existing file stays.
    public var replacesExisting: Bool
    /// Whether a file archive is written to an unnamed file (Linux `O_TMPFILE`) where the
    /// file system has them; when `false`, always to a hidden file beside the path, as on a
    /// file system without them.
    public var usesUnnamedFile: Bool

    /// Creates options.
    ///
    /// - Parameters:
    ///   - compressionLevel: The compression level, or `nil` for the format's default.
    ///   - synchronizesOnFinish: Whether finishing a file archive fsyncs it.
    ///   - readBufferSize: The read buffer for files on disk.
    ///   - replacesExisting: Whether finishing a file archive replaces a file at its path.
    ///   - usesUnnamedFile: Whether a file archive is written to an unnamed file where possible.
    public init(
        compressionLevel: Int? = nil, synchronizesOnFinish: Bool = false, readBufferSize: Int = 256 << 10,
        replacesExisting: Bool = true, usesUnnamedFile: Bool = true
    ) {
        self.usesUnnamedFile = usesUnnamedFile
        self.compressionLevel = compressionLevel
        self.synchronizesOnFinish = synchronizesOnFinish
        self.readBufferSize = readBufferSize
        self.replacesExisting = replacesExisting
    }
}

/// Writes a `.tar`, `.tar.gz`, `.tar.zst`, `.tar.xz` or `.zip` archive, streaming, to a file
/// or to a stream of chunks.
///
/// Add members with ``addFile(at:as:)`` (a file, directory or symbolic link on disk),
/// ``addTree(at:as:)`` (a whole directory), ``writeEntry(_:contents:)`` (bytes in memory)
/// or ``writeEntry(_:nextChunk:)`` (a stream of chunks), then call ``finish()``. Memory use
/// does not depend on the size of the members.
///
/// ```swift
/// try withArchiveWriter(at: "bundle.tar.zst") { writer in
///     try writer.addTree(at: "/data/bundle", as: "bundle")
///     try writer.writeEntry(ArchiveEntry(path: "bundle/note.txt", kind: .file, size: 3), contents: Array("hi\n".utf8))
/// }
/// ```
///
/// A file archive is written to an unnamed file in `path`'s folder (Linux `O_TMPFILE`) and
/// linked at `path` by ``finish()``: `path` never holds a partial archive, and a process
/// that dies before then — killed, even — leaves nothing behind. Where the file system has
/// no unnamed files, the archive is written to a hidden temporary file beside `path`
/// (whose name is given first to the `willCreateTemporaryFile` of
/// ``init(path:format:options:willCreateTemporaryFile:)``, for a caller that must clean up
/// after a crash) and renamed into place. A writer dropped without ``finish()`` (for
/// example because an error was thrown) removes its temporary file; a streamed archive
/// then simply stops without its trailer.
///
/// Names are written as UTF-8 byte for byte (zip entries carry the UTF-8 flag; tar uses pax
/// headers when a name is not ASCII). Ownership is not recorded (uid and gid are 0).
public final class ArchiveWriter {
    /// The archive's path, or the name given to a streamed archive; used in messages.
    public let archivePath: String
    /// The format being written.
    public let format: ArchiveFormat
    /// Every warning libarchive reported so far, in order.
    public private(set) var warnings: [ArchiveWarning] = []
    /// Called with each warning as it is reported (in addition to ``warnings``).
    public var onWarning: ((ArchiveWarning) -> Void)?

    private let handle: OpaquePointer
    private let locale = UTF8LocaleScope()
    private let sink: ChunkSink
    /// For a compressed archive written to a file: the thread that compresses it.
    private var stage: CompressionStage?
    private let options: ArchiveWriteOptions
    /// Where a file archive is written until ``finish()`` publishes it; `nil` for a stream.
    private let file: FileTarget?
    private var state = State.open
    private var buffer: UnsafeMutableRawBufferPointer?

    private enum State {
        case open, finished
        case failed(ArchiveError)
    }

    private enum FileTarget {
        /// An `O_TMPFILE` file: no name until it is linked at the archive's path.
        case unnamed
        /// A hidden file beside the archive's path.
        case named(String)

        var temporaryPath: String? {
            if case .named(let path) = self { path } else { nil }
        }
    }

    /// Creates the archive file `path`, in `format` or the format its extension names.
    ///
    /// - Parameters:
    ///   - path: Where to write the archive. Replaced by ``finish()`` if it exists, unless
    ///     ``ArchiveWriteOptions/replacesExisting`` is `false`.
    ///   - format: The format; `nil` derives it from `path`'s extension.
    ///   - options: Compression level and buffering.
    ///   - willCreateTemporaryFile: Called with the path of each hidden file the writer is
    ///     about to create beside `path` — only where the file system has no unnamed files,
    ///     or for an instant when replacing a file — before it exists: a caller that records
    ///     it can remove it should the process die before ``finish()``. Throwing stops the
    ///     writer (code `callbackFailed`, the error as ``ArchiveError/cause``).
    /// - Throws: ``ArchiveError`` with code `invalidArgument` for an unknown extension or a
    ///   compression level out of range, `io` if the file cannot be created.
    public convenience init(
        path: String, format: ArchiveFormat? = nil, options: ArchiveWriteOptions = ArchiveWriteOptions(),
        willCreateTemporaryFile: ((String) throws -> Void)? = nil
    ) throws(ArchiveError) {
        guard let format = format ?? ArchiveFormat(fileExtensionOf: path) else {
            throw ArchiveError(
                code: .invalidArgument,
                message: "Cannot write '\(path)': its extension names no archive format "
                    + "(use .tar, .tar.gz, .tgz, .tar.zst, .tzst, .tar.xz, .txz or .zip)",
                archivePath: path)
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        // An unnamed file in the target's folder, with the usual 0666 & ~umask mode: it
        // vanishes with the process unless finish() links it.
        var fd = options.usesUnnamedFile ? cfilesync_open_unnamed(directory, 0o666) : -1
        var target = FileTarget.unnamed
        if fd < 0, !options.usesUnnamedFile || [EOPNOTSUPP, EISDIR, EINVAL].contains(Glibc.errno) {
            // No O_TMPFILE on this file system: a new, unique hidden file beside the target.
            (fd, target) = try Self.createTemporaryFile(for: path, announcing: willCreateTemporaryFile)
        }
        guard fd >= 0 else {
            let code = Glibc.errno
            throw ArchiveError(
                code: .io,
                message: "Cannot write '\(path)': cannot create a file in '\(directory)': \(systemMessage(code))",
                archivePath: path, operation: "open", errno: code)
        }
        try self.init(
            archivePath: path, format: format, options: options, sink: ChunkSink(fd: fd), file: target,
            willCreateTemporaryFile: willCreateTemporaryFile)
    }

    /// A hidden path beside `path` that no file has (by chance).
    private static func temporaryPath(for path: String, _ kind: String) -> String {
        let url = URL(fileURLWithPath: path)
        return url.deletingLastPathComponent().path
            + "/.\(url.lastPathComponent).\(kind)-\(UInt32.random(in: .min ... .max))"
    }

    /// Creates a new hidden file beside `path` (`O_EXCL`), named to `announce` first; the
    /// descriptor is -1 (errno set) if it cannot be created.
    private static func createTemporaryFile(
        for path: String, announcing announce: ((String) throws -> Void)?
    ) throws(ArchiveError) -> (Int32, FileTarget) {
        var fd: Int32 = -1
        var temporary = ""
        for _ in 0..<100 {
            temporary = temporaryPath(for: path, "partial")
            try announced(temporary, to: announce, archivePath: path)
            fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o666)
            if fd >= 0 || Glibc.errno != EEXIST { break }
        }
        return (fd, .named(temporary))
    }

    private static func announced(
        _ temporary: String, to announce: ((String) throws -> Void)?, archivePath: String
    ) throws(ArchiveError) {
        do {
            try announce?(temporary)
        } catch {
            throw ArchiveError(
                code: .callbackFailed, message: "Cannot write '\(archivePath)': \(error)", archivePath: archivePath,
                cause: error)
        }
    }

    /// Writes an archive in `format` as a stream of chunks, passing each to `writeChunk`.
    ///
    /// `writeChunk` is called with blocks of at most 64 KiB; the buffer is only valid during
    /// the call. If it throws, writing stops with an ``ArchiveError`` of code
    /// `callbackFailed` carrying the error as ``ArchiveError/cause``.
    ///
    /// ```swift
    /// var output: [UInt8] = []
    /// let writer = try ArchiveWriter(format: .tarGzip) { output.append(contentsOf: $0) }
    /// ```
    ///
    /// - Parameters:
    ///   - format: The archive format.
    ///   - name: A name for the archive, used in messages.
    ///   - options: Compression level and buffering.
    ///   - writeChunk: Receives the archive's bytes in order.
    /// - Throws: ``ArchiveError`` with code `invalidArgument` for a compression level out of
    ///   range.
    public convenience init(
        format: ArchiveFormat, name: String = "<stream>", options: ArchiveWriteOptions = ArchiveWriteOptions(),
        writeChunk: @escaping (UnsafeRawBufferPointer) throws -> Void
    ) throws(ArchiveError) {
        try self.init(
            archivePath: name, format: format, options: options, sink: ChunkSink(write: writeChunk), file: nil,
            willCreateTemporaryFile: nil)
    }

    /// For a file archive: names the hidden file that replacing an existing one takes.
    private let willCreateTemporaryFile: ((String) throws -> Void)?

    private init(
        archivePath: String, format: ArchiveFormat, options: ArchiveWriteOptions, sink: ChunkSink,
        file: FileTarget?, willCreateTemporaryFile: ((String) throws -> Void)?
    ) throws(ArchiveError) {
        guard let handle = archive_write_new() else {
            sink.closeFile()
            if let temporaryPath = file?.temporaryPath { unlink(temporaryPath) }
            throw ArchiveError(
                code: .outOfMemory, message: "Cannot write '\(archivePath)': archive_write_new failed: out of memory",
                archivePath: archivePath, operation: "archive_write_new")
        }
        self.handle = handle
        self.archivePath = archivePath
        self.format = format
        self.options = options
        self.sink = sink
        self.file = file
        self.willCreateTemporaryFile = willCreateTemporaryFile
        // libarchive caches the locale's charset the first time it converts a name, so even
        // setting options must happen under the UTF-8 locale.
        try locale.run { () throws(ArchiveError) in try configure() }
    }

    private func configure() throws(ArchiveError) {
        if let level = options.compressionLevel {
            guard let range = format.compressionLevels, range.contains(level) else {
                let allowed = format.compressionLevels.map { "\($0.lowerBound)–\($0.upperBound)" }
                throw failEarly(
                    ArchiveError(
                        code: .invalidArgument,
                        message: "Cannot write '\(archivePath)': compression level \(level) is not valid for "
                            + "\(format) (\(allowed.map { "use \($0)" } ?? "it has no compression level"))",
                        archivePath: archivePath))
            }
        }
        let level = options.compressionLevel.map(String.init)
        switch format {
        case .tar, .tarGzip, .tarZstd, .tarXz:
            try check(archive_write_set_format_pax_restricted(handle), "archive_write_set_format_pax_restricted")
            // Names in pax headers as raw bytes (`hdrcharset=BINARY`): libarchive reads UTF-8
            // pax names through an NFC normalisation, raw ones byte for byte.
            try setOption("pax", "hdrcharset", "BINARY")
        case .zip(let compression):
            try check(archive_write_set_format_zip(handle), "archive_write_set_format_zip")
            try setOption("zip", "hdrcharset", "UTF-8")
            try setOption("zip", "compression", compression == .store ? "store" : "deflate")
            if let level { try setOption("zip", "compression-level", level) }
        }
        let filter: ((OpaquePointer) -> Int32, String)? =
            switch format {
            case .tarGzip: (archive_write_add_filter_gzip, "archive_write_add_filter_gzip")
            case .tarZstd: (archive_write_add_filter_zstd, "archive_write_add_filter_zstd")
            case .tarXz: (archive_write_add_filter_xz, "archive_write_add_filter_xz")
            case .tar, .zip: nil
            }
        if let (filter, name) = filter {
            if file != nil {
                // To a file: compressed on a thread of its own, beside the work that produces
                // the members' bytes. (A stream's chunks stay on the caller's thread.)
                do {
                    stage = try CompressionStage(filter: filter, filterName: name, level: level, output: sink)
                } catch {
                    let outOfMemory = error.failure == nil || error.failure?.errno == ENOMEM
                    throw failEarly(
                        ArchiveError(
                            code: outOfMemory ? .outOfMemory : .invalidArgument,
                            message: "Cannot write '\(archivePath)': \(error.operation) failed: "
                                + "\(error.failure?.message ?? "out of memory")",
                            archivePath: archivePath, operation: error.operation,
                            libarchiveMessage: error.failure?.message, errno: error.failure?.errno ?? 0))
                }
            } else {
                try check(filter(handle), name)
                if let level {
                    let status = archive_write_set_filter_option(handle, nil, "compression-level", level)
                    try check(status, "archive_write_set_filter_option(compression-level=\(level))")
                }
            }
        }
        try check(archive_write_set_bytes_per_block(handle, 64 << 10), "archive_write_set_bytes_per_block")
        // Never pad the last block: padded zstd output is unreadable (PLATFORM.md trap 2).
        try check(archive_write_set_bytes_in_last_block(handle, 1), "archive_write_set_bytes_in_last_block")
        let client = Unmanaged.passUnretained((stage ?? sink) as AnyObject).toOpaque()
        let status = archive_write_open2(handle, client, nil, archiveIOWriteCallback, nil, nil)
        try check(status, "archive_write_open2")
    }

    private func setOption(_ module: String, _ key: String, _ value: String) throws(ArchiveError) {
        try check(
            archive_write_set_format_option(handle, module, key, value),
            "archive_write_set_format_option(\(module):\(key)=\(value))")
    }

    deinit {
        var finished = false
        if case .finished = state { finished = true }
        // Keep libarchive from writing a trailer that would make a partial archive look whole.
        if !finished { archive_write_fail(handle) }
        archive_write_free(handle)
        stage = nil  // its blocks written (or dropped) before the file closes
        sink.closeFile()
        if !finished, let temporaryPath = file?.temporaryPath { unlink(temporaryPath) }
        buffer?.deallocate()
    }

    // MARK: Adding members

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

    /// Writes the archive's trailer, flushes the compressor and, for a file archive, moves
    /// the finished file to its path.
    ///
    /// - Throws: ``ArchiveError`` with code `writeFailed` or `io`; `misuse` if called twice.
    public func finish() throws(ArchiveError) {
        try ensureOpen()
        let status = archive_write_close(handle)
        if status < ARCHIVE_WARN { throw poison(fail("archive_write_close", member: nil)) }
        if status == ARCHIVE_WARN { warn("archive_write_close", member: nil) }
        if let ending = stage?.finish() {
            let failure = ending.failure
            if ending.isWarning {
                warn(ending.operation, member: nil, message: failure.message)
            } else {
                throw poison(
                    ArchiveError(
                        code: failure.errno == ENOMEM ? .outOfMemory : .writeFailed,
                        message:
                            "Cannot write '\(archivePath)': compressing failed: \(failure.message ?? "unknown error")",
                        archivePath: archivePath, operation: ending.operation, libarchiveMessage: failure.message,
                        errno: failure.errno))
            }
        }
        if let file {
            if options.synchronizesOnFinish, let fd = sink.fd, fsync(fd) != 0 {
                throw poison(ioError("fsync", path: file.temporaryPath ?? archivePath, member: nil))
            }
            try publish(file)
            if options.synchronizesOnFinish {
                let directory = URL(fileURLWithPath: archivePath).deletingLastPathComponent().path
                let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                if fd >= 0 {
                    defer { close(fd) }
                    if fsync(fd) != 0 { throw poison(ioError("fsync", path: directory, member: nil)) }
                }
            }
        }
        state = .finished
    }

    // MARK: Internals

    /// Gives the finished file the archive's path: never replacing a file there unless
    /// ``ArchiveWriteOptions/replacesExisting``, and then in one `rename(2)`.
    private func publish(_ file: FileTarget) throws(ArchiveError) {
        switch file {
        case .named(let temporary):
            sink.closeFile()
            let status =
                options.replacesExisting
                ? rename(temporary, archivePath) : cfilesync_rename_noreplace(temporary, archivePath)
            guard status == 0 else {
                throw poison(
                    Glibc.errno == EEXIST ? alreadyExists() : ioError("rename", path: archivePath, member: nil))
            }
        case .unnamed:
            guard let fd = sink.fd else { throw poison(ioError("linkat", path: archivePath, member: nil)) }
            if cfilesync_link_unnamed(fd, archivePath) == 0 {
                sink.closeFile()
                return
            }
            guard Glibc.errno == EEXIST else { throw poison(ioError("linkat", path: archivePath, member: nil)) }
            guard options.replacesExisting else { throw poison(alreadyExists()) }
            // Replacing: linked under a hidden name beside the target, then renamed over it.
            let temporary = Self.temporaryPath(for: archivePath, "replacing")
            do throws(ArchiveError) {
                try Self.announced(temporary, to: willCreateTemporaryFile, archivePath: archivePath)
            } catch {
                throw poison(error)
            }
            guard cfilesync_link_unnamed(fd, temporary) == 0 else {
                throw poison(ioError("linkat", path: temporary, member: nil))
            }
            sink.closeFile()
            guard rename(temporary, archivePath) == 0 else {
                let error = ioError("rename", path: archivePath, member: nil)
                unlink(temporary)
                throw poison(error)
            }
        }
    }

    private func alreadyExists() -> ArchiveError {
        ArchiveError(
            code: .alreadyExists, message: "Cannot write '\(archivePath)': a file of that name already exists",
            archivePath: archivePath, operation: "link", errno: EEXIST)
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

    private func ensureOpen() throws(ArchiveError) {
        switch state {
        case .open: return
        case .failed(let error): throw error
        case .finished:
            throw ArchiveError(
                code: .misuse, message: "Cannot write to '\(archivePath)': the archive is already finished",
                archivePath: archivePath)
        }
    }

    private func check(_ status: Int32, _ operation: String) throws(ArchiveError) {
        if status == ARCHIVE_WARN { warn(operation, member: nil) }
        if status < ARCHIVE_WARN { throw failEarly(fail(operation, member: nil, code: .invalidArgument)) }
    }

    /// A failure while setting up: the writer never becomes usable.
    private func failEarly(_ error: ArchiveError) -> ArchiveError {
        state = .failed(error)
        return error
    }

    /// Marks the writer failed: no later call can produce a complete-looking archive.
    /// Poisons the writer with `error` unless it failed already (with that error).
    private func poisonIfOpen(_ error: ArchiveError) -> ArchiveError {
        if case .failed(let first) = state { return first }
        return poison(error)
    }

    private func poison(_ error: ArchiveError) -> ArchiveError {
        state = .failed(error)
        archive_write_fail(handle)
        return error
    }

    private func fail(_ operation: String, member: String?, code: ArchiveError.Code = .writeFailed) -> ArchiveError {
        let failure = LibarchiveFailure(handle)
        var location = "'\(archivePath)'"
        if let member { location += ", member '\(displayName(member))'" }
        if let cause = sink.error {
            return ArchiveError(
                code: .callbackFailed, message: "Cannot write \(location): the chunk sink threw: \(cause)",
                archivePath: archivePath, member: member, operation: operation, libarchiveMessage: failure.message,
                errno: failure.errno, cause: cause)
        }
        return ArchiveError(
            code: failure.errno == ENOMEM ? .outOfMemory : code,
            message: "Cannot write \(location): \(operation) failed: \(failure.message ?? "unknown error")",
            archivePath: archivePath, member: member, operation: operation, libarchiveMessage: failure.message,
            errno: failure.errno)
    }

    private func ioError(_ operation: String, path: String, member: String?) -> ArchiveError {
        let code = Glibc.errno
        return ArchiveError(
            code: .io, message: "Cannot write '\(archivePath)': \(operation) '\(path)' failed: \(systemMessage(code))",
            archivePath: archivePath, member: member, operation: operation, errno: code)
    }

    private func warn(_ operation: String, member: String?, message: String? = nil) {
        let message = message ?? archive_error_string(handle).map { String(cString: $0) } ?? "warning"
        let warning = ArchiveWarning(archivePath: archivePath, member: member, operation: operation, message: message)
        warnings.append(warning)
        onWarning?(warning)
    }
}

@available(*, unavailable)
extension ArchiveWriter: Sendable {}

/// Creates the archive `path`, passes a writer to `body`, and finishes the archive when
/// `body` returns. If `body` throws, no archive is left at `path` (an existing file there is
/// kept) and the error is rethrown.
///
/// ```swift
/// try withArchiveWriter(at: "out.zip") { writer in
///     try writer.addFile(at: "README.md", as: "README.md")
/// }
/// ```
///
/// - Parameters:
///   - path: Where to write the archive.
///   - format: The format; `nil` derives it from `path`'s extension.
///   - options: Compression level and buffering.
///   - body: Adds members; must not keep the writer.
/// - Returns: What `body` returns.
/// - Throws: ``ArchiveError`` from creating or finishing the archive, or what `body` throws.
public func withArchiveWriter<Result>(
    at path: String, format: ArchiveFormat? = nil, options: ArchiveWriteOptions = ArchiveWriteOptions(),
    _ body: (ArchiveWriter) throws -> Result
) throws -> Result {
    let writer = try ArchiveWriter(path: path, format: format, options: options)
    let result = try body(writer)
    try writer.finish()
    return result
}

/// Where a writer's bytes go: a file descriptor or a caller's closure.
final class ChunkSink: ArchiveOutput {
    private(set) var fd: Int32?
    private let write: ((UnsafeRawBufferPointer) throws -> Void)?
    var error: (any Error)?

    init(fd: Int32) {
        self.fd = fd
        self.write = nil
    }

    init(write: @escaping (UnsafeRawBufferPointer) throws -> Void) {
        self.fd = nil
        self.write = write
    }

    func closeFile() {
        if let fd { close(fd) }
        fd = nil
    }

    func accept(_ archive: OpaquePointer?, _ bytes: UnsafeRawBufferPointer) -> Int {
        if let write {
            do {
                try write(bytes)
                return bytes.count
            } catch {
                self.error = error
                carchive_set_error(archive, EIO, "the chunk sink threw an error")
                return -1
            }
        }
        guard let fd else {
            carchive_set_error(archive, EBADF, "the archive file is closed")
            return -1
        }
        var remaining = bytes
        while !remaining.isEmpty {
            let count = Glibc.write(fd, remaining.baseAddress, remaining.count)
            if count < 0 {
                if Glibc.errno == EINTR { continue }
                let code = Glibc.errno
                carchive_set_error(archive, code, "write failed: \(systemMessage(code))")
                return -1
            }
            remaining = UnsafeRawBufferPointer(rebasing: remaining[count...])
        }
        return bytes.count
    }
}

func archiveIOWriteCallback(
    _ archive: OpaquePointer?, _ client: UnsafeMutableRawPointer?, _ buffer: UnsafeRawPointer?, _ length: Int
) -> la_ssize_t {
    guard let client else { return -1 }
    let output = Unmanaged<AnyObject>.fromOpaque(client).takeUnretainedValue() as! any ArchiveOutput
    return output.accept(archive, UnsafeRawBufferPointer(start: buffer, count: length))
}
