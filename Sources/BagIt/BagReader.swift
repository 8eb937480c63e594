public import ArchiveIO
import Foundation
import GRDB
import GRDBSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// Receives the bytes of one payload file as a ``BagReader`` reads them (an
/// importer stages them; a validator needs no sink).
public protocol BagPayloadSink: AnyObject {
    /// The next bytes of the file.
    func write(_ bytes: UnsafeRawBufferPointer) throws
    /// The file is complete: these are its digests (SHA-256 always, and those of the
    /// payload manifests read so far).
    func finish(digests: [ChecksumAlgorithm: String]) throws
}

/// Options for reading a bag.
public struct BagReadOptions: Sendable {
    /// The rules for an archive's members: limits on count, size and compression
    /// ratio, and what links may do.
    public var policy: ExtractionPolicy
    /// The most bytes a tag file kept in memory may have: one of ``keptTagFiles``. (The
    /// standard ones have smaller limits of their own: 4 KiB for `bagit.txt`, 1 MiB for
    /// `bag-info.txt`, 1 MiB for a tag manifest, 16 MiB for all of them together, and lines
    /// of at most 1 KiB, 64 KiB and 1 MiB.)
    public var maxTagFileBytes: Int
    /// Further tag files (relative to the bag) whose bytes ``BagContents/tagFiles`` keeps.
    /// (Payload manifests are never kept: they are read line by line into the read's index.)
    public var keptTagFiles: Set<String>
    /// Whether a payload sink is told the SHA-256 the manifest gives its file: a look-up per
    /// file, which a sink that would not use it (nothing to compare with) can spare.
    public var looksUpExpectedSHA256: Bool
    /// The most problems ``BagContents/problems`` gives (the first, by file); its
    /// ``BagContents/problemCount`` counts them all. A bag of a million problems takes the
    /// memory of this many.
    public var maxProblems: Int
    /// Whether the checks after the read stop looking for more problems once they have found
    /// ``maxProblems``: for a reader that refuses a bad bag whatever its number of problems
    /// (an importer), which need not walk the rest of a manifest of a million lines the bag
    /// lacks. ``BagContents/problemCount`` is then a lower bound, and
    /// ``BagContents/countsAllProblems`` `false`. (A problem that stops the read is thrown
    /// either way.) Such a reader also stops at the first manifest line that names a payload
    /// file the bag lacks, thrown as `missingFile`; if its sink is told expected digests
    /// (``looksUpExpectedSHA256``), which needs lines indexed as they stream, the first
    /// 50,000 lines of a manifest are, and are checked after the read like any reader's (a
    /// file listed after them is staged without its expected digest).
    public var stopsAtMaxProblems: Bool
    /// For a reader that stops at its first problems and whose sink is told expected digests:
    /// how many lines of a payload manifest are indexed as they stream (those the sink's
    /// files can be looked up in); the lines after them wait, like all of them without such a
    /// sink, and the read stops at the first of them that names a file the bag lacks. What a
    /// manifest of millions of such lines costs before it is refused is bounded by this many.
    package var linesIndexedAsTheyStream = 50_000

    public init(
        policy: ExtractionPolicy = .default, maxTagFileBytes: Int = 256 << 20, keptTagFiles: Set<String> = [],
        looksUpExpectedSHA256: Bool = true, maxProblems: Int = 1_000, stopsAtMaxProblems: Bool = false
    ) {
        self.policy = policy
        self.maxTagFileBytes = maxTagFileBytes
        self.keptTagFiles = keptTagFiles
        self.looksUpExpectedSHA256 = looksUpExpectedSHA256
        self.maxProblems = maxProblems
        self.stopsAtMaxProblems = stopsAtMaxProblems
    }
}

/// How far a read has come: bytes of the bundle (of the archive file, or of the
/// directory's files) consumed so far, of how many.
public struct BagProgress: Sendable, Hashable {
    public var bytesDone: Int64
    public var bytesTotal: Int64
    public var filesDone: Int
}

/// A payload file as read: its size and digests, and what the manifests list for it.
public struct BagPayloadFile: Sendable, Hashable {
    /// The path relative to the bag (`data/…`).
    public var path: String
    public var size: Int64
    /// Lowercase hex digests: SHA-256 always, and every algorithm a manifest uses.
    public var digests: [ChecksumAlgorithm: String]
    /// What each payload manifest lists for it, by algorithm (lowercase hex).
    public var listed: [ChecksumAlgorithm: String]
    /// For a hard link in an archive: the payload file it repeats.
    public var linkTarget: String?
}

/// What reading a bag found: its declaration, fields, payload and manifests, the tag files
/// asked for — and its problems, each naming its file (the first of them, and how many).
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
    /// The payload files (`data/…`), and what the payload manifests list.
    public var payload: BagPayload
    /// The bytes of the tag files in ``BagReadOptions/keptTagFiles`` that the bag has.
    public var tagFiles: [String: [UInt8]]
    /// The problems found, sorted by file: all of them, or the first
    /// ``BagReadOptions/maxProblems`` when there are more (``problemCount`` counts them all).
    /// Empty for a valid bag.
    public var problems: [BagError]
    /// How many problems were found in all.
    public var problemCount: Int
    /// Whether ``problemCount`` counts every problem the bag has: `false` when the checks
    /// stopped at ``BagReadOptions/maxProblems`` (``BagReadOptions/stopsAtMaxProblems``), and
    /// there may be more.
    public var countsAllProblems = true
    /// What the bag does that other tools accept and this reader reads as they do — an
    /// md5sum `*` marker, a path listed twice with the same checksum, a file the manifest
    /// lists in two spellings of which the bag holds one, a missing `.DS_Store`, files left
    /// to fetch — sorted by file: all of them, or the first ``BagReadOptions/maxProblems``
    /// (``warningCount`` counts them all). A bag with warnings and no problems is valid.
    public var warnings: [BagError] = []
    /// How many warnings there are in all.
    public var warningCount = 0
    /// How many payload files the manifests list that the bag lacks and its `fetch.txt` says
    /// where to fetch from: a valid bag is incomplete until they are there (this reader does
    /// not fetch them).
    public var filesToFetch = 0
    /// For a directory bag: the directory that holds its `bagit.txt` (the one given, or the
    /// one folder in it); `nil` for an archive.
    public var directory: String?

    public var isValid: Bool { problemCount == 0 }
    /// Payload bytes (what `Payload-Oxum` counts, with ``BagPayload/count``).
    public var payloadBytes: Int64 { payload.bytes }
}

/// Reads a bag — a directory, or any archive libarchive reads — in one streaming
/// pass, and checks it against RFC 8493: the declaration, every payload and tag
/// manifest present (MD5, SHA-1, SHA-224, SHA-256, SHA-384, SHA-512), completeness both ways,
/// `Payload-Oxum`.
///
/// Archive members pass an `ExtractionGuard` (ArchiveIO's) first: absolute paths, `..`,
/// links leaving the bag, devices and size or ratio bombs stop the read with an
/// error naming the member, before any of their bytes are used. Symbolic links
/// are refused too (a bag holds regular files); a hard link to an earlier
/// regular file repeats it. A second file with the same path stops the read with
/// the guard's own error, found in the read's index (a batch later) rather than
/// by the guard, so that the read's memory does not grow with the bag: a sink may
/// be handed the second copy of a payload file before the read stops. (A
/// directory member holds nothing a bag needs: it is skipped, even twice or
/// where a file has its path.)
///
/// ```swift
/// let bag = try BagReader.read(at: "incoming.tar.zst")
/// for problem in bag.problems { print(problem) }   // "data/a.txt: sha256 checksum mismatch …"
/// ```
public enum BagReader {
    /// The tag files whose bytes a reader keeps. (Payload manifests and `fetch.txt` are read
    /// line by line, into the read's index, instead.)
    static func isStandardTag(_ name: String) -> Bool {
        name == "bagit.txt" || name == "bag-info.txt"
            || ChecksumAlgorithm(manifestName: name, prefix: "tagmanifest-") != nil
    }

    /// The most bytes, and the longest line, that a reader takes of a standard tag file it
    /// keeps in memory: far more than any bag needs, far less than a hostile one could hold.
    struct TagLimit {
        var bytes: Int
        var lineBytes: Int

        /// `bagit.txt`: two short lines.
        static let declaration = TagLimit(bytes: 4 << 10, lineBytes: 1 << 10)
        /// `bag-info.txt`: a few fields, some of them long.
        static let bagInfo = TagLimit(bytes: 1 << 20, lineBytes: 64 << 10)
        /// A tag manifest: a line for each of a bag's few tag files (thousands fit).
        static let tagManifest = TagLimit(bytes: 1 << 20, lineBytes: Scan.maxManifestLineBytes)
        /// All of them together, in every possible root (the top level and each top-level
        /// directory: which one is the bag's is known once the read ends).
        static let totalBytes = 16 << 20

        /// The limit of a tag file by its name in the bag, if it has one.
        static func of(_ name: String) -> TagLimit? {
            if name == "bagit.txt" { return declaration }
            if name == "bag-info.txt" { return bagInfo }
            if ChecksumAlgorithm(manifestName: name, prefix: "tagmanifest-") != nil { return tagManifest }
            return nil
        }

        /// `1048576` → `1 MiB (1048576 bytes)`.
        static func describe(_ bytes: Int) -> String {
            let unit = bytes >= 1 << 20 && bytes % (1 << 20) == 0 ? "\(bytes >> 20) MiB" : "\(bytes >> 10) KiB"
            return "\(unit) (\(bytes) bytes)"
        }
    }

    /// Reads and checks the bag at `path`.
    ///
    /// What the read finds of each file is kept in a temporary database, not in memory (see
    /// ``BagPayload``): the memory a read takes does not grow with the bag.
    ///
    /// - Parameters:
    ///   - path: A bag directory (or a directory holding exactly one bag), or an archive.
    ///   - options: Limits, and the extra tag files to keep.
    ///   - sink: Called for each payload file with its path and, when the bag's SHA-256
    ///     manifest came before it (and ``BagReadOptions/looksUpExpectedSHA256``), the checksum
    ///     it should have; returns where its bytes go, or `nil` to only hash them. An archive
    ///     that holds a payload file twice is refused, but only once the index meets the
    ///     second copy: the sink may be called for it first.
    ///   - tagFileRead: Called as soon as a tag file of ``BagReadOptions/keptTagFiles`` has
    ///     been read, with its name and bytes — before the payload that follows it, so that
    ///     work on it can start early. A guess until the read ends: the bytes that count are
    ///     those in ``BagContents/tagFiles``.
    ///   - tagSink: Called for each other tag file (not a manifest, `bagit.txt`,
    ///     `bag-info.txt` or `fetch.txt`) with each name it could have in the bag — its path
    ///     relative to a possible root (one whose `bagit.txt` came before it, when one did), a
    ///     top-level directory's first — and its path in the bundle,
    ///     until it returns where the file's bytes go: a tag file of any size, streamed
    ///     instead of kept. It is checked against the tag manifests like any other; the bag's
    ///     root, and so whether the file was the bag's, is known once the read ends
    ///     (``BagContents/bagName``).
    ///   - progress: Called as the read advances.
    ///   - isCancelled: Polled between chunks; `true` stops the read with `cancelled`.
    /// - Returns: The contents, with the validation problems in ``BagContents/problems`` (the
    ///   first ``BagReadOptions/maxProblems``) and their number in ``BagContents/problemCount``.
    /// - Throws: ``BagError`` for what stops a read: a missing bundle, an unreadable or
    ///   hostile archive, a refused entry, a failing sink.
    public static func read(
        at path: String, options: BagReadOptions = BagReadOptions(),
        sink: ((_ path: String, _ expectedSHA256: String?) throws -> (any BagPayloadSink)?)? = nil,
        tagFileRead: ((_ name: String, _ bytes: [UInt8]) -> Void)? = nil,
        tagSink: ((_ name: String, _ path: String) throws -> (any BagPayloadSink)?)? = nil,
        progress: ((BagProgress) -> Void)? = nil, isCancelled: @escaping () -> Bool = { false }
    ) throws -> BagContents {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw BagError(.io, file: path, "does not exist")
        }
        let index = try BagIndex()
        let scan = Scan(
            source: path, index: index, options: options, sink: sink, progress: progress, isCancelled: isCancelled)
        scan.tagFileRead = tagFileRead
        scan.tagSink = tagSink
        defer { scan.writer.stop() }
        if isDirectory.boolValue {
            try scan.readDirectory(path)
        } else {
            try scan.readArchive(path)
        }
        try scan.writer.drain()
        return try index.run { files, manifests in
            var contents: BagContents?
            try files.inTransaction {
                try manifests.inTransaction {
                    scan.db = files
                    scan.mdb = manifests
                    defer { (scan.db, scan.mdb) = (nil, nil) }
                    contents = try scan.contents()
                    return .commit
                }
                return .commit
            }
            return contents!
        }
    }
}

/// The state of one read. Per-file state goes to the read's ``BagIndex``; only what is
/// small stays here (the kept tag files, one entry per manifest).
final class Scan {
    /// A payload manifest of a possible bag root, read line by line into the index.
    struct Manifest {
        /// Its path in the bundle.
        var path: String
        var root: String
        var algorithm: ChecksumAlgorithm
        /// The root's version, which says how to decode paths; `nil` when the lines came
        /// before the root's `bagit.txt`.
        var version: String?
        /// The number of the first line that waits, raw, until the read ends rather than
        /// being parsed into the index as it streams (``Scan/parsePending(_:version:encoding:)``),
        /// if any does: line 1 when the version is not known yet, else the line after
        /// ``Scan/linesIndexedAsTheyStream``. Once a line waits, the bytes after it are not
        /// even split into lines until then.
        var waitsFrom: Int?
        /// Where the manifest's bytes, all of them, are in the read's ``Scan/spool``: the lines
        /// that wait are split from them, and a tag manifest that lists the manifest is checked
        /// against them (it is not hashed as it streams: which algorithms that needs is known
        /// once the read ends).
        var spooled: Range<Int64> = 0..<0
        /// The encoding of the root's tag files, known with the version.
        var encoding: TagFile.Encoding = .utf8
        /// Whether the manifest began with a UTF-16 byte-order mark: its lines were turned into
        /// UTF-8 as they were split.
        var isUTF16 = false
        /// The lines split so far.
        var lines = 0
        /// The first line that could not be read: the manifest is not used.
        var failure: BagError? {
            didSet { if failure != nil && failureLine == .max { failureLine = lines } }
        }
        /// The number of that line.
        var failureLine = Int.max
        /// How many lines marked their file with md5sum's binary-mode `*`.
        var binaryMarkers = 0
        /// The lines that listed a path again with the same checksum, by how (the first, and
        /// how many): warnings (see ``Scan/repeatIsError(_:version:)``).
        var repeats: [BagIndexWriter.Repeat: (number: Int, path: String, count: Int)] = [:]
        var name: String { "manifest-\(algorithm.rawValue).txt" }
    }

    let source: String
    let index: BagIndex
    let options: BagReadOptions
    let sink: ((String, String?) throws -> (any BagPayloadSink)?)?
    let progress: ((BagProgress) -> Void)?
    let isCancelled: () -> Bool
    var tagFileRead: ((String, [UInt8]) -> Void)?
    var tagSink: ((String, String) throws -> (any BagPayloadSink)?)?
    /// Writes the files and manifest lines into the index as the read goes.
    let writer: BagIndexWriter
    /// The error for an archive member (as the archive spells it) whose path an earlier one has.
    let duplicate: @Sendable (String) -> any Error
    /// The tag files read so far that change what the bag says (manifests, kept tag files,
    /// those given to ``tagSink``): a second copy of one is refused before its bytes are
    /// used, rather than a batch later by the index. Few: a bag has a handful. By bytes, as
    /// archive paths are compared (another normalisation is a twin, which the index finds).
    var handledTags: Set<[UInt8]> = []
    /// The index's databases of files and of manifests, once the read has ended (``contents()``).
    var db: Database?
    var mdb: Database?

    /// Kept tag-file bytes, by path in the bundle.
    var kept: [String: [UInt8]] = [:]
    /// The bytes of the standard tag files kept so far (``BagReader/TagLimit/totalBytes``).
    var keptStandardBytes = 0
    /// The files named `fetch.txt` (at a possible root), by path in the bundle: their lines
    /// wait, raw, in the index (``BagIndexWriter/Row/fetchLine(file:number:line:)``), and the
    /// first that could not be split (too long), if any.
    var fetchLists: [String: BagError?] = [:]
    /// The files named `bagit.txt` at the top or one directory down.
    var declarations: [String] = []
    /// The payload manifests met so far; a manifest's ID in the index is its position.
    var manifests: [Manifest] = []
    /// The bytes of the payload manifests (``Manifest/spooled``), once one has come.
    var spool: ByteSpool?
    /// The complete, readable SHA-256 manifest of each possible root, by root.
    var sha256Manifests: [String: Int] = [:]
    /// A directory bag's root, relative to which paths are given.
    var directoryRoot: String?
    /// The root, open: every file of a directory bag is opened below it (``FileAccess``).
    var directoryFD: Int32 = -1
    var bytesTotal: Int64 = 0
    var bytesDone: Int64 = 0
    var filesDone = 0

    deinit { if directoryFD >= 0 { close(directoryFD) } }

    init(
        source: String, index: BagIndex, options: BagReadOptions,
        sink: ((String, String?) throws -> (any BagPayloadSink)?)?, progress: ((BagProgress) -> Void)?,
        isCancelled: @escaping () -> Bool
    ) {
        self.source = source
        self.index = index
        // The guard remembers no paths (the index does): a second member with the same path is
        // refused with its error, when the index meets it.
        let refusing = ExtractionGuard(policy: options.policy, archivePath: source, remembersPaths: false)
        let duplicate: @Sendable (String) -> any Error = { member in
            Self.bagError(refusing.duplicateRefusal(for: ArchiveEntry(path: member, kind: .file)), archive: source)
        }
        self.duplicate = duplicate
        writer = BagIndexWriter(index: index, duplicate: duplicate)
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

    /// Whether a path is a declaration: `bagit.txt`, at the top or one directory down.
    static func isDeclaration(_ path: String) -> Bool {
        path == "bagit.txt"
            || (path.utf8.reversed().starts(with: "/bagit.txt".utf8.reversed())
                && path.utf8.split(separator: 0x2F).count == 2)
    }

    /// The algorithms of the payload manifests read so far, and whether one was SHA-256's.
    var manifestAlgorithms: Set<ChecksumAlgorithm> = []
    var sawSHA256Manifest = false
    /// The algorithms of the tag manifests read so far.
    var tagManifestAlgorithms: Set<ChecksumAlgorithm> = []

    /// The algorithms to hash a payload file with: SHA-256, and those of the payload
    /// manifests seen so far (SHA-256 and SHA-512 when none has been).
    func payloadAlgorithms() -> Set<ChecksumAlgorithm> {
        var algorithms = manifestAlgorithms.union([.sha256])
        if algorithms.count == 1 && !sawSHA256Manifest { algorithms.insert(.sha512) }
        return algorithms
    }

    /// The algorithms to hash a tag file with as it is read: those of the tag manifests seen
    /// so far, or all of them while none has been. (One that a later tag manifest adds is
    /// hashed in a second pass.)
    func tagAlgorithms() -> Set<ChecksumAlgorithm> {
        tagManifestAlgorithms.isEmpty ? Set(ChecksumAlgorithm.allCases) : tagManifestAlgorithms
    }

    /// Notes a kept tag file that is a tag manifest (found by its last path component).
    func noteKept(_ path: String) {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        if let algorithm = ChecksumAlgorithm(manifestName: name, prefix: "tagmanifest-") {
            tagManifestAlgorithms.insert(algorithm)
        }
    }

    /// The SHA-256 the manifest read so far gives `path` (`root/data/…`), if any.
    func expectedSHA256(_ path: String, root: String) throws -> String? {
        guard let manifest = sha256Manifests[root] else { return nil }
        return try manifestDatabase { db in
            var checksum: String?
            try db.run(
                "SELECT checksum FROM manifest WHERE manifest = ? AND key = ?",
                [.integer(Int64(manifest)), .text(BagIndex.key(path))]
            ) { checksum = Database.checksum($0, 0).hex }
            return checksum
        }
    }

    func report(bytes: Int64, file: Bool) {
        bytesDone += bytes
        if file { filesDone += 1 }
        progress?(BagProgress(bytesDone: bytesDone, bytesTotal: bytesTotal, filesDone: filesDone))
    }

    // MARK: The index

    /// Runs `body` on the index's database: the read's transaction once the read has ended,
    /// or a call of its own.
    func database<T>(_ body: (Database) throws -> T) throws -> T {
        if let db { return try body(db) }
        return try index.run(\.files, body)
    }

    /// Runs `body` on the index's database of manifests (see ``database(_:)``).
    func manifestDatabase<T>(_ body: (Database) throws -> T) throws -> T {
        if let mdb { return try body(mdb) }
        return try index.run(\.manifests, body)
    }

    /// Records a file read. A second file with the same name, or with an earlier one's name
    /// in another Unicode normalisation (``BagIndex/twin(_:)``), stops the read a batch later.
    ///
    /// - Parameter member: The archive member's path as the archive spells it; `nil` in a
    ///   directory.
    func record(
        _ path: String, size: Int64, digests: [ChecksumAlgorithm: String], link: String?, member: String? = nil
    ) throws {
        try writer.add(.file(path: path, member: member, size: size, digests: digests, link: link))
        if Self.isDeclaration(path) { declarations.append(path) }
    }

    /// A file read so far, by its path in the bundle (paths not made relative to a root).
    func indexedFile(_ path: String) throws -> BagPayloadFile? {
        if db == nil { try writer.drain() }  // once the read has ended, nothing waits
        return try database { db in
            var file: BagPayloadFile?
            try db.run(
                "SELECT \(BagIndex.fileColumns) FROM file AS f WHERE f.key = ?", [.text(BagIndex.key(path))]
            ) { file = BagIndex.file($0, root: "") }
            return file
        }
    }

    // MARK: Manifests

    /// Starts reading a payload manifest (`manifest-<algorithm>.txt` at a possible root) line
    /// by line; returns its ID, or `nil` when `path` is not one.
    func startManifest(_ path: String) -> Int? {
        for name in tagNames(path) where !name.utf8.contains(0x2F) {
            guard let algorithm = ChecksumAlgorithm(manifestName: name, prefix: "manifest-") else { continue }
            let root = String(Substring(path.utf8.dropLast(name.utf8.count)))
            manifestAlgorithms.insert(algorithm)
            if algorithm == .sha256 { sawSHA256Manifest = true }
            let declaration = self.declaration(of: root)
            manifests.append(
                Manifest(
                    path: path, root: root, algorithm: algorithm, version: declaration?.version,
                    waitsFrom: declaration == nil || linesIndexedAsTheyStream == 0 ? 1 : nil,
                    encoding: declaration?.encoding ?? .utf8))
            return manifests.count - 1
        }
        return nil
    }

    /// How many lines of a payload manifest are parsed into the index as they stream; the
    /// rest wait, raw, until the read ends (``parsePending(_:version:encoding:)``). Every line
    /// for a reader that checks them all; for one that stops at its first problems (an
    /// importer), only those a sink's look-ups of expected digests need — none without such a
    /// sink. A manifest that comes before the payload, as an export writes it, and lists files
    /// the bag lacks is then refused at the first such line once the payload is known, rather
    /// than after every line of it was indexed.
    var linesIndexedAsTheyStream: Int {
        guard options.stopsAtMaxProblems else { return .max }
        return sink != nil && options.looksUpExpectedSHA256 ? options.linesIndexedAsTheyStream : 0
    }

    /// Where the bytes of the payload manifest at `path` (in the bundle, or its key) are in the
    /// ``spool``, if it is one.
    func spooledManifest(_ path: String) -> Range<Int64>? {
        let key = BagIndex.key(path)
        return manifests.first { BagIndex.key($0.path) == key }?.spooled
    }

    /// The version and encoding a root's `bagit.txt`, read so far, declares.
    func declaration(of root: String) -> (version: String, encoding: TagFile.Encoding)? {
        kept[root + "bagit.txt"].flatMap { try? TagFile.parseDeclarationAndEncoding($0) }
    }

    /// Keeps the next bytes of manifest `id` in the read's ``spool``.
    func spoolManifestBytes(_ id: Int, _ chunk: UnsafeRawBufferPointer) throws(BagError) {
        let spool: ByteSpool
        if let existing = self.spool {
            spool = existing
        } else {
            spool = try ByteSpool()
            self.spool = spool
        }
        // A manifest's bytes come one chunk after the other: they are one run of the spool.
        if manifests[id].spooled.isEmpty { manifests[id].spooled = spool.end..<spool.end }
        try spool.append(chunk)
        manifests[id].spooled = manifests[id].spooled.lowerBound..<spool.end
    }

    /// Whether the lines of manifest `id` are split as its bytes stream: until one waits
    /// (``Manifest/waitsFrom``) or the manifest cannot be read.
    func splitsAsItStreams(_ id: Int) -> Bool {
        manifests[id].failure == nil && manifests[id].waitsFrom == nil
    }

    /// Splits `chunk`, the next bytes of manifest `id`, with `stream`, calling `line` with each
    /// line it ends (``Manifest/lines`` counts them); a manifest whose UTF-16 cannot be read,
    /// or a line longer than ``maxManifestLineBytes``, is the manifest's ``Manifest/failure``
    /// — as it streams, only before the first line that waits (the lines after it are split
    /// again, and such a failure found, once the read ends). `chunk` is `nil` at the end of
    /// the manifest.
    func splitManifest(
        _ id: Int, _ chunk: UnsafeRawBufferPointer?, _ stream: inout ManifestStream, asItStreams: Bool,
        _ line: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let each = { (bytes: UnsafeRawBufferPointer, isUTF16: Bool) throws in
            self.manifests[id].isUTF16 = isUTF16
            self.manifests[id].lines += 1
            try line(bytes)
        }
        if let chunk { try stream.split(chunk, each) } else { try stream.finish(each) }
        guard !asItStreams || manifests[id].waitsFrom == nil else { return }
        if let failure = stream.failure { manifests[id].failure = failure }
        // A line is held whole until it ends: a bounded one.
        if stream.pendingBytes > Self.maxManifestLineBytes {
            manifests[id].lines += 1
            manifests[id].failure = BagError(
                .malformedManifest, file: manifests[id].name,
                "line \(manifests[id].lines) is longer than \(Self.maxManifestLineBytes) bytes")
            stream = ManifestStream(file: manifests[id].name)
        }
    }

    /// Takes line ``Manifest/lines`` of manifest `id`, split as it streamed: parsed into the
    /// index, or, from the first line that waits (``Manifest/waitsFrom``), left in the spool
    /// until the read ends.
    func manifestLine(_ id: Int, _ line: UnsafeRawBufferPointer) throws {
        guard manifests[id].failure == nil else { return }
        let number = manifests[id].lines
        if manifests[id].waitsFrom == nil, number > linesIndexedAsTheyStream { manifests[id].waitsFrom = number }
        if let from = manifests[id].waitsFrom, number >= from { return }
        switch parseManifestLine(id, number: number, line, version: manifests[id].version!) {
        case .failure(let problem): manifests[id].failure = problem
        case .success(nil): break
        case .success(let parsed?):
            if parsed.marksBinary { manifests[id].binaryMarkers += 1 }
            try writer.add(
                .line(manifest: id, number: number, key: parsed.key, path: parsed.storedPath, checksum: parsed.checksum)
            )
        }
    }

    /// A manifest line, parsed, as the read's index keeps it.
    struct IndexedLine {
        var key: String
        /// The path as the row keeps it: `nil` when it is ``key`` without the manifest's root
        /// (``BagIndex/storedManifestLinePath(_:key:root:)``).
        var storedPath: String?
        var checksum: ManifestChecksum
        /// Whether the path came after md5sum's binary-mode `*`.
        var marksBinary: Bool

        /// The path, relative to the manifest's `root`.
        func path(root: String) -> String { BagIndex.manifestLinePath(stored: storedPath, key: key, root: root) }
    }

    /// Parses line `number` of manifest `id`: its key, path and checksum (`nil` for a blank
    /// line), or what is wrong with it.
    func parseManifestLine(
        _ id: Int, number: Int, _ line: UnsafeRawBufferPointer, version: String
    ) -> Result<IndexedLine?, BagError> {
        let root = manifests[id].root
        // Most lines, from their bytes (ASCII reads alike in every encoding a line can be in);
        // in a root of ASCII, the key is the root and the path's bytes, made in one string.
        if let scanned = TagFile.scanASCIIManifestLine(line, algorithm: manifests[id].algorithm) {
            guard root.utf8.allSatisfy({ $0 < 0x80 }) else {
                let path = String(decoding: scanned.path, as: UTF8.self)
                return .success(Self.indexedLine(path, root: root, scanned.checksum, marksBinary: scanned.marksBinary))
            }
            let key = String(unsafeUninitializedCapacity: root.utf8.count + scanned.path.count) { key in
                var i = 0
                for byte in root.utf8 {
                    key[i] = byte
                    i += 1
                }
                for byte in scanned.path {
                    key[i] = byte
                    i += 1
                }
                return i
            }
            return .success(
                IndexedLine(key: key, storedPath: nil, checksum: scanned.checksum, marksBinary: scanned.marksBinary))
        }
        let manifest = manifests[id]
        do {
            guard
                let parsed = try Self.parseStreamedManifestLine(
                    line, number: number, file: manifest.name, algorithm: manifest.algorithm, version: version,
                    encoding: manifest.encoding, isUTF16: manifest.isUTF16)
            else { return .success(nil) }
            return .success(
                Self.indexedLine(
                    parsed.path, root: root, ManifestChecksum(validHex: parsed.checksum),
                    marksBinary: parsed.marksBinary))
        } catch {
            return .failure(error)
        }
    }

    /// The line of `path` (relative to `root`) and `checksum`: its key is the NFC form of the
    /// root and path.
    static func indexedLine(
        _ path: String, root: String, _ checksum: ManifestChecksum, marksBinary: Bool
    ) -> IndexedLine {
        let key = BagIndex.key(root + path)
        return IndexedLine(
            key: key, storedPath: BagIndex.storedManifestLinePath(path, key: key, root: root), checksum: checksum,
            marksBinary: marksBinary)
    }

    /// Decodes (UTF-8) and parses line `number` (from 1) of `fetch.txt` as it streamed, its
    /// end cut off: the path it lists (``TagFile/parseFetchLine(_:number:version:)``), or
    /// `nil` for a blank line.
    static func parseStreamedFetchLine(
        _ line: some Collection<UInt8>, number: Int, version: String
    ) throws(BagError) -> String? {
        guard let text = String(validating: line, as: UTF8.self) else {
            throw BagError(.malformedTagFile, file: "fetch.txt", "line \(number) is not valid UTF-8")
        }
        return try TagFile.parseFetchLine(Substring(text), number: number, version: version)
    }

    /// Decodes and parses line `number` (from 1) of a manifest as it streamed, its end cut
    /// off: in ISO-8859-1 or UTF-8 as `encoding` says, or UTF-8 when the manifest was in
    /// UTF-16 (`isUTF16`: turned into UTF-8 as it streamed). `nil` for a blank line.
    static func parseStreamedManifestLine(
        _ line: some Collection<UInt8>, number: Int, file: String, algorithm: ChecksumAlgorithm, version: String,
        encoding: TagFile.Encoding, isUTF16: Bool
    ) throws(BagError) -> TagFile.ManifestLine? {
        let text: String
        if encoding == .latin1 && !isUTF16 {
            text = String(String.UnicodeScalarView(line.lazy.map { Unicode.Scalar($0) }))
        } else {
            // UTF-8, or UTF-16 turned into UTF-8 as it streamed.
            if number == 1, !isUTF16, line.starts(with: [0xEF, 0xBB, 0xBF]) {
                throw BagError(
                    .malformedTagFile, file: file, "begins with a byte-order mark, which BagIt does not allow")
            }
            guard let decoded = String(validating: line, as: UTF8.self) else {
                throw BagError(
                    .malformedTagFile, file: file, "line \(number) is not valid \(isUTF16 ? "UTF-16" : "UTF-8")")
            }
            text = decoded
        }
        return try TagFile.parseManifestLine(
            Substring(text), number: number, file: file, algorithm: algorithm, version: version)
    }

    /// Ends manifest `id` once its lines are written: a manifest that could not be read —
    /// a bad line, or one that lists a path again, whichever comes first — leaves nothing
    /// in the index.
    func endManifest(_ id: Int) throws {
        try writer.drain()
        let version = manifests[id].version ?? "1.0"  // (a manifest whose lines wait has written none)
        for (kind, first) in writer.repeats(in: id, root: manifests[id].root) {
            if Self.repeatIsError(kind, version: version) {
                if first.number < manifests[id].failureLine {
                    manifests[id].failure = TagFile.duplicateManifestLine(
                        first.path, number: first.number, file: manifests[id].name)
                }
            } else {
                manifests[id].repeats[kind] = first
            }
        }
        if manifests[id].failure != nil {
            try manifestDatabase { db in
                try db.execute(sql: "DELETE FROM manifest WHERE manifest = ?", arguments: [id])
            }
        } else if manifests[id].waitsFrom != 1, manifests[id].algorithm == .sha256 {
            sha256Manifests[manifests[id].root] = id
        }
    }

    /// Whether a manifest line that lists a path again is a problem, or only a warning: a
    /// line with another checksum always is; the same line again is in BagIt 1.0 (RFC 8493
    /// lists each file once) and a warning before it, as bagit-python has it; the path in
    /// another Unicode normalisation with the same checksum names the same file (the
    /// bag's index compares paths by their NFC form), a warning.
    static func repeatIsError(_ kind: BagIndexWriter.Repeat, version: String) -> Bool {
        switch kind {
        case .conflicting: true
        case .sameLine: version == "1.0"
        case .otherNormalization: false
        }
    }

    /// Parses the lines of manifest `id` that waited (once the read has ended: straight into
    /// the index).
    ///
    /// A reader that stops at its first problems (``BagReadOptions/stopsAtMaxProblems``)
    /// stops at the first line that names a payload file the bag lacks, unless `fetch.txt`
    /// may list it or the bag holds a file whose path differs from it only by case (then the
    /// checks after the read decide): the rest of a manifest of a million such lines is
    /// moot.
    ///
    /// - Throws: `missingFile` for that line.
    func parsePending(_ id: Int, version: String, encoding: TagFile.Encoding) throws {
        guard let db = mdb, let files = self.db else { return }
        manifests[id].version = version
        manifests[id].encoding = encoding
        let root = manifests[id].root
        var checksAbsence = options.stopsAtMaxProblems && fetchLists[root + "fetch.txt"] == nil
        /// Whether `line` names a payload file the bag lacks, with no twin.
        func isAbsent(_ line: IndexedLine, root: String) throws -> Bool {
            let path = line.path(root: root)
            guard path.hasBytePrefix("data/"), !Self.isSystemFile(path) else { return false }
            let has = { (sql: String) in try Bool.fetchOne(files, sql: sql, arguments: [line.key]) == true }
            if try has("SELECT EXISTS (SELECT 1 FROM file WHERE key = ?)") { return false }
            // One scan of the files, once: a twin by case leaves the rest to the checks after.
            if try has("SELECT EXISTS (SELECT 1 FROM file WHERE key = ? COLLATE NOCASE)") {
                checksAbsence = false
                return false
            }
            return true
        }
        /// Parses line ``Manifest/lines`` into the index, unless it was as it streamed.
        func take(_ line: UnsafeRawBufferPointer) throws {
            let number = manifests[id].lines
            guard number >= manifests[id].waitsFrom ?? 1, manifests[id].failure == nil else { return }
            switch parseManifestLine(id, number: number, line, version: version) {
            case .failure(let problem): manifests[id].failure = problem
            case .success(nil): break
            case .success(let parsed?):
                if checksAbsence, try isAbsent(parsed, root: root) {
                    throw BagError(
                        .missingFile, file: parsed.path(root: root),
                        "is listed in \(manifests[id].name) but is not in the bag")
                }
                if parsed.marksBinary { manifests[id].binaryMarkers += 1 }
                let insert = try db.cachedStatement(sql: BagIndex.insertManifestLineSQL).sqliteStatement
                let isNew = try BagIndex.insertManifestLine(
                    insert, db, manifest: id, key: parsed.key, path: parsed.storedPath, checksum: parsed.checksum)
                if !isNew {
                    let path = parsed.path(root: root)
                    let kind = try BagIndexWriter.Repeat.of(
                        parsed.storedPath, parsed.checksum, key: parsed.key, manifest: id, db)
                    if Self.repeatIsError(kind, version: version) {
                        manifests[id].failure = TagFile.duplicateManifestLine(
                            path, number: number, file: manifests[id].name)
                    } else {
                        let count = (manifests[id].repeats[kind]?.count ?? 0) + 1
                        let first = manifests[id].repeats[kind].map { ($0.number, $0.path) } ?? (number, path)
                        manifests[id].repeats[kind] = (first.0, first.1, count)
                    }
                }
            }
        }
        // The manifest's lines, from its bytes: those before the first that waited were
        // parsed as they streamed, and are passed over.
        manifests[id].lines = 0
        var stream = ManifestStream(file: manifests[id].name)
        try spool?.chunks(in: manifests[id].spooled) { chunk in
            try splitManifest(id, chunk, &stream, asItStreams: false, take)
            return manifests[id].failure == nil
        }
        if manifests[id].failure == nil { try splitManifest(id, nil, &stream, asItStreams: false, take) }
        if manifests[id].failure != nil {
            try db.execute(sql: "DELETE FROM manifest WHERE manifest = ?", arguments: [id])
        }
    }

    // MARK: Reading

    /// The longest line of a payload manifest (a checksum and a path: a few hundred bytes).
    static let maxManifestLineBytes = 1 << 20

    /// Hashes (and keeps, or passes to a sink) one file's bytes, pushed by `produce`.
    ///
    /// - Parameter member: The archive member's path as the archive spells it, for an error
    ///   naming it; `nil` in a directory.
    func consume(
        _ path: String, member: String? = nil, produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        let roots = Self.payloadRoots(path)
        let isPayload = !roots.isEmpty
        if !isPayload, let member, handledTags.contains(Array(path.utf8)) { throw duplicate(member) }
        var target: (any BagPayloadSink)?
        if isPayload, let sink {
            var expected: String?
            for root in roots where expected == nil && options.looksUpExpectedSHA256 {
                expected = try expectedSHA256(path, root: root)
            }
            target = try sink(path, expected)
        }
        let manifest = isPayload ? nil : startManifest(path)
        let keeps = !isPayload && manifest == nil && isKeptTag(path)
        // Of `fetch.txt`, only whether it lists anything is kept.
        let isFetch = !isPayload && manifest == nil && !keeps && tagNames(path).contains("fetch.txt")
        if !isPayload && manifest == nil && !keeps && !isFetch, let tagSink {
            // Relative to a root whose `bagit.txt` came already, when one did.
            let names = tagNames(path).filter { name in
                declarations.isEmpty
                    || declarations.contains(String(Substring(path.utf8.dropLast(name.utf8.count))) + "bagit.txt")
            }
            for name in names where target == nil { target = try tagSink(name, path) }
        }
        if !isPayload && (manifest != nil || keeps || isFetch || target != nil) {
            handledTags.insert(Array(path.utf8))
        }
        // A standard tag file kept in memory has limits of its own, checked as its bytes come.
        let tagLimit =
            keeps
            ? tagNames(path).lazy.compactMap { name in BagReader.TagLimit.of(name).map { (name, $0) } }.first : nil
        var lineCount = LineCount()
        var fetchLines = LineSplitter()
        var fetchLineCount = 0
        var fetchFailure: BagError?
        let keepFetchLine = { (line: UnsafeRawBufferPointer) throws in
            fetchLineCount += 1
            try self.writer.add(.fetchLine(file: path, number: fetchLineCount, line: Array(line)))
        }
        // A kept tag file is hashed later, from its bytes, with the algorithms of the tag
        // manifests the bag turns out to have.
        // A payload manifest too, from its bytes in the spool, should a tag manifest list it.
        let hasher = SplitHasher(isPayload ? payloadAlgorithms() : keeps || manifest != nil ? [] : tagAlgorithms())
        var lines = ManifestStream(file: manifest.map { manifests[$0].name } ?? path)
        var bytes: [UInt8] = []
        var size: Int64 = 0
        let limit = options.maxTagFileBytes
        let cancelled = isCancelled
        try produce { chunk in
            if cancelled() { throw BagError(.cancelled, file: nil, "cancelled") }
            hasher.update(chunk)
            size += Int64(chunk.count)
            try target?.write(chunk)
            if let manifest {
                try spoolManifestBytes(manifest, chunk)
                // A manifest in UTF-16 (it begins with a byte-order mark) is split as UTF-8.
                if splitsAsItStreams(manifest) {
                    try splitManifest(manifest, chunk, &lines, asItStreams: true) {
                        try self.manifestLine(manifest, $0)
                    }
                }
            }
            if isFetch && fetchFailure == nil {
                try fetchLines.split(chunk, keepFetchLine)
                if fetchLines.pendingBytes > Self.maxManifestLineBytes {
                    fetchFailure = BagError(
                        .malformedTagFile, file: "fetch.txt",
                        "line \(fetchLineCount + 1) is longer than \(Self.maxManifestLineBytes) bytes")
                    fetchLines = LineSplitter()
                }
            }
            if let (name, tagLimit) = tagLimit {
                guard bytes.count + chunk.count <= tagLimit.bytes else {
                    throw BagError(
                        .hostileEntry, file: path,
                        "is larger than \(BagReader.TagLimit.describe(tagLimit.bytes)), the limit for \(name)")
                }
                guard keptStandardBytes + chunk.count <= BagReader.TagLimit.totalBytes else {
                    throw BagError(
                        .hostileEntry, file: path,
                        "takes the tag files kept in memory (bagit.txt, bag-info.txt and tag manifests, of every "
                            + "possible root) over \(BagReader.TagLimit.describe(BagReader.TagLimit.totalBytes)), "
                            + "their limit together")
                }
                keptStandardBytes += chunk.count
                try lineCount.count(chunk, limit: tagLimit.lineBytes) { number in
                    BagError(
                        .hostileEntry, file: path,
                        "line \(number) is longer than \(BagReader.TagLimit.describe(tagLimit.lineBytes)), "
                            + "the limit for a line of \(name)")
                }
            }
            if keeps {
                guard bytes.count + chunk.count <= limit else {
                    throw BagError(
                        .hostileEntry, file: path, "is a tag file larger than \(limit) bytes, the limit for tag files")
                }
                bytes.append(contentsOf: chunk)
            }
        }
        let digests = hasher.finalize()
        try target?.finish(digests: digests)
        if let manifest {
            if splitsAsItStreams(manifest) {
                try splitManifest(manifest, nil, &lines, asItStreams: true) { try manifestLine(manifest, $0) }
            }
            try endManifest(manifest)
        }
        if isFetch {
            if fetchFailure == nil { try fetchLines.finish(keepFetchLine) }
            fetchLists[path] = fetchFailure
        }
        if keeps {
            kept[path] = bytes
            noteKept(path)
            if let tagFileRead, let name = tagNames(path).first(where: options.keptTagFiles.contains) {
                tagFileRead(name, bytes)
            }
        }
        try record(path, size: size, digests: digests, link: nil, member: member)
    }

    // MARK: Archives

    func readArchive(_ path: String) throws {
        try withArchive(path) { reader in
            bytesTotal = reader.fileSize ?? 0  // of the file opened, not of what the path names now
            // Paths are remembered by the index, on disk, not by the guard (see `record`).
            var checker = ExtractionGuard(policy: options.policy, archivePath: path, remembersPaths: false)
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
                    // Only to a regular file read before it, named by the same bytes, as the guard
                    // would check it.
                    let target = try checker.validatePath(entry.linkTarget ?? "", of: entry).joined(separator: "/")
                    guard let seen = try indexedFile(target), seen.linkTarget == nil,
                        seen.path.utf8.elementsEqual(target.utf8)
                    else { throw checker.missingLinkTargetRefusal(for: entry) }
                    try record(
                        member, size: seen.size, digests: seen.digests, link: BagIndex.key(target), member: entry.path)
                case .file:
                    let start = reader.compressedBytesRead
                    try consume(member, member: entry.path) { write in
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
    static func bagError(_ error: ArchiveError, archive: String) -> any Error {
        switch error.code {
        case .absolutePath, .parentTraversal, .invalidName, .nameTooLong, .linkOutsideRoot, .hardlinkTargetMissing,
            .entryTypeNotAllowed, .duplicateEntry, .tooManyEntries, .sizeLimitExceeded, .compressionRatioExceeded:
            return BagError(.hostileEntry, file: nil, error.message)
        case .callbackFailed:
            if let cause = error.cause as? BagError { return cause }
            if let cause = error.cause, cause is DatabaseError { return BagIndex.failure(cause) }
            return BagError(.io, file: archive, error.message)
        default:
            return BagError(.unreadableArchive, file: nil, error.message)
        }
    }

    /// Hashes, in a second pass, what the first could not: files read before a manifest in
    /// an algorithm they were not hashed with. `payload` gives the algorithms every payload
    /// file under `root` needs; `tags`, those of some tag files, by path in the bundle.
    func completeDigests(
        _ db: Database, root: String, payload: Set<ChecksumAlgorithm>, tags: [String: Set<ChecksumAlgorithm>]
    ) throws {
        let (low, high) = BagPayload.range(root + "data/")
        func needs(_ path: String) throws -> Set<ChecksumAlgorithm> {
            var algorithms = tags[path] ?? []
            guard !payload.isEmpty, let seen = try indexedFile(path), seen.linkTarget == nil else {
                return algorithms
            }
            let missing = payload.subtracting(seen.digests.keys)
            guard !missing.isEmpty else { return algorithms }
            // Payload, or a file that a payload hard link repeats (a tag file, say).
            let repeated = {
                try Bool.fetchOne(
                    db, sql: "SELECT EXISTS (SELECT 1 FROM file WHERE link = ? AND path >= ? AND path < ?)",
                    arguments: [BagIndex.key(path), low, high]) == true
            }
            if try path.hasBytePrefix(low) || repeated() { algorithms.formUnion(missing) }
            return algorithms
        }
        func update(_ path: String, _ digests: [ChecksumAlgorithm: String]) throws {
            try db.execute(
                sql: "UPDATE file SET md5 = coalesce(md5, ?), sha1 = coalesce(sha1, ?), sha224 = coalesce(sha224, ?), "
                    + "sha256 = coalesce(sha256, ?), sha384 = coalesce(sha384, ?), sha512 = coalesce(sha512, ?) "
                    + "WHERE key = ?",
                arguments: [
                    digests[.md5], digests[.sha1], digests[.sha224], digests[.sha256], digests[.sha384],
                    digests[.sha512], BagIndex.key(path),
                ])
        }
        if directoryRoot != nil {
            // Tag files, then the payload, from the disk again.
            var paths = Array(tags.keys)
            if !payload.isEmpty {
                let lacking = payload.map { "\($0.rawValue) IS NULL" }.joined(separator: " OR ")
                paths += try String.fetchAll(
                    db, sql: "SELECT path FROM file WHERE path >= ? AND path < ? AND link IS NULL AND (\(lacking))",
                    arguments: [low, high])
            }
            for path in paths {
                var hasher = MultiHasher(try needs(path))
                try hashFile(path) { hasher.update($0) }
                try update(path, hasher.finalize())
            }
        } else {
            try withArchive(source) { reader in
                // The first pass checked every member's path.
                var checker = ExtractionGuard(policy: options.policy, archivePath: source, remembersPaths: false)
                while let entry = try reader.nextEntry() {
                    guard let safe = try checker.admit(entry), entry.kind == .file else { continue }
                    let path = safe.description
                    let algorithms = try needs(path)
                    guard !algorithms.isEmpty else { continue }
                    var hasher = MultiHasher(algorithms)
                    try reader.readData { chunk in
                        if isCancelled() { throw BagError(.cancelled, file: nil, "cancelled") }
                        hasher.update(chunk)
                    }
                    try update(path, hasher.finalize())
                }
            }
        }
        // Hard links repeat their file's digests.
        try db.execute(
            sql: """
                UPDATE file SET (md5, sha1, sha224, sha256, sha384, sha512) =
                    (SELECT t.md5, t.sha1, t.sha224, t.sha256, t.sha384, t.sha512 FROM file AS t
                     WHERE t.key = file.link)
                WHERE link IS NOT NULL
                """)
    }

    // MARK: Directories

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

    // MARK: Checking

    /// A file whose digest differs from the one `manifest` lists — or that was not hashed in
    /// that algorithm, which must not pass for a match.
    static func checksumProblem(
        _ path: String, listed: String, in manifest: String, _ algorithm: ChecksumAlgorithm, _ actual: String?
    ) -> [BagError] {
        guard let actual else {
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
        guard let db, let mdb else { preconditionFailure("contents() runs once the read has ended, on its databases") }
        // Where is the bag? `bagit.txt` at the top, or in exactly one top-level directory.
        guard !declarations.isEmpty else {
            throw BagError(.notABag, file: source, "holds no bagit.txt: it is not a BagIt bag")
        }
        // A bag at the top holds whatever else is named bagit.txt: payload (`data/bagit.txt`)
        // or a tag file in a tag directory.
        if declarations.contains("bagit.txt") { declarations = ["bagit.txt"] }
        guard declarations.count == 1 else {
            throw BagError(
                .notABag, file: source, "holds more than one bag (\(declarations.sorted().joined(separator: ", ")))")
        }
        let root = String(declarations[0].dropLast("bagit.txt".count))
        let (dataLow, dataHigh) = BagPayload.range(root + "data/")
        var problems = ProblemList(limit: options.maxProblems)
        var warnings = ProblemList(limit: options.maxProblems)
        // With ``BagReadOptions/stopsAtMaxProblems``: whether the walks below stopped there, with
        // at least one problem found (a listed file the bag lacks is one only once no twin excuses it).
        var stopped = false
        let (stops, enoughProblems) = (options.stopsAtMaxProblems, max(1, options.maxProblems))
        let enough = { stops && problems.count >= enoughProblems }

        if !root.isEmpty {
            let (low, high) = BagPayload.range(root)
            let outside = try RowWalk(
                db, "SELECT path FROM file WHERE path < ? OR path >= ? ORDER BY path", [.text(low), .text(high)])
            while outside.hasRow {
                if enough() {
                    stopped = true
                    break
                }
                problems.append(
                    BagError(
                        .unlistedFile, file: outside.text(0) ?? "",
                        "is outside the bag's top-level directory \(root.dropLast())"))
                try outside.step()
            }
        }
        // Nothing else reads right without the version: a bad declaration stops here.
        let (version, encoding) = try TagFile.parseDeclarationAndEncoding(kept[root + "bagit.txt"] ?? [])
        var info: [(label: String, value: String)] = []
        if let bytes = kept[root + "bag-info.txt"] {
            do {
                info = try TagFile.parseFields(bytes, file: "bag-info.txt", encoding: encoding)
            } catch { problems.append(error) }
        }
        var tagFiles: [String: [UInt8]] = [:]
        for name in options.keptTagFiles { if let bytes = kept[root + name] { tagFiles[name] = bytes } }

        // Payload manifests: those whose lines waited for the version are parsed now.
        var payloadManifests: [ChecksumAlgorithm: Int] = [:]
        for id in manifests.indices where manifests[id].root == root {
            if manifests[id].waitsFrom != nil && manifests[id].failure == nil {
                try parsePending(id, version: version, encoding: encoding)
            }
            // A manifest whose lines streamed in one encoding, of a bag that declares another.
            if manifests[id].failure == nil && manifests[id].lines > 0 && manifests[id].isUTF16 != (encoding == .utf16)
            {
                manifests[id].failure = BagError(
                    .malformedTagFile, file: manifests[id].name,
                    manifests[id].isUTF16
                        ? "is in UTF-16, but bagit.txt declares \(encoding.rawValue)"
                        : "has no UTF-16 byte-order mark, which this reader needs to read it as bagit.txt declares")
            }
            if let failure = manifests[id].failure {
                problems.append(failure)
            } else {
                payloadManifests[manifests[id].algorithm] = id
                if manifests[id].binaryMarkers > 0 {
                    warnings.append(Self.binaryMarkerWarning(manifests[id].binaryMarkers, file: manifests[id].name))
                }
                for (kind, first) in manifests[id].repeats {
                    let how = kind == .otherNormalization ? " in another Unicode normalisation" : ""
                    let more = first.count > 1 ? " (and \(first.count - 1) more lines like it)" : ""
                    warnings.append(
                        BagError(
                            .malformedManifest, file: manifests[id].name,
                            "line \(first.number) lists \(first.path) again\(how), with the same checksum\(more)"))
                }
            }
        }
        // Tag manifests, from their kept bytes.
        var tagManifests: [ChecksumAlgorithm: [String: String]] = [:]
        for (path, bytes) in kept where path.hasBytePrefix(root) {
            let relative = path.droppingBytePrefix(root)
            guard let algorithm = ChecksumAlgorithm(manifestName: relative, prefix: "tagmanifest-") else { continue }
            do {
                let parsed = try TagFile.parseManifestCountingMarkers(
                    bytes, file: relative, algorithm: algorithm, version: version, encoding: encoding)
                tagManifests[algorithm] = parsed.entries
                if parsed.binaryMarkers > 0 {
                    warnings.append(Self.binaryMarkerWarning(parsed.binaryMarkers, file: relative))
                }
            } catch { problems.append(error) }
        }
        // A manifest in a supported algorithm that could not be read has said why already.
        let readManifest = manifests.contains { $0.root == root }
        if payloadManifests.isEmpty && !readManifest && !problems.contains(.malformedManifest) {
            let (low, high) = (root + "manifest-", root + "manifest.")
            let manifestFiles = try String.fetchAll(
                db, sql: "SELECT path FROM file WHERE path >= ? AND path < ? ORDER BY path", arguments: [low, high]
            ).map { $0.droppingBytePrefix(root) }.filter { !$0.utf8.contains(0x2F) && $0.hasSuffix(".txt") }
            problems.append(
                BagError(
                    .missingManifest, file: manifestFiles.first ?? "manifest-sha256.txt",
                    manifestFiles.isEmpty
                        ? "is missing: a bag needs a payload manifest"
                        : "is in an unsupported algorithm; a bag needs a manifest in md5, sha1, sha224, sha256, sha384 or sha512"
                ))
        }

        // The digests each tag file listed needs: hashed now from kept bytes, or read in a
        // second pass when the file was read before its tag manifest.
        var tagDigests: [String: [ChecksumAlgorithm: String]] = [:]
        var tagNeeds: [String: Set<ChecksumAlgorithm>] = [:]
        let tagAlgorithms = Set(tagManifests.keys)
        for path in Set(tagManifests.values.flatMap(\.keys)) where !path.hasBytePrefix("data/") {
            guard let seen = try indexedFile(root + path) else { continue }
            // A hard link to a kept tag file has that file's bytes.
            if let bytes = kept[root + path] ?? seen.linkTarget.flatMap({ kept[$0] }) {
                var hasher = MultiHasher(tagAlgorithms)
                bytes.withUnsafeBytes { hasher.update($0) }
                tagDigests[path] = hasher.finalize()
            } else if let spooled = spooledManifest(seen.linkTarget ?? seen.path) {
                // A payload manifest (or a hard link to one): from its bytes in the spool.
                var hasher = MultiHasher(tagAlgorithms)
                try spool?.chunks(in: spooled) { chunk in
                    hasher.update(chunk)
                    return true
                }
                tagDigests[path] = hasher.finalize()
            } else {
                let lacking = tagAlgorithms.subtracting(seen.digests.keys)
                if !lacking.isEmpty { tagNeeds[root + path] = lacking }
            }
        }
        // Payload hashed before a manifest of its algorithm was seen: a second pass.
        let payloadNeeds = Set(payloadManifests.keys)
        let lacking = payloadNeeds.map { "\($0.rawValue) IS NULL" }.joined(separator: " OR ")
        let payloadLacks =
            try !payloadNeeds.isEmpty
            && Bool.fetchOne(
                db,
                sql:
                    "SELECT EXISTS (SELECT 1 FROM file WHERE path >= ? AND path < ? AND (\(lacking)))",
                arguments: [dataLow, dataHigh]) == true
        if payloadLacks || !tagNeeds.isEmpty {
            try completeDigests(db, root: root, payload: payloadLacks ? payloadNeeds : [], tags: tagNeeds)
        }

        // fetch.txt: the files it lists, by key, for the walk to tell a file to fetch from one
        // that is missing.
        var fetchListed = 0
        if let failure = fetchLists[root + "fetch.txt"] {
            if let failure { problems.append(failure) }
            var after = 0
            parsing: while true {
                let page = try Row.fetchAll(
                    mdb.cachedStatement(
                        sql: "SELECT number, line FROM fetchline WHERE file = ? AND number > ? "
                            + "ORDER BY number LIMIT 1000"),
                    arguments: [root + "fetch.txt", after])
                for row in page {
                    let number: Int = row[0]
                    let line: Data = row[1]
                    do {
                        guard let path = try Self.parseStreamedFetchLine(line, number: number, version: version)
                        else { continue }
                        try mdb.run(
                            "INSERT OR IGNORE INTO fetch(key, path) VALUES (?, ?)",
                            [.text(BagIndex.key(root + path)), .text(path)])
                        fetchListed += 1
                    } catch let error as BagError {
                        problems.append(error)  // the first line that cannot be read; the rest is moot
                        break parsing
                    }
                }
                guard page.count == 1000, let last = page.last else { break }
                after = last[0]
            }
        }
        // Files listed but absent that fetch.txt lists, in the first manifest's walk.
        var filesToFetch = 0

        // Completeness both ways, and checksums, for every payload manifest. (In any order:
        // the problems are sorted by file at the end.)
        let otherProblems = { problems.count - problems.codes[.malformedManifest, default: 0] }
        let otherProblemsBefore = otherProblems()
        // Files listed but absent that the first manifest's walk excused: those the operating
        // system makes, by count; and those to look at once the walk is over, for a twin
        // that differs only by case (a bag made on a case-insensitive file system).
        var absentSystemFiles = 0
        var absentByManifest: [(name: String, id: Int, files: [AbsentFile])] = []
        // A line's path is under data/ when its key is under the root's key and data/ (a key is
        // the NFC form of the root and the path, and NFC changes neither an ASCII `data/` nor
        // anything across a `/`): the lines outside data/ are the keys either side of the range.
        let (keyLow, keyHigh) = BagPayload.range(BagIndex.key(root) + "data/")
        merging: for (index, algorithm) in payloadManifests.keys.sorted().enumerated() {
            let name = "manifest-\(algorithm.rawValue).txt"
            let id = payloadManifests[algorithm]!
            var absent: [AbsentFile] = []
            defer { if !absent.isEmpty { absentByManifest.append((name, id, absent)) } }
            for side in ["key < ?", "key >= ?"] {
                let outside = try RowWalk(
                    mdb, "SELECT key, path FROM manifest WHERE manifest = ? AND \(side) ORDER BY key",
                    [.integer(Int64(id)), .text(side == "key < ?" ? keyLow : keyHigh)])
                while outside.hasRow {
                    if enough() {
                        stopped = true
                        break merging
                    }
                    problems.append(
                        BagError(
                            .malformedManifest, file: name,
                            "lists \(outside.manifestLinePath(root: root)), which is not under data/"))
                    try outside.step()
                }
            }
            // The manifest's lines and the payload files, side by side in the order of their keys.
            let listed = try RowWalk(
                mdb,
                "SELECT key, path, checksum FROM manifest WHERE manifest = ? AND key >= ? AND key < ? ORDER BY key",
                [.integer(Int64(id)), .text(keyLow), .text(keyHigh)])
            let files = try RowWalk(
                db, "SELECT key, path, \(algorithm.rawValue) FROM file WHERE path >= ? AND path < ? ORDER BY key",
                [.text(dataLow), .text(dataHigh)])
            while listed.hasRow || files.hasRow {
                if enough() {
                    stopped = true
                    break merging
                }
                let order = !listed.hasRow ? 1 : !files.hasRow ? -1 : listed.compare(0, with: files, 0)
                if order < 0 {
                    let path = listed.manifestLinePath(root: root)
                    if fetchListed > 0,
                        try Bool.fetchOne(
                            mdb, sql: "SELECT EXISTS (SELECT 1 FROM fetch WHERE key = ?)", arguments: [listed.text(0)])
                            == true
                    {
                        if index == 0 { filesToFetch += 1 }
                    } else if Self.isSystemFile(path) {
                        warnings.append(
                            BagError(
                                .missingFile, file: path,
                                "is listed in \(name) but is not in the bag: a file the operating system makes, "
                                    + "which copies often leave out"))
                        if index == 0 { absentSystemFiles += 1 }
                    } else if absent.count < Self.maxCaseTwinChecks {
                        absent.append((path, listed.text(0) ?? "", Database.checksum(listed.handle, 2)))
                    } else {
                        problems.append(.missingFile, file: path, "is listed in \(name) but is not in the bag")
                    }
                    try listed.step()
                } else if order > 0 {
                    problems.append(
                        .unlistedFile, file: (files.text(1) ?? "").droppingBytePrefix(root),
                        "is in the bag but not listed in \(name)")
                    try files.step()
                } else {
                    let checksum = Database.checksum(listed.handle, 2)
                    if !checksum.matches(hex: files.bytes(2)) || sqlite3_column_type(files.handle, 2) == SQLITE_NULL {
                        problems.append(
                            contentsOf: Self.checksumProblem(
                                listed.manifestLinePath(root: root), listed: checksum.hex, in: name, algorithm,
                                files.text(2)))
                    }
                    try listed.step()
                    try files.step()
                }
            }
        }
        // A listed file the bag lacks is excused when the manifest lists, with the same
        // checksum, a file the bag holds whose path differs only by (ASCII) case: on the
        // case-insensitive file system the bag was made on, they were one file.
        if !absentByManifest.isEmpty {
            let twins = try caseTwins(of: absentByManifest.map { ($0.id, $0.files) }, root: root, db, mdb)
            for (m, (name, _, absent)) in absentByManifest.enumerated() {
                for (f, file) in absent.enumerated() {
                    if let twin = twins[m][f] {
                        warnings.append(
                            BagError(
                                .missingFile, file: file.path,
                                "is listed in \(name) but is not in the bag, which holds \(twin) with the same "
                                    + "checksum: the two names differ only by case, one file on a case-insensitive "
                                    + "file system"))
                    } else {
                        problems.append(
                            BagError(.missingFile, file: file.path, "is listed in \(name) but is not in the bag"))
                    }
                }
            }
        }

        // Tag manifests: what they list must be there and match; they do not list payload.
        for algorithm in tagManifests.keys.sorted() {
            let name = "tagmanifest-\(algorithm.rawValue).txt"
            for (path, checksum) in tagManifests[algorithm]!.sorted(by: { $0.key < $1.key }) {
                if path.hasBytePrefix("data/") {
                    problems.append(BagError(.malformedManifest, file: name, "lists the payload file \(path)"))
                } else if let digests = try tagDigests[path] ?? indexedFile(root + path)?.digests {
                    problems.append(
                        contentsOf: Self.checksumProblem(
                            path, listed: checksum, in: name, algorithm, digests[algorithm]))
                } else {
                    problems.append(BagError(.missingFile, file: path, "is listed in \(name) but is not in the bag"))
                }
            }
        }

        // Payload-Oxum and fetch.txt.
        let totals = try Row.fetchOne(
            db, sql: "SELECT count(*), coalesce(sum(size), 0) FROM file WHERE path >= ? AND path < ?",
            arguments: [dataLow, dataHigh])!
        // (The problems since are the merges', and a manifest's lines not under data/.)
        let manifestsMatch = otherProblems() == otherProblemsBefore
        let payload = BagPayload(
            index: index, root: root, manifests: payloadManifests, manifestsListDigests: manifestsMatch,
            count: totals[0], bytes: totals[1])
        if let oxum = info.first(where: { $0.label.lowercased() == "payload-oxum" })?.value {
            let parts = oxum.split(separator: ".")
            let actual = "\(payload.bytes).\(payload.count)"
            if parts.count != 2 || Int64(parts[0]) == nil || Int(parts[1]) == nil {
                problems.append(
                    BagError(.malformedTagFile, file: "bag-info.txt", "Payload-Oxum '\(oxum)' is not 'octets.files'"))
            } else if filesToFetch > 0 {
                // Of the whole bag, once fetched: its files only can be counted.
                if Int(parts[1]) != payload.count + filesToFetch {
                    problems.append(
                        BagError(
                            .oxumMismatch, file: "bag-info.txt",
                            "Payload-Oxum is \(oxum) but the payload is \(payload.count) files and fetch.txt lists "
                                + "\(filesToFetch) more it lacks"))
                }
            } else if oxum != actual {
                let mismatch =
                    "Payload-Oxum is \(oxum) but the payload is \(payload.bytes) bytes in \(payload.count) files"
                // The files the operating system makes, listed but left out, explain it: a warning.
                if absentSystemFiles > 0, Int(parts[1]) == payload.count + absentSystemFiles,
                    let bytes = Int64(parts[0]), bytes >= payload.bytes
                {
                    warnings.append(
                        BagError(
                            .oxumMismatch, file: "bag-info.txt",
                            mismatch + ": the files it lacks are ones the operating system makes"))
                } else {
                    problems.append(BagError(.oxumMismatch, file: "bag-info.txt", mismatch))
                }
            }
        }
        // RFC 8493 2.2.3: every file fetch.txt lists is in every payload manifest.
        if fetchListed > 0, let (algorithm, id) = payloadManifests.min(by: { $0.key < $1.key }) {
            for path in try String.fetchAll(
                mdb,
                sql: "SELECT path FROM fetch WHERE key NOT IN (SELECT key FROM manifest WHERE manifest = ?) "
                    + "ORDER BY key LIMIT ?",
                arguments: [id, max(1, options.maxProblems)])
            {
                problems.append(
                    BagError(
                        .malformedTagFile, file: "fetch.txt",
                        "lists \(path), which manifest-\(algorithm.rawValue).txt does not list"))
            }
        }
        if fetchListed > 0 {
            warnings.append(
                BagError(
                    .fetchUnsupported, file: "fetch.txt",
                    filesToFetch == 0
                        ? "lists \(fetchListed == 1 ? "1 file" : "\(fetchListed) files") to fetch from elsewhere, "
                            + "all of them in the bag already"
                        : "lists \(fetchListed == 1 ? "1 file" : "\(fetchListed) files") to fetch from elsewhere, "
                            + "\(filesToFetch) of them not in the bag: it is incomplete until they are fetched "
                            + "(fetching is not supported)"))
        }
        return BagContents(
            source: source, version: version, bagName: String(root.dropLast()), info: info, payload: payload,
            tagFiles: tagFiles, problems: problems.first, problemCount: problems.count, countsAllProblems: !stopped,
            warnings: warnings.first, warningCount: warnings.count, filesToFetch: filesToFetch,
            directory: directoryRoot)
    }

    /// How many listed files a bag lacks that a read checks for a twin differing only by case
    /// (in each payload manifest); those beyond are problems without a look.
    static let maxCaseTwinChecks = 1000

    /// A listed file the bag lacks, kept for ``caseTwins(of:root:_:_:)``: its path, key and checksum.
    typealias AbsentFile = (path: String, key: String, checksum: ManifestChecksum)

    /// For each manifest's listed files that the bag lacks (`absent`, by manifest ID): the
    /// path, as that manifest spells it, of a file the bag holds whose key differs from the
    /// absent one's only by ASCII case (as SQLite's `NOCASE` folds) and that the manifest lists
    /// with the same checksum — the first such key in byte order — or `nil`.
    ///
    /// One walk of the files read, each key folded and looked up among the absent ones (a
    /// few thousand at most, ``maxCaseTwinChecks`` a manifest), and a look in the manifest for
    /// each key that folds like one: the cost of the files' keys, whatever the number of
    /// manifest lines. (An index on the manifest's folded keys costs a sort of every line, and
    /// without statistics SQLite scans all of a manifest's lines for each look-up instead of
    /// using it.)
    func caseTwins(
        of absent: [(id: Int, files: [AbsentFile])], root: String, _ db: Database, _ mdb: Database
    ) throws -> [[String?]] {
        var byFolded: [String: [(manifest: Int, file: Int)]] = [:]
        for (m, list) in absent.enumerated() {
            for (f, file) in list.files.enumerated() {
                byFolded[Self.asciiFolded(file.key), default: []].append((m, f))
            }
        }
        var twins: [[(key: String, path: String)?]] = absent.map { Array(repeating: nil, count: $0.files.count) }
        let files = try RowWalk(db, "SELECT key FROM file", [])
        while files.hasRow {
            let key = files.text(0) ?? ""
            if let waiting = byFolded[Self.asciiFolded(key)] {
                for (m, f) in waiting {
                    let file = absent[m].files[f]
                    guard !key.utf8.elementsEqual(file.key.utf8),
                        twins[m][f].map({ key.utf8.lexicographicallyPrecedes($0.key.utf8) }) ?? true
                    else { continue }
                    var listed: (path: String, checksum: ManifestChecksum)?
                    try mdb.run(
                        "SELECT path, checksum FROM manifest WHERE manifest = ? AND key = ?",
                        [.integer(Int64(absent[m].id)), .text(key)]
                    ) {
                        listed = (
                            BagIndex.manifestLinePath(stored: Database.text($0, 0), key: key, root: root),
                            Database.checksum($0, 1)
                        )
                    }
                    if let listed, listed.checksum == file.checksum { twins[m][f] = (key, listed.path) }
                }
            }
            try files.step()
        }
        return twins.map { $0.map { $0?.path } }
    }

    /// `key` with its ASCII letters in lower case, as SQLite's `NOCASE` compares it.
    static func asciiFolded(_ key: String) -> String {
        guard key.utf8.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) else { return key }
        return String(decoding: key.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// The names of files that operating systems make in folders they show (Finder's
    /// `.DS_Store` and `._` AppleDouble files, Windows' `Thumbs.db` and `desktop.ini`), which
    /// copies between systems often leave out.
    /// (Asked of every listed file a bag lacks: a name that begins with none of their first
    /// letters is answered from the path's bytes, without a copy.)
    static func isSystemFile(_ path: String) -> Bool {
        var path = path
        let start = path.withUTF8 { bytes in
            var start = bytes.count
            while start > 0 && bytes[start - 1] != 0x2F { start -= 1 }
            return start < bytes.count && systemFileInitials.contains(bytes[start]) ? start : nil
        }
        guard let start else { return false }
        let name = String(Substring(path.utf8.dropFirst(start)))
        return systemFileNames.contains(name) || name.hasBytePrefix("._")
    }

    static let systemFileNames: Set<String> = [
        "Thumbs.db", "ehthumbs.db", "desktop.ini", "Desktop.ini", ".DS_Store", ".Spotlight-V100", ".Trashes",
        ".fseventsd", ".TemporaryItems", ".localized",
    ]
    static let systemFileInitials = Array(Set(systemFileNames.compactMap(\.utf8.first)))

    /// The warning for a manifest whose lines mark files with md5sum's binary-mode `*`.
    static func binaryMarkerWarning(_ count: Int, file: String) -> BagError {
        BagError(
            .malformedManifest, file: file,
            "\(count == 1 ? "1 line marks its file" : "\(count) lines mark their files") with md5sum's binary-mode "
                + "'*' (read as the name after it)")
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
