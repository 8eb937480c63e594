import Foundation
public import Persistence

/// A snapshot of an asset, safe to pass between tasks and to print: its ID, its archive's
/// ID for a member, and its ``fields`` — read and written on the record itself
/// (`record.name`, `record.tags`).
///
/// Its `Codable` form is the CLI's `--json` output, with stable field names:
/// `id`, `name`, `kind`, `size`, `sha256`, `storage`, `path`, `archive`,
/// `member`, `tags`, `created`, `modified` (and `metadata`).
@dynamicMemberLookup
public struct AssetRecord: Sendable, Hashable, Codable {
    /// The asset's ID (encoded as a bare number).
    public var id: AssetID
    /// An archive member's archive (an asset ID).
    public var archive: AssetID?
    /// Everything else the asset holds: name, kind, content, storage, tags, metadata, dates.
    public var fields: AssetFields

    /// A field of the asset: `record.name` is `record.fields.name`.
    public subscript<Value>(dynamicMember field: WritableKeyPath<AssetFields, Value>) -> Value {
        get { fields[keyPath: field] }
        set { fields[keyPath: field] = newValue }
    }

    /// A snapshot of `asset`, as its context holds it.
    public init(_ asset: Asset) {
        id = asset.assetID
        archive = asset.archive?.assetID
        fields = AssetFields(asset)
    }

    init(id: AssetID, archive: AssetID?, fields: AssetFields) {
        self.id = id
        self.archive = archive
        self.fields = fields
    }

    /// The asset's ID in the object graph.
    public var objectID: ManagedObjectID { ManagedObjectID(entityName: Asset.entityName, rowID: id.rawValue) }

    /// Reads a record in the CLI's JSON form (``encode(to:)``).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: AssetJSONKey.self)
        id = try c.decode(AssetID.self, forKey: .id)
        archive = try c.decodeIfPresent(AssetID.self, forKey: .archive)
        fields = try AssetFields(from: c)
    }

    /// Every field, `null` when absent: `ls --json` has a stable shape.
    public func encode(to encoder: any Encoder) throws {
        try encode(to: encoder, only: nil)
    }

    /// The record's JSON form, or with `only` just those of its fields (each as in the full form).
    func encode(to encoder: any Encoder, only: Set<Field>?) throws {
        var c = encoder.container(keyedBy: AssetJSONKey.self)
        let keys = only.map { Set($0.map(\.key)) }
        if keys?.contains(.id) ?? true { try c.encode(id, forKey: .id) }
        if keys?.contains(.archive) ?? true { try c.encode(archive, forKey: .archive) }  // null, not absent
        try fields.encode(to: &c, absentAsNull: true, memberOrdinal: false, only: keys)
    }

    /// The fields of a record's JSON form (``encode(to:)``), by their JSON names: what
    /// `ls --fields` chooses among.
    public enum Field: String, CaseIterable, Sendable, Hashable {
        case id, name, kind, size, sha256, storage, path, archive, member, tags, created, modified, metadata

        var key: AssetJSONKey {
            switch self {
            case .id: .id
            case .name: .name
            case .kind: .kind
            case .size: .size
            case .sha256: .sha256
            case .storage: .storage
            case .path: .path
            case .archive: .archive
            case .member: .member
            case .tags: .tags
            case .created: .created
            case .modified: .modified
            case .metadata: .metadata
            }
        }

        /// The fields a comma-separated list names (`id,name,size`), in its order, without
        /// repeats.
        ///
        /// - Throws: ``CatalogError/Code/invalidArgument`` for an empty list or a name that is no
        ///   field's, with a message listing the valid names.
        public static func list(_ text: String) throws -> [Field] {
            let valid = allCases.map(\.rawValue).joined(separator: ", ")
            var fields: [Field] = []
            for name in text.split(separator: ",", omittingEmptySubsequences: false) {
                let trimmed = name.trimmingCharacters(in: .whitespaces)
                guard let field = Field(rawValue: trimmed) else {
                    let shown = trimmed.isEmpty ? "an empty name" : "'\(DisplayText.quoted(trimmed))'"
                    throw CatalogError(.invalidArgument, "Unknown field \(shown) in --fields; valid fields: \(valid)")
                }
                if !fields.contains(field) { fields.append(field) }
            }
            return fields
        }
    }

    /// The record in its JSON form with only `fields` (``Field``): encode it as the record.
    public func selecting(_ fields: some Sequence<Field>) -> Selection {
        Selection(record: self, fields: Set(fields))
    }

    /// Some of a record's fields, encoded as in the record's JSON form (``selecting(_:)``).
    public struct Selection: Encodable, Sendable {
        let record: AssetRecord
        let fields: Set<Field>

        public func encode(to encoder: any Encoder) throws {
            try record.encode(to: encoder, only: fields)
        }
    }
}

/// Which assets to list.
public struct AssetQuery: Sendable, Hashable {
    /// Only assets with every one of these tags.
    public var tags: [String]
    /// Only assets with none of these tags.
    public var excludingTags: [String]
    /// Only assets of this kind (`image`, `archive`, …).
    public var kind: String?
    /// Only assets stored this way.
    public var storage: Storage?
    /// Only the members of this archive asset (an archive's members are listed with it).
    public var archive: AssetID?

    /// Only assets with this tag: the first of ``tags`` (set: ``tags`` is just it, or
    /// empty for `nil`).
    public var tag: String? {
        get { tags.first }
        set { tags = newValue.map { [$0] } ?? [] }
    }

    /// The assets with `tag` (all when `nil`), of `kind`, stored as `storage`, and members
    /// of `archive`.
    public init(tag: String? = nil, kind: String? = nil, storage: Storage? = nil, archive: AssetID? = nil) {
        self.init(tags: tag.map { [$0] } ?? [], kind: kind, storage: storage, archive: archive)
    }

    /// The assets with every tag of `tags` and none of `excludingTags`, of `kind`, stored as
    /// `storage`, and members of `archive`. A tag both asked for and excluded matches nothing.
    public init(
        tags: [String], excludingTags: [String] = [], kind: String? = nil, storage: Storage? = nil,
        archive: AssetID? = nil
    ) {
        self.tags = tags
        self.excludingTags = excludingTags
        self.kind = kind
        self.storage = storage
        self.archive = archive
    }

    /// The query in the store: each tag through the index of ``AssetTag``, in
    /// O(matches + log n).
    var predicate: FetchPredicate<Asset> {
        var p = FetchPredicate<Asset>.all
        for tag in tags { p = p && AssetTag.tagged(tag) }
        for tag in excludingTags { p = p && !AssetTag.tagged(tag) }
        if let kind { p = p && \.kind == kind }
        if let storage { p = p && \.storage == storage }
        if let archive {
            p = p && \Asset.archive == ManagedObjectID(entityName: Asset.entityName, rowID: archive.rawValue)
        }
        return p
    }

    /// Whether `record` is one of the assets the query chooses (as ``predicate`` says in the store).
    func matches(_ record: AssetRecord) -> Bool {
        let recordTags = Set(record.tags)
        return tags.allSatisfy(recordTags.contains) && !excludingTags.contains(where: recordTags.contains)
            && kind.map { $0 == record.kind } ?? true && storage.map { $0 == record.storage } ?? true
            && archive.map { $0 == record.archive } ?? true
    }
}

/// Content kinds, from a file name's extension.
enum ContentKind {
    /// The kind of a file or member named `name` (a name, or a path in an archive).
    static func of(_ name: String) -> String {
        if let kind = name.utf8.withContiguousStorageIfAvailable(asciiKind) ?? nil { return kind }
        return unicodeKind(name)
    }

    /// ``unicodeKind(_:)``'s answer for an ASCII name that does not end in `/`, found in the
    /// bytes (an add calls this once per file: Unicode lower-casing, `hasSuffix` and
    /// `NSString` cost more than reading a tiny file); `nil` for any other name.
    private static func asciiKind(_ name: UnsafeBufferPointer<UInt8>) -> String? {
        let dot = UInt8(ascii: "."), slash = UInt8(ascii: "/")
        guard let last = name.last, last != slash, name.allSatisfy({ $0 < 0x80 }) else { return nil }
        func lowered(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        for suffix in archiveSuffixBytes where suffix.count <= name.count {
            if zip(name.suffix(suffix.count), suffix).allSatisfy({ lowered($0) == $1 }) { return "archive" }
        }
        // `NSString.pathExtension`: what follows the last dot of the last component, if that
        // dot neither starts nor ends it.
        let start = name.lastIndex(of: slash).map { $0 + 1 } ?? 0
        guard let period = name[start...].lastIndex(of: dot), period > start, period < name.count - 1 else {
            return "data"
        }
        let ext = String(decoding: name[(period + 1)...].lazy.map(lowered), as: UTF8.self)
        return kindOfExtension[ext] ?? "data"
    }

    /// The kind of any name: its lower-cased form's archive suffix or path extension.
    static func unicodeKind(_ name: String) -> String {
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

    private static let archiveSuffixBytes = archiveSuffixes.map { Array($0.utf8) }

    static func isArchiveName(_ name: String) -> Bool { of(name) == "archive" }

    private static let table: [(String, Set<String>)] = [
        ("image", ["jpg", "jpeg", "png", "gif", "webp", "tif", "tiff", "bmp", "heic", "svg", "raw", "dng"]),
        ("audio", ["mp3", "wav", "flac", "ogg", "m4a", "aac", "opus"]),
        ("video", ["mp4", "mov", "mkv", "webm", "avi", "m4v"]),
        ("text", ["txt", "md", "csv", "json", "xml", "yaml", "yml", "html", "css", "swift", "py", "c", "h", "log"]),
        ("document", ["pdf", "doc", "docx", "odt", "rtf", "epub", "ppt", "pptx", "xls", "xlsx"]),
    ]

    /// ``table`` by extension, the first kind that lists one.
    private static let kindOfExtension: [String: String] = table.reversed().reduce(into: [:]) { byExtension, entry in
        for ext in entry.1 { byExtension[ext] = entry.0 }
    }
}
