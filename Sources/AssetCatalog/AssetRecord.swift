public import Foundation
public import Persistence

/// A snapshot of an asset, safe to pass between tasks and to print.
///
/// Its `Codable` form is the CLI's `--json` output, with stable field names:
/// `id`, `name`, `kind`, `size`, `sha256`, `storage`, `path`, `archive`,
/// `member`, `tags`, `created`, `modified` (and `metadata`).
public struct AssetRecord: Sendable, Hashable, Codable {
    /// The asset's ID (encoded as a bare number).
    public var id: AssetID
    public var name: String
    public var kind: String
    public var size: Int64
    public var sha256: String
    public var storage: Storage
    /// A referenced file's path; a managed file's original path.
    public var path: String?
    /// An archive member's archive (an asset ID).
    public var archive: AssetID?
    /// An archive member's path inside its archive.
    public var member: String?
    /// Which of the archive's members with this path it is (0 for the first;
    /// see ``Asset/memberOrdinal``). Not part of the JSON form.
    public var memberOrdinal: Int = 0
    public var tags: [String]
    public var created: Date
    public var modified: Date
    public var metadata: [String: String]

    public init(_ asset: Asset) {
        id = asset.assetID
        name = asset.name
        kind = asset.kind
        size = asset.size
        sha256 = asset.sha256
        storage = asset.storage
        path = asset.path
        archive = asset.archive?.assetID
        member = asset.member
        memberOrdinal = asset.memberOrdinal
        tags = asset.tags
        created = asset.created
        modified = asset.modified
        metadata = asset.metadata
    }

    init(
        id: AssetID, name: String, kind: String, size: Int64, sha256: String, storage: Storage, path: String?,
        archive: AssetID?, member: String?, memberOrdinal: Int, tags: [String], created: Date, modified: Date,
        metadata: [String: String]
    ) {
        self.id = id
        self.name = name
        self.kind = kind
        self.size = size
        self.sha256 = sha256
        self.storage = storage
        self.path = path
        self.archive = archive
        self.member = member
        self.memberOrdinal = memberOrdinal
        self.tags = tags
        self.created = created
        self.modified = modified
        self.metadata = metadata
    }

    /// The asset's ID in the object graph.
    public var objectID: ManagedObjectID { ManagedObjectID(entityName: Asset.entityName, rowID: id.rawValue) }

    enum CodingKeys: String, CodingKey {
        case id, name, kind, size, sha256, storage, path, archive, member, tags, created, modified, metadata
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(name, forKey: .name)
        try c.encode(kind, forKey: .kind)
        try c.encode(size, forKey: .size)
        try c.encode(sha256, forKey: .sha256)
        try c.encode(storage, forKey: .storage)
        try c.encode(path, forKey: .path)  // null, not absent: stable shape
        try c.encode(archive, forKey: .archive)
        try c.encode(member, forKey: .member)
        try c.encode(tags, forKey: .tags)
        try c.encode(created, forKey: .created)
        try c.encode(modified, forKey: .modified)
        try c.encode(metadata, forKey: .metadata)
    }
}

/// Which assets to list.
public struct AssetQuery: Sendable, Hashable {
    /// Only assets with this tag.
    public var tag: String?
    /// Only assets of this kind (`image`, `archive`, …).
    public var kind: String?
    /// Only assets stored this way.
    public var storage: Storage?

    public init(tag: String? = nil, kind: String? = nil, storage: Storage? = nil) {
        self.tag = tag
        self.kind = kind
        self.storage = storage
    }

    var predicate: FetchPredicate<Asset> {
        var p = FetchPredicate<Asset>.all
        if let tag { p = p && .contains(\.tagText, "\n\(tag)\n") }
        if let kind { p = p && \.kind == kind }
        if let storage { p = p && \.storage == storage }
        return p
    }
}

/// Content kinds, from a file name's extension.
enum ContentKind {
    static func of(_ name: String) -> String {
        let lower = name.lowercased()
        if archiveSuffixes.contains(where: { lower.hasSuffix($0) }) { return "archive" }
        let ext = (lower as NSString).pathExtension
        for (kind, extensions) in table where extensions.contains(ext) { return kind }
        return "data"
    }

    static let archiveSuffixes = [
        ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst", ".zip", ".7z", ".cpio",
        ".iso",
    ]

    static func isArchiveName(_ name: String) -> Bool { of(name) == "archive" }

    private static let table: [(String, Set<String>)] = [
        ("image", ["jpg", "jpeg", "png", "gif", "webp", "tif", "tiff", "bmp", "heic", "svg", "raw", "dng"]),
        ("audio", ["mp3", "wav", "flac", "ogg", "m4a", "aac", "opus"]),
        ("video", ["mp4", "mov", "mkv", "webm", "avi", "m4v"]),
        ("text", ["txt", "md", "csv", "json", "xml", "yaml", "yml", "html", "css", "swift", "py", "c", "h", "log"]),
        ("document", ["pdf", "doc", "docx", "odt", "rtf", "epub", "ppt", "pptx", "xls", "xlsx"]),
    ]
}
