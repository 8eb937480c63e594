import ArchiveIO
import Foundation
import GRDB
import GRDBSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// The state of one read. Per-file state goes to the read's ``BagIndex``; only what is
/// small stays here (the kept tag files, one entry per manifest).
final class Scan {
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
    /// The index's databases of files and of manifests, once the read has ended (``BagValidation``).
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
}
