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
    public internal(set) var warnings: [ArchiveWarning] = []
    /// Called with each warning as it is reported (in addition to ``warnings``).
    public var onWarning: ((ArchiveWarning) -> Void)?

    let handle: OpaquePointer
    let locale = UTF8LocaleScope()
    let sink: ChunkSink
    /// For a compressed archive written to a file: the thread that compresses it.
    var stage: CompressionStage?
    let options: ArchiveWriteOptions
    /// Where a file archive is written until ``finish()`` publishes it; `nil` for a stream.
    let file: FileTarget?
    var state = State.open
    var buffer: UnsafeMutableRawBufferPointer?

    enum State {
        case open, finished
        case failed(ArchiveError)
    }

    enum FileTarget {
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
    static func temporaryPath(for path: String, _ kind: String) -> String {
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

    static func announced(
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
    let willCreateTemporaryFile: ((String) throws -> Void)?

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
