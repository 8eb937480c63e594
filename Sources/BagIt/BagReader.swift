public import ArchiveIO
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Receives the bytes of one payload file as a ``BagReader`` reads them (an
/// importer stages them; a validator needs no sink).
public protocol BagPayloadSink: AnyObject {
    /// The next bytes of the file.
    func write(_ bytes: UnsafeRawBufferPointer) throws
    /// The file is complete.
    func finish() throws
}

/// Options for reading a bag.
public struct BagReadOptions: Sendable {
    /// The rules for an archive's members: limits on count, size and compression
    /// ratio, and what links may do.
    public var policy: ExtractionPolicy
    /// The most bytes a tag file kept in memory (declaration, bag-info, manifests,
    /// ``keptTagFiles``) may have.
    public var maxTagFileBytes: Int
    /// Further tag files (relative to the bag) whose bytes ``BagContents/tagFiles`` keeps.
    public var keptTagFiles: Set<String>

    public init(policy: ExtractionPolicy = .default, maxTagFileBytes: Int = 256 << 20, keptTagFiles: Set<String> = []) {
        self.policy = policy
        self.maxTagFileBytes = maxTagFileBytes
        self.keptTagFiles = keptTagFiles
    }
}

/// How far a read has come: bytes of the bundle (of the archive file, or of the
/// directory's files) consumed so far, of how many.
public struct BagProgress: Sendable, Hashable {
    public var bytesDone: Int64
    public var bytesTotal: Int64
    public var filesDone: Int
}

/// A payload file as read: its size and digests, and the sink that received it.
public struct BagPayloadFile {
    /// The path relative to the bag (`data/…`).
    public var path: String
    public var size: Int64
    /// Lowercase hex digests: SHA-256 always, and every algorithm a manifest uses.
    public var digests: [ChecksumAlgorithm: String]
    /// The sink that received the bytes, if one did.
    public var sink: (any BagPayloadSink)?
    /// For a hard link in an archive: the payload file it repeats.
    public var linkTarget: String?
}

/// What reading a bag found: its declaration, fields, manifests, payload, the tag files
/// asked for — and every problem, each naming its file.
public struct BagContents {
    /// The bundle's path (a directory or an archive).
    public var source: String
    /// `BagIt-Version`, once `bagit.txt` could be read.
    public var version: String?
    /// The bag's top-level directory inside an archive (empty for a directory or an
    /// archive that holds the bag at its root).
    public var bagName: String
    /// `bag-info.txt`'s fields, in order.
    public var info: [(label: String, value: String)]
    /// Payload files by path (`data/…`).
    public var payload: [String: BagPayloadFile]
    /// Each payload manifest: path → checksum.
    public var manifests: [ChecksumAlgorithm: [String: String]]
    /// The bytes of the tag files in ``BagReadOptions/keptTagFiles`` that the bag has.
    public var tagFiles: [String: [UInt8]]
    /// Every problem found, sorted by file. Empty for a valid bag.
    public var problems: [BagError]

    public var isValid: Bool { problems.isEmpty }
    /// Payload bytes and files (what `Payload-Oxum` counts).
    public var payloadBytes: Int64 { payload.values.reduce(0) { $0 + $1.size } }
}

/// Reads a bag — a directory, or any archive libarchive reads — in one streaming
/// pass, and checks it against RFC 8493: the declaration, every payload and tag
/// manifest present (MD5, SHA-1, SHA-256, SHA-512), completeness both ways,
/// `Payload-Oxum`.
///
/// Archive members pass an ``ExtractionGuard`` first: absolute paths, `..`,
/// links leaving the bag, devices, duplicates and size or ratio bombs stop the
/// read with an error naming the member, before any of their bytes are used.
/// Symbolic links are refused too (a bag holds regular files); a hard link to
/// an earlier payload file repeats it.
///
/// ```swift
/// let bag = try BagReader.read(at: "incoming.tar.zst")
/// for problem in bag.problems { print(problem) }   // "data/a.txt: sha256 checksum mismatch …"
/// ```
public enum BagReader {
    /// The tag files whose bytes a reader always keeps.
    static func isStandardTag(_ name: String) -> Bool {
        name == "bagit.txt" || name == "bag-info.txt" || name == "fetch.txt"
            || ChecksumAlgorithm(manifestName: name, prefix: "manifest-") != nil
            || ChecksumAlgorithm(manifestName: name, prefix: "tagmanifest-") != nil
    }

    /// Reads and checks the bag at `path`.
    ///
    /// - Parameters:
    ///   - path: A bag directory (or a directory holding exactly one bag), or an archive.
    ///   - options: Limits, and the extra tag files to keep.
    ///   - sink: Called for each payload file with its path and, when the bag's SHA-256
    ///     manifest came before it, the checksum it should have; returns where its bytes go,
    ///     or `nil` to only hash them.
    ///   - tagFileRead: Called as soon as a tag file of ``BagReadOptions/keptTagFiles`` has
    ///     been read, with its name and bytes — before the payload that follows it, so that
    ///     work on it can start early. A guess until the read ends: the bytes that count are
    ///     those in ``BagContents/tagFiles``.
    ///   - progress: Called as the read advances.
    ///   - isCancelled: Polled between chunks; `true` stops the read with `cancelled`.
    /// - Returns: The contents, with every validation problem in ``BagContents/problems``.
    /// - Throws: ``BagError`` for what stops a read: a missing bundle, an unreadable or
    ///   hostile archive, a refused entry, a failing sink.
    public static func read(
        at path: String, options: BagReadOptions = BagReadOptions(),
        sink: ((_ path: String, _ expectedSHA256: String?) throws -> (any BagPayloadSink)?)? = nil,
        tagFileRead: ((_ name: String, _ bytes: [UInt8]) -> Void)? = nil,
        progress: ((BagProgress) -> Void)? = nil, isCancelled: @escaping () -> Bool = { false }
    ) throws -> BagContents {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw BagError(.io, file: path, "does not exist")
        }
        let scan = Scan(source: path, options: options, sink: sink, progress: progress, isCancelled: isCancelled)
        scan.tagFileRead = tagFileRead
        if isDirectory.boolValue {
            try scan.readDirectory(path)
        } else {
            try scan.readArchive(path)
        }
        return try scan.contents()
    }
}

/// The state of one read.
final class Scan {
    struct Seen {
        var size: Int64
        var digests: [ChecksumAlgorithm: String]
        var sink: (any BagPayloadSink)?
        var linkTarget: String?
    }

    let source: String
    let options: BagReadOptions
    let sink: ((String, String?) throws -> (any BagPayloadSink)?)?
    let progress: ((BagProgress) -> Void)?
    let isCancelled: () -> Bool
    var tagFileRead: ((String, [UInt8]) -> Void)?

    /// Every regular file, by its path in the bundle.
    var files: [String: Seen] = [:]
    /// Kept tag-file bytes, by path in the bundle.
    var kept: [String: [UInt8]] = [:]
    /// A directory bag's root, relative to which paths are given.
    var directoryRoot: String?
    var bytesTotal: Int64 = 0
    var bytesDone: Int64 = 0
    var filesDone = 0

    init(
        source: String, options: BagReadOptions, sink: ((String, String?) throws -> (any BagPayloadSink)?)?,
        progress: ((BagProgress) -> Void)?, isCancelled: @escaping () -> Bool
    ) {
        self.source = source
        self.options = options
        self.sink = sink
        self.progress = progress
        self.isCancelled = isCancelled
    }

    // MARK: Classifying

    /// The bag root a path would have if it were payload (`X/data/…` → `X/`, `data/…` → ``).
    static func payloadRoots(_ path: String) -> [String] {
        // The first three components, by UTF-8 code units.
        let c = path.utf8.split(separator: 0x2F, maxSplits: 2, omittingEmptySubsequences: false)
        let data: [UInt8] = Array("data".utf8)
        var roots: [String] = []
        if c.count >= 2, c[0].elementsEqual(data) { roots.append("") }
        if c.count >= 3, c[1].elementsEqual(data) { roots.append(String(Substring(c[0])) + "/") }
        return roots
    }

    func isKeptTag(_ path: String) -> Bool {
        tagNames(path).contains { BagReader.isStandardTag($0) || options.keptTagFiles.contains($0) }
    }

    /// The names a tag file could have in the bag: its path relative to each possible root.
    func tagNames(_ path: String) -> [String] {
        let c = path.split(separator: "/", omittingEmptySubsequences: false)
        return [c.count >= 2 ? String(c[0]) + "/" : nil, ""].compactMap { $0 }.filter(path.hasBytePrefix).map {
            path.droppingBytePrefix($0)
        }
    }

    /// The algorithms of the payload manifests read so far, and whether one was SHA-256's.
    var manifestAlgorithms: Set<ChecksumAlgorithm> = []
    var sawSHA256Manifest = false

    /// The algorithms to hash a payload file with: SHA-256, and those of the payload
    /// manifests seen so far (SHA-256 and SHA-512 when none has been).
    func payloadAlgorithms() -> Set<ChecksumAlgorithm> {
        var algorithms = manifestAlgorithms.union([.sha256])
        if algorithms.count == 1 && !sawSHA256Manifest { algorithms.insert(.sha512) }
        return algorithms
    }

    /// Notes a kept tag file that is a payload manifest (found by its last path component).
    func noteKept(_ path: String) {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        if let algorithm = ChecksumAlgorithm(manifestName: name, prefix: "manifest-") {
            manifestAlgorithms.insert(algorithm)
        }
        if name == "manifest-sha256.txt" { sawSHA256Manifest = true }
    }

    /// The SHA-256 manifests read so far, parsed once, by bag root.
    var parsedSHA256Manifests: [String: [String: String]] = [:]
    /// Bag roots whose declaration or SHA-256 manifest could not be parsed.
    var unparsableManifestRoots: Set<String> = []

    /// The SHA-256 the manifest read so far gives `path` (`root/data/…`), if any.
    func expectedSHA256(_ path: String, root: String) -> String? {
        if parsedSHA256Manifests[root] == nil {
            guard !unparsableManifestRoots.contains(root), let declaration = kept[root + "bagit.txt"],
                let manifest = kept[root + "manifest-sha256.txt"]
            else { return nil }
            guard let version = try? TagFile.parseDeclaration(declaration),
                let entries = try? TagFile.parseManifest(manifest, file: "", algorithm: .sha256, version: version)
            else {
                unparsableManifestRoots.insert(root)  // once: the checks after the read report why
                return nil
            }
            parsedSHA256Manifests[root] = entries
        }
        return parsedSHA256Manifests[root]?[path.droppingBytePrefix(root)]
    }

    func report(bytes: Int64, file: Bool) {
        bytesDone += bytes
        if file { filesDone += 1 }
        progress?(BagProgress(bytesDone: bytesDone, bytesTotal: bytesTotal, filesDone: filesDone))
    }

    /// Refuses a second file whose name is the same string as an earlier one's in another
    /// Unicode normalisation (`é` as one scalar and as `e` + accent): two files on Linux, one
    /// key in ``files`` — without this, one of them would silently take the other's place.
    func checkNameIsNew(_ path: String) throws {
        guard files[path] == nil else {
            throw BagError(
                .hostileEntry, file: path,
                "is a second file with this name in another Unicode normalisation (NFC and NFD); a bag cannot "
                    + "hold both")
        }
    }

    /// Hashes (and keeps, or passes to a sink) one file's bytes, pushed by `produce`.
    func consume(
        _ path: String, produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        try checkNameIsNew(path)
        let roots = Self.payloadRoots(path)
        let isPayload = !roots.isEmpty
        var target: (any BagPayloadSink)?
        if isPayload, let sink {
            var expected: String?
            for root in roots where expected == nil { expected = expectedSHA256(path, root: root) }
            target = try sink(path, expected)
        }
        let keeps = !isPayload && isKeptTag(path)
        // A kept tag file is hashed later, from its bytes, with the algorithms of the tag
        // manifests the bag turns out to have; any other is hashed with all of them now.
        var hasher = MultiHasher(isPayload ? payloadAlgorithms() : keeps ? [] : Set(ChecksumAlgorithm.allCases))
        var bytes: [UInt8] = []
        var size: Int64 = 0
        let limit = options.maxTagFileBytes
        let cancelled = isCancelled
        try produce { chunk in
            if cancelled() { throw BagError(.cancelled, file: nil, "cancelled") }
            hasher.update(chunk)
            size += Int64(chunk.count)
            try target?.write(chunk)
            if keeps {
                guard bytes.count + chunk.count <= limit else {
                    throw BagError(
                        .hostileEntry, file: path, "is a tag file larger than \(limit) bytes, the limit for tag files")
                }
                bytes.append(contentsOf: chunk)
            }
        }
        try target?.finish()
        if keeps {
            kept[path] = bytes
            noteKept(path)
            if let tagFileRead, let name = tagNames(path).first(where: options.keptTagFiles.contains) {
                tagFileRead(name, bytes)
            }
        }
        files[path] = Seen(size: size, digests: hasher.finalize(), sink: target)
    }

    // MARK: Archives

    func readArchive(_ path: String) throws {
        var info = stat()
        if stat(path, &info) == 0 { bytesTotal = Int64(info.st_size) }
        try withArchive(path) { reader in
            var checker = ExtractionGuard(policy: options.policy, archivePath: path)
            while let entry = try reader.nextEntry() {
                guard let safe = try checker.admit(entry) else { continue }
                let member = safe.description
                switch entry.kind {
                case .directory:
                    continue
                case .symlink:
                    throw BagError(
                        .hostileEntry, file: member,
                        "is a symbolic link (to \(entry.linkTarget ?? "?")); a bag holds regular files only")
                case .hardlink:
                    let target = try checker.validatePath(entry.linkTarget ?? "", of: entry).joined(separator: "/")
                    guard var seen = files[target] else {
                        throw BagError(
                            .hostileEntry, file: member, "is a hard link to \(target), which is not in the bag")
                    }
                    try checkNameIsNew(member)
                    seen.linkTarget = target
                    files[member] = seen
                case .file:
                    let start = reader.compressedBytesRead
                    try consume(member) { write in
                        try reader.readData { chunk in
                            if reader.lastChunkIsHole {
                                try checker.accountHole(bytes: chunk.count)
                            } else {
                                try checker.account(bytes: chunk.count, compressedBytesRead: reader.compressedBytesRead)
                            }
                            try write(chunk)
                        }
                    }
                    report(bytes: reader.compressedBytesRead - start, file: true)
                default:
                    throw BagError(.hostileEntry, file: member, "is a \(entry.kind); a bag holds regular files only")
                }
            }
        }
    }

    /// Opens an archive and maps ArchiveIO's errors to bag errors naming the member.
    func withArchive(_ path: String, _ body: (ArchiveReader) throws -> Void) throws {
        do {
            let reader = try ArchiveReader(path: path)
            try body(reader)
        } catch let error as ArchiveError {
            throw Self.bagError(error, archive: path)
        }
    }

    /// ArchiveIO's messages already name the archive and the member ("Refusing member 'x' of
    /// 'in.tar': …"): they are kept whole, without the archive's path once more in front.
    static func bagError(_ error: ArchiveError, archive: String) -> BagError {
        switch error.code {
        case .absolutePath, .parentTraversal, .invalidName, .nameTooLong, .linkOutsideRoot, .hardlinkTargetMissing,
            .entryTypeNotAllowed, .duplicateEntry, .tooManyEntries, .sizeLimitExceeded, .compressionRatioExceeded:
            return BagError(.hostileEntry, file: nil, error.message)
        case .callbackFailed:
            if let cause = error.cause as? BagError { return cause }
            return BagError(.io, file: archive, error.message)
        default:
            return BagError(.unreadableArchive, file: nil, error.message)
        }
    }

    /// Hashes, in a second pass over the archive, what the first could not: payload files
    /// that came before a manifest in an algorithm they were not hashed with.
    func completeDigests(_ needs: [String: Set<ChecksumAlgorithm>]) throws {
        guard !needs.isEmpty else { return }
        var updated: [String: [ChecksumAlgorithm: String]] = [:]
        try withArchive(source) { reader in
            var checker = ExtractionGuard(policy: options.policy, archivePath: source)
            while let entry = try reader.nextEntry() {
                guard let safe = try checker.admit(entry), entry.kind == .file, let algorithms = needs[safe.description]
                else { continue }
                var hasher = MultiHasher(algorithms)
                try reader.readData { chunk in
                    if isCancelled() { throw BagError(.cancelled, file: nil, "cancelled") }
                    hasher.update(chunk)
                }
                updated[safe.description] = hasher.finalize()
            }
        }
        for (path, digests) in updated { files[path]?.digests.merge(digests) { old, _ in old } }
    }

    // MARK: Directories

    func readDirectory(_ path: String) throws {
        var root = path
        let manager = FileManager.default
        if !manager.fileExists(atPath: path + "/bagit.txt") {
            let children = (try? manager.contentsOfDirectory(atPath: path)) ?? []
            if children.count == 1, manager.fileExists(atPath: path + "/" + children[0] + "/bagit.txt") {
                root = path + "/" + children[0]  // the folder an archive was extracted into
            }
        }
        directoryRoot = root
        guard let walker = manager.enumerator(atPath: root) else { throw BagError(.io, file: root, "cannot be read") }
        var tags: [String] = []
        var payload: [String] = []
        while let relative = walker.nextObject() as? String {
            var info = stat()
            guard lstat(root + "/" + relative, &info) == 0 else {
                throw BagError(.io, file: relative, "cannot be read")
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: continue
            case S_IFREG:
                bytesTotal += Int64(info.st_size)
                if relative.hasBytePrefix("data/") { payload.append(relative) } else { tags.append(relative) }
            case S_IFLNK:
                let target = (try? manager.destinationOfSymbolicLink(atPath: root + "/" + relative)) ?? "?"
                let resolved = URL(fileURLWithPath: root + "/" + relative).resolvingSymlinksInPath().path
                let inside = resolved.hasPrefix(URL(fileURLWithPath: root).resolvingSymlinksInPath().path + "/")
                throw BagError(
                    .hostileEntry, file: relative,
                    inside
                        ? "is a symbolic link (to \(target)); a bag holds regular files only"
                        : "is a symbolic link to \(target), outside the bag")
            default:
                throw BagError(
                    .hostileEntry, file: relative, "is a device, FIFO or socket; a bag holds regular files only")
            }
        }
        let byteOrder: (String, String) -> Bool = { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        // Tag files first: the manifests say which digests the payload needs.
        for relative in tags.sorted(by: byteOrder) + payload.sorted(by: byteOrder) {
            try readFile(root + "/" + relative, as: relative)
        }
    }

    func readFile(_ full: String, as relative: String) throws {
        let fd = open(full, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw BagError(.io, file: relative, "cannot be opened: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let size = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        try consume(relative) { write in
            while true {
                let n = Glibc.read(fd, buffer.baseAddress, size)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw BagError(.io, file: relative, "cannot be read: \(String(cString: strerror(errno)))")
                }
                if n == 0 { break }
                total += Int64(n)
                try write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
        }
        report(bytes: total, file: true)
    }

    // MARK: Checking

    /// A file whose digest differs from the one `manifest` lists — or that was not hashed in
    /// that algorithm, which must not pass for a match.
    static func checksumProblem(
        _ path: String, listed: String, in manifest: String, _ algorithm: ChecksumAlgorithm,
        _ digests: [ChecksumAlgorithm: String]
    ) -> [BagError] {
        guard let actual = digests[algorithm] else {
            return [
                BagError(
                    .checksumMismatch, file: path,
                    "\(manifest) lists it, but it could not be hashed in \(algorithm.rawValue) to check")
            ]
        }
        guard actual == listed else {
            return [
                BagError(
                    .checksumMismatch, file: path,
                    "\(algorithm.rawValue) checksum mismatch: \(manifest) says \(listed), the file has \(actual)")
            ]
        }
        return []
    }

    func contents() throws -> BagContents {
        // Where is the bag? `bagit.txt` at the top, or in exactly one top-level directory.
        let declarations = files.keys.filter {
            $0 == "bagit.txt"
                || ($0.utf8.reversed().starts(with: "/bagit.txt".utf8.reversed())
                    && $0.utf8.split(separator: 0x2F).count == 2)
        }
        guard !declarations.isEmpty else {
            throw BagError(.notABag, file: source, "holds no bagit.txt: it is not a BagIt bag")
        }
        guard declarations.count == 1 else {
            throw BagError(
                .notABag, file: source, "holds more than one bag (\(declarations.sorted().joined(separator: ", ")))")
        }
        let root = String(declarations[0].dropLast("bagit.txt".count))
        var problems: [BagError] = []
        var result = BagContents(
            source: source, version: nil, bagName: String(root.dropLast()), info: [], payload: [:], manifests: [:],
            tagFiles: [:], problems: [])

        for path in files.keys.filter({ !$0.hasBytePrefix(root) }).sorted() {
            problems.append(
                BagError(.unlistedFile, file: path, "is outside the bag's top-level directory \(root.dropLast())"))
        }
        // Nothing else reads right without the version: a bad declaration stops here.
        let version = try TagFile.parseDeclaration(kept[root + "bagit.txt"] ?? [])
        result.version = version
        if let bytes = kept[root + "bag-info.txt"] {
            do { result.info = try TagFile.parseFields(bytes, file: "bag-info.txt") } catch { problems.append(error) }
        }
        for name in options.keptTagFiles { if let bytes = kept[root + name] { result.tagFiles[name] = bytes } }

        // Tag files (anything under the root but outside data/) and payload.
        var tagDigests: [String: [ChecksumAlgorithm: String]] = [:]
        for (path, seen) in files where path.hasBytePrefix(root) {
            let relative = path.droppingBytePrefix(root)
            if relative.hasBytePrefix("data/") {
                result.payload[relative] = BagPayloadFile(
                    path: relative, size: seen.size, digests: seen.digests, sink: seen.sink, linkTarget: seen.linkTarget
                )
            } else {
                tagDigests[relative] = seen.digests
            }
        }

        // Manifests.
        var tagManifests: [ChecksumAlgorithm: [String: String]] = [:]
        for (relative, _) in tagDigests {
            guard let bytes = kept[root + relative] else { continue }
            if let algorithm = ChecksumAlgorithm(manifestName: relative, prefix: "manifest-") {
                if relative == "manifest-sha256.txt", let parsed = parsedSHA256Manifests[root] {
                    result.manifests[algorithm] = parsed  // parsed during the read
                    continue
                }
                do {
                    result.manifests[algorithm] = try TagFile.parseManifest(
                        bytes, file: relative, algorithm: algorithm, version: version)
                } catch { problems.append(error) }
            } else if let algorithm = ChecksumAlgorithm(manifestName: relative, prefix: "tagmanifest-") {
                do {
                    tagManifests[algorithm] = try TagFile.parseManifest(
                        bytes, file: relative, algorithm: algorithm, version: version)
                } catch { problems.append(error) }
            }
        }
        // Kept tag files were not hashed as they were read: hash them now, in the tag
        // manifests' algorithms.
        if !tagManifests.isEmpty {
            let algorithms = Set(tagManifests.keys)
            for relative in tagDigests.keys {
                // A hard link to a kept tag file has that file's bytes.
                let source = files[root + relative]?.linkTarget ?? root + relative
                guard let bytes = kept[source] else { continue }
                var hasher = MultiHasher(algorithms)
                bytes.withUnsafeBytes { hasher.update($0) }
                tagDigests[relative] = hasher.finalize()
            }
        }
        let manifestFiles = tagDigests.keys.filter { $0.hasPrefix("manifest-") && $0.hasSuffix(".txt") }
        if result.manifests.isEmpty && !problems.contains(where: { $0.code == .malformedManifest }) {
            problems.append(
                BagError(
                    .missingManifest, file: manifestFiles.sorted().first ?? "manifest-sha256.txt",
                    manifestFiles.isEmpty
                        ? "is missing: a bag needs a payload manifest"
                        : "is in an unsupported algorithm; a bag needs a manifest in md5, sha1, sha256 or sha512"))
        }

        // Payload hashed before a manifest of its algorithm was seen: a second pass (archives).
        var needs: [String: Set<ChecksumAlgorithm>] = [:]
        for (relative, file) in result.payload where file.linkTarget == nil {
            let missing = Set(result.manifests.keys).subtracting(file.digests.keys)
            if !missing.isEmpty { needs[root + relative] = missing }
        }
        if !needs.isEmpty {
            if directoryRoot == nil {
                try completeDigests(needs)
                for (relative, _) in result.payload {
                    let seen = files[root + relative]
                    if let target = seen?.linkTarget {
                        result.payload[relative]?.digests = files[target]?.digests ?? [:]
                    } else if let digests = seen?.digests {
                        result.payload[relative]?.digests = digests
                    }
                }
            }
        }

        // Completeness both ways, and checksums, for every payload manifest. (In any order:
        // the problems are sorted by file at the end.)
        for algorithm in result.manifests.keys.sorted() {
            let name = "manifest-\(algorithm.rawValue).txt"
            let entries = result.manifests[algorithm]!
            for (path, checksum) in entries {
                guard path.hasBytePrefix("data/") else {
                    problems.append(BagError(.malformedManifest, file: name, "lists \(path), which is not under data/"))
                    continue
                }
                guard let file = result.payload[path] else {
                    problems.append(BagError(.missingFile, file: path, "is listed in \(name) but is not in the bag"))
                    continue
                }
                problems += Self.checksumProblem(path, listed: checksum, in: name, algorithm, file.digests)
            }
            for path in result.payload.keys where entries[path] == nil {
                problems.append(BagError(.unlistedFile, file: path, "is in the bag but not listed in \(name)"))
            }
        }

        // Tag manifests: what they list must be there and match; they do not list payload.
        for algorithm in tagManifests.keys.sorted() {
            let name = "tagmanifest-\(algorithm.rawValue).txt"
            for (path, checksum) in tagManifests[algorithm]!.sorted(by: { $0.key < $1.key }) {
                if path.hasBytePrefix("data/") {
                    problems.append(BagError(.malformedManifest, file: name, "lists the payload file \(path)"))
                } else if let digests = tagDigests[path] {
                    problems += Self.checksumProblem(path, listed: checksum, in: name, algorithm, digests)
                } else {
                    problems.append(BagError(.missingFile, file: path, "is listed in \(name) but is not in the bag"))
                }
            }
        }

        // Payload-Oxum and fetch.txt.
        if let oxum = result.info.first(where: { $0.label.lowercased() == "payload-oxum" })?.value {
            let parts = oxum.split(separator: ".")
            let actual = "\(result.payloadBytes).\(result.payload.count)"
            if parts.count != 2 || Int64(parts[0]) == nil || Int(parts[1]) == nil {
                problems.append(
                    BagError(.malformedTagFile, file: "bag-info.txt", "Payload-Oxum '\(oxum)' is not 'octets.files'"))
            } else if oxum != actual {
                problems.append(
                    BagError(
                        .oxumMismatch, file: "bag-info.txt",
                        "Payload-Oxum is \(oxum) but the payload is \(result.payloadBytes) bytes in \(result.payload.count) files"
                    ))
            }
        }
        if let fetch = kept[root + "fetch.txt"],
            fetch.contains(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 })
        {
            problems.append(
                BagError(
                    .fetchUnsupported, file: "fetch.txt",
                    "lists files to fetch from elsewhere; fetch them into the bag first (fetching is not supported)"))
        }
        result.problems = problems.sorted { ($0.file ?? "", $0.reason) < ($1.file ?? "", $1.reason) }
        return result
    }
}

extension String {
    /// Whether the UTF-8 bytes begin with `prefix`'s. Paths are compared as bytes, everywhere
    /// in a read: as Characters, `data/` followed by a combining mark would not begin with
    /// `data/`, and one file could count as payload in one place and as a tag file in another.
    func hasBytePrefix(_ prefix: String) -> Bool { utf8.starts(with: prefix.utf8) }

    /// The string after `prefix`, which must begin it (``hasBytePrefix(_:)``) and end with an
    /// ASCII byte.
    func droppingBytePrefix(_ prefix: String) -> String { String(Substring(utf8.dropFirst(prefix.utf8.count))) }
}
