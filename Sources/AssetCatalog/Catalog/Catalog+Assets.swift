import BagIt
public import Foundation
import Persistence

#if canImport(Glibc)
    import Glibc
#endif

/// What ``Catalog/remove(_:dryRun:)-(AssetID,_)`` removed.
public struct RemovalResult: Sendable {
    /// The deleted assets, including archive members deleted with their archive.
    public var removed: [AssetRecord]
    /// Managed files that were removed from `objects/` because no asset uses
    /// their content any more: those the sweep after the commit removed, by path, sorted.
    /// (A file another process's sweep removed first is not listed.)
    public var filesRemoved: [String]
    /// Whether this was a dry run (nothing was changed).
    public var wasDryRun: Bool
}

/// Counts and sizes of a catalog.
public struct CatalogStats: Sendable, Codable, Hashable {
    public var assets: Int
    public var managed: Int
    public var referenced: Int
    public var members: Int
    public var archives: Int
    /// The sum of the assets' sizes.
    public var totalBytes: Int64
    /// Files in `objects/` and their size on disk (shared content counts once).
    public var objectFiles: Int
    public var objectBytes: Int64
    /// Removals committed but not carried out yet (a crash; finished on open).
    public var pendingRemovals: Int
    public var tags: [String: Int]
    public var kinds: [String: Int]
}

extension Catalog {
    /// The assets `query` selects, in ID order.
    public func assets(_ query: AssetQuery = AssetQuery()) throws -> [AssetRecord] {
        try storeErrors {
            try withContext { context in
                try context.fetch(FetchRequest<Asset>(predicate: query.predicate)).map(AssetRecord.init)
            }
        }
    }

    /// Calls `body` with every asset `query` selects, in ID order, loading
    /// them a page at a time: memory stays bounded whatever the catalog's size.
    public func forEachAsset(
        _ query: AssetQuery = AssetQuery(), pageSize: Int = 1_000, _ body: (AssetRecord) throws -> Void
    ) throws {
        var after: Int64 = 0
        while true {
            let page = try assetPage(query, after: after, limit: pageSize)
            for record in page { try body(record) }
            guard page.count == pageSize, let last = page.last else { return }
            after = last.id.rawValue
        }
    }

    /// Up to `limit` assets that `query` selects, with IDs above `after`, by ID.
    func assetPage(_ query: AssetQuery, after: Int64, limit: Int) throws -> [AssetRecord] {
        try storeErrors {
            try withContext { context in
                let request = FetchRequest<Asset>(
                    predicate: query.predicate && .objectIDs(after: after), sortBy: [.objectID()], limit: limit)
                return try context.fetchSnapshots(request).map(AssetRecord.init(snapshot:))  // no objects
            }
        }
    }

    /// The asset with ID `id`.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has it.
    public func asset(_ id: AssetID) throws -> AssetRecord {
        try storeErrors { try withContext { try AssetRecord(existingAsset(id, in: $0)) } }
    }

    /// The assets named `name` exactly (any number of them: names need not be unique), in ID order.
    public func assets(named name: String) throws -> [AssetRecord] {
        try storeErrors {
            try withContext { context in
                try context.fetch(FetchRequest<Asset>(predicate: \.name == name, sortBy: [.objectID()]))
                    .map(AssetRecord.init)
            }
        }
    }

    /// The asset of `context` with ID `id`.
    func existingAsset(_ id: AssetID, in context: ManagedObjectContext) throws -> Asset {
        let objectID = ManagedObjectID(entityName: Asset.entityName, rowID: id.rawValue)
        guard let asset = try? context.existingObject(with: objectID, as: Asset.self) else {
            throw CatalogError(.notFound, "No asset with ID \(id); list assets with `assetcat ls`")
        }
        return asset
    }

    /// Deletes assets (and the members of archives among them). Managed
    /// files whose content no other asset uses are removed — only after the
    /// deletion has committed. With `dryRun`, reports what would go and
    /// changes nothing; a deletion the real removal would refuse (a program's deny rule)
    /// is refused with the same error. A change to the same assets committed meanwhile (a
    /// job's result) does not refuse the removal: it runs again on the new rows.
    ///
    /// The assets are deleted as objects: every hook runs (`prepareForDeletion`, `willSave`),
    /// on the objects of a program's own entities that the deletion cascades to too. For
    /// thousands of assets, ``removeRows(_:)`` deletes them as rows.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has one of `ids` (nothing is deleted).
    @discardableResult
    public func remove(_ ids: some Collection<AssetID>, dryRun: Bool = false) throws -> RemovalResult {
        try storeErrors {
            try withRetriedContext { context in
                let assets = try ids.map { try existingAsset($0, in: context) }
                for asset in assets { context.delete(asset) }
                let doomed = context.deletedObjects.compactMap { $0 as? Asset }.sorted { $0.objectID < $1.objectID }
                let records = doomed.map(AssetRecord.init)
                let candidates = Set(doomed.filter { $0.storage == .managed }.map(\.sha256))
                if dryRun {
                    // What the save would refuse (a program's deny rule), the dry run refuses.
                    do {
                        try context.validateDeletion(of: context.deletedObjects)
                    } catch {
                        context.rollback()
                        throw error
                    }
                    // Content still used by an asset that stays is not removed.
                    let removable = try candidates.filter { digest in
                        let users = try context.count(
                            for: FetchRequest<Asset>(predicate: \.sha256 == digest && \.storage == Storage.managed))
                        return users == 0
                    }
                    context.rollback()
                    return RemovalResult(
                        removed: records, filesRemoved: removable.sorted().map(content.objectPath), wasDryRun: true)
                }
                let unlinks = UnlinkWatch()
                unlinks.watch(candidates)
                try runtime.watchingUnlinks(unlinks) { try context.save() }
                let unlinked = unlinks.unlinked
                let removed = candidates.filter(unlinked.contains).sorted().map(content.objectPath)
                return RemovalResult(removed: records, filesRemoved: removed, wasDryRun: false)
            }
        }
    }

    /// Deletes assets (and the members of archives among them) as ``remove(_:dryRun:)-(AssetID,_)`` does,
    /// with the same result, but as rows — a batch deletion by ID, as ``removeAll(_:dryRun:)``
    /// deletes a query's assets: no objects are made, in one transaction, a page of IDs at a
    /// time. The journal rows of the files to remove are written in it, and the files go
    /// after the commit. The assets' jobs are stopped first (queued again if the deletion
    /// fails) and cancelled for good once it commits. A program's own entities that the
    /// deletion reaches get `ManagedObject.willBatchDelete(_:effects:)`, not
    /// `prepareForDeletion` or `willSave`. `assetcat rm ID...` and `rm --from-file` use it.
    ///
    /// The result lists the rows as the transaction deleted them (a change committed
    /// meanwhile, a job's result, is in it), by ID, and the files of their content that were
    /// in `objects/` before and are gone once the sweep after the commit has run.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has one of `ids`, checked inside
    ///   the transaction (nothing is deleted).
    @discardableResult
    public func removeRows(_ ids: some Collection<AssetID>) throws -> RemovalResult {
        let sorted = Array(Set(ids.map(\.rawValue))).sorted()
        let result = try storeErrors {
            try withContext { context in
                let removal = RowRemoval(requested: sorted)
                context[RowRemoval.self] = removal
                try context.deleteRows(Asset.self) { after in
                    if after == 0 { removal.restart() }  // a save that starts again gathers again
                    // The next page of requested IDs above `after`, by binary search: a save
                    // that starts again asks from 0.
                    var low = 0
                    var high = sorted.count
                    while low < high {
                        let middle = (low + high) / 2
                        if sorted[middle] > after { high = middle } else { low = middle + 1 }
                    }
                    return Array(sorted[low..<min(low + 500, sorted.count)])
                }
                // As `prepareForDeletion` does: the assets' jobs stop before the deletion, and
                // run again if it fails (those of members it cascades to stop at the commit).
                for id in sorted { AssetRules.deletionBegan(id, in: context) }
                do {
                    try runtime.watchingUnlinks(removal.unlinks) { try context.save() }
                } catch {
                    for id in sorted { AssetRules.deletionLeft(id, in: context) }
                    throw error
                }
                return removal
            }
        }
        // No requested row was there (another process removed them all first): nothing was deleted.
        try result.requireAllDeleted()
        let records = result.records.sorted { $0.id < $1.id }
        let unlinked = result.unlinks.unlinked
        let removed = result.digests.filter(unlinked.contains).sorted().map(content.objectPath)
        return RemovalResult(removed: records, filesRemoved: removed, wasDryRun: false)
    }

    /// Deletes one asset (and its members, if it is an archive), as the overload that takes several IDs does.
    @discardableResult
    public func remove(_ id: AssetID, dryRun: Bool = false) throws -> RemovalResult {
        try remove(CollectionOfOne(id), dryRun: dryRun)
    }

    /// Deletes every asset `query` selects in one set-based statement (a
    /// batch delete: no objects are loaded), archive members with their
    /// archives. Managed files whose content no other asset uses are removed
    /// after the commit, and the assets' jobs cancelled, as for
    /// ``remove(_:dryRun:)-(AssetID,_)``. Returns how many assets were deleted.
    @discardableResult
    public func removeAll(_ query: AssetQuery) throws -> Int {
        let result = try removeAll(query, dryRun: false)
        return result.assets + result.members
    }

    /// Adds and removes tags on assets; returns them as they are afterwards.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has one of `ids` (nothing changes).
    @discardableResult
    public func tag(
        _ ids: some Collection<AssetID>, adding: [String] = [], removing: [String] = []
    ) throws -> [AssetRecord] {
        for tag in adding + removing { try Self.validateTag(tag) }
        return try storeErrors {
            try withRetriedContext { context in
                let assets = try ids.map { try existingAsset($0, in: context) }
                for asset in assets {
                    asset.tags = Array(Set(asset.tags).union(adding).subtracting(removing))
                }
                try context.save()
                return assets.map(AssetRecord.init)
            }
        }
    }

    /// Sets metadata values on an asset (a `nil` value removes the key).
    @discardableResult
    public func setMetadata(_ id: AssetID, _ values: [String: String?]) throws -> AssetRecord {
        try storeErrors {
            try withRetriedContext { context in
                let asset = try existingAsset(id, in: context)
                var metadata = asset.metadata
                for (key, value) in values { metadata[key] = value }
                asset.metadata = metadata
                try context.save()
                return AssetRecord(asset)
            }
        }
    }

    /// Streams an asset's bytes (an archive member's too) to `body`, in chunks.
    public func read(_ id: AssetID, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let record = try asset(id)
        try read(record, body)
    }

    /// The file that holds an asset's bytes, for a tool that needs a path rather than a
    /// stream (`read(_:_:)` streams any asset, archive members too).
    ///
    /// - A managed asset: its content's file in the catalog's `objects/`, shared by every
    ///   asset with the same content. **Do not modify, move or delete it**: open it read-only.
    ///   The path is valid while the asset exists; after its removal commits the file may go.
    /// - A referenced asset: the file it references (the catalog never writes to it).
    /// - An archive member: `nil`, as it has no file of its own (read it with `read`).
    ///
    /// The file is not opened or checked here: it may be missing or damaged
    /// (``verify(_:progress:)`` reports that), and a tool should open it once and check what it
    /// opened.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has `id`.
    public func contentURL(of id: AssetID) throws -> URL? {
        let record = try asset(id)
        switch record.storage {
        case .managed: return URL(fileURLWithPath: content.objectPath(record.sha256))
        case .referenced: return record.path.map { URL(fileURLWithPath: $0) }
        case .member: return nil
        }
    }

    func read(_ record: AssetRecord, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        switch record.storage {
        case .managed: try Self.stream(content.objectPath(record.sha256), body)
        case .referenced: try Self.stream(record.path ?? "", body)
        case .member:
            guard let archivePath = try memberArchivePath(record), let member = record.member else {
                throw CatalogError(.notFound, "Asset \(record.id) has no archive")
            }
            try ArchiveIndex.read(member: member, ordinal: record.memberOrdinal, ofArchiveAt: archivePath, body)
        }
    }

    /// The file of an archive member's archive.
    func memberArchivePath(_ record: AssetRecord) throws -> String? {
        guard let archiveID = record.archive else { return nil }
        let archive = try asset(archiveID)
        return archive.storage == .managed ? content.objectPath(archive.sha256) : archive.path
    }

    /// Streams a managed or referenced file: opened once and checked for what it is (a FIFO
    /// swapped in for a referenced file is refused, not waited on).
    static func stream(_ path: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let fd: Int32
        do {
            fd = try FileAccess.openRegularFile(atPath: path).fd
        } catch {
            let name = DisplayText.quoted(path)
            switch error.kind {
            case .system(ENOENT):
                throw CatalogError(
                    .notFound, "Cannot read \(name): the file is missing; run `assetcat verify`", path: path)
            case .system(let code):
                throw CatalogError(.io, "Could not read \(name): \(String(cString: strerror(code)))", path: path)
            default: throw CatalogError(.io, "Could not read \(name): it \(error.reason)", path: path)
            }
        }
        defer { Glibc.close(fd) }
        try ContentStore.readChunks(fd, path: path, body)
    }

    /// Counts and sizes, read from the counts the store keeps (``Asset/tallies``): one
    /// lookup per storage, per kind and for the content in `objects/`, whatever the number of
    /// assets. `objectFiles` and `objectBytes` count the distinct content that managed assets
    /// use (each file of `objects/` once); a file whose removal is pending counts in
    /// `pendingRemovals` instead, and files no asset uses are `gc`'s to report. Tags are
    /// counted the same way, from the tag rows (`AssetTag.tallies`).
    public func stats() throws -> CatalogStats {
        try storeErrors {
            var stats = CatalogStats(
                assets: 0, managed: 0, referenced: 0, members: 0, archives: 0, totalBytes: 0, objectFiles: 0,
                objectBytes: 0, pendingRemovals: 0, tags: [:], kinds: [:])
            for count in try container.tally(Asset.storageTally, of: Asset.self) {
                stats.assets += count.count
                stats.totalBytes += count.total
                switch Storage(rawValue: count.key) {
                case .managed: stats.managed += count.count
                case .referenced: stats.referenced += count.count
                case .member: stats.members += count.count
                case nil: break
                }
            }
            for count in try container.tally(Asset.kindTally, of: Asset.self) where count.count > 0 {
                stats.kinds[count.key] = count.count
            }
            stats.archives = stats.kinds["archive"] ?? 0
            if let content = try container.tally(Asset.contentTally, of: Asset.self).first {
                stats.objectFiles = content.count
                stats.objectBytes = content.total
            }
            stats.pendingRemovals = try withContext { try $0.count(for: FetchRequest<RemovalPlan>()) }
            for count in try container.tally(AssetTag.tagTally, of: AssetTag.self) where count.count > 0 {
                stats.tags[count.key] = count.count
            }
            return stats
        }
    }
}

/// What ``Catalog/removeRows(_:)`` deletes as rows, gathered inside its transaction from
/// ``Asset/willBatchDelete(_:effects:)``: the records of the rows (the requested ones and
/// the members their deletion cascades to), and their managed content, whose files the
/// sweep after the commit removes when no asset uses them. Before the commit, every requested ID must have had its row:
/// one deleted meanwhile by another process makes the save fail, as an unknown ID does.
final class RowRemoval: ContextKey {
    typealias Value = RowRemoval
    let requested: [Int64]
    var records: [AssetRecord] = []
    /// The managed content of the deleted rows, each once.
    var digests = Set<String>()
    /// What the sweep after the commit unlinks of `digests`.
    let unlinks = UnlinkWatch()
    private var checksBeforeCommit = false

    init(requested: [Int64]) {
        self.requested = requested
    }

    /// Forgets what an earlier attempt of the save gathered.
    func restart() {
        records.removeAll()
        digests.removeAll()
        checksBeforeCommit = false
    }

    /// One page of deleted rows.
    func deleted(_ rows: [ObjectSnapshot], effects: SaveEffects) {
        if !checksBeforeCommit {
            checksBeforeCommit = true
            effects.beforeCommit { [self] _ in try requireAllDeleted() }
        }
        var managed: [String] = []
        for row in rows {
            let record = AssetRecord(snapshot: row)
            records.append(record)
            if record.storage == .managed, digests.insert(record.sha256).inserted { managed.append(record.sha256) }
        }
        unlinks.watch(managed)
    }

    /// Throws ``CatalogError/Code/notFound`` for the first requested ID whose row was not deleted.
    func requireAllDeleted() throws {
        let deleted = Set(records.map(\.id.rawValue))
        if let missing = requested.first(where: { !deleted.contains($0) }) { throw Self.notFound(missing) }
    }

    static func notFound(_ id: Int64) -> CatalogError {
        CatalogError(.notFound, "No asset with ID \(AssetID(id)); list assets with `assetcat ls`")
    }
}
