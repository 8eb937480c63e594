import Foundation
import Persistence

/// The asset's write rules, in one place. Every way an asset is written goes
/// through them — an object inserted, changed or deleted (``Asset/willSave()``
/// and its hooks), rows inserted without objects (an import), rows deleted
/// without objects (a batch delete, the assets an import replaces, the members
/// a deletion cascades to in the store) — so each rule is stated once:
///
/// - **A committed record never points at missing content.** A managed asset
///   inserted, or whose content changed, has its content checked in
///   `objects/` before the commit, under the content lock (shared:
///   ``CatalogRuntime/contentLock``), where no sweep can remove it meanwhile.
/// - **Content goes only after the deletion that made it unused commits.**
///   The removal is journaled (a ``RemovalPlan``) in the deletion's own
///   transaction — for a deleted managed asset, and for the old content of a
///   managed asset whose content or storage changed — so a rollback or a failed
///   save discards it with the deletion. Once the save commits, the sweep
///   (``CatalogRuntime/sweep()``) removes what no asset uses.
/// - **An asset's tags are rows too.** Its ``AssetTag`` rows follow its `tagText` in the
///   same transaction, written by ``tagsChanged(asset:added:removed:)`` alone (its deletion
///   takes them by cascade).
/// - **A deletion stops the asset's jobs.** Pending, it holds them (one hold
///   per context it is pending in: ``JobProvider`` states the rule); committed,
///   it cancels them; ended without a commit, it lets them run again.
///
/// The rules need the catalog (its content store, its jobs): they are reached
/// through ``CatalogRuntime/of(_:)``, which fails loudly — a save of an asset
/// in a context that is not a catalog's is refused, never a check skipped.
struct AssetRules {
    let runtime: CatalogRuntime
    let effects: SaveEffects

    init(_ runtime: CatalogRuntime, _ effects: SaveEffects) {
        self.runtime = runtime
        self.effects = effects
    }

    /// The rules of `effects`' save, whose context must be a catalog's.
    init(_ effects: SaveEffects) throws {
        self.init(try CatalogRuntime.of(effects[CatalogRuntime.self]), effects)
    }

    // MARK: - Inserted, changed

    /// An asset inserted: a managed one's content must be in `objects/` at the commit.
    func inserted(name: String, storage: Storage, sha256: String) {
        guard storage == .managed else { return }
        requireContent([sha256: name])
    }

    /// An asset whose storage or content changed in place: the new content is checked as an
    /// inserted asset's is, and the old managed content is journaled as a deleted asset's
    /// is (it goes once no asset uses it).
    func changed(name: String, from old: (storage: Storage, sha256: String), to new: (storage: Storage, sha256: String))
    {
        guard old != new else { return }
        inserted(name: name, storage: new.storage, sha256: new.sha256)
        if old.storage == .managed { journalRemoval(of: old.sha256) }
    }

    /// Rows inserted without objects: each managed row's content must be in `objects/` at
    /// the commit. Content that `adoption` (an add's or an import's staged copies) holds is
    /// checked by it, once for the whole save.
    func inserted(rows: [ObjectSnapshot], adoption: ContentAdoption?) throws {
        var parsed: (text: String, tags: Set<String>)?  // the rows of an add share their tags
        for row in rows {
            let text = row.value(for: \Asset.tagText) ?? "\n"
            guard text != "\n" else { continue }
            let tags = parsed?.text == text ? parsed!.tags : Set(Asset.tags(fromText: text))
            parsed = (text, tags)
            try tagsChanged(asset: row.objectID, added: tags, removed: [String]())
        }
        var managed: [String: String] = [:]  // digest → the name of an asset with it
        for row in rows where row.value(for: \Asset.storage) ?? .managed == .managed {
            if let digest = row.value(for: \Asset.sha256), managed[digest] == nil {
                managed[digest] = row.value(for: \Asset.name) ?? ""
            }
        }
        if let adoption, !managed.isEmpty {
            let covered = try adoption.covering(Set(managed.keys))
            if !covered.isEmpty {
                for digest in covered { managed[digest] = nil }
                if adoption.claimCheck() {
                    let content = runtime.content
                    effects.beforeCommit { reader in
                        try adoption.wait()  // the links, made while the rows were written
                        try CatalogRuntime.lockContent(reader, shared: true, faults: content.faults)
                        try adoption.requireAll(in: content)
                        content.faults.reach(.afterContentCheck)
                    }
                }
            }
        }
        guard !managed.isEmpty else { return }
        effects.beforeCommit { [content = runtime.content] reader in
            try adoption?.wait()
            try CatalogRuntime.lockContent(reader, shared: true, faults: content.faults)
            for (digest, name) in managed { try content.requireObject(digest, for: name) }
            content.faults.reach(.afterContentCheck)
        }
    }

    /// Content a save certifies is checked under the shared content lock
    /// (``CatalogRuntime/contentLock``), so that no sweep removes it between the check and
    /// the commit; content with a pin among `pins` is linked back from it should a sweep
    /// have removed it since it was stored.
    private func requireContent(_ named: [String: String], pins: [String: String] = [:]) {
        effects.beforeCommit { [content = runtime.content] reader in
            try CatalogRuntime.lockContent(reader, shared: true, faults: content.faults)
            for (digest, name) in named { try content.requireObject(digest, for: name, pin: pins[digest]) }
            content.faults.reach(.afterContentCheck)
        }
    }

    // MARK: - Tags

    /// The one place the tag rows (``AssetTag``) are written: `added` tags of the asset
    /// `asset` get a row each, `removed` ones lose theirs, in this save's transaction — with
    /// the change of the asset's `tagText` that they follow. Every way tags change comes
    /// here: an object's save (``tagsSettled(_:committed:current:)``) and rows inserted
    /// without objects (``inserted(rows:adoption:)``). A deleted asset's rows go by the
    /// cascade of ``AssetTag/asset``, not here.
    func tagsChanged(asset: ManagedObjectID, added: some Collection<String>, removed: some Collection<String>)
        throws
    {
        if !removed.isEmpty {
            try effects.delete(FetchRequest<AssetTag>(predicate: \.asset == asset && .in(\.tag, removed)))
        }
        for tag in added {
            effects.insertRow(AssetTag.self) {
                $0[\.tag] = tag
                $0[\.asset] = asset
            }
        }
    }

    /// An asset object's `tagText` as the store holds it (`committed`; `"\n"` for an inserted
    /// asset) and as this save leaves it (`current`; `nil` for a deleted asset). Its
    /// `willSave` may run more than once in a save: the last call wins, and the rows are
    /// planned once every pass is over (``tagsChanged(asset:added:removed:)``).
    func tagsSettled(_ asset: ManagedObjectID, committed: String, current: String?) {
        let pending = effects.shared(PendingTags.self) {
            let pending = PendingTags()
            effects.beforeTransaction { [self] in
                for (asset, texts) in pending.assets {
                    guard let current = texts.current, current != texts.committed else { continue }
                    let old = Set(Asset.tags(fromText: texts.committed))
                    let new = Set(Asset.tags(fromText: current))
                    try tagsChanged(
                        asset: asset, added: new.subtracting(old).sorted(), removed: old.subtracting(new).sorted())
                }
            }
            return pending
        }
        pending.assets[asset] = (committed, current)
    }

    /// The tags of the asset objects one save writes, by asset.
    private final class PendingTags {
        var assets: [ManagedObjectID: (committed: String, current: String?)] = [:]
    }

    // MARK: - Thumbnails

    /// An asset's thumbnail made, made again or dropped (`old` is the one the store's row
    /// names): the new one must be in `objects/` at the commit — put back from its pin
    /// (``ContentPins``) should a sweep have taken it since it was stored — and the old one
    /// is journaled, as a deleted asset's content is.
    func thumbnailChanged(of name: String, from old: String?, to new: String?) {
        guard old != new else { return }
        if let new { requireContent([new: "the thumbnail of \(name)"], pins: effects[ContentPins.self] ?? [:]) }
        if let old { journalRemoval(of: old) }
    }

    // MARK: - Deleted

    /// An asset deleted (an object, or a row without one), with the storage, content and
    /// thumbnail its row in the store names: a managed one's content, and any asset's
    /// thumbnail, are journaled for removal; once the save commits, the asset's jobs are
    /// cancelled and the sweep runs.
    func deleted(id: Int64, storage: Storage, sha256: String, thumbnail: String?) {
        DeletedAssets.of(effects, runtime).ids.insert(id)
        if let thumbnail { journalRemoval(of: thumbnail) }
        guard storage == .managed else { return }  // referenced files and members are never removed
        journalRemoval(of: sha256)
    }

    /// Rows deleted without objects: each as ``deleted(id:storage:sha256:thumbnail:)``.
    func deleted(rows: [ObjectSnapshot]) {
        for row in rows {
            deleted(
                id: row.objectID.rowID, storage: row.value(for: \Asset.storage) ?? .managed,
                sha256: row.value(for: \Asset.sha256) ?? "", thumbnail: row.value(for: \Asset.thumbnail) ?? nil)
        }
    }

    /// A row of the removal journal, in this save's transaction.
    private func journalRemoval(of digest: String) {
        // A row, not an object: a deletion of 10,000 files journals 10,000 of them.
        effects.insertRow(RemovalPlan.self) { row in
            row[\.sha256] = digest
            row[\.created] = Date()
        }
        DeletedAssets.of(effects, runtime).removeContent = true
    }

    /// The assets one save deletes, gathered into one piece of work: once it commits, their
    /// jobs are cancelled and (when content was journaled) the sweep runs, once.
    ///
    /// A save that fails leaves the jobs held as they are: the context still holds the
    /// deletion, and what ends it releases them once — a rollback (`undoDeletion`), a
    /// reset or the context thrown away (its discarded deletions), or a later save that
    /// commits.
    private final class DeletedAssets {
        /// Every asset deleted, as ranges: a bulk deletion of consecutive IDs stays small.
        var ids = RowIDSet()
        /// Whether the save journaled the removal of content.
        var removeContent = false

        static func of(_ effects: SaveEffects, _ runtime: CatalogRuntime) -> DeletedAssets {
            effects.shared(DeletedAssets.self) {
                let deleted = DeletedAssets()
                // Announced from the transaction, so heard only if it commits: every other process
                // and host stops its runs of these assets' jobs at once (``JobQueue/heard(_:)``).
                effects.beforeCommit { [weak effects, deleted] _ in
                    try effects?.announce(JobQueue.deletionTopic, payload: JobQueue.deletionPayload(deleted.ids))
                }
                effects.afterCommit { [deleted, weak runtime] in
                    runtime?.jobs?.assetsDeleted(deleted.ids)
                    if deleted.removeContent { runtime?.didCommitRemovals() }
                }
                return deleted
            }
        }
    }

    // MARK: - Jobs of a pending deletion

    /// The asset was deleted in its context (directly, or by a cascade): its jobs are held.
    static func deletionBegan(_ id: Int64, in context: ManagedObjectContext?) {
        context?[CatalogRuntime.self]?.jobs?.cancelAll(for: AssetID(id))
    }

    /// A deletion left its context without a commit (a rollback; or a child's save handed
    /// it to the parent, which holds the jobs itself): one hold is released.
    static func deletionLeft(_ id: Int64, in context: ManagedObjectContext?) {
        context?[CatalogRuntime.self]?.jobs?.resume(for: AssetID(id))
    }

    // MARK: - Shape

    /// What every asset must be, whichever way it is written.
    static func validateShape(
        name: String, storage: Storage, sha256: String, path: String?, hasArchive: Bool, member: String?
    ) throws {
        switch storage {
        case .managed:
            guard ContentStore.isDigest(sha256) else {
                throw CatalogError(.invalidArgument, "\(name): a managed asset needs a SHA-256 digest")
            }
        case .referenced:
            guard let path, path.hasPrefix("/") else {
                throw CatalogError(.invalidArgument, "\(name): a referenced asset needs an absolute path")
            }
        case .member:
            guard hasArchive, member != nil else {
                throw CatalogError(.invalidArgument, "\(name): an archive member needs its archive and member path")
            }
        }
    }
}

extension CatalogRuntime {
    /// The catalog of a context, which must have one (see below).
    static func of(_ context: ManagedObjectContext?) throws -> CatalogRuntime {
        try of(context?[CatalogRuntime.self])
    }

    /// `runtime`, the catalog a context or a save carries (its value for the key
    /// `CatalogRuntime`), which must be there.
    ///
    /// - Throws: ``CatalogError/Code/invalidArgument`` when it belongs to none: a context made
    ///   on the store directly, or used after ``Catalog/close()``. Assets are written in a
    ///   catalog's contexts only (``Catalog/newContext(name:)``), where every rule applies.
    static func of(_ runtime: CatalogRuntime?) throws -> CatalogRuntime {
        guard let runtime else {
            throw CatalogError(
                .invalidArgument,
                "Assets are written in a catalog's contexts only (Catalog.newContext, performBackgroundTask): this "
                    + "context belongs to no open catalog")
        }
        return runtime
    }
}
