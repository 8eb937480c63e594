import ArchiveIO
import Foundation
import GRDB
import GRDBSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// Reading an archive, member by member, through ArchiveIO's guard; and the second pass that
/// hashes what the first could not.
extension Scan {
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
}
