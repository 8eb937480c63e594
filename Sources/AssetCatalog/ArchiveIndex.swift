import ArchiveIO
import Crypto
import Foundation

/// Reads an archive's members: path, size and SHA-256 of each regular file.
enum ArchiveIndex {
    static func members(ofArchiveAt path: String, isCancelled: () -> Bool) throws -> [IngestedMember] {
        do {
            return try withArchiveReader(at: path) { reader in
                var members: [IngestedMember] = []
                var seen: [[UInt8]: Int] = [:]
                while let entry = try reader.nextEntry() {
                    if isCancelled() { throw CatalogError(.cancelled, "Stopped while indexing \(path)", path: path) }
                    guard entry.kind == .file else { continue }
                    var hasher = SHA256()
                    var size: Int64 = 0
                    try reader.readData { chunk in
                        hasher.update(bufferPointer: chunk)
                        size += Int64(chunk.count)
                    }
                    let ordinal = seen[Array(entry.path.utf8), default: 0]
                    seen[Array(entry.path.utf8)] = ordinal + 1
                    members.append(
                        IngestedMember(
                            path: entry.path, ordinal: ordinal, digest: ContentStore.hex(hasher.finalize()), size: size)
                    )
                }
                return members
            }
        } catch let error as CatalogError {
            throw error
        } catch {
            throw CatalogError(.archive, "Could not index the archive \(path): \(error)", path: path, cause: error)
        }
    }

    /// Streams the bytes of the `ordinal`-th member named `member` (byte for byte) to `body`.
    static func read(
        member: String, ordinal: Int, ofArchiveAt path: String, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        do {
            try withArchiveReader(at: path) { reader in
                var matches = 0
                while let entry = try reader.nextEntry() {
                    guard entry.kind == .file, entry.hasPath(member) else { continue }
                    if matches == ordinal { return try reader.readData(body) }
                    matches += 1
                }
                throw CatalogError(.notFound, "No member \(member) in \(path); run `assetcat verify`", path: path)
            }
        } catch let error as CatalogError {
            throw error
        } catch {
            throw CatalogError(.archive, "Could not read \(member) from \(path): \(error)", path: path, cause: error)
        }
    }
}
