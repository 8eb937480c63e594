import AssetCatalog
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An asset named on the command line: by its ID or by its name.
///
/// A reference that is an asset's ID written canonically (`7`, not `007` or `+7`) names that
/// asset; anything else, or an ID no asset has, is a name. A name must be unique: when
/// several assets have it, the message lists their IDs to use instead.
enum AssetReference {
    /// The asset `reference` designates.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when none does;
    ///   ``CatalogError/Code/invalidArgument`` when a name is ambiguous.
    static func resolve(_ reference: String, in catalog: Catalog) throws -> AssetRecord {
        let id = Int64(reference).flatMap { $0 > 0 && String($0) == reference ? AssetID($0) : nil }
        if let id {
            do {
                return try catalog.asset(id)
            } catch let error as CatalogError where error.code == .notFound {
                // Not an ID any asset has: it may still be a name.
            }
        }
        let named = try catalog.assets(named: reference)
        switch named.count {
        case 0:
            if let id { throw CatalogError(.notFound, "No asset with ID \(id); list assets with `assetcat ls`") }
            throw CatalogError(.notFound, "No asset named \(reference); list assets with `assetcat ls`")
        case 1: return named[0]
        default:
            let ids = named.map { String(describing: $0.id) }.joined(separator: ", ")
            throw CatalogError(.invalidArgument, "\(named.count) assets are named \(reference) (IDs \(ids)); use an ID")
        }
    }

    /// The IDs of the assets `references` designate, in their order.
    static func resolve(_ references: [String], in catalog: Catalog) throws -> [AssetID] {
        try references.map { try resolve($0, in: catalog).id }
    }

    /// The non-empty lines of a file (`-`: standard input), without their line breaks: the
    /// references of `--from-file`. The file is opened once and checked for what it opened (a
    /// folder is refused); a pipe or FIFO is read to its end.
    ///
    /// - Throws: ``CatalogError/Code/io`` naming the file when it cannot be read.
    static func lines(ofFile path: String) throws -> [String] {
        let fd = path == "-" ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC)
        let name = path == "-" ? "standard input" : DisplayText.quoted(path)
        func failure(_ code: Int32) -> CatalogError {
            CatalogError(.io, "Could not read \(name): \(String(cString: strerror(code)))", path: path)
        }
        guard fd >= 0 else { throw failure(errno) }
        defer { if fd != STDIN_FILENO { close(fd) } }
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw failure(errno) }
        if status.st_mode & S_IFMT == S_IFDIR { throw failure(EISDIR) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw failure(errno) }
            if count == 0 { break }
            bytes += buffer[0..<count]
        }
        return bytes.split(separator: 0x0A).map { String(decoding: $0, as: UTF8.self) }
    }
}
