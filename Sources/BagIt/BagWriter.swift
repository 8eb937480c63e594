public import ArchiveIO
import CFileSync
import Crypto
public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One payload file a ``BagWriter`` will write: its path under `data/`, its
/// size and the SHA-256 its bytes must have.
public struct BagPayloadItem: Sendable, Hashable {
    /// The path relative to `data/` (`photos/a.jpg` is written as `data/photos/a.jpg`).
    public var path: String
    public var size: Int64
    /// Lowercase hex; the bytes written are hashed and compared with it.
    public var sha256: String

    public init(path: String, size: Int64, sha256: String) {
        self.path = path
        self.size = size
        self.sha256 = sha256
    }
}

/// The payload a ``BagWriter`` will write, declared before any of it is: the
/// SHA-256 manifest as a file, with the number of files and bytes it lists. For a
/// bag of any size — nothing per payload file is held in memory.
public struct BagPayloadManifest: Sendable, Hashable {
    /// A file of `checksum  data/path` lines (lowercase SHA-256, two spaces, the path
    /// encoded as ``TagFile/encodePath(_:)`` does), sorted by the paths' UTF-8 bytes, with
    /// no path twice: what ``TagFile/formatManifest(_:)`` writes. It must not change until
    /// the writer's initializer returns.
    public var file: String
    /// How many payload files it lists, and their total size (`Payload-Oxum`).
    public var files: Int
    public var bytes: Int64

    public init(file: String, files: Int, bytes: Int64) {
        self.file = file
        self.files = files
        self.bytes = bytes
    }
}

/// A tag file a ``BagWriter`` adds to a bag (outside `data/`): bytes in memory, or a
/// file whose bytes are copied in chunks — for a large tag file, which then need not
/// fit in memory.
public struct BagTagFile: Sendable, Hashable {
    enum Contents: Sendable, Hashable {
        case bytes([UInt8])
        case file(String)

        /// The file the bytes come from, if they do.
        var source: String? {
            if case .file(let source) = self { source } else { nil }
        }
    }

    /// The path relative to the bag.
    public var path: String
    var contents: Contents

    /// A tag file holding `bytes`.
    public static func bytes(_ path: String, _ bytes: [UInt8]) -> Self { Self(path: path, contents: .bytes(bytes)) }

    /// A tag file holding the bytes of the file at `source`, which must not change until
    /// the writer has written its tag files (when its initializer returns).
    public static func file(_ path: String, from source: String) -> Self { Self(path: path, contents: .file(source)) }
}

/// Where a bag is written: an archive (one top-level directory holding the
/// bag) or a plain directory (the bag itself).
public enum BagFormat: Sendable, Hashable, CustomStringConvertible {
    case archive(ArchiveFormat)
    case directory

    /// The format a path's extension names (`.tar`, `.tar.gz`, `.tar.zst`, `.zip`, …), else a directory.
    public init(path: String) {
        self = ArchiveFormat(fileExtensionOf: path).map(Self.archive) ?? .directory
    }

    /// The format named on a command line: `tar`, `tar.gz`, `tgz`, `tar.zst`, `tar.xz`,
    /// `zip` or `dir`.
    public init?(name: String) {
        if ["dir", "directory"].contains(name.lowercased()) {
            self = .directory
        } else if let format = ArchiveFormat(fileExtensionOf: "x." + name.lowercased()) {
            self = .archive(format)
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case .archive(let format): format.description
        case .directory: "directory"
        }
    }
}

/// Writes a BagIt 1.0 bag (RFC 8493), streaming: the tag files first —
/// `bagit.txt`, `bag-info.txt`, `manifest-sha256.txt`, the caller's own tag
/// files and `tagmanifest-sha256.txt` — then each payload file as its bytes
/// are pushed. Every payload byte is hashed on the way; a file whose bytes
/// differ from its listed SHA-256 or size stops the bag.
///
/// The bag appears at its path only when ``finish()`` succeeds: an archive is
/// written to an unnamed file in its folder (or, where the file system has none, a
/// hidden file beside it) and published there, a directory is built under a hidden
/// name and renamed. A writer dropped unfinished removes what it wrote; the hidden
/// names a process killed meanwhile would leave are given first to
/// `willCreateTemporaryFile`, for a caller that cleans up after a crash. A file or a
/// non-empty folder at the path is replaced only when `replacesExisting`. Memory use
/// does not depend on the payload's size — nor on its number of files, for a
/// writer given its manifest as a file (``BagPayloadManifest``).
///
/// ```swift
/// let writer = try BagWriter(path: "out.tar.zst", payload: [BagPayloadItem(path: "a.txt", size: 3, sha256: digest)])
/// try writer.writePayload(0) { write in try Array("hi\n".utf8).withUnsafeBytes(write) }
/// try writer.finish()
/// ```
public final class BagWriter {
    /// The bag's path.
    public let path: String
    public let format: BagFormat
    /// The bag's top-level directory name inside an archive.
    public let bagName: String
    /// The payload items given to ``init(path:format:bagName:payload:info:tagFiles:agent:compressionLevel:date:replacesExisting:willCreateTemporaryFile:usesUnnamedFile:)-(_,_,_,[BagPayloadItem],_,_,_,_,_,_,_,_)``;
    /// empty for a bag declared by a ``BagPayloadManifest``.
    public let payload: [BagPayloadItem]

    private var archive: ArchiveWriter?
    private var partialDirectory: String?
    private let replacesExisting: Bool
    private let willCreateTemporaryFile: ((String) throws -> Void)?
    private var written: [Bool]
    private var finished = false
    private let date: Date
    /// What the manifest declares, and what has been written: counts, bytes, and a sum of
    /// the SHA-256 of each `checksum  path` line, which are equal only when the same lines
    /// were listed and written, in whatever order — checked in constant memory.
    private let declared: ManifestSummary
    private var wrote = ManifestSummary()

    /// Starts a bag whose payload is the list `payload`, and writes its tag files.
    ///
    /// - Parameters:
    ///   - path: Where the bag goes. It must not hold a file or a non-empty folder, unless
    ///     `replacesExisting`.
    ///   - format: The format; `nil` takes it from `path` (an archive extension, else a directory).
    ///   - bagName: The top-level directory inside an archive; by default `path`'s file name
    ///     without its archive extension.
    ///   - payload: Every payload file, in the order they will be written
    ///     (``writePayload(_:producing:)-(Int,_)`` takes their indices).
    ///   - info: Fields added to `bag-info.txt` after the generated ones.
    ///   - tagFiles: Further tag files (paths relative to the bag, outside `data/`), listed in
    ///     the tag manifest.
    ///   - agent: `Bag-Software-Agent`.
    ///   - compressionLevel: For compressed archives; `nil` for the format's default.
    ///   - date: `Bagging-Date`.
    ///   - replacesExisting: Whether ``finish()`` replaces a file or folder at `path`.
    ///   - willCreateTemporaryFile: Called with each hidden path the writer is about to
    ///     create beside `path` that a killed process would leave behind, before it exists.
    ///   - usesUnnamedFile: Whether an archive is written to an unnamed file where possible.
    /// - Throws: ``BagError`` `invalidArgument` for an unsafe or repeated payload path, or a
    ///   compression level the format does not take; `io` if the bag cannot be created.
    public convenience init(
        path: String, format: BagFormat? = nil, bagName: String? = nil, payload: [BagPayloadItem],
        info: [(label: String, value: String)] = [], tagFiles: [BagTagFile] = [],
        agent: String = "AssetCatalog BagIt", compressionLevel: Int? = nil, date: Date = Date(),
        replacesExisting: Bool = false, willCreateTemporaryFile: ((String) throws -> Void)? = nil,
        usesUnnamedFile: Bool = true
    ) throws(BagError) {
        var seen = Set<String>()
        for item in payload {
            try Self.checkRelative(item.path, what: "payload file")
            guard seen.insert(item.path).inserted else {
                throw BagError(.invalidArgument, file: "data/" + item.path, "is listed twice")
            }
        }
        try self.init(
            path: path, format: format, bagName: bagName, payload: payload,
            manifest: .bytes(
                "manifest-sha256.txt", TagFile.formatManifest(payload.map { ("data/" + $0.path, $0.sha256) })),
            files: payload.count, bytes: payload.reduce(0) { $0 + $1.size }, info: info, tagFiles: tagFiles,
            agent: agent, compressionLevel: compressionLevel, date: date, replacesExisting: replacesExisting,
            willCreateTemporaryFile: willCreateTemporaryFile, usesUnnamedFile: usesUnnamedFile)
    }

    /// Starts a bag whose payload `manifest` declares, and writes its tag files: for a bag of
    /// any size, since nothing per payload file is kept in memory. Each file is then written
    /// with ``writePayload(_:producing:)-(BagPayloadItem,_)``, in any order.
    ///
    /// - Parameters:
    ///   - path: Where the bag goes, as for the initializer taking a list of payload items.
    ///   - format: The format; `nil` takes it from `path` (an archive extension, else a directory).
    ///   - bagName: The top-level directory inside an archive; by default `path`'s file name
    ///     without its archive extension.
    ///   - manifest: The SHA-256 manifest, as a sorted file, with its file count and total
    ///     size.
    ///   - info: Fields added to `bag-info.txt` after the generated ones.
    ///   - tagFiles: Further tag files (paths relative to the bag, outside `data/`), listed in
    ///     the tag manifest.
    ///   - agent: `Bag-Software-Agent`.
    ///   - compressionLevel: For compressed archives; `nil` for the format's default.
    ///   - date: `Bagging-Date`.
    ///   - replacesExisting: Whether ``finish()`` replaces a file or folder at `path`.
    ///   - willCreateTemporaryFile: Called with each hidden path the writer is about to
    ///     create beside `path` that a killed process would leave behind, before it exists
    ///     (as for the initializer taking a list of payload items).
    ///   - usesUnnamedFile: Whether an archive is written to an unnamed file where possible.
    /// - Throws: ``BagError`` `invalidArgument` naming the manifest and the line for a line
    ///   that is not `checksum  data/path`, a path that is unsafe or out of order (or listed
    ///   twice), a count that differs from `manifest.files`; `io`.
    public convenience init(
        path: String, format: BagFormat? = nil, bagName: String? = nil, payload manifest: BagPayloadManifest,
        info: [(label: String, value: String)] = [], tagFiles: [BagTagFile] = [],
        agent: String = "AssetCatalog BagIt", compressionLevel: Int? = nil, date: Date = Date(),
        replacesExisting: Bool = false, willCreateTemporaryFile: ((String) throws -> Void)? = nil,
        usesUnnamedFile: Bool = true
    ) throws(BagError) {
        try self.init(
            path: path, format: format, bagName: bagName, payload: [],
            manifest: BagTagFile(path: "manifest-sha256.txt", contents: .file(manifest.file)), files: manifest.files,
            bytes: manifest.bytes, info: info, tagFiles: tagFiles, agent: agent, compressionLevel: compressionLevel,
            date: date, replacesExisting: replacesExisting, willCreateTemporaryFile: willCreateTemporaryFile,
            usesUnnamedFile: usesUnnamedFile)
    }

    private init(
        path: String, format: BagFormat?, bagName: String?, payload: [BagPayloadItem], manifest: BagTagFile,
        files: Int, bytes: Int64, info: [(label: String, value: String)], tagFiles: [BagTagFile], agent: String,
        compressionLevel: Int?, date: Date, replacesExisting: Bool, willCreateTemporaryFile: ((String) throws -> Void)?,
        usesUnnamedFile: Bool
    ) throws(BagError) {
        let format = format ?? BagFormat(path: path)
        self.path = path
        self.replacesExisting = replacesExisting
        self.willCreateTemporaryFile = willCreateTemporaryFile
        self.format = format
        self.payload = payload
        self.date = date
        self.bagName = bagName ?? Self.defaultName(path, format: format)
        written = Array(repeating: false, count: payload.count)
        for tag in tagFiles {
            try Self.checkRelative(tag.path, what: "tag file")
            guard tag.path != "data", !tag.path.hasPrefix("data/") else {
                throw BagError(.invalidArgument, file: tag.path, "a tag file cannot be under data/")
            }
            guard !["bagit.txt", "bag-info.txt", manifest.path, "tagmanifest-sha256.txt"].contains(tag.path) else {
                throw BagError(.invalidArgument, file: tag.path, "is a tag file the writer makes itself")
            }
        }
        try Self.checkRelative(self.bagName, what: "bag name")
        // The manifest first: a bad one must not leave a file behind.
        var summary = ManifestSummary()
        var lines = ManifestLines(file: manifest.contents.source ?? manifest.path)
        try Self.read(manifest) { chunk in try lines.add(chunk, into: &summary) }
        try lines.finish(into: &summary)
        guard summary.files == files else {
            throw BagError(
                .invalidArgument, file: manifest.contents.source ?? manifest.path,
                "lists \(summary.files) payload files, not the \(files) declared")
        }
        summary.bytes = bytes
        declared = summary

        if !replacesExisting, Self.isTaken(path, byDirectory: format == .directory) {
            throw BagError(.alreadyExists, file: path, Self.takenReason)
        }
        switch format {
        case .archive(let archiveFormat):
            do {
                archive = try ArchiveWriter(
                    path: path, format: archiveFormat,
                    options: ArchiveWriteOptions(
                        compressionLevel: compressionLevel, synchronizesOnFinish: true,
                        replacesExisting: replacesExisting, usesUnnamedFile: usesUnnamedFile),
                    willCreateTemporaryFile: willCreateTemporaryFile)
            } catch {
                throw BagError(
                    error.code == .invalidArgument ? .invalidArgument : .io, file: path,
                    "cannot be written: \(error.message)")
            }
        case .directory:
            if let compressionLevel {
                throw BagError(
                    .invalidArgument, file: path,
                    "is a directory bag: it has no compression level (\(compressionLevel) was given)")
            }
            let partial = Self.hiddenPath(beside: path, "partial")
            try announce(partial)
            try Self.makeDirectory(partial)
            partialDirectory = partial
        }

        var tags: [BagTagFile] = [
            .bytes("bagit.txt", TagFile.declaration),
            .bytes("bag-info.txt", TagFile.formatFields(bagInfo(agent: agent, files: files, bytes: bytes) + info)),
            manifest,
        ]
        tags += tagFiles
        var tagManifest: [(path: String, checksum: String)] = []
        var sizes: [String: Int64] = [:]
        for tag in tags {
            var hasher = MultiHasher([.sha256])
            var size: Int64 = 0
            try Self.read(tag) { chunk in
                hasher.update(chunk)
                size += Int64(chunk.count)
            }
            tagManifest.append((tag.path, hasher.finalize()[.sha256]!))
            sizes[tag.path] = size
        }
        // The tag manifest before the manifest and the other tag files: a reader then knows,
        // as it reads them, the one algorithm to hash them with.
        if case .archive = format { try writeDirectory("") }
        var ordered = Array(zip(tags, tagManifest.map(\.checksum) as [String?]))
        ordered.insert((.bytes("tagmanifest-sha256.txt", TagFile.formatManifest(tagManifest)), nil), at: 2)
        for (tag, listed) in ordered {
            try writeTag(tag, size: sizes[tag.path], sha256: listed)
        }
        if case .archive = format { try writeDirectory("data") }
    }

    deinit {
        if !finished, let partialDirectory { try? FileManager.default.removeItem(atPath: partialDirectory) }
        // An unfinished ArchiveWriter removes its own temporary file.
    }

    private func bagInfo(agent: String, files: Int, bytes: Int64) -> [(label: String, value: String)] {
        let day = Date.ISO8601FormatStyle(timeZone: .current).year().month().day().dateSeparator(.dash)
        return [
            ("Bagging-Date", date.formatted(day)),
            ("Bag-Software-Agent", agent),
            ("Payload-Oxum", "\(bytes).\(files)"),
            ("Bag-Size", Self.humanSize(bytes)),
        ]
    }

    /// Writes payload file `index` of the list the writer was made with: `produce` pushes
    /// its bytes, in order, through the function it is given.
    ///
    /// - Throws: ``BagError`` `contentMismatch` naming the file when the bytes' SHA-256 or
    ///   size differ from the item's (the bag is then unusable: drop the writer), `io`, or
    ///   whatever `produce` throws.
    public func writePayload(
        _ index: Int, producing produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        guard payload.indices.contains(index), !written[index] else {
            throw BagError(.invalidArgument, file: nil, "payload item \(index) does not exist or was written")
        }
        try write(payload[index], producing: produce)
        written[index] = true
    }

    /// Writes one payload file: `produce` pushes its bytes, in order, through the function
    /// it is given. The file must be one the manifest lists, written once; ``finish()``
    /// checks that every one was.
    ///
    /// - Throws: ``BagError`` `contentMismatch` naming the file when the bytes' SHA-256 or
    ///   size differ from the item's (the bag is then unusable: drop the writer),
    ///   `invalidArgument` for an unsafe path or a writer made with a list of items (write
    ///   those by index), `io`, or whatever `produce` throws.
    public func writePayload(
        _ item: BagPayloadItem, producing produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        guard payload.isEmpty else {
            throw BagError(
                .invalidArgument, file: "data/" + item.path,
                "this writer was given a list of payload items: write them by their index")
        }
        try write(item, producing: produce)
    }

    private func write(
        _ item: BagPayloadItem, producing produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        try Self.checkRelative(item.path, what: "payload file")
        let name = "data/" + item.path
        var hasher = MultiHasher([.sha256])
        var size: Int64 = 0
        let counting: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void = { write in
            try withoutActuallyEscaping(write) { write in
                try produce { chunk in
                    hasher.update(chunk)
                    size += Int64(chunk.count)
                    guard size <= item.size else { throw Self.sizeMismatch(name, item.size, size, more: true) }
                    try write(chunk)
                }
            }
            guard size == item.size else { throw Self.sizeMismatch(name, item.size, size, more: false) }
        }
        if let archive {
            let entry = ArchiveEntry(path: bagName + "/" + name, kind: .file, size: item.size, modificationDate: date)
            do throws(ArchiveError) {
                try archive.writeEntry(entry, producing: counting)
            } catch {
                throw Self.unwrapped(error, path: path)
            }
        } else if let partialDirectory {
            try writeFile(partialDirectory + "/" + name, producing: counting)
        }
        let digest = hasher.finalize()[.sha256]!
        guard digest == item.sha256 else {
            throw BagError(
                .contentMismatch, file: name,
                "its bytes hash to \(digest.prefix(12))…, not the \(item.sha256.prefix(12))… they were listed with")
        }
        wrote.add(line: Array((digest + "  " + TagFile.encodePath(name)).utf8))
        wrote.bytes += size
    }

    /// Completes the bag and moves it to ``path``.
    ///
    /// - Throws: ``BagError`` `invalidArgument` if a payload file was not written, or (for a
    ///   writer given a ``BagPayloadManifest``) if the files written are not those the
    ///   manifest lists; `io`.
    public func finish() throws(BagError) {
        if let missing = written.firstIndex(of: false) {
            throw BagError(.invalidArgument, file: "data/" + payload[missing].path, "was never written")
        }
        guard wrote.files == declared.files, wrote.bytes == declared.bytes, wrote.sum == declared.sum else {
            throw BagError(
                .invalidArgument, file: "manifest-sha256.txt",
                wrote.files < declared.files
                    ? "lists \(declared.files) payload files; \(wrote.files) were written"
                    : "lists \(declared.files) payload files of \(declared.bytes) bytes; the \(wrote.files) written "
                        + "(\(wrote.bytes) bytes) are not those")
        }
        if let archive {
            do {
                try archive.finish()
            } catch {
                if error.code == .alreadyExists { throw BagError(.alreadyExists, file: path, Self.takenReason) }
                throw BagError(.io, file: path, "cannot be written: \(error.message)")
            }
        } else if let partialDirectory {
            let fd = open(partialDirectory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if fd >= 0 {
                defer { close(fd) }
                guard cfilesync_syncfs(fd) == 0 else { throw Self.ioError(partialDirectory, "cannot be synced") }
            }
            try publish(partialDirectory)
        }
        finished = true
    }

    /// Renames the finished directory bag to ``path`` — over an empty folder, or (when
    /// `replacesExisting`) over a file or folder, which is moved aside first and then removed.
    private func publish(_ partialDirectory: String) throws(BagError) {
        if rename(partialDirectory, path) == 0 { return }
        guard [EEXIST, ENOTEMPTY, ENOTDIR, EISDIR].contains(errno) else {
            throw Self.ioError(path, "cannot be created")
        }
        guard replacesExisting else { throw BagError(.alreadyExists, file: path, Self.takenReason) }
        let replaced = Self.hiddenPath(beside: path, "replaced")
        try announce(replaced)
        guard rename(path, replaced) == 0 else { throw Self.ioError(path, "cannot be replaced") }
        guard rename(partialDirectory, path) == 0 else {
            let error = Self.ioError(path, "cannot be created")
            rename(replaced, path)
            throw error
        }
        try? FileManager.default.removeItem(atPath: replaced)
    }

    /// Whether `path` holds something a bag in `format` would replace (which it does only
    /// when told to): anything, for an archive; anything but an empty folder, for a
    /// directory bag.
    public static func wouldReplace(_ path: String, format: BagFormat? = nil) -> Bool {
        isTaken(path, byDirectory: (format ?? BagFormat(path: path)) == .directory)
    }

    static func isTaken(_ path: String, byDirectory: Bool) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return false }
        guard byDirectory, (info.st_mode & S_IFMT) == S_IFDIR else { return true }
        return !((try? FileManager.default.contentsOfDirectory(atPath: path))?.isEmpty ?? false)
    }

    static let takenReason = "already exists"

    /// A hidden path beside `path` that no file has (by chance): `.name.kind-random`.
    static func hiddenPath(beside path: String, _ kind: String) -> String {
        let url = URL(fileURLWithPath: path)
        return url.deletingLastPathComponent().path
            + "/.\(url.lastPathComponent).\(kind)-\(UInt32.random(in: 0...UInt32.max))"
    }

    private func announce(_ temporary: String) throws(BagError) {
        do {
            try willCreateTemporaryFile?(temporary)
        } catch {
            throw BagError(.io, file: path, "cannot be written: \(error)")
        }
    }

    // MARK: - Writing

    private func writeDirectory(_ relative: String) throws(BagError) {
        guard let archive else { return }
        let member = relative.isEmpty ? bagName : bagName + "/" + relative
        do {
            try archive.writeEntry(ArchiveEntry(path: member, kind: .directory, modificationDate: date))
        } catch {
            throw BagError(.io, file: path, "cannot be written: \(error.message)")
        }
    }

    /// Writes a tag file; one read from a file must still have the size and SHA-256 it
    /// had when it was listed in the tag manifest.
    private func writeTag(_ tag: BagTagFile, size listedSize: Int64?, sha256 listed: String?) throws(BagError) {
        var hasher = MultiHasher([.sha256])
        var size: Int64 = 0
        let produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void = { write in
            try Self.read(tag) { chunk in
                hasher.update(chunk)
                size += Int64(chunk.count)
                try write(chunk)
            }
        }
        do {
            if let archive {
                let entry = ArchiveEntry(
                    path: bagName + "/" + tag.path, kind: .file, size: listedSize ?? 0, modificationDate: date)
                if case .bytes(let bytes) = tag.contents {
                    try archive.writeEntry(entry, contents: bytes)
                } else {
                    do throws(ArchiveError) {
                        try archive.writeEntry(entry, producing: produce)
                    } catch {
                        throw Self.unwrapped(error, path: path)
                    }
                }
            } else if let partialDirectory {
                try writeFile(partialDirectory + "/" + tag.path, producing: produce)
            }
        } catch {
            if let error = error as? BagError { throw error }
            if let error = error as? ArchiveError {
                throw BagError(.io, file: path, "cannot be written: \(error.message)")
            }
            throw BagError(.io, file: tag.path, "cannot be written: \(error)")
        }
        if case .file = tag.contents, let listed, hasher.finalize()[.sha256] != listed || size != listedSize {
            throw BagError(.contentMismatch, file: tag.path, "changed while the bag was written")
        }
    }

    /// Pushes a tag file's bytes through `body`, in chunks for a file.
    static func read(_ tag: BagTagFile, _ body: (UnsafeRawBufferPointer) throws -> Void) throws(BagError) {
        switch tag.contents {
        case .bytes(let bytes):
            do { try bytes.withUnsafeBytes(body) } catch { throw wrapped(error, tag.path) }
        case .file(let source):
            let fd = open(source, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw ioError(tag.path, "cannot be read from \(source)") }
            defer { close(fd) }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw ioError(tag.path, "cannot be read from \(source)")
                }
                if n == 0 { return }
                do { try body(UnsafeRawBufferPointer(rebasing: buffer[0..<n])) } catch {
                    throw wrapped(error, tag.path)
                }
            }
        }
    }

    private static func wrapped(_ error: any Error, _ file: String) -> BagError {
        error as? BagError ?? BagError(.io, file: file, "cannot be written: \(error)")
    }

    private func writeFile(
        _ file: String, producing produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        // The folder by bytes: NSString's path functions see `/` + a combining mark as no `/`.
        let slash = file.utf8.lastIndex(of: 0x2F) ?? file.utf8.startIndex
        try Self.makeDirectory(String(Substring(file.utf8[..<slash])))
        let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Self.ioError(file, "cannot be created") }
        defer { close(fd) }
        try produce { chunk in
            var offset = 0
            while offset < chunk.count {
                let n = Glibc.write(fd, chunk.baseAddress! + offset, chunk.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Self.ioError(file, "cannot be written")
                }
                offset += n
            }
        }
    }

    // MARK: - Helpers

    static func defaultName(_ path: String, format: BagFormat) -> String {
        var name = (path as NSString).lastPathComponent
        if case .archive = format {
            for suffix in [".tar.gz", ".tar.zst", ".tar.xz", ".tgz", ".tzst", ".txz", ".tar", ".zip"]
            where name.lowercased().hasSuffix(suffix) && name.count > suffix.count {
                name = String(name.dropLast(suffix.count))
                break
            }
        }
        return name.isEmpty || name == "." || name == ".." ? "bag" : name
    }

    static func checkRelative(_ path: String, what: String) throws(BagError) {
        guard TagFile.isNormal(path), !path.utf8.contains(0) else {
            throw BagError(.invalidArgument, file: path, "is not a safe relative path for a \(what)")
        }
    }

    static func makeDirectory(_ path: String) throws(BagError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw BagError(.io, file: path, "cannot be created: \(error.localizedDescription)")
        }
    }

    /// The error a chunk source threw (a mismatch, a read error), or the writer's own.
    static func unwrapped(_ error: ArchiveError, path: String) -> any Error {
        error.cause ?? BagError(.io, file: path, "cannot be written: \(error.message)")
    }

    static func ioError(_ path: String, _ what: String) -> BagError {
        BagError(.io, file: path, "\(what): \(String(cString: strerror(errno)))")
    }

    static func sizeMismatch(_ name: String, _ expected: Int64, _ actual: Int64, more: Bool) -> BagError {
        BagError(
            .contentMismatch, file: name,
            "holds \(more ? "more than \(expected)" : "\(actual)") bytes, not the \(expected) it was listed with")
    }

    /// `Bag-Size`: bytes in decimal units, as people read them (`12.3 MB`).
    static func humanSize(_ bytes: Int64) -> String {
        let units = ["bytes", "KB", "MB", "GB", "TB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1000 && unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return unit == 0 ? "\(bytes) bytes" : String(format: "%.1f %@", value, units[unit])
    }
}

/// A count of payload files and bytes, and a sum (modulo 2²⁵⁶) of the SHA-256 of their
/// manifest lines: two summaries are equal when they were made of the same lines, in any
/// order, which lets a writer check what it wrote against its manifest without keeping either.
struct ManifestSummary: Equatable {
    var files = 0
    var bytes: Int64 = 0
    var sum: [UInt64] = [0, 0, 0, 0]

    mutating func add(line: [UInt8]) {
        files += 1
        let digest = Array(SHA256.hash(data: line))
        var carry: UInt64 = 0
        for word in 0..<4 {
            var value: UInt64 = 0
            for byte in digest[(word * 8)..<(word * 8 + 8)] { value = value << 8 | UInt64(byte) }
            let (partial, overflow1) = sum[word].addingReportingOverflow(value)
            let (total, overflow2) = partial.addingReportingOverflow(carry)
            sum[word] = total
            carry = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
        }
    }
}

/// Reads a SHA-256 payload manifest a chunk at a time, checking each line as a
/// ``BagWriter`` needs it: `checksum  data/path`, a safe path, in strictly increasing
/// order of the paths' bytes (so no path is listed twice).
struct ManifestLines {
    let file: String
    private var line: [UInt8] = []
    private var previous: [UInt8]?
    private var number = 0

    init(file: String) { self.file = file }

    mutating func add(_ chunk: UnsafeRawBufferPointer, into summary: inout ManifestSummary) throws(BagError) {
        var start = 0
        for (i, byte) in chunk.enumerated() where byte == 0x0A {
            line.append(contentsOf: chunk[start..<i])
            try take(into: &summary)
            start = i + 1
        }
        line.append(contentsOf: chunk[start...])
    }

    mutating func finish(into summary: inout ManifestSummary) throws(BagError) {
        guard line.isEmpty else {
            throw BagError(.invalidArgument, file: file, "line \(number + 1) does not end with a newline")
        }
    }

    private mutating func take(into summary: inout ManifestSummary) throws(BagError) {
        number += 1
        defer { line.removeAll(keepingCapacity: true) }
        let hexLength = ChecksumAlgorithm.sha256.hexLength
        guard line.count > hexLength + 2, line[hexLength] == 0x20, line[hexLength + 1] == 0x20,
            line[..<hexLength].allSatisfy(TagFile.isHexDigit),
            let encoded = String(validating: line[(hexLength + 2)...], as: UTF8.self)
        else {
            throw BagError(.invalidArgument, file: file, "line \(number) is not 'sha256  data/path'")
        }
        let path = TagFile.decodePath(encoded, version: "1.0")
        guard path.hasBytePrefix("data/"), TagFile.isNormal(path), !path.utf8.contains(0) else {
            throw BagError(.invalidArgument, file: file, "line \(number) names \(path), not a safe path under data/")
        }
        // Encoded as the writer encodes the files it writes: otherwise none could match it.
        guard TagFile.encodePath(path).utf8.elementsEqual(encoded.utf8) else {
            throw BagError(
                .invalidArgument, file: file,
                "line \(number): '\(encoded)' is not encoded as BagIt 1.0 encodes paths (only %25, %0A and %0D)")
        }
        let bytes = Array(path.utf8)
        if let previous, !previous.lexicographicallyPrecedes(bytes) {
            throw BagError(
                .invalidArgument, file: file,
                "line \(number) lists \(path) out of order or a second time (paths must be sorted by their bytes)")
        }
        previous = bytes
        summary.add(line: line)
    }
}
