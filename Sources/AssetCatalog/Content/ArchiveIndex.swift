import ArchiveIO
import Crypto
import Foundation

/// Reads archive members for the catalog.
enum ArchiveIndex {
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
        } catch let error as ArchiveError where error.code == .openFailed && error.libarchiveMessage == nil {
            // The file itself could not be opened (gone, not permitted, not a regular file):
            // as for a referenced file, not a damaged archive.
            let code: CatalogError.Code = error.errno == ENOENT ? .notFound : .io
            throw CatalogError(code, "Could not read \(member) from \(path): \(error)", path: path, cause: error)
        } catch {
            throw CatalogError(.archive, "Could not read \(member) from \(path): \(error)", path: path, cause: error)
        }
    }
}
