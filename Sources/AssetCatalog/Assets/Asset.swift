public import Foundation
public import Persistence

/// Where an asset's bytes live.
public enum Storage: String, AttributeValue, Sendable, Codable, CaseIterable {
    /// Copied into the catalog's content-addressed `objects/`; the catalog owns it.
    case managed
    /// A file outside the catalog, never written or deleted by it.
    case referenced
    /// A member of an archive that is itself an asset.
    case member
}

/// A record of the catalog: one file resource (a managed or referenced file,
/// or a member of an archive asset), with its name, content digest, tags and
/// free-form metadata.
///
/// Deleting an asset never removes its file at once: ``willSave()`` plans the
/// removal in the deletion's own transaction (a row of the removal journal),
/// and the file is removed only after that transaction commits, when no other
/// asset uses the same content. A rollback, a failed save or a save into a
/// parent context removes nothing; a crash after the commit is repaired when
/// the catalog is next opened.
public final class Asset: ManagedObject {
    /// The display name (a file name, or a member's path inside its archive).
    @Attribute(.indexed) public var name = ""
    /// A broad content kind from the name: `image`, `audio`, `video`, `text`,
    /// `document`, `archive`, `data`.
    @Attribute(.indexed) public var kind = "data"
    /// Where the bytes live.
    @Attribute public var storage = Storage.managed
    /// The size in bytes. Not indexed: an index of random keys would slow every add by a
    /// third for the sake of `ls --sort size`, which reads the catalog in large pages instead
    /// (``AssetOrder/size``).
    @Attribute public var size: Int64 = 0
    /// The SHA-256 of the content, lowercase hex. Indexed for managed assets only
    /// (``compositeIndexes``).
    @Attribute public var sha256 = ""
    /// For a referenced file: its absolute path. For a managed file: where it
    /// was added from (informational).
    @Attribute public var path: String?
    /// For an archive member: its path inside the archive.
    @Attribute public var member: String?
    /// For an archive member: which of the members with this same path it
    /// is (0 for the first). An archive can hold two: libarchive reads some
    /// formats' NFC and NFD spellings of a name as the same bytes.
    @Attribute public var memberOrdinal = 0
    /// Tags, stored as `\n`-delimited text (the storage column behind ``tags``): the asset's
    /// own copy of its ``AssetTag`` rows, which its saves keep in step (``AssetRules``), so a
    /// listing reads an asset's tags with its row. Not indexed: queries use the rows.
    @Attribute var tagText = "\n"
    /// Free-form metadata, stored as a JSON object (the storage column behind ``metadata``).
    @Attribute var metadataJSON = "{}"
    /// When the asset was added (kept by an import from the catalog it came from). Indexed:
    /// `ls --sort added` pages through the index.
    @Attribute(.indexed) public var created = Date(timeIntervalSince1970: 0)
    /// The SHA-256 of the asset's thumbnail — a small WebP its `thumbnail` job made of an
    /// image, kept in `objects/` as managed content is — or `nil`. It goes as content does:
    /// journaled in the transaction that deletes the asset (or replaces the thumbnail), removed
    /// once that commits and no asset uses it. Indexed: that is how the sweep asks.
    @Attribute(.indexed) public var thumbnail: String?
    @Attribute public var modified = Date(timeIntervalSince1970: 0)
    /// For an archive member: the archive asset it belongs to.
    @ToOne public var archive: Asset?
    /// For an archive: its members. Deleting an archive deletes them.
    @ToMany(inverse: \Asset.archive, deleteRule: .cascade) public var members: [Asset]

    /// The counts ``Catalog/stats()`` reads, kept by the store in every transaction that
    /// writes assets (whichever way: objects, rows, cascades): assets and bytes by storage
    /// and by kind, and the distinct managed contents — the files of `objects/` that assets
    /// use — with their bytes.
    override public class var tallies: [Tally] {
        [
            Tally(Self.storageTally, by: \Asset.storage, summing: \Asset.size),
            Tally(Self.kindTally, by: \Asset.kind, summing: \Asset.size),
            .distinct(Self.contentTally, of: \Asset.sha256, summing: \Asset.size, where: \Asset.storage, is: .managed),
        ]
    }

    /// The index on ``sha256``, over managed assets only: what the content's users are found
    /// by (deduplication, the removal of a file when its last user goes, `gc`, the objects
    /// tally). No query looks a referenced or member asset up by digest, so adding a million
    /// files by reference does not pay for inserting into a B-tree of random keys.
    override public class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\Asset.sha256, where: \Asset.storage, is: .managed)]
    }

    /// What `assetcat search` finds an asset by (``Catalog/search(_:limit:offset:)``), kept by the
    /// store in the transaction that writes the asset: its name (for a member, its path in
    /// the archive) weighs most, then its tags, then its archive's name and its metadata (keys
    /// and values), then its name's extension (what `ext:` matches). A renamed archive's
    /// members are indexed again with it.
    override public class var searchIndex: SearchIndex? {
        SearchIndex(
            SearchField(Self.nameField, .attribute(\Asset.name)),
            SearchField(Self.tagsField, .attribute(\Asset.tagText)),
            SearchField(Self.aboutField, .related(\Asset.archive, \Asset.name), .attribute(\Asset.metadataJSON)),
            SearchField(Self.extensionField, .pathExtension(\Asset.name)))
    }

    /// The fields of the ``searchIndex``.
    static let nameField = "name"
    static let tagsField = "tags"
    static let aboutField = "about"
    static let extensionField = "ext"

    /// Replaces the index of earlier releases on every asset's ``sha256`` by the partial one
    /// of ``compositeIndexes`` (which the schema's extension makes, after this runs).
    static let managedDigestIndex = Migration("2026-11-sha256-index-managed-only") { db in
        try db.execute("DROP INDEX IF EXISTS \"Asset_sha256_index\"")
    }

    /// The names of the ``tallies``.
    static let storageTally = "storage"
    static let kindTally = "kind"
    static let contentTally = "objects"

    /// The asset's ID (its row in the store): what ``Catalog/asset(_:)`` and the CLI take.
    public var assetID: AssetID { AssetID(objectID.rowID) }

    /// The asset's tags, sorted.
    public var tags: [String] {
        get { Self.tags(fromText: tagText) }
        set { tagText = Self.tagText(newValue) }
    }

    /// The tags ``tagText`` holds, sorted.
    static func tags(fromText text: String) -> [String] {
        text.split(separator: "\n").map(String.init).sorted()
    }

    /// How ``tagText`` stores `tags`: `\n`-delimited, sorted, without duplicates.
    static func tagText(_ tags: [String]) -> String {
        "\n" + Set(tags).sorted().joined(separator: "\n") + (tags.isEmpty ? "" : "\n")
    }

    /// The asset's free-form metadata.
    public var metadata: [String: String] {
        get { Self.metadata(fromJSON: metadataJSON) }
        set { metadataJSON = Self.metadataJSON(newValue) }
    }

    /// The metadata ``metadataJSON`` holds (none, should it not be a JSON object of strings).
    static func metadata(fromJSON json: String) -> [String: String] {
        guard json != "{}" else { return [:] }
        return (try? JSONDecoder().decode([String: String].self, from: Data(json.utf8))) ?? [:]
    }

    /// How ``metadataJSON`` stores `metadata`: a JSON object, keys sorted.
    static func metadataJSON(_ metadata: [String: String]) -> String {
        guard !metadata.isEmpty else { return "{}" }  // what the encoder writes, without making one
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return (try? encoder.encode(metadata)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    override public func awakeFromInsert() {
        let now = Date()
        setPrimitiveValue(now, for: \.created)
        setPrimitiveValue(now, for: \.modified)
    }

    // MARK: - The write rules (AssetRules states them; these hooks only call them)

    /// Holds the asset's jobs through the job provider (the seeds'
    /// `cancelAllRequests(for:)`); files are not touched: the deletion may
    /// still be rolled back.
    override public func prepareForDeletion() {
        AssetRules.deletionBegan(objectID.rowID, in: managedObjectContext)
    }

    /// A rolled-back deletion: the jobs `prepareForDeletion` stopped run again.
    override public func awakeFromSnapshotEvents(_ events: SnapshotEvents) {
        if events.contains(.undoDeletion) { AssetRules.deletionLeft(objectID.rowID, in: managedObjectContext) }
    }

    /// A child's save hands its deletion to the parent context, whose own instance now
    /// holds the asset's jobs (its `prepareForDeletion` ran as the save deleted it there,
    /// or it had deleted the asset itself): this context lets go of its hold, so that one
    /// deletion pending in one context is one hold, however many contexts it passed through.
    /// A deletion saved to the store releases nothing here: its commit cancels the jobs.
    override public func didSave() {
        guard isDeleted, managedObjectContext?.parent != nil else { return }
        AssetRules.deletionLeft(objectID.rowID, in: managedObjectContext)
    }

    override public func willSave() {
        // The validation before it made sure the context is a catalog's.
        guard let effects = saveEffects, let rules = try? AssetRules(effects) else { return }
        // The content the store's row names, whatever unsaved changes say.
        let committed = (
            storage: committedValue(for: \.storage) ?? storage, sha256: committedValue(for: \.sha256) ?? sha256
        )
        let committedTags = isInserted ? "\n" : committedValue(for: \.tagText) ?? tagText
        let committedThumbnail = isInserted ? nil : committedValue(for: \.thumbnail) ?? thumbnail
        if isDeleted {
            rules.deleted(
                id: objectID.rowID, storage: committed.storage, sha256: committed.sha256, thumbnail: committedThumbnail)
            rules.tagsSettled(objectID, committed: committedTags, current: nil)
            return
        }
        setPrimitiveValue(Date(), for: \.modified)
        rules.tagsSettled(objectID, committed: committedTags, current: tagText)
        if isInserted {
            rules.inserted(name: name, storage: storage, sha256: sha256)
        } else {
            rules.changed(name: name, from: committed, to: (storage, sha256))
        }
        rules.thumbnailChanged(of: name, from: committedThumbnail, to: thumbnail)
    }

    /// Rows deleted without objects (a batch delete, an import's replace, the members a
    /// deletion cascades to) get what `prepareForDeletion` and ``willSave()`` give a deleted
    /// asset.
    override public class func willBatchDelete(_ rows: [ObjectSnapshot], effects: SaveEffects) throws {
        try AssetRules(effects).deleted(rows: rows)
        effects[RowRemoval.self]?.deleted(rows, effects: effects)
    }

    /// Rows inserted in bulk (an import) get what ``validateForInsert()`` and ``willSave()``
    /// give an inserted asset: a check of their shape, and of their content.
    override public class func willInsertRows(
        _ rows: [ObjectSnapshot], in context: ManagedObjectContext, effects: SaveEffects
    ) throws {
        for row in rows {
            try AssetRules.validateShape(
                name: row.value(for: \Asset.name) ?? "", storage: row.value(for: \Asset.storage) ?? .managed,
                sha256: row.value(for: \Asset.sha256) ?? "", path: row.value(for: \Asset.path) ?? nil,
                hasArchive: row.objectID(for: \Asset.archive) != nil, member: row.value(for: \Asset.member) ?? nil)
        }
        try AssetRules(try CatalogRuntime.of(context), effects)
            .inserted(rows: rows, adoption: context[ContentAdoption.self])
    }

    override public func validateForInsert() throws {
        try validate()
    }

    override public func validateForUpdate() throws {
        try validate()
    }

    override public func validateForDelete() throws {
        _ = try CatalogRuntime.of(managedObjectContext)
    }

    private func validate() throws {
        _ = try CatalogRuntime.of(managedObjectContext)
        try AssetRules.validateShape(
            name: name, storage: storage, sha256: sha256, path: path, hasArchive: archive != nil, member: member)
    }
}

/// A row of the removal journal: the plan to remove one managed file, written in the same
/// transaction as the deletion that makes it unused (``AssetRules``).
///
/// Only the sweep deletes plans — in the transaction that carries them out, which unlinks
/// each file that no asset uses: ``CatalogRuntime/carryOut(_:in:)``. A deletion by any
/// other context is refused: it would drop the removal.
final class RemovalPlan: ManagedObject {
    @Attribute(.indexed) var sha256 = ""
    @Attribute var created = Date(timeIntervalSince1970: 0)

    /// The key the sweep's context carries (``CatalogRuntime/sweep()``): the only context
    /// whose deletions of plans are allowed.
    enum Sweeper: ContextKey { typealias Value = CatalogRuntime }

    override func awakeFromInsert() {
        setPrimitiveValue(Date(), for: \.created)
    }

    override func validateForDelete() throws {
        try Self.requireSweeper(managedObjectContext?[Sweeper.self])
    }

    override class func willBatchDelete(_ rows: [ObjectSnapshot], effects: SaveEffects) throws {
        try requireSweeper(effects[Sweeper.self])
    }

    private static func requireSweeper(_ sweeper: CatalogRuntime?) throws {
        guard sweeper != nil else {
            throw CatalogError(.invalidArgument, "removal plans are carried out by the catalog's sweeper only")
        }
    }
}

/// The journal of one import in progress: the content it links into `objects/` before
/// its records commit, in rows of up to 10,000 digests rather than a removal plan per file.
///
/// The rows are written before the first link and deleted once the records commit. Should
/// the import fail, the import itself turns them into removal plans; should its process die
/// first, the next sweep does, once the lock of the rows' ``owner`` is free. A sweep leaves
/// the rows of live imports alone. Rows that outlive their import's commit (a crash just
/// after it) are harmless: a removal plan removes no content an asset uses.
final class PendingImport: ManagedObject {
    /// The staging folder (``ContentStore/owner``) of the process importing; empty for a
    /// row given up, which any sweep carries out.
    @Attribute var owner = ""
    /// The SHA-256 of each content linked, one per line.
    @Attribute var digests = ""
    @Attribute var created = Date(timeIntervalSince1970: 0)

    override func awakeFromInsert() {
        setPrimitiveValue(Date(), for: \.created)
    }

    /// Replaces the row with a removal plan per content, in the same save: the sweeper
    /// then removes each content that no asset uses.
    func giveUp() {
        guard let context = managedObjectContext else { return }
        for digest in digests.split(separator: "\n") { RemovalPlan(context: context).sha256 = String(digest) }
        context.delete(self)
    }
}

/// An add or an import leaves its ``ContentAdoption`` in its context, under its own type:
/// the staged copy of each content — a pin, a second link that keeps the bytes should a
/// removal take the object meanwhile — and the linking that the commit waits for.
extension ContentAdoption: ContextKey {
    typealias Value = ContentAdoption
}
