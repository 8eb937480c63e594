import ArchiveIO
import Crypto
import Foundation

/// Reads an archive's members: path, size and SHA-256 of each regular file.
enum ArchiveIndex {
    static func members(ofArchiveAt path: String, isCancelled: () -> Bool) throws -> [IngestedMember] {
        do {
            return try withArchiveReader(at: path) { reader in
                var members: [IngestedMember] = []
                while let entry = try reader.nextEntry() {
                    if isCancelled() { throw CatalogError(.cancelled, "Stopped while indexing \(path)", path: path) }
                    guard entry.kind == .file else { continue }
                    var hasher = SHA256()
                    var size: Int64 = 0
                    try reader.readData { chunk in
                        hasher.update(bufferPointer: chunk)
                        size += Int64(chunk.count)
                    }
                    members.append(
                        IngestedMember(path: entry.path, digest: ContentStore.hex(hasher.finalize()), size: size))
                }
                return members
            }
        } catch let error as CatalogError {
            throw error
        } catch {
            throw CatalogError(.archive, "Could not index the archive \(path): \(error)", path: path, cause: error)
        }
    }

    /// Streams one member's bytes to `body`.
    static func read(member: String, ofArchiveAt path: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        do {
            try withArchiveReader(at: path) { reader in
                guard try reader.findEntry(path: member) != nil else {
                    throw CatalogError(.notFound, "No member \(member) in \(path)", path: path)
                }
                try reader.readData(body)
            }
        } catch let error as CatalogError {
            throw error
        } catch {
            throw CatalogError(.archive, "Could not read \(member) from \(path): \(error)", path: path, cause: error)
        }
    }
}
