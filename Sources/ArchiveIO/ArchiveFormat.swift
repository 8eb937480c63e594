/// An archive format ArchiveIO can write.
///
/// Reading needs no format: ``ArchiveReader`` detects the format and the compression of
/// anything libarchive reads. Writing takes one of these, usually derived from the file
/// name with ``init(fileExtensionOf:)``.
///
/// ```swift
/// let format = ArchiveFormat(fileExtensionOf: "bundle.tar.zst")   // .tarZstd
/// let stored = ArchiveFormat.zip(.store)                          // zip without compression
/// ```
public enum ArchiveFormat: Sendable, Hashable, CustomStringConvertible {
    /// How a zip archive compresses its members.
    public enum ZipCompression: Sendable, Hashable {
        /// Deflate (the usual zip compression).
        case deflate
        /// No compression: members are stored as they are.
        case store
    }

    /// POSIX tar (pax, with extended headers only where ustar cannot express a member).
    case tar
    /// tar compressed with gzip (`.tar.gz`, `.tgz`).
    case tarGzip
    /// tar compressed with Zstandard (`.tar.zst`, `.tzst`).
    case tarZstd
    /// tar compressed with xz (`.tar.xz`, `.txz`).
    case tarXz
    /// zip, with UTF-8 names.
    case zip(ZipCompression)

    /// Every format ArchiveIO writes.
    public static let allCases: [ArchiveFormat] = [.tar, .tarGzip, .tarZstd, .tarXz, .zip(.deflate), .zip(.store)]

    /// The format a file name's extension names, or `nil` for an unknown extension.
    ///
    /// Recognises `.tar`, `.tar.gz`, `.tgz`, `.tar.zst`, `.tzst`, `.tar.xz`, `.txz` and `.zip`
    /// (deflate), case-insensitively.
    ///
    /// - Parameter path: A file name or path, such as `"out/bundle.tar.gz"`.
    public init?(fileExtensionOf path: String) {
        let name = path.lowercased()
        let table: [(String, ArchiveFormat)] = [
            (".tar.gz", .tarGzip), (".tgz", .tarGzip), (".tar.zst", .tarZstd), (".tzst", .tarZstd),
            (".tar.xz", .tarXz), (".txz", .tarXz), (".tar", .tar), (".zip", .zip(.deflate)),
        ]
        guard let match = table.first(where: { name.hasSuffix($0.0) }) else { return nil }
        self = match.1
    }

    /// The usual file extension, with its leading dot (`".tar.zst"`).
    public var fileExtension: String {
        switch self {
        case .tar: ".tar"
        case .tarGzip: ".tar.gz"
        case .tarZstd: ".tar.zst"
        case .tarXz: ".tar.xz"
        case .zip: ".zip"
        }
    }

    /// The compression levels this format accepts, or `nil` if it has no level (`.tar`,
    /// stored zip).
    public var compressionLevels: ClosedRange<Int>? {
        switch self {
        case .tar, .zip(.store): nil
        case .tarGzip, .tarXz, .zip(.deflate): 0...9
        case .tarZstd: 1...22
        }
    }

    public var description: String {
        switch self {
        case .tar: "tar"
        case .tarGzip: "tar.gz"
        case .tarZstd: "tar.zst"
        case .tarXz: "tar.xz"
        case .zip(.deflate): "zip (deflate)"
        case .zip(.store): "zip (store)"
        }
    }
}
