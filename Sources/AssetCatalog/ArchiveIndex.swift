import ArchiveIO
import Crypto
import Foundation

/// Reads an archive's members: path, size and SHA-256 of each regular file.
enum ArchiveIndex {
    /// The members of the archive at `path`; errors name `displayPath` (the
    /// file the user gave, when `path` is its staged copy).
    static func members(ofArchiveAt path: String, displayPath: String? = nil, isCancelled: () -> Bool) throws
        -> [IngestedMember]
    {
        let shown = displayPath ?? path
        do {
            return try withArchiveReader(at: path) { reader in
                var members: [IngestedMember] = []
                var seen: [[UInt8]: Int] = [:]
                var files: [[UInt8]: (digest: String, size: Int64)] = [:]
                while let entry = try reader.nextEntry() {
                    if isCancelled() { throw CatalogError(.cancelled, "Stopped while indexing \(shown)", path: shown) }
                    if entry.kind == .hardlink, let target = entry.linkTarget, let linked = files[Array(target.utf8)] {
                        // A second name for a member already read: same bytes, no data of its own.
                        let ordinal = seen[Array(entry.path.utf8), default: 0]
                        seen[Array(entry.path.utf8)] = ordinal + 1
                        members.append(
                            IngestedMember(path: entry.path, ordinal: ordinal, digest: linked.digest, size: linked.size)
                        )
                        continue
                    }
                    guard entry.kind == .file else { continue }
                    var hasher = SHA256()
                    var size: Int64 = 0
                    try reader.readData { chunk in
                        hasher.update(bufferPointer: chunk)
                        size += Int64(chunk.count)
                    }
                    let ordinal = seen[Array(entry.path.utf8), default: 0]
                    seen[Array(entry.path.utf8)] = ordinal + 1
                    let digest = ContentStore.hex(hasher.finalize())
                    files[Array(entry.path.utf8)] = (digest, size)
                    members.append(IngestedMember(path: entry.path, ordinal: ordinal, digest: digest, size: size))
                }
                return members
            }
        } catch let error as CatalogError {
            throw error
        } catch let error as ArchiveError {
            var reason = error.libarchiveMessage ?? error.message
            if let member = error.member { reason = "member '\(member)': \(reason)" }
            throw CatalogError(.archive, "Could not index the archive \(shown): \(reason)", path: shown, cause: error)
        } catch {
            throw CatalogError(.archive, "Could not index the archive \(shown): \(error)", path: shown, cause: error)
        }
    }

    /// Streams the bytes of the `ordinal`-th member named `member` (byte for byte) to `body`.
    static func read(
        member: String, ordinal: Int, ofArchiveAt path: String, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        do {
            try withArchiveReader(at: path) { reader in
                var matches = 0
                var target: String?
                while let entry = try reader.nextEntry() {
                    guard entry.kind == .file || entry.kind == .hardlink, entry.hasPath(member) else { continue }
                    if matches == ordinal {
                        guard entry.kind == .hardlink else { return try reader.readData(body) }
                        target = entry.linkTarget  // its bytes are those of an earlier member
                        break
                    }
                    matches += 1
                }
                if let target, target != member { return try read(member: target, ordinal: 0, ofArchiveAt: path, body) }
                throw CatalogError(.notFound, "No member \(member) in \(path); run `assetcat verify`", path: path)
            }
        } catch let error as CatalogError {
            throw error
        } catch {
            throw CatalogError(.archive, "Could not read \(member) from \(path): \(error)", path: path, cause: error)
        }
    }
}
