public import Foundation
import Persistence

/// An asset's own fields — all but its identity — as one value: what a snapshot
/// (``AssetRecord``), an entry of a bundle's records file and a row an import writes all
/// carry. Each of those names the asset and its archive in its own terms (a catalog's IDs,
/// a records file's keys), so those two stay out of here.
///
/// ``init(_:)`` is the one place that copies an ``Asset`` into fields, and
/// `write(to:)` the one place that writes fields into a row of the catalog.
public struct AssetFields: Sendable, Hashable {
    /// The display name (a file name, or a member's path inside its archive).
    public var name: String
    /// A broad content kind: `image`, `audio`, `video`, `text`, `document`, `archive`, `data`.
    public var kind: String
    /// Where the bytes live.
    public var storage: Storage
    /// The size in bytes.
    public var size: Int64
    /// The SHA-256 of the content, lowercase hex.
    public var sha256: String
    /// A referenced file's path; a managed file's original path.
    public var path: String?
    /// An archive member's path inside its archive.
    public var member: String?
    /// Which of the archive's members with this path it is (0 for the first; see
    /// ``Asset/memberOrdinal``). Not part of the CLI's JSON form; a records file has it
    /// for members.
    public var memberOrdinal: Int
    /// The tags as the catalog stores them (``Asset/tagText``): read and written as ``tags``.
    var tagText: String
    /// The metadata as the catalog stores it (``Asset/metadataJSON``): read and written as
    /// ``metadata``.
    var metadataJSON: String
    /// When the asset was first recorded.
    public var created: Date
    /// When the asset was last changed.
    public var modified: Date
    /// The SHA-256 of the asset's thumbnail, once its `thumbnail` job made one
    /// (``Asset/thumbnail``; ``Catalog/thumbnailURL(of:)`` gives its file). Not part of the
    /// record's JSON, nor of a bundle: a catalog makes its own.
    public var thumbnail: String?

    /// The tags, sorted, without duplicates.
    public var tags: [String] {
        get { Asset.tags(fromText: tagText) }
        set { tagText = Asset.tagText(newValue) }
    }

    /// The free-form metadata.
    public var metadata: [String: String] {
        get { Asset.metadata(fromJSON: metadataJSON) }
        set { metadataJSON = Asset.metadataJSON(newValue) }
    }

    init(
        name: String, kind: String, storage: Storage, size: Int64, sha256: String, path: String? = nil,
        member: String? = nil, memberOrdinal: Int = 0, tags: [String] = [], metadata: [String: String] = [:],
        created: Date, modified: Date
    ) {
        self.name = name
        self.kind = kind
        self.storage = storage
        self.size = size
        self.sha256 = sha256
        self.path = path
        self.member = member
        self.memberOrdinal = memberOrdinal
        self.tagText = tags.isEmpty ? "\n" : Asset.tagText(tags)  // what tagText([]) gives, without the work
        self.metadataJSON = Asset.metadataJSON(metadata)
        self.created = created
        self.modified = modified
    }

    /// The fields of `asset`, as its context holds them.
    public init(_ asset: Asset) {
        self.init(
            name: asset.name, kind: asset.kind, storage: asset.storage, size: asset.size, sha256: asset.sha256,
            path: asset.path, member: asset.member, memberOrdinal: asset.memberOrdinal, created: asset.created,
            modified: asset.modified)
        tagText = asset.tagText  // as stored: no JSON work
        metadataJSON = asset.metadataJSON
        thumbnail = asset.thumbnail
    }

    /// The fields of an asset's row read without making an object (``Catalog/forEachAsset(_:pageSize:_:)``).
    init(_ row: ObjectSnapshot) {
        self.init(
            name: row.value(for: \Asset.name) ?? "", kind: row.value(for: \Asset.kind) ?? "data",
            storage: row.value(for: \Asset.storage) ?? .managed, size: row.value(for: \Asset.size) ?? 0,
            sha256: row.value(for: \Asset.sha256) ?? "", path: row.value(for: \Asset.path) ?? nil,
            member: row.value(for: \Asset.member) ?? nil, memberOrdinal: row.value(for: \Asset.memberOrdinal) ?? 0,
            created: row.value(for: \Asset.created) ?? Date(timeIntervalSince1970: 0),
            modified: row.value(for: \Asset.modified) ?? Date(timeIntervalSince1970: 0))
        tagText = row.value(for: \Asset.tagText) ?? "\n"  // as stored: no JSON work
        metadataJSON = row.value(for: \Asset.metadataJSON) ?? "{}"
        thumbnail = row.value(for: \Asset.thumbnail) ?? nil
    }

    /// Writes the fields into a row of assets inserted in bulk (the asset's archive, for a
    /// member, is the row's to set).
    func write(to row: inout BatchInsertRow<Asset>) {
        row[\.name] = name
        row[\.kind] = kind
        row[\.storage] = storage
        row[\.size] = size
        row[\.sha256] = sha256
        row[\.path] = path
        row[\.member] = member
        row[\.memberOrdinal] = memberOrdinal
        row[\.tagText] = tagText
        row[\.metadataJSON] = metadataJSON
        row[\.created] = created
        row[\.modified] = modified
    }
}

// MARK: - JSON

/// The keys of the JSON objects that carry an asset's fields: the fields' own, and those of
/// the objects that hold them — the CLI's form (``AssetRecord``: `id`, `archive`) and an entry
/// of a bundle's records file (`key`, `archive`, `payload`). One key type, so that each object
/// is read through one container.
enum AssetJSONKey: String, CodingKey {
    case name, kind, storage, size, sha256, path, member, memberOrdinal, tags, metadata, created, modified
    case id, key, archive, payload
}

extension AssetFields: Codable {
    /// Reads the fields from a JSON object that holds them among others (a records file's
    /// entry, the CLI's JSON form): `path`, `member` and `memberOrdinal` may be absent.
    public init(from decoder: any Decoder) throws {
        try self.init(from: decoder.container(keyedBy: AssetJSONKey.self))
    }

    init(from c: KeyedDecodingContainer<AssetJSONKey>) throws {
        name = try c.decode(String.self, forKey: .name)
        kind = try c.decode(String.self, forKey: .kind)
        storage = try c.decode(Storage.self, forKey: .storage)
        size = try c.decode(Int64.self, forKey: .size)
        sha256 = try c.decode(String.self, forKey: .sha256)
        path = try c.decodeIfPresent(String.self, forKey: .path)
        member = try c.decodeIfPresent(String.self, forKey: .member)
        memberOrdinal = try c.decodeIfPresent(Int.self, forKey: .memberOrdinal) ?? 0
        tagText = Asset.tagText(try c.decode([String].self, forKey: .tags))
        metadataJSON = Asset.metadataJSON(try Self.decodeMetadata(c))
        created = try c.decode(Date.self, forKey: .created)
        modified = try c.decode(Date.self, forKey: .modified)
    }

    /// The `metadata` object of `c`, its values checked in the order of their keys' bytes:
    /// a value that is not a string is named the same way at every read. (A dictionary's
    /// own decoding checks them in its hash order, which changes from one decode to the next.)
    private static func decodeMetadata(_ c: KeyedDecodingContainer<AssetJSONKey>) throws -> [String: String] {
        let object = try c.nestedContainer(keyedBy: MetadataKey.self, forKey: .metadata)
        var metadata: [String: String] = [:]
        for key in object.allKeys.sorted(by: { $0.stringValue.utf8.lexicographicallyPrecedes($1.stringValue.utf8) }) {
            metadata[key.stringValue] = try object.decode(String.self, forKey: key)
        }
        return metadata
    }

    /// A key of the free-form metadata.
    private struct MetadataKey: CodingKey {
        let stringValue: String
        init(stringValue: String) { self.stringValue = stringValue }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }

    /// Writes the fields as the CLI's `--json` shows them: every field, `null` when absent
    /// (a stable shape), without `memberOrdinal`.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: AssetJSONKey.self)
        try encode(to: &c, absentAsNull: true, memberOrdinal: false)
    }

    /// Writes the fields into a JSON object: absent ones as `null` or left out, and
    /// `memberOrdinal` or not.
    /// With `only`, writes just those of the fields' keys.
    func encode(
        to c: inout KeyedEncodingContainer<AssetJSONKey>, absentAsNull: Bool, memberOrdinal writesOrdinal: Bool,
        only: Set<AssetJSONKey>? = nil
    ) throws {
        func wanted(_ key: AssetJSONKey) -> Bool { only?.contains(key) ?? true }
        if wanted(.name) { try c.encode(name, forKey: .name) }
        if wanted(.kind) { try c.encode(kind, forKey: .kind) }
        if wanted(.storage) { try c.encode(storage, forKey: .storage) }
        if wanted(.size) { try c.encode(size, forKey: .size) }
        if wanted(.sha256) { try c.encode(sha256, forKey: .sha256) }
        if absentAsNull {
            if wanted(.path) { try c.encode(path, forKey: .path) }
            if wanted(.member) { try c.encode(member, forKey: .member) }
        } else {
            if wanted(.path) { try c.encodeIfPresent(path, forKey: .path) }
            if wanted(.member) { try c.encodeIfPresent(member, forKey: .member) }
        }
        if writesOrdinal && wanted(.memberOrdinal) { try c.encode(memberOrdinal, forKey: .memberOrdinal) }
        if wanted(.tags) { try c.encode(tags, forKey: .tags) }
        if wanted(.metadata) { try c.encode(metadata, forKey: .metadata) }
        if wanted(.created) { try c.encode(created, forKey: .created) }
        if wanted(.modified) { try c.encode(modified, forKey: .modified) }
    }
}
