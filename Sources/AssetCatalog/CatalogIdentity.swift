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

    /// Writes a new identity into `root`, durably: a temporary file synced, renamed over
    /// the name, the folder synced. An identity already there is kept.
    static func write(in root: URL) throws {
        guard !exists(in: root) else { return }
        let identity = CatalogIdentity(id: UUID(), created: Date())
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        var bytes = try encoder.encode(identity)
        bytes.append(UInt8(ascii: "\n"))
        let target = url(in: root).path
        let temporary = root.appending(path: ".\(fileName).new-\(getpid())").path
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw CatalogError(.io, "Could not write \(temporary): \(ContentStore.errnoText())", path: temporary)
        }
        do {
            defer { close(fd) }
            try bytes.withUnsafeBytes { try ContentStore.writeAll(fd, $0, path: temporary) }
            guard fsync(fd) == 0 else {
                throw CatalogError(.io, "Could not sync \(temporary): \(ContentStore.errnoText())", path: temporary)
            }
        } catch {
            unlink(temporary)
            throw error
        }
        guard rename(temporary, target) == 0 else {
            let error = CatalogError(.io, "Could not write \(target): \(ContentStore.errnoText())", path: target)
            unlink(temporary)
            throw error
        }
        try ContentStore.syncDirectory(root.path)
    }
}
