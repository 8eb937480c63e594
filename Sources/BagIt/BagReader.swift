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
                    contents = try BagValidation(scan, files: files, manifests: manifests).contents()
                    return .commit
                }
                return .commit
            }
            return contents!
        }
    }
}
