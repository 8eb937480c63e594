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
    /// Where its records are, when not in `catalog.sqlite` beside it: a `postgresql://` URL
    /// without a password (with its `schema`, `sslmode` and `sslrootcert`), as
    /// `assetcat init --store` wrote it. Absent for a SQLite catalog (and then not written,
    /// so a SQLite catalog's file is what it always was).
    var store: String?

    /// The most of a `catalog.json` read.
    static let maxBytes = 1 << 20

    static func url(in root: URL) -> URL { root.appending(path: fileName) }

    static func exists(in root: URL) -> Bool {
        var info = stat()
        return lstat(url(in: root).path, &info) == 0
    }

    /// The identity in `root`, or `nil` when it has none. The file is opened once, then
    /// checked (`fstat`) for a plain file.
    ///
    /// - Throws: ``CatalogError/Code/store`` when it cannot be read or is not an identity.
    static func read(in root: URL) throws -> CatalogIdentity? {
        let path = url(in: root).path
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw CatalogError(.store, "Could not read \(path): \(ContentStore.errnoText())", path: path)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= maxBytes else {
            throw CatalogError(.store, "\(path) is not a catalog's identity file (not a small plain file)", path: path)
        }
        var bytes: [UInt8] = []
        try ContentStore.readChunks(fd, path: path, size: Int64(info.st_size)) { bytes += $0 }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(CatalogIdentity.self, from: Data(bytes))
        } catch {
            throw CatalogError(.store, "\(path) is not a catalog's identity file: \(error)", path: path, cause: error)
        }
    }

    /// Writes a new identity into `root`, durably: an unnamed file synced, then linked
    /// under its name (which never replaces one: an identity already there is kept), the
    /// folder synced. A kill at any point leaves either no file or the whole one. Where the
    /// file system has no unnamed files, a temporary name synced and renamed without
    /// replacing.
    static func write(in root: URL) throws {
        guard !exists(in: root) else { return }
        try CatalogIdentity(id: UUID(), created: Date()).write(in: root)
    }

    /// Writes this identity into `root` as ``write(in:)`` does a new one (an identity
    /// already there is kept).
    func write(in root: URL) throws {
        let fileName = Self.fileName
        let bytes = try fileBytes()
        let target = Self.url(in: root).path
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

extension CatalogIdentity {
    /// The file's bytes: the identity as sorted, indented JSON, dates in ISO 8601, a newline last.
    func fileBytes() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        var bytes = try encoder.encode(self)
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }
}
