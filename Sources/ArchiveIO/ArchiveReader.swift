import CArchive
import FoundationEssentials
import Glibc

/// Reads an archive member by member, streaming: any format and compression libarchive
/// reads (tar, pax, ustar, gnutar, cpio, zip, 7z, iso9660, ar, xar, … compressed with gzip,
/// bzip2, xz, lzma, zstd, lz4, …), detected automatically.
///
/// A reader moves forward only. ``nextEntry()`` returns each member's header; the member's
/// data can then be read in bounded chunks with ``readData(_:)`` or ``read(into:)``, or left
/// unread (it is skipped, without decompressing where the format allows). Memory use does
/// not depend on the archive's or the member's size.
///
/// ```swift
/// try withArchiveReader(at: "photos.tar.zst") { reader in
///     while let entry = try reader.nextEntry() {
///         guard entry.kind == .file else { continue }
///         var bytes = 0
///         try reader.readData { chunk in bytes += chunk.count }
///         print(entry.path, bytes)
///     }
/// }
/// ```
///
/// Errors are ``ArchiveError``s naming the archive, the member and the libarchive call that
/// failed. A truncated or corrupt archive is always an error, never a short read: a member
/// whose data ends before its recorded size throws ``ArchiveError/Code-swift.struct/truncatedArchive``.
/// libarchive's warnings (`ARCHIVE_WARN`) are collected in ``warnings`` and passed to
/// ``onWarning``.
///
/// The underlying libarchive handle is freed when the reader is deinitialised; prefer the
/// scoped ``withArchiveReader(at:_:)``. A reader is not thread-safe; use it from one task
/// at a time.
public final class ArchiveReader {
    /// The archive's path, or the name given to a streamed archive; used in messages.
    public let archivePath: String
    /// Every warning libarchive reported so far, in order.
    public private(set) var warnings: [ArchiveWarning] = []
    /// Called with each warning as it is reported (in addition to ``warnings``).
    public var onWarning: ((ArchiveWarning) -> Void)?
    /// The header returned by the last ``nextEntry()``, or `nil` before the first and after
    /// the end.
    public private(set) var currentEntry: ArchiveEntry?

    let handle: OpaquePointer
    private let locale = UTF8LocaleScope()
    private let source: ChunkSource?
    private var failure: ArchiveError?
    private var cursor = DataCursor()
    private var zeroes: UnsafeMutableRawBufferPointer?
    private var finished = false
    /// The descriptor of the archive file when reading a file, opened once by this reader and
    /// closed by it; `-1` for a stream. Zip names are read from it too (see ``ZipRawNames``).
    private var fileDescriptor: Int32 = -1
    private var zipNames: ZipRawNames??
    private var entryIndex = 0

    /// Opens the archive file at `path`.
    ///
    /// The file is opened once, and what was opened is checked: it must be a regular file. A
    /// FIFO, a device, a socket or a directory is refused at once (it is opened without
    /// blocking, so a FIFO never waits for a writer). Everything read afterwards comes from
    /// that one descriptor, even if the path is renamed or replaced meanwhile. A symbolic link
    /// at `path` is followed.
    ///
    /// - Parameters:
    ///   - path: The archive's path.
    ///   - blockSize: How many bytes to read from the file at a time.
    /// - Throws: ``ArchiveError`` with code `openFailed` if the file cannot be opened or is not
    ///   a regular file ("Cannot open 'in.tar': it is a FIFO, not a regular file");
    ///   `unrecognizedFormat` or `truncatedArchive` when its first block already shows that
    ///   (opening reads it to detect the compression); `outOfMemory`.
    public convenience init(path: String, blockSize: Int = 128 * 1024) throws(ArchiveError) {
        let (fd, size) = try openRegularFile(path)
        do {
            try self.init(archivePath: path, source: nil)
        } catch {
            close(fd)
            throw error
        }
        fileDescriptor = fd
        fileSize = size
        let status = locale.run { archive_read_open_fd(handle, fd, max(blockSize, 512)) }
        try check(status, "archive_read_open_fd", code: .openFailed)
    }

    /// Reads an archive from a stream of chunks, for example a network download.
    ///
    /// `nextChunk` is called whenever libarchive needs more bytes; it returns the next chunk,
    /// or `nil` at the end of the stream. Empty chunks are skipped. An error it throws stops
    /// reading with code `callbackFailed`, carrying the error as ``ArchiveError/cause``.
    ///
    /// ```swift
    /// var chunks = downloadedChunks.makeIterator()
    /// let reader = try ArchiveReader(name: "download.tar.gz") { chunks.next() }
    /// ```
    ///
    /// Formats that need to seek are read in their streaming form or not at all: a streamed
    /// zip is read from its local headers (symbolic links then look like small files, sizes
    /// may be unknown until the data is read, names may be NFC-normalised), and 7z cannot be
    /// streamed. Read those from a file.
    ///
    /// - Parameters:
    ///   - name: A name for the archive, used in messages.
    ///   - nextChunk: Returns the next bytes of the archive, or `nil` at its end.
    /// - Throws: ``ArchiveError`` with code `openFailed` or `callbackFailed` if the first
    ///   chunk cannot be read, `unrecognizedFormat` if it is no archive.
    public convenience init(name: String = "<stream>", nextChunk: @escaping () throws -> [UInt8]?) throws(ArchiveError)
    {
        let source = ChunkSource(next: nextChunk)
        try self.init(archivePath: name, source: source)
        let client = Unmanaged.passUnretained(source).toOpaque()
        let status = locale.run {
            archive_read_open(handle, client, nil, archiveIOReadCallback, nil)
        }
        try check(status, "archive_read_open", code: .openFailed)
    }

    private init(archivePath: String, source: ChunkSource?) throws(ArchiveError) {
        guard let handle = archive_read_new() else {
            throw ArchiveError(
                code: .outOfMemory, message: "Cannot read '\(archivePath)': archive_read_new failed: out of memory",
                archivePath: archivePath, operation: "archive_read_new")
        }
        self.handle = handle
        self.archivePath = archivePath
        self.source = source
        try locale.run { () throws(ArchiveError) in
            try check(archive_read_support_format_all(handle), "archive_read_support_format_all")
            try check(archive_read_support_filter_all(handle), "archive_read_support_filter_all")
        }
    }

    deinit {
        archive_read_free(handle)  // libarchive does not close a descriptor it was given
        if fileDescriptor >= 0 { close(fileDescriptor) }
        zeroes?.deallocate()
    }

    // MARK: Entries

    /// Moves to the next member and returns its header, or `nil` at the end of the archive.
    ///
    /// Unread data of the previous member is skipped.
    ///
    /// - Returns: The member's header, or `nil` when there are no more members.
    /// - Throws: ``ArchiveError`` with code `unrecognizedFormat`, `corruptArchive`,
    ///   `truncatedArchive`, `callbackFailed` or `outOfMemory`. After an error the reader
    ///   cannot continue; every later call throws the same error.
    public func nextEntry() throws(ArchiveError) -> ArchiveEntry? {
        if let failure { throw failure }
        if finished { return nil }
        let previous = currentEntry?.path
        let unconsumed = tarBytesLeft()
        let positionBefore = archive_filter_bytes(handle, 0)
        currentEntry = nil
        cursor = DataCursor()
        var raw: OpaquePointer?
        let (status, found) = locale.run { () -> (Int32, ArchiveEntry?) in
            let status = archive_read_next_header(handle, &raw)
            guard status == ARCHIVE_OK || status == ARCHIVE_WARN, let raw else { return (status, nil) }
            return (status, makeEntry(raw))
        }
        defer { entryIndex += 1 }
        if status == ARCHIVE_EOF {
            finished = true
            try checkTarEnd(consumed: archive_filter_bytes(handle, 0) - positionBefore, unconsumed, after: previous)
            return nil
        }
        guard var entry = found else {
            let code = status == ARCHIVE_RETRY ? .corruptArchive : readFailureCode(LibarchiveFailure(handle))
            throw record(fail("archive_read_next_header", code: code, after: previous))
        }
        if let raw = rawZipName() {
            // Canonically equivalent (Swift's `==`) but not necessarily the same bytes.
            let exact = String(decoding: raw, as: UTF8.self)
            if exact == entry.path {
                entry.path = exact
            } else {
                zipNames = .some(nil)  // Out of step: stop using the central directory.
            }
        }
        currentEntry = entry
        if status == ARCHIVE_WARN { warn("archive_read_next_header", member: entry.path) }
        if entry.kind == .file, let raw { cursor.isSparse = archive_entry_sparse_count(raw) > 0 }
        return entry
    }

    /// Calls `body` with each remaining member; `body` may read the member's data.
    ///
    /// ```swift
    /// try reader.forEachEntry { entry in print(entry.path) }
    /// ```
    ///
    /// - Throws: Any ``ArchiveError`` of ``nextEntry()``, or what `body` throws.
    public func forEachEntry(_ body: (ArchiveEntry) throws -> Void) throws {
        while let entry = try nextEntry() { try body(entry) }
    }

    /// Moves forward to the member whose path is byte-for-byte `path` and returns its header,
    /// or `nil` if no later member has that path. Members before it are skipped unread.
    ///
    /// A leading `./` and a trailing `/` are ignored on both sides.
    ///
    /// - Parameter path: The member's path inside the archive.
    /// - Throws: Any ``ArchiveError`` of ``nextEntry()``.
    public func findEntry(path: String) throws(ArchiveError) -> ArchiveEntry? {
        let wanted = Self.comparable(path)
        while let entry = try nextEntry() {
            if Self.comparable(entry.path).elementsEqual(wanted) { return entry }
        }
        return nil
    }

    private static func comparable(_ path: String) -> Substring.UTF8View {
        var path = Substring(path)
        while path.hasPrefix("./") { path = path.dropFirst(2) }
        while path.count > 1 && path.hasSuffix("/") { path = path.dropLast() }
        return path.utf8
    }

    // MARK: Data

    /// Calls `body` with the current member's data, chunk by chunk, in order.
    ///
    /// Chunks are at most a few hundred KiB whatever the member's size; the buffer is only
    /// valid during the call. Holes of sparse members are delivered as zeros.
    ///
    /// ```swift
    /// var hasher = SHA256()
    /// try reader.readData { hasher.update(bufferPointer: $0) }
    /// ```
    ///
    /// - Parameter body: Called with each chunk.
    /// - Throws: ``ArchiveError`` (`truncatedArchive`, `corruptArchive`, `unsupportedEntry`
    ///   for encrypted data, `misuse` before the first entry), or what `body` throws.
    public func readData(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        while let chunk = try nextChunk() { try body(chunk) }
    }

    /// Copies up to `buffer.count` bytes of the current member's data into `buffer`.
    ///
    /// - Parameter buffer: Where to copy the bytes.
    /// - Returns: How many bytes were copied; `0` at the end of the member's data.
    /// - Throws: Like ``readData(_:)``.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(ArchiveError) -> Int {
        guard buffer.count > 0, let chunk = try nextChunk(limit: buffer.count) else { return 0 }
        buffer.copyMemory(from: chunk)
        return chunk.count
    }

    /// Reads the whole data of the current member into memory, for small members.
    ///
    /// - Parameter maxBytes: The most bytes to accept.
    /// - Returns: The member's data.
    /// - Throws: ``ArchiveError`` with code `sizeLimitExceeded` if the member is larger than
    ///   `maxBytes`, or any error of ``readData(_:)``.
    public func readContents(maxBytes: Int = 16 << 20) throws(ArchiveError) -> [UInt8] {
        var bytes: [UInt8] = []
        while let chunk = try nextChunk() {
            guard bytes.count + chunk.count <= maxBytes else {
                throw record(
                    ArchiveError(
                        code: .sizeLimitExceeded,
                        message: "Cannot read member '\(displayName(currentEntry?.path ?? ""))' of '\(archivePath)' "
                            + "into memory: it is larger than \(maxBytes) bytes",
                        archivePath: archivePath, member: currentEntry?.path),
                    fatal: false)
            }
            bytes.append(contentsOf: chunk)
        }
        return bytes
    }

    /// Skips the current member's data without reading it; seeks past it where the format
    /// and the source allow. Calling ``nextEntry()`` does the same.
    ///
    /// - Throws: ``ArchiveError`` if the archive is damaged.
    public func skipData() throws(ArchiveError) {
        if let failure { throw failure }
        guard currentEntry != nil, !cursor.finished else { return }
        cursor.finished = true
        cursor.skipped = true
        let status = archive_read_data_skip(handle)
        if status < ARCHIVE_WARN {
            throw record(fail("archive_read_data_skip", code: readFailureCode(LibarchiveFailure(handle))))
        }
        if status == ARCHIVE_WARN { warn("archive_read_data_skip", member: currentEntry?.path) }
    }

    // MARK: Properties of the archive

    /// The size of the archive file, from `fstat` of the descriptor the reader opened; `nil`
    /// for a streamed archive.
    public private(set) var fileSize: Int64?

    /// The number of bytes read from the file or stream so far (compressed bytes).
    public var compressedBytesRead: Int64 { archive_filter_bytes(handle, -1) }

    /// The format libarchive detected, such as `"POSIX pax interchange format"` or `"ZIP 2.0
    /// (deflation)"`; known after the first ``nextEntry()``.
    public var formatName: String? {
        archive_format_name(handle).map { String(cString: $0) }
    }

    /// The compression filters libarchive detected, outermost first, such as `["zstd"]`;
    /// empty for an uncompressed archive. Known after the first ``nextEntry()``.
    public var filterNames: [String] {
        let count = archive_filter_count(handle)
        guard count > 1 else { return [] }
        return (0..<count - 1).compactMap { archive_filter_name(handle, $0).map { String(cString: $0) } }
    }

    // MARK: Internals

    /// Whether the chunk just delivered (to the body of ``readData(_:)``, or by
    /// ``read(into:)``) is part of a hole of a sparse member: zeros that the archive does
    /// not store. Extraction writes such chunks as holes; see
    /// ``ExtractionGuard/accountHole(bytes:)``.
    public private(set) var lastChunkIsHole = false

    /// The next chunk of the current member's data (at most `limit` bytes), or `nil` at its
    /// end. The buffer is valid until the next call into the reader.
    func nextChunk(limit: Int = .max) throws(ArchiveError) -> UnsafeRawBufferPointer? {
        lastChunkIsHole = false
        if let failure { throw failure }
        guard let entry = currentEntry else {
            throw record(
                ArchiveError(
                    code: .misuse,
                    message: "Cannot read data from '\(archivePath)': there is no current member "
                        + "(call nextEntry() first)",
                    archivePath: archivePath),
                fatal: false)
        }
        if cursor.finished { return nil }
        while true {
            if cursor.hole > 0 {
                let zeroes = zeroBlock()
                let count = Int(min(cursor.hole, Int64(min(zeroes.count, limit))))
                cursor.hole -= Int64(count)
                cursor.position += Int64(count)
                lastChunkIsHole = true
                return UnsafeRawBufferPointer(rebasing: zeroes[0..<count])
            }
            if let block = cursor.block, block.count > 0 {
                let count = min(block.count, limit)
                cursor.block = UnsafeRawBufferPointer(rebasing: block[count...])
                cursor.position += Int64(count)
                return UnsafeRawBufferPointer(rebasing: block[0..<count])
            }
            var buffer: UnsafeRawPointer?
            var size = 0
            var offset: la_int64_t = 0
            let status = archive_read_data_block(handle, &buffer, &size, &offset)
            switch status {
            case ARCHIVE_EOF:
                if let expected = entry.size, entry.kind == .file, cursor.position < expected {
                    if cursor.isSparse && !cursor.trailingHoleDelivered {
                        // A sparse member may end with a hole, which libarchive does not report.
                        cursor.hole = expected - cursor.position
                        cursor.trailingHoleDelivered = true
                        continue
                    }
                    throw record(
                        ArchiveError(
                            code: .truncatedArchive,
                            message: "Cannot read '\(archivePath)', member '\(displayName(entry.path))': its data "
                                + "ends after \(cursor.position) of \(expected) bytes",
                            archivePath: archivePath, member: entry.path, operation: "archive_read_data_block"))
                }
                cursor.finished = true
                return nil
            case ARCHIVE_OK, ARCHIVE_WARN:
                if status == ARCHIVE_WARN {
                    // libarchive reports a member whose CRC does not match as a mere warning
                    // (zip), after handing out its bad bytes: that is corruption.
                    let failure = LibarchiveFailure(handle)
                    let text = failure.message?.lowercased() ?? ""
                    if text.contains("crc") || text.contains("checksum") {
                        cursor.finished = true
                        throw record(fail("archive_read_data_block", code: .corruptArchive), fatal: false)
                    }
                    warn("archive_read_data_block", member: entry.path)
                }
                if offset < cursor.position {
                    throw record(
                        ArchiveError(
                            code: .corruptArchive,
                            message: "Cannot read '\(archivePath)', member '\(displayName(entry.path))': "
                                + "archive_read_data_block returned overlapping data at offset \(offset)",
                            archivePath: archivePath, member: entry.path, operation: "archive_read_data_block"))
                }
                cursor.hole = offset - cursor.position
                cursor.block = buffer.map { UnsafeRawBufferPointer(start: $0, count: size) }
                cursor.fetched += Int64(size)
            default:
                let failure = LibarchiveFailure(handle)
                if status == ARCHIVE_FAILED {
                    // This member cannot be read (for example encrypted); the archive can continue.
                    cursor.finished = true
                    throw record(fail("archive_read_data_block", code: readFailureCode(failure)), fatal: false)
                }
                throw record(fail("archive_read_data_block", code: readFailureCode(failure)))
            }
        }
    }

    /// How many bytes of the current tar member libarchive has yet to consume (data not read,
    /// and the padding to 512 bytes), or `nil` when that cannot be known (sparse members).
    private func tarBytesLeft() -> Int64? {
        guard let entry = currentEntry else { return 0 }
        guard entry.kind == .file, let size = entry.size else { return 0 }
        if cursor.isSparse { return nil }
        if cursor.skipped { return 0 }
        return max(size - cursor.fetched, 0) + (512 - size % 512) % 512
    }

    /// libarchive ends a tar archive quietly when the file stops exactly between two members
    /// ("some writers omit the block of nulls"), which is also what a truncated download looks
    /// like. Require the end-of-archive marker: at least one block of zeros after the last
    /// member.
    private func checkTarEnd(consumed: Int64, _ unconsumed: Int64?, after previous: String?) throws(ArchiveError) {
        guard archive_format(handle) & ARCHIVE_FORMAT_BASE_MASK == ARCHIVE_FORMAT_TAR, let unconsumed else { return }
        guard consumed < unconsumed + 512 else { return }
        let location = previous.map { "'\(archivePath)' after member '\(displayName($0))'" } ?? "'\(archivePath)'"
        throw record(
            ArchiveError(
                code: .truncatedArchive,
                message: "Cannot read \(location): the archive ends without its end-of-archive marker "
                    + "(it is probably truncated)",
                archivePath: archivePath, member: nil, operation: "archive_read_next_header"))
    }

    /// The raw bytes of the current zip member's name when libarchive may have normalised it.
    private func rawZipName() -> [UInt8]? {
        guard fileDescriptor >= 0, archive_format(handle) & ARCHIVE_FORMAT_BASE_MASK == ARCHIVE_FORMAT_ZIP,
            archive_filter_count(handle) == 1
        else { return nil }
        if zipNames == nil { zipNames = .some(ZipRawNames.read(fd: fileDescriptor)) }
        return zipNames??.names[entryIndex]
    }

    private func zeroBlock() -> UnsafeRawBufferPointer {
        if let zeroes { return UnsafeRawBufferPointer(zeroes) }
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
        block.initializeMemory(as: UInt8.self, repeating: 0)
        zeroes = block
        return UnsafeRawBufferPointer(block)
    }

    private func makeEntry(_ raw: OpaquePointer) -> ArchiveEntry {
        // The locale is UTF-8, so the multibyte form is UTF-8 already, and reading it converts
        // nothing (a `_utf8` getter could normalise).
        let path = Self.string(archive_entry_pathname(raw), fallback: archive_entry_pathname_utf8(raw)) ?? ""
        let hardlink = Self.string(archive_entry_hardlink(raw), fallback: archive_entry_hardlink_utf8(raw))
        let kind: ArchiveEntry.Kind
        if hardlink != nil {
            kind = .hardlink
        } else {
            switch UInt32(archive_entry_filetype(raw)) & CARCHIVE_AE_IFMT {
            case CARCHIVE_AE_IFREG: kind = .file
            case CARCHIVE_AE_IFDIR: kind = .directory
            case CARCHIVE_AE_IFLNK: kind = .symlink
            case CARCHIVE_AE_IFCHR: kind = .characterDevice
            case CARCHIVE_AE_IFBLK: kind = .blockDevice
            case CARCHIVE_AE_IFIFO: kind = .fifo
            case CARCHIVE_AE_IFSOCK: kind = .socket
            default: kind = .other
            }
        }
        var entry = ArchiveEntry(path: path, kind: kind, permissions: UInt16(archive_entry_perm(raw) & 0o7777))
        entry.size = archive_entry_size_is_set(raw) != 0 ? archive_entry_size(raw) : nil
        if archive_entry_mtime_is_set(raw) != 0 {
            let seconds = Double(archive_entry_mtime(raw))
            let nanoseconds = Double(archive_entry_mtime_nsec(raw))
            entry.modificationDate = Date(timeIntervalSince1970: seconds + nanoseconds / 1e9)
        }
        entry.linkTarget =
            kind == .symlink
            ? Self.string(archive_entry_symlink(raw), fallback: archive_entry_symlink_utf8(raw)) : hardlink
        entry.isEncrypted = archive_entry_is_encrypted(raw) != 0
        return entry
    }

    private static func string(
        _ primary: UnsafePointer<CChar>?, fallback: @autoclosure () -> UnsafePointer<CChar>?
    ) -> String? {
        guard let raw = primary ?? fallback() else { return nil }
        // Invalid UTF-8 (a legacy archive) is repaired with U+FFFD rather than dropped.
        let bytes = UnsafeRawBufferPointer(start: raw, count: strlen(raw))
        return String(decoding: bytes, as: UTF8.self)
    }

    private func check(_ status: Int32, _ operation: String, code: ArchiveError.Code = .openFailed) throws(ArchiveError)
    {
        if status == ARCHIVE_WARN { warn(operation, member: nil) }
        guard status < ARCHIVE_WARN else { return }
        // Opening reads the first block to detect the compression, so it can already find
        // a truncated or unrecognisable stream.
        let classified = readFailureCode(LibarchiveFailure(handle))
        throw record(fail(operation, code: classified == .corruptArchive ? code : classified))
    }

    /// Builds the error for a failed libarchive call, preferring a chunk source's own error.
    private func fail(_ operation: String, code: ArchiveError.Code, after previous: String? = nil) -> ArchiveError {
        let failure = LibarchiveFailure(handle)
        let member = previous == nil ? currentEntry?.path : nil
        var location = "'\(archivePath)'"
        if let member { location += ", member '\(displayName(member))'" }
        if let previous { location += " after member '\(displayName(previous))'" }
        if let cause = source?.error {
            return ArchiveError(
                code: .callbackFailed,
                message: "Cannot read \(location): the chunk source threw: \(cause)",
                archivePath: archivePath, member: member, operation: operation,
                libarchiveMessage: failure.message, errno: failure.errno, cause: cause)
        }
        let detail = failure.message ?? "unknown error"
        let verb = operation.hasPrefix("archive_read_open") ? "open" : "read"
        return ArchiveError(
            code: failure.errno == ENOMEM ? .outOfMemory : code,
            message: "Cannot \(verb) \(location): \(operation) failed: \(detail)",
            archivePath: archivePath, member: member, operation: operation,
            libarchiveMessage: failure.message, errno: failure.errno)
    }

    /// Remembers a fatal error so that later calls report it again instead of touching a
    /// handle libarchive has given up on.
    private func record(_ error: ArchiveError, fatal: Bool = true) -> ArchiveError {
        if fatal { failure = error }
        return error
    }

    private func warn(_ operation: String, member: String?) {
        let message = archive_error_string(handle).map { String(cString: $0) } ?? "warning"
        let warning = ArchiveWarning(archivePath: archivePath, member: member, operation: operation, message: message)
        warnings.append(warning)
        onWarning?(warning)
    }
}

@available(*, unavailable)
extension ArchiveReader: Sendable {}

/// Opens the archive at `path`, passes a reader to `body`, and frees the reader when `body`
/// returns or throws.
///
/// ```swift
/// let names = try withArchiveReader(at: "bundle.zip") { reader in
///     var names: [String] = []
///     try reader.forEachEntry { names.append($0.path) }
///     return names
/// }
/// ```
///
/// - Parameters:
///   - path: The archive's path.
///   - body: Works with the reader; must not keep it.
/// - Returns: What `body` returns.
/// - Throws: ``ArchiveError`` from opening (`openFailed`), or what `body` throws.
public func withArchiveReader<Result>(at path: String, _ body: (ArchiveReader) throws -> Result) throws -> Result {
    let reader = try ArchiveReader(path: path)
    return try withExtendedLifetime(reader) { try body(reader) }
}

/// Opens the file at `path` for reading, once, and checks what was opened: a regular file, or
/// an error naming what it is. `O_NONBLOCK` makes the open of a FIFO return at once instead of
/// waiting for a writer (and keeps a device from waiting for a carrier); it is cleared once the
/// file is known to be regular. Returns the descriptor (the caller closes it) and the size.
private func openRegularFile(_ path: String) throws(ArchiveError) -> (fd: Int32, size: Int64) {
    func failure(_ operation: String, _ code: Int32, fd: Int32 = -1) -> ArchiveError {
        if fd >= 0 { close(fd) }
        return ArchiveError(
            code: code == ENOMEM ? .outOfMemory : .openFailed,
            message: "Cannot open '\(path)': \(operation) failed: \(systemMessage(code))",
            archivePath: path, operation: operation, errno: code)
    }
    var fd: Int32
    repeat { fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY) } while fd < 0 && errno == EINTR
    guard fd >= 0 else { throw failure("open", errno) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw failure("fstat", errno, fd: fd) }
    guard info.st_mode & S_IFMT == S_IFREG else {
        close(fd)
        throw ArchiveError(
            code: .openFailed,
            message: "Cannot open '\(path)': it is \(fileTypeName(info.st_mode)), not a regular file",
            archivePath: path)
    }
    let flags = fcntl(fd, F_GETFL)
    guard flags >= 0, fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 else { throw failure("fcntl", errno, fd: fd) }
    return (fd, Int64(info.st_size))
}

/// A file type in words, for a mode that is not a regular file's.
private func fileTypeName(_ mode: mode_t) -> String {
    switch mode & S_IFMT {
    case S_IFDIR: "a directory"
    case S_IFIFO: "a FIFO"
    case S_IFCHR: "a character device"
    case S_IFBLK: "a block device"
    case S_IFSOCK: "a socket"
    case S_IFLNK: "a symbolic link"
    default: "a file of an unknown type"
    }
}

/// Where the reader is within the current member's data.
private struct DataCursor {
    /// The part of libarchive's current block not yet delivered.
    var block: UnsafeRawBufferPointer?
    /// Zero bytes (a sparse hole) to deliver before `block`.
    var hole: Int64 = 0
    /// Bytes delivered so far.
    var position: Int64 = 0
    var finished = false
    var isSparse = false
    var trailingHoleDelivered = false
    /// Bytes libarchive has handed out (and consumed) for this member, holes excluded.
    var fetched: Int64 = 0
    /// Whether the data was skipped with `archive_read_data_skip` (which consumes it all).
    var skipped = false
}

/// The state behind a streamed reader's libarchive read callback.
final class ChunkSource {
    let next: () throws -> [UInt8]?
    var error: (any Error)?
    private var buffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)

    init(next: @escaping () throws -> [UInt8]?) { self.next = next }

    deinit { buffer.deallocate() }

    /// Copies the next chunk into memory that stays valid until the following call.
    func read(_ archive: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafeRawPointer?>?) -> Int {
        do {
            while let chunk = try next() {
                guard !chunk.isEmpty else { continue }
                if buffer.count < chunk.count {
                    buffer.deallocate()
                    buffer = .allocate(byteCount: chunk.count, alignment: 16)
                }
                chunk.withUnsafeBytes { buffer.copyMemory(from: $0) }
                out?.pointee = UnsafeRawPointer(buffer.baseAddress)
                return chunk.count
            }
            return 0
        } catch {
            self.error = error
            carchive_set_error(archive, EIO, "the chunk source threw an error")
            return Int(ARCHIVE_FATAL)
        }
    }
}

private func archiveIOReadCallback(
    _ archive: OpaquePointer?, _ client: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<UnsafeRawPointer?>?
) -> la_ssize_t {
    guard let client else { return la_ssize_t(ARCHIVE_FATAL) }
    return Unmanaged<ChunkSource>.fromOpaque(client).takeUnretainedValue().read(archive, out)
}
