import CFileSync
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The file (`catalog.json`) that says a directory holds a catalog: written
/// by ``Catalog/create(at:options:)`` once the store has its schema, and by
/// the first writable open of a catalog made before the file existed.
///
/// It is how a catalog knows it was initialised: a store that is missing,
/// empty or without its tables in a directory that has this file is a lost
/// store, never a new catalog.
struct CatalogIdentity: Codable, Sendable {
    static let fileName = "catalog.json"

    /// Names this catalog.
    var id: UUID
    /// When it was made (or, for an older catalog, when the file was first written).
    var created: Date

    static func url(in root: URL) -> URL { root.appending(path: fileName) }

    static func exists(in root: URL) -> Bool {
        var info = stat()
        return lstat(url(in: root).path, &info) == 0
    }

    /// Writes a new identity into `root`, durably: an unnamed file synced, then linked
    /// under its name (which never replaces one: an identity already there is kept), the
    /// folder synced. A kill at any point leaves either no file or the whole one. Where the
    /// file system has no unnamed files, a temporary name synced and renamed without
    /// replacing.
    static func write(in root: URL) throws {
        guard !exists(in: root) else { return }
        let identity = CatalogIdentity(id: UUID(), created: Date())
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        var bytes = try encoder.encode(identity)
        bytes.append(UInt8(ascii: "\n"))
        let target = url(in: root).path
        var temporary: String?
        var fd = cfilesync_open_unnamed(root.path, 0o644)
        if fd < 0, errno == EOPNOTSUPP || errno == EISDIR {
            temporary = root.appending(path: ".\(fileName).new-\(getpid())").path
            fd = open(temporary!, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        }
        guard fd >= 0 else {
            throw CatalogError(.io, "Could not write \(target): \(ContentStore.errnoText())", path: target)
        }
        defer { close(fd) }
        do {
            try bytes.withUnsafeBytes { try ContentStore.writeAll(fd, $0, path: target) }
            guard fsync(fd) == 0 else {
                throw CatalogError(.io, "Could not sync \(target): \(ContentStore.errnoText())", path: target)
            }
            let published =
                temporary.map { cfilesync_rename_noreplace($0, target) } ?? cfilesync_link_unnamed(fd, target)
            guard published == 0 || errno == EEXIST else {
                throw CatalogError(.io, "Could not write \(target): \(ContentStore.errnoText())", path: target)
            }
        } catch {
            if let temporary { unlink(temporary) }
            throw error
        }
        if let temporary { unlink(temporary) }  // left only when another identity was there first
        try ContentStore.syncDirectory(root.path)
    }
}
