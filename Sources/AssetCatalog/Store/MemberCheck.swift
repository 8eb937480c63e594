import ArchiveIO
import BagIt
import Foundation
import GRDB
import GRDBSQLite

extension BundleRecords {
    /// Checks our records' archive members against the archives themselves, in the bag's
    /// payload: each member an import would record exists in its archive — the
    /// `memberOrdinal`-th of that name, as ``ArchiveIndex`` counts them — with the recorded
    /// size and SHA-256. The other checks compare a member's record with the member's own
    /// payload file only: without this one, a record could point at a member its archive does
    /// not have, and the catalog at nothing right after the import.
    ///
    /// Each archive is read once, as a stream; what it holds goes to the import's
    /// ``ImportScratch`` (table `archive_member`), which the records are then compared with
    /// in SQL: memory does not grow with the number of members. Its bytes count against the
    /// import's ``ExtractionPolicy/maxTotalBytes``, so that an archive that expands without
    /// end is refused rather than read. (Not against its compression ratio: the archive is
    /// not extracted, and a catalog may well hold an archive of highly compressible files,
    /// which the bag holds uncompressed beside it.)
    enum MemberCheck {
        /// The most problems listed (all are counted).
        static let limit = 1_000

        /// The problems of the records' members, the first ``limit`` in the records' order,
        /// and how many there are in all.
        ///
        /// - Parameter archiveFile: A path to the bytes of the archive with this SHA-256 and
        ///   payload path, `nil` when there are none (its members are reported as absent).
        static func problems(
            _ scratch: ImportScratch, policy: ExtractionPolicy,
            archiveFile: (_ sha256: String, _ payload: String) throws -> String?, isCancelled: () -> Bool
        ) throws -> (first: [BagError], count: Int) {
            try scratch.execute("DROP TABLE IF EXISTS archive_member")
            try scratch.execute(
                """
                CREATE TABLE archive_member(
                    archive INTEGER NOT NULL, member TEXT NOT NULL, ordinal INTEGER NOT NULL,
                    size INTEGER, sha256 TEXT, PRIMARY KEY (archive, member, ordinal)) WITHOUT ROWID
                """)
            // The archives whose members an import records (few rows: one per archive).
            var archives: [(key: Int64, sha256: String, payload: String)] = []
            try scratch.run { db in
                try db.run(
                    """
                    SELECT a.key, a.sha256, a.payload FROM entry AS a
                    WHERE a.top = 1 AND a.key IN (SELECT archive FROM entry WHERE top = 0) ORDER BY a.seq
                    """, []
                ) { h in
                    archives.append((sqlite3_column_int64(h, 0), Database.text(h, 1) ?? "", Database.text(h, 2) ?? ""))
                }
            }
            for archive in archives {
                guard let file = try archiveFile(archive.sha256, archive.payload) else { continue }
                try read(
                    file, key: archive.key, payload: archive.payload, into: scratch, policy: policy,
                    isCancelled: isCancelled)
            }
            return try compare(scratch)
        }

        /// Reads one archive's members into `archive_member`: each file's size and SHA-256
        /// under its path and ordinal; a hard link's, those of the member it repeats.
        private static func read(
            _ file: String, key: Int64, payload: String, into scratch: ImportScratch, policy: ExtractionPolicy,
            isCancelled: () -> Bool
        ) throws {
            var rows: [(member: String, size: Int64?, sha256: String?, link: String?)] = []
            func flush() throws {
                guard !rows.isEmpty else { return }
                try scratch.run { db in
                    try db.inTransaction {
                        for row in rows {
                            // The ordinal: how many members of this path came before.
                            var ordinal: Int64 = 0
                            try db.run(
                                "SELECT count(*) FROM archive_member WHERE archive = ? AND member = ?",
                                [.integer(key), .text(row.member)]
                            ) { ordinal = sqlite3_column_int64($0, 0) }
                            var size = row.size.map(SQLArgument.integer) ?? .text(nil)
                            var sha256 = SQLArgument.text(row.sha256)
                            if let link = row.link {
                                // As ArchiveIndex reads a hard link: the first member of its target's path.
                                try db.run(
                                    "SELECT size, sha256 FROM archive_member WHERE archive = ? AND member = ? AND ordinal = 0",
                                    [.integer(key), .text(link)]
                                ) { h in
                                    size = .integer(sqlite3_column_int64(h, 0))
                                    sha256 = .text(Database.text(h, 1))
                                }
                            }
                            try db.run(
                                "INSERT INTO archive_member(archive, member, ordinal, size, sha256) VALUES (?, ?, ?, ?, ?)",
                                [.integer(key), .text(row.member), .integer(ordinal), size, sha256])
                        }
                        return .commit
                    }
                }
                rows.removeAll(keepingCapacity: true)
            }
            do {
                try withArchiveReader(at: file) { reader in
                    var limits = policy
                    limits.maxCompressionRatio = .infinity
                    var checker = ExtractionGuard(policy: limits, archivePath: payload, remembersPaths: false)
                    while let entry = try reader.nextEntry() {
                        if isCancelled() {
                            throw CatalogError(.cancelled, "The import was stopped; nothing was imported")
                        }
                        switch entry.kind {
                        case .file:
                            var hasher = DigestAccumulator()
                            var size: Int64 = 0
                            try reader.readData { chunk in
                                if reader.lastChunkIsHole {
                                    try checker.accountHole(bytes: chunk.count)
                                } else {
                                    try checker.account(
                                        bytes: chunk.count, compressedBytesRead: reader.compressedBytesRead)
                                }
                                hasher.add(chunk)
                                size += Int64(chunk.count)
                            }
                            rows.append((entry.path, size, hasher.hex, nil))
                        case .hardlink:
                            // A link to itself, or to nothing read before it, has no bytes.
                            let target = entry.linkTarget.flatMap { $0 == entry.path ? nil : $0 }
                            if target != nil { try flush() }  // its target's row is written first
                            rows.append((entry.path, nil, nil, target))
                        default:
                            continue
                        }
                        if rows.count >= ImportScratch.pageSize { try flush() }
                    }
                    try flush()
                }
            } catch let error as CatalogError {
                throw error
            } catch let error as ArchiveError where error.code == .sizeLimitExceeded {
                throw BagError(
                    .malformedTagFile, file: BundleRecords.fileName,
                    "lists members of \(payload), which expands to more than \(policy.maxTotalBytes) bytes, the "
                        + "import's limit")
            } catch let error as ArchiveError {
                throw BagError(
                    .malformedTagFile, file: BundleRecords.fileName,
                    "lists members of \(payload), which cannot be read as an archive: \(error.libarchiveMessage ?? error.message)"
                )
            }
        }

        /// The member entries that their archive contradicts, in the records' order.
        private static func compare(_ scratch: ImportScratch) throws -> (first: [BagError], count: Int) {
            let wrong = """
                FROM entry AS e JOIN entry AS a ON a.key = e.archive AND a.top = 1
                LEFT JOIN archive_member AS m
                    ON m.archive = a.key AND m.member = e.member AND m.ordinal = coalesce(e.member_ordinal, 0)
                WHERE e.top = 0 AND (m.member IS NULL OR m.size IS NOT e.size OR m.sha256 IS NOT e.sha256)
                """
            let count = Int(try scratch.value("SELECT count(*) \(wrong)"))
            guard count > 0 else { return ([], 0) }
            var first: [BagError] = []
            try scratch.run { db in
                try db.run(
                    """
                    SELECT e.name, e.member, coalesce(e.member_ordinal, 0), e.size, e.sha256, a.payload,
                        m.member IS NOT NULL, m.size, m.sha256
                    \(wrong) ORDER BY e.seq LIMIT ?
                    """, [.integer(Int64(limit))]
                ) { h in
                    let name = Database.text(h, 0) ?? ""
                    let member = Database.text(h, 1) ?? ""
                    let ordinal = sqlite3_column_int64(h, 2)
                    let payload = Database.text(h, 5) ?? ""
                    let which = ordinal == 0 ? "member \(member)" : "member \(member) (ordinal \(ordinal))"
                    let reason: String
                    if sqlite3_column_int64(h, 6) == 0 {
                        reason = "says \(name) is \(which) of \(payload), which that archive does not hold"
                    } else if sqlite3_column_type(h, 7) == SQLITE_NULL {
                        reason = "says \(name) is \(which) of \(payload), a link in that archive to nothing before it"
                    } else if sqlite3_column_int64(h, 7) != sqlite3_column_int64(h, 3) {
                        reason =
                            "says \(which) of \(payload) has \(sqlite3_column_int64(h, 3)) bytes; "
                            + "it has \(sqlite3_column_int64(h, 7))"
                    } else {
                        let recorded = Database.text(h, 4) ?? ""
                        let actual = Database.text(h, 8) ?? ""
                        reason =
                            "says \(which) of \(payload) hashes to \(recorded.prefix(12))…; "
                            + "it hashes to \(actual.prefix(12))…"
                    }
                    first.append(BagError(.malformedTagFile, file: BundleRecords.fileName, reason))
                }
            }
            return (first, count)
        }
    }
}

/// Copies of a bag's archives for ``BundleRecords/MemberCheck`` when a bag is validated, not
/// imported (nothing is staged): each in an unnamed temporary file (`O_TMPFILE`), which goes
/// with its descriptor, or with the process should it be killed — read through
/// `/proc/self/fd`. One at a time: a copy goes when the next is made, or when this goes.
final class ArchiveCopies {
    let bag: BagContents
    private var fd: Int32 = -1

    init(_ bag: BagContents) {
        self.bag = bag
    }

    deinit { if fd >= 0 { close(fd) } }

    /// `O_TMPFILE`, which Swift does not import (`__O_TMPFILE | O_DIRECTORY`).
    private static let temporaryFile: Int32 = 0o20000000 | O_DIRECTORY

    /// A path to a copy of payload file `payload` (relative to the bag), or `nil` when the
    /// bag has no such regular file.
    func copy(_ payload: String) throws -> String? {
        if fd >= 0 { close(fd) }
        fd = open(NSTemporaryDirectory(), Self.temporaryFile | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw BagError(
                .io, file: payload, "cannot be copied to read its members: \(String(cString: strerror(errno)))")
        }
        let out = fd
        let write = { (chunk: UnsafeRawBufferPointer) in try ContentStore.writeAll(out, chunk, path: payload) }
        if let directory = bag.directory {
            // Opened once, without following a link, and then checked for what it is.
            let input = open(directory + "/" + payload, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard input >= 0 else { return nil }
            defer { close(input) }
            var info = stat()
            guard fstat(input, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let n = read(input, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                guard n >= 0 else {
                    throw BagError(.io, file: payload, "cannot be read: \(String(cString: strerror(errno)))")
                }
                if n == 0 { break }
                try write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
        } else {
            let root = bag.bagName.isEmpty ? "" : bag.bagName + "/"
            guard try copyMember(root + payload, write) else { return nil }
        }
        return "/proc/self/fd/\(fd)"
    }

    /// Streams the regular file at `path` (normalised, as a read names members) in the bag's
    /// archive through `write`: a hard link's, from the file it repeats. Whether it was there.
    private func copyMember(_ path: String, _ write: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        let checker = ExtractionGuard(policy: .default, archivePath: bag.source, remembersPaths: false)
        var target: String?
        let found: Bool = try withArchiveReader(at: bag.source) { reader in
            while let entry = try reader.nextEntry() {
                guard entry.kind == .file || entry.kind == .hardlink,
                    (try? checker.validatePath(entry.path, of: entry))?.joined(separator: "/") == path
                else { continue }
                guard entry.kind == .file else {
                    target = try? checker.validatePath(entry.linkTarget ?? "", of: entry).joined(separator: "/")
                    return false
                }
                try reader.readData(write)
                return true
            }
            return false
        }
        if !found, let target, target != path { return try copyMember(target, write) }
        return found
    }
}
