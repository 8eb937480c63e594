import Dispatch
import Foundation
import Locking
import Logging

/// How a save resolves rows that changed in the store since its objects read them.
public enum MergePolicy: Sendable, Hashable {
    /// Refuse the save with a ``PersistenceError/Code/conflict`` error naming the objects (the default).
    case error
    /// Per property: keep the store's value where both sides changed it.
    case mergeByPropertyStoreTrump
    /// Per property: keep this context's value where both sides changed it.
    case mergeByPropertyObjectTrump
    /// Write this context's values, whatever the store has.
    case overwrite
    /// Drop this context's changes to conflicting objects; take the store's.
    case rollback
}

/// What brought an object back to an earlier state (Core Data's snapshot events).
public struct SnapshotEvents: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// A deletion was rolled back: the object lives again.
    public static let undoDeletion = SnapshotEvents(rawValue: 1)
    /// Unsaved changes were rolled back.
    public static let rollback = SnapshotEvents(rawValue: 2)
    /// The object's values were re-read (`refresh(_:mergeChanges: true)` or a merge).
    public static let refresh = SnapshotEvents(rawValue: 4)
}

/// A scratchpad of managed objects: insert, fetch, change and delete them,
/// then ``save()`` — or ``rollback()``.
///
/// A context sits on the store (a root context: its saves are SQLite
/// transactions) or on a parent context (a child: its saves reach only the
/// parent — the way to make an edit discardable). Each context runs its work
/// on its own serial queue: use ``perform(_:)`` or ``performAndWait(_:)``
/// from outside, and never pass its objects to another context — pass their
/// ``ManagedObjectID``s.
///
/// ```swift
/// let context = container.newBackgroundContext()
/// try await context.perform {
///     let note = Note(context: context)
///     note.title = "Groceries"
///     try context.save()
/// }
/// ```
public final class ManagedObjectContext {
    /// A name for logs and notifications.
    public var name: String?
    /// The context this one saves into; `nil` for a context on the store.
    public let parent: ManagedObjectContext?
    /// How conflicting rows are resolved at save (default: refuse).
    public var mergePolicy: MergePolicy = .error
    /// Whether saves of other contexts on the same store (or, for a child,
    /// into its parent) are merged into this one automatically, on its queue.
    public var automaticallyMergesChangesFromParent = false
    /// Called with the IDs of the objects whose deletion this context never
    /// saved nor rolled back when the context is discarded or reset (for a rollback,
    /// objects get ``ManagedObject/awakeFromSnapshotEvents(_:)`` with
    /// `.undoDeletion` instead). Child contexts inherit it. It runs on the
    /// thread that released the context.
    public var discardedDeletionsHandler: (@Sendable (Set<ManagedObjectID>) -> Void)?
    /// Free-form values for the program's own use (Core Data's `userInfo`);
    /// objects reach it through their ``ManagedObject/managedObjectContext``.
    /// Child contexts start with a copy of their parent's.
    public var userInfo: [String: Any] = [:]
    /// How many `willSave` passes a save allows before it stops with
    /// ``PersistenceError/Code/willSaveLoop``.
    public var maximumWillSavePasses = 10

    let core: ContainerCore
    let queue: DispatchQueue
    private let queueTag = QueueTag()
    private static let queueKey = DispatchSpecificKey<QueueTag>()

    private var registered: [ManagedObjectID: ManagedObject] = [:]
    private var insertedList: [ManagedObject] = []
    private var updatedList: [ManagedObject] = []
    private var deletedList: [ManagedObject] = []
    /// Errors found outside a save (a misuse, an ID that could not be
    /// reserved), thrown by the next save.
    private var deferredErrors: [PersistenceError] = []
    private var isSaving = false
    private var redirtied: [ManagedObject] = []
    /// What the last commit's transaction did beyond the changes it was given: rows it
    /// deleted or cleared while completing delete rules, the rows its row deletions removed.
    private var committed = StoreSaveResult()
    private var entityCache: [ObjectIdentifier: EntityDescription] = [:]
    private let children = Locked<[WeakContext]>([])

    private final class QueueTag: Sendable {}

    init(core: ContainerCore, parent: ManagedObjectContext?, name: String?) {
        self.core = core
        self.parent = parent
        self.name = name
        queue = DispatchQueue(label: "Persistence.context.\(name ?? "unnamed")")
        queue.setSpecific(key: Self.queueKey, value: queueTag)
        if parent == nil { core.register(self) }
    }

    /// A context thrown away with deletions it never saved rolls them back:
    /// ``discardedDeletionsHandler`` gets their IDs, so that what
    /// `prepareForDeletion` stopped can restart (discarding a child context
    /// is how an edit is abandoned).
    deinit {
        let ids = deletedList.filter { $0.pendingDelete && !$0.pendingInsert }.map(\.objectID)
        for object in deletedList { object.pendingDelete = false }
        if !ids.isEmpty { discardedDeletionsHandler?(Set(ids)) }
    }

    /// A new context whose saves reach only this one (an edit you can throw
    /// away). It sees this context's unsaved changes, and starts with a copy
    /// of its ``userInfo`` and ``discardedDeletionsHandler``.
    public func newChildContext(name: String? = nil) -> ManagedObjectContext {
        let child = ManagedObjectContext(core: core, parent: self, name: name)
        child.discardedDeletionsHandler = discardedDeletionsHandler
        child.userInfo = userInfo
        children.withLock { list in
            list.removeAll { $0.context == nil }
            list.append(WeakContext(child))
        }
        return child
    }

    // MARK: - Running work on the context's queue

    /// Runs `body` on the context's queue and returns its result; runs it in
    /// place when this thread already runs that queue's work (also when a
    /// parent's work drives a child that reads through the parent).
    public func performAndWait<T>(_ body: () throws -> T) rethrows -> T {
        let tag = ObjectIdentifier(queueTag)
        if DispatchQueue.getSpecific(key: Self.queueKey) === queueTag || HeldQueues.current.tags.contains(tag) {
            return try body()
        }
        return try queue.sync {
            let held = HeldQueues.current
            held.tags.append(tag)
            defer { held.tags.removeLast() }
            return try body()
        }
    }

    /// Runs `body` on the context's queue and returns its result.
    public nonisolated(nonsending) func perform<T>(_ body: @escaping () throws -> T) async throws -> T {
        let work = UncheckedBox(body)
        let tag = ObjectIdentifier(queueTag)
        let result: UncheckedBox<Result<T, any Error>> = await withCheckedContinuation { continuation in
            queue.async {
                let held = HeldQueues.current
                held.tags.append(tag)
                defer { held.tags.removeLast() }
                continuation.resume(returning: UncheckedBox(Result { try work.value() }))
            }
        }
        return try result.value.get()
    }

    // MARK: - State

    /// Objects inserted and not saved yet, in insertion order.
    public var insertedObjects: [ManagedObject] { insertedList.filter { !$0.pendingDelete } }
    /// Objects changed through observed setters and not saved yet.
    public var updatedObjects: [ManagedObject] { updatedList.filter { $0.isUpdated } }
    /// Objects deleted and not saved yet (objects inserted then deleted excluded).
    public var deletedObjects: [ManagedObject] { deletedList.filter { !$0.pendingInsert } }
    /// Every object the context holds.
    public var registeredObjects: [ManagedObject] { Array(registered.values) }
    /// Whether a save would write anything.
    public var hasChanges: Bool {
        !insertedList.isEmpty || !deletedList.isEmpty || !pendingRows.isEmpty || !pendingStreams.isEmpty
            || !pendingDeletions.isEmpty || updatedList.contains { $0.isUpdated }
    }

    func entity(for type: ManagedObject.Type) -> EntityDescription {
        let key = ObjectIdentifier(type)
        if let entity = entityCache[key] { return entity }
        let entity = type.entityDescription
        entityCache[key] = entity
        return entity
    }

    func newObjectID(for entity: EntityDescription) -> ManagedObjectID {
        do {
            return ManagedObjectID(entityName: entity.name, rowID: try core.ids.next(for: entity))
        } catch {
            deferredErrors.append(
                PersistenceError(.io, "Could not reserve an ID for a new \(entity.name): \(error)", cause: error))
            return ManagedObjectID(entityName: entity.name, rowID: core.ids.provisional())
        }
    }

    /// Rows added by ``insertRows(_:count:_:)``, written by the next save.
    private var pendingRows: [StoreChanges.Insert] = []
    /// Rows added by ``insertRows(_:count:batchSize:streaming:)``, produced by the next
    /// save: the values of a batch come from `configure` only (check and hook are the save's).
    private var pendingStreams: [StoreChanges.Stream] = []
    /// Rows of ``deleteRows(_:pages:)``, deleted by the next save.
    private var pendingDeletions: [StoreChanges.RowDeletion] = []

    func registerInserted(_ object: ManagedObject) {
        object.pendingInsert = true
        registered[object.objectID] = object
        insertedList.append(object)
    }

    func recordMisuse(_ message: String) {
        core.logger.error("\(message)")
        deferredErrors.append(PersistenceError(.misuse, message))
    }

    func objectDidChange(_ object: ManagedObject) {
        if !object.pendingInsert && !object.pendingDelete && !object.pendingUpdate {
            object.pendingUpdate = true
            updatedList.append(object)
        } else if !object.pendingUpdate {
            object.pendingUpdate = true
        }
        if isSaving && object.willSavePass > 0 { redirtied.append(object) }
    }

    // MARK: - Objects by ID

    /// The object with `id` in this context: the registered instance, or a
    /// fault that loads its values when first touched. Does no I/O.
    public func object(with id: ManagedObjectID) -> ManagedObject {
        if let object = registered[id] { return object }
        guard let entity = core.schema.entity(named: id.entityName) else {
            preconditionFailure("\(id.entityName) is not an entity of this store")
        }
        let object = entity.objectType.init(ObjectInitToken(entity: entity, objectID: id, context: self))
        object.values = []
        object.faultState = .fault
        registered[id] = object
        return object
    }

    func object<T: ManagedObject>(with id: ManagedObjectID, as type: T.Type) -> T? {
        object(with: id) as? T
    }

    /// The object with `id`, loaded; throws when no such object exists (it
    /// was never saved, or its deletion was).
    public func existingObject(with id: ManagedObjectID) throws -> ManagedObject {
        if let object = registered[id], object.faultState == .loaded { return object }
        guard let entity = core.schema.entity(named: id.entityName) else {
            throw PersistenceError(.notFound, "No entity named \(id.entityName) in this store", objectIDs: [id])
        }
        guard let row = try sourceRows(entity: entity, ids: [id.rowID]).first else {
            throw PersistenceError(.notFound, "No \(id) in the store", objectIDs: [id])
        }
        return materialize(entity: entity, row: row)
    }

    /// The object with `id`, loaded and of type `T`.
    public func existingObject<T: ManagedObject>(with id: ManagedObjectID, as type: T.Type) throws -> T {
        guard let object = try existingObject(with: id) as? T else {
            throw PersistenceError(.notFound, "\(id) is not a \(T.entityName)", objectIDs: [id])
        }
        return object
    }

    func fulfillFault(_ object: ManagedObject) {
        let row: StoreRow?
        do {
            row = try sourceRows(entity: object.entity, ids: [object.objectID.rowID]).first
        } catch {
            core.logger.error("Could not load \(object.objectID): \(error)")
            row = nil
        }
        guard let row else {
            object.values = object.entity.defaultValues
            object.snapshot = object.values
            object.faultState = .unfulfillable
            return
        }
        load(object, row)
    }

    private func load(_ object: ManagedObject, _ row: StoreRow) {
        object.values = row.values
        object.snapshot = row.values
        object.version = row.version
        object.faultState = .loaded
        object.awakeFromFetch()
    }

    private func materialize(entity: EntityDescription, row: StoreRow) -> ManagedObject {
        let id = ManagedObjectID(entityName: entity.name, rowID: row.id)
        if let object = registered[id] {
            if object.faultState != .loaded { load(object, row) }
            return object
        }
        let object = entity.objectType.init(ObjectInitToken(entity: entity, objectID: id, context: self))
        registered[id] = object
        load(object, row)
        return object
    }

    // MARK: - Reading from the parent store

    /// Rows as the parent (store or context) sees them.
    private func sourceRows(_ fetch: StoreFetch) throws -> [StoreRow] {
        if let parent { return try parent.performAndWait { try parent.rowsForChild(fetch) } }
        return try core.store.fetch(fetch)
    }

    private func sourceRows(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        if let parent { return try parent.performAndWait { try parent.rowsForChild(entity: entity, ids: ids) } }
        return try core.store.rows(entity: entity, ids: ids)
    }

    private func isDirty(_ object: ManagedObject) -> Bool {
        object.pendingInsert || object.pendingDelete || object.pendingUpdate
    }

    private func hasPendingChanges(for entity: EntityDescription) -> Bool {
        insertedList.contains { $0.entity === entity } || deletedList.contains { $0.entity === entity }
            || updatedList.contains { $0.entity === entity }
    }

    /// This context's view of `fetch`, for a child: the parent's rows with
    /// this context's unsaved changes applied.
    private func rowsForChild(_ fetch: StoreFetch) throws -> [StoreRow] {
        try merged(fetch).map { item in
            switch item {
            case .row(let row): row
            case .object(let o): StoreRow(id: o.objectID.rowID, version: o.version, values: o.values)
            }
        }
    }

    private func rowsForChild(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        var result: [StoreRow] = []
        var missing: [Int64] = []
        for id in ids {
            if let o = registered[ManagedObjectID(entityName: entity.name, rowID: id)], o.faultState == .loaded {
                if !o.pendingDelete { result.append(StoreRow(id: id, version: o.version, values: o.values)) }
            } else {
                missing.append(id)
            }
        }
        if !missing.isEmpty { result += try sourceRows(entity: entity, ids: missing) }
        return result
    }

    private enum Item {
        case row(StoreRow)
        case object(ManagedObject)
    }

    /// The result of `fetch` with this context's unsaved changes applied.
    private func merged(_ fetch: StoreFetch) throws -> [Item] {
        guard hasPendingChanges(for: fetch.entity) else { return try sourceRows(fetch).map(Item.row) }
        let entity = fetch.entity
        var items: [Item] = []
        for row in try sourceRows(fetch.unwindowed) {
            if let o = registered[ManagedObjectID(entityName: entity.name, rowID: row.id)], isDirty(o) { continue }
            items.append(.row(row))
        }
        for o in insertedList + updatedList where o.entity === entity && !o.pendingDelete {
            if fetch.predicate?.evaluate(o.values, rowID: o.objectID.rowID) ?? true { items.append(.object(o)) }
        }
        func key(_ item: Item) -> (Int64, [StoreValue]) {
            switch item {
            case .row(let r): (r.id, r.values)
            case .object(let o): (o.objectID.rowID, o.values)
            }
        }
        items.sort { fetch.areInIncreasingOrder(key($0), key($1)) }
        let start = min(fetch.offset, items.count)
        let end = fetch.limit.map { min(start + $0, items.count) } ?? items.count
        return Array(items[start..<end])
    }

    // MARK: - Fetching

    /// The objects `request` describes, unsaved changes of this context
    /// included (unless `includesPendingChanges` is false).
    public func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
        let fetch = request.storeFetch
        let entity = fetch.entity
        if request.includesPendingChanges && hasPendingChanges(for: entity) {
            return try merged(fetch).map { item in
                switch item {
                case .row(let row): materialize(entity: entity, row: row) as! T
                case .object(let o): o as! T
                }
            }
        }
        if request.fetchBatchSize > 0 && parent == nil {
            return try batchFaulted(fetch, batchSize: request.fetchBatchSize) as! [T]
        }
        return try sourceRows(fetch).map { materialize(entity: entity, row: $0) as! T }
    }

    private func batchFaulted(_ fetch: StoreFetch, batchSize: Int) throws -> [ManagedObject] {
        let ids = try core.store.fetchIDs(fetch)
        var result: [ManagedObject] = []
        result.reserveCapacity(ids.count)
        for (i, chunk) in ids.chunked(batchSize).enumerated() {
            if i == 0 {
                let rows = Dictionary(
                    uniqueKeysWithValues: try sourceRows(entity: fetch.entity, ids: Array(chunk)).map { ($0.id, $0) })
                for id in chunk {
                    if let row = rows[id] { result.append(materialize(entity: fetch.entity, row: row)) }
                }
            } else {
                let batch = FaultBatch(ids: Array(chunk))
                for id in chunk {
                    let o = object(with: ManagedObjectID(entityName: fetch.entity.name, rowID: id))
                    if o.faultState == .fault { o.faultBatch = batch }
                    result.append(o)
                }
            }
        }
        return result
    }

    /// Loads every fault of `batch` with one query.
    func fulfillBatch(_ batch: FaultBatch, entity: EntityDescription) {
        guard let rows = try? sourceRows(entity: entity, ids: batch.ids) else { return }
        for row in rows {
            if let o = registered[ManagedObjectID(entityName: entity.name, rowID: row.id)], o.faultState == .fault {
                o.faultBatch = nil
                load(o, row)
            }
        }
    }

    /// How many objects `request` would fetch.
    public func count<T: ManagedObject>(for request: FetchRequest<T>) throws -> Int {
        let fetch = request.storeFetch
        if request.includesPendingChanges && hasPendingChanges(for: fetch.entity) { return try merged(fetch).count }
        if let parent { return try parent.performAndWait { try parent.rowsForChild(fetch) }.count }
        return try core.store.count(fetch)
    }

    /// The IDs of the objects `request` would fetch, without loading them.
    public func fetchObjectIDs<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ManagedObjectID] {
        let fetch = request.storeFetch
        if request.includesPendingChanges && hasPendingChanges(for: fetch.entity) || parent != nil {
            return try merged(fetch).map { item in
                switch item {
                case .row(let r): ManagedObjectID(entityName: fetch.entity.name, rowID: r.id)
                case .object(let o): o.objectID
                }
            }
        }
        return try core.store.fetchIDs(fetch).map { ManagedObjectID(entityName: fetch.entity.name, rowID: $0) }
    }

    // MARK: - Relationships

    func members<T: ManagedObject>(of owner: ManagedObject, toMany property: PropertyDescription, as type: T.Type)
        -> [T]
    {
        do {
            return try members(of: owner, toMany: property).compactMap { $0 as? T }
        } catch {
            core.logger.error("Could not fetch \(owner.objectID).\(property.name): \(error)")
            return []
        }
    }

    private func members(of owner: ManagedObject, toMany property: PropertyDescription) throws -> [ManagedObject] {
        let inverse = try owner.entity.inverse(of: property)
        guard case .toMany(let destinationName) = property.kind,
            let destination = core.schema.entity(named: destinationName)
        else { return [] }
        let fetch = StoreFetch(
            entity: destination, predicate: .compare(PropertyRef(inverse), .equal, .integer(owner.objectID.rowID)),
            sort: [], limit: nil, offset: 0)
        return try merged(fetch).map { item in
            switch item {
            case .row(let row): materialize(entity: destination, row: row)
            case .object(let o): o
            }
        }
    }

    func setMembers(_ newMembers: [ManagedObject], of owner: ManagedObject, toMany property: PropertyDescription) {
        do {
            let inverse = try owner.entity.inverse(of: property)
            let keep = Set(newMembers.map(ObjectIdentifier.init))
            for member in try members(of: owner, toMany: property) where !keep.contains(ObjectIdentifier(member)) {
                member.setValue(.null, atSlot: inverse.slot!, observed: true)
            }
            let link = StoreValue.integer(owner.objectID.rowID)
            for member in newMembers {
                guard member.managedObjectContext === self else {
                    recordMisuse(
                        "\(member.objectID) was added to \(owner.objectID).\(property.name) from another context")
                    continue
                }
                if member.value(atSlot: inverse.slot!) != link {
                    member.setValue(link, atSlot: inverse.slot!, observed: true)
                }
            }
        } catch {
            recordMisuse("\(owner.objectID).\(property.name) could not be set: \(error)")
        }
    }

    // MARK: - Deleting

    /// Marks `object` for deletion and applies its relationships' delete
    /// rules at once: ``ManagedObject/prepareForDeletion()`` runs on it and on
    /// every object a cascade reaches; nullified relationships are cleared;
    /// deny rules are checked at save. Nothing is written until ``save()``.
    public func delete(_ object: ManagedObject) {
        guard object.managedObjectContext === self else {
            recordMisuse("\(object.objectID) was deleted in a context it does not belong to")
            return
        }
        guard !object.pendingDelete else { return }
        object.fireFaultIfNeeded()
        object.pendingDelete = true
        deletedList.append(object)
        if isSaving && object.willSavePass > 0 { redirtied.append(object) }
        object.prepareForDeletion()
        for property in object.entity.properties {
            switch property.kind {
            case .attribute: continue
            case .toOne(let destinationName):
                guard property.deleteRule == .cascade, case .integer(let row) = object.values[property.slot!] else {
                    continue
                }
                delete(self.object(with: ManagedObjectID(entityName: destinationName, rowID: row)))
            case .toMany:
                guard property.deleteRule != .deny else { continue }
                let members: [ManagedObject]
                do {
                    members = try self.members(of: object, toMany: property)
                } catch {
                    recordMisuse("Could not apply the delete rule of \(object.objectID).\(property.name): \(error)")
                    continue
                }
                if property.deleteRule == .cascade {
                    for member in members { delete(member) }
                } else if let inverse = try? object.entity.inverse(of: property) {
                    for member in members where !member.pendingDelete {
                        member.setValue(.null, atSlot: inverse.slot!, observed: true)
                    }
                }
            }
        }
    }

    // MARK: - Saving

    /// Writes the context's changes: to the store in one transaction (a root
    /// context), or into the parent context (a child).
    ///
    /// In order: validation of every changed object (all refusals reported
    /// together), ``ManagedObject/willSave()`` passes until no object is
    /// re-dirtied through observed setters (at most ``maximumWillSavePasses``),
    /// one write transaction with the rows of ``SaveEffects``,
    /// ``ManagedObject/didSave()``, then ``SaveEffects/afterCommit(_:)`` work
    /// and the save notification.
    ///
    /// If anything fails, nothing is written, the error names the objects,
    /// and the context keeps its unsaved changes: fix them and save again, or
    /// ``rollback()``.
    ///
    /// - Throws: ``PersistenceError`` with code `validation`, `constraint`,
    ///   `conflict`, `willSaveLoop`, `io` or `misuse`.
    public func save() throws {
        try save(runCleanUp: true)
    }

    private func save(runCleanUp: Bool) throws {
        guard !isSaving else {
            throw PersistenceError(.misuse, "save() was called on a context that is already saving (from a save hook)")
        }
        try throwDeferredErrors()
        guard hasChanges || !insertedList.isEmpty || !deletedList.isEmpty else { return }
        isSaving = true
        var saved = SavedObjects()
        var effects = SaveEffects(commitsToStore: parent == nil, userInfo: userInfo)
        var gone = Set<ManagedObjectID>()
        var attempt = 1
        while true {
            do {
                saved = try runSave(effects, gone: &gone, lastAttempt: attempt == 3)
                break
            } catch is RestartSave {
                // A conflict was resolved by the merge policy: the objects'
                // values changed, so hooks run again and plan afresh.
                clearSaveMarks()
                effects.runOnFailure()
                effects = SaveEffects(commitsToStore: parent == nil, userInfo: userInfo)
                attempt += 1
            } catch {
                isSaving = false
                clearSaveMarks()
                effects.runOnFailure()
                core.saveErrorHandler?(error, self)
                throw error
            }
        }
        isSaving = false
        for o in saved.all { o.didSave() }
        for o in saved.deleted {
            turnIntoFault(o, detach: true)
            o.pendingDelete = false
        }
        effects.runAfterCommit()
        if parent == nil {
            let (cascaded, nullified) = (committed.cascadeDeleted, committed.nullified)
            let deletedRanges = committed.deletedRows.mapValues(\.ranges)
            committed = StoreSaveResult()
            var rowRanges = saved.rowRanges
            for (entity, ids) in effects.rowRanges { rowRanges[entity, default: []] += ids.ranges }
            let note = SaveNotification(
                inserted: saved.inserted.map(\.objectID) + saved.rows
                    + effects.rows.map { .init(entityName: $0.entity.name, rowID: $0.id) },
                updated: saved.updated.map(\.objectID) + nullified,
                deleted: saved.deleted.map(\.objectID) + cascaded, contextName: name,
                insertedRowRanges: rowRanges, deletedRowRanges: deletedRanges)
            // Objects of this context that the transaction deleted or cleared are stale.
            if !cascaded.isEmpty || !nullified.isEmpty || !deletedRanges.isEmpty {
                mergeChanges(
                    from: SaveNotification(
                        inserted: [], updated: nullified, deleted: cascaded, deletedRowRanges: deletedRanges))
            }
            core.broadcast(note, from: self)
            if runCleanUp, let cleanUp = core.postSaveCleanUp {
                // The save has committed: a failing clean-up must not look like a failed save.
                do {
                    try cleanUp(self)
                    if hasChanges { try save(runCleanUp: false) }
                } catch {
                    core.logger.error("post-save clean-up failed after a committed save: \(error)")
                    core.saveErrorHandler?(error, self)
                }
            }
        } else if let parent {
            let note = SaveNotification(
                inserted: saved.inserted.map(\.objectID), updated: saved.updated.map(\.objectID),
                deleted: saved.deleted.map(\.objectID), contextName: name)
            parent.performAndWait { parent.childDidSave(note, from: self) }
        }
    }

    /// Thrown inside a save when a conflict was resolved and the save must run again.
    private struct RestartSave: Error {}

    private func clearSaveMarks() {
        for o in insertedList + updatedList + deletedList {
            o.currentSaveEffects = nil
            o.willSavePass = 0
        }
    }

    /// Errors found outside a save stay until `rollback()` or `reset()`: a
    /// save after one would write a graph that is not what was asked for.
    private func throwDeferredErrors() throws {
        guard let first = deferredErrors.first else { return }
        if deferredErrors.count == 1 { throw first }
        throw PersistenceError(
            first.code, deferredErrors.map(\.message).joined(separator: "; "), underlyingErrors: deferredErrors,
            cause: first.cause)
    }

    private struct SavedObjects {
        var inserted: [ManagedObject] = []
        var updated: [ManagedObject] = []
        var deleted: [ManagedObject] = []
        /// Rows of ``insertRows(_:count:_:)`` (the store's saves only).
        var rows: [ManagedObjectID] = []
        /// Rows of ``insertRows(_:count:batchSize:streaming:)``, by entity name.
        var rowRanges: [String: [Range<Int64>]] = [:]
        var all: [ManagedObject] { inserted + updated + deleted }
    }

    /// Whether `o` will be written by this save (inserted-then-deleted objects are simply forgotten).
    private func willBeWritten(_ o: ManagedObject) -> Bool {
        o.pendingInsert != o.pendingDelete || o.isUpdated
    }

    private func runSave(_ effects: SaveEffects, gone: inout Set<ManagedObjectID>, lastAttempt: Bool) throws
        -> SavedObjects
    {
        let changed =
            insertedList.filter { !$0.pendingDelete } + updatedList.filter(\.isUpdated)
            + deletedList.filter { !$0.pendingInsert }
        // Objects validated in this save, by the state they were validated in.
        var validated: [ObjectIdentifier: Bool] = [:]
        try validate(changed, &validated)
        var pass = 1
        var due = changed
        while !due.isEmpty {
            guard pass <= maximumWillSavePasses else {
                let names = due.map(\.objectID.description).joined(separator: ", ")
                throw PersistenceError(
                    .willSaveLoop,
                    "willSave kept changing \(names) through observed setters for \(maximumWillSavePasses) passes; "
                        + "change values in willSave with setPrimitiveValue(_:for:)",
                    objectIDs: due.map(\.objectID))
            }
            // Objects that became dirty, or deleted, during the last pass are validated too.
            try validate(due.filter { validated[ObjectIdentifier($0)] != $0.pendingDelete }, &validated)
            redirtied = []
            for o in due {
                o.willSavePass = pass
                o.currentSaveEffects = effects
                o.willSave()
            }
            var seen = Set<ObjectIdentifier>()
            let fresh = (insertedList + updatedList + deletedList).filter {
                $0.willSavePass == 0 && willBeWritten($0)
            }
            due = (redirtied + fresh).filter { seen.insert(ObjectIdentifier($0)).inserted && willBeWritten($0) }
            pass += 1
        }
        try throwDeferredErrors()
        try announcePendingRows(effects)
        var saved = SavedObjects()
        saved.inserted = insertedList.filter { !$0.pendingDelete }
        saved.updated = updatedList.filter(\.isUpdated)
        saved.deleted = deletedList.filter { !$0.pendingInsert }
        if let parent {
            parent.performAndWait { parent.absorb(saved, from: self) }
        } else {
            try commit(saved, effects, gone: &gone, lastAttempt: lastAttempt)
        }
        for o in saved.inserted + saved.updated {
            o.snapshot = o.values
            o.pendingInsert = false
            o.pendingUpdate = false
        }
        for o in deletedList where o.pendingInsert {  // inserted then deleted: never existed
            registered[o.objectID] = nil
            o.managedObjectContext = nil
        }
        for o in saved.all + deletedList {
            o.currentSaveEffects = nil
            o.willSavePass = 0
        }
        insertedList = []
        updatedList = []
        deletedList = []
        saved.rows = pendingRows.map { ManagedObjectID(entityName: $0.entity.name, rowID: $0.id) }
        pendingRows = []
        for stream in pendingStreams { saved.rowRanges[stream.entity.name, default: []].append(stream.ids) }
        pendingStreams = []
        pendingDeletions = []
        return saved
    }

    private func validate(_ objects: [ManagedObject], _ validated: inout [ObjectIdentifier: Bool]) throws {
        var refusals: [PersistenceError] = []
        for o in objects {
            validated[ObjectIdentifier(o)] = o.pendingDelete
            do {
                if o.pendingDelete {
                    try checkDenyRules(o)
                    try o.validateForDelete()
                } else {
                    try checkReferences(o)
                    if o.pendingInsert { try o.validateForInsert() } else { try o.validateForUpdate() }
                }
            } catch let error as PersistenceError {
                refusals.append(error)
            } catch {
                refusals.append(
                    PersistenceError(.validation, "\(o.objectID): \(error)", objectIDs: [o.objectID], cause: error))
            }
        }
        guard !refusals.isEmpty else { return }
        if refusals.count == 1 { throw refusals[0] }
        throw PersistenceError(
            .validation,
            "\(refusals.count) objects refused to save: " + refusals.map(\.message).joined(separator: "; "),
            objectIDs: refusals.flatMap(\.objectIDs), underlyingErrors: refusals)
    }

    /// A to-one relationship must not point at an object this save deletes.
    private func checkReferences(_ object: ManagedObject) throws {
        for property in object.entity.storedProperties {
            guard case .toOne(let destination) = property.kind, case .integer(let row) = object.values[property.slot!],
                let target = registered[ManagedObjectID(entityName: destination, rowID: row)], target.pendingDelete
            else { continue }
            throw PersistenceError.pointsAtDeleted(object.objectID, property, target.objectID)
        }
    }

    private func checkDenyRules(_ object: ManagedObject) throws {
        for property in object.entity.properties where property.deleteRule == .deny {
            switch property.kind {
            case .attribute: continue
            case .toOne:
                if case .integer = object.values[property.slot!] {
                    throw SQLiteStore.denial(object.entity, object.objectID.rowID, property)
                }
            case .toMany:
                if try members(of: object, toMany: property).contains(where: { !$0.pendingDelete }) {
                    throw SQLiteStore.denial(object.entity, object.objectID.rowID, property)
                }
            }
        }
    }

    /// Writes to the store. On a conflict, the merge policy resolves it and
    /// the save restarts (``RestartSave``); `gone` collects rows that another
    /// context already deleted, whose deletion here is therefore moot.
    private func commit(
        _ saved: SavedObjects, _ effects: SaveEffects, gone: inout Set<ManagedObjectID>, lastAttempt: Bool
    )
        throws
    {
        var changes = StoreChanges()
        for o in saved.inserted {
            changes.inserts.append(.init(entity: o.entity, id: o.objectID.rowID, values: o.values))
        }
        changes.inserts += pendingRows
        changes.streams = streamsToWrite(effects)
        changes.rowDeletions = pendingDeletions
        let checksVersions = mergePolicy != .overwrite
        for o in saved.updated where !gone.contains(o.objectID) {
            let slots = o.values.indices.filter {
                !checksVersions || o.snapshot.isEmpty || o.values[$0] != o.snapshot[$0]
            }
            guard !slots.isEmpty else { continue }
            changes.updates.append(
                .init(
                    entity: o.entity, id: o.objectID.rowID, expectedVersion: checksVersions ? o.version : nil,
                    slots: slots, values: slots.map { o.values[$0] }))
        }
        for o in saved.deleted where !gone.contains(o.objectID) {
            changes.deletes.append(
                .init(entity: o.entity, id: o.objectID.rowID, expectedVersion: checksVersions ? o.version : nil))
        }
        guard !changes.isEmpty || !effects.rows.isEmpty || !effects.beforeCommitWork.isEmpty else { return }
        do {
            let result = try core.store.save(changes, effects: effects)
            for o in saved.inserted { o.version = 1 }
            for o in saved.updated { o.version = result.versions[o.objectID] ?? o.version }
            committed = result
        } catch let conflict as StoreConflict {
            guard mergePolicy != .error, !lastAttempt else {
                let names = conflict.objectIDs.map(\.description).joined(separator: ", ")
                throw PersistenceError(
                    .conflict,
                    "Could not save: \(names) changed in the store since this context read "
                        + (conflict.objectIDs.count == 1 ? "it" : "them")
                        + "; merge the changes (refresh(_:mergeChanges:)) or choose a merge policy",
                    objectIDs: conflict.objectIDs)
            }
            try resolve(conflict.objectIDs, gone: &gone)
            throw RestartSave()
        }
    }

    /// Applies the merge policy to conflicting objects, from the store's current rows.
    private func resolve(_ ids: [ManagedObjectID], gone: inout Set<ManagedObjectID>) throws {
        for id in ids {
            guard let o = registered[id] else { continue }
            guard let row = try core.store.rows(entity: o.entity, ids: [id.rowID]).first else {
                if o.pendingDelete {
                    gone.insert(id)  // deleted elsewhere too: nothing to write
                } else if mergePolicy == .rollback {
                    gone.insert(id)  // take the store's state: the object no longer exists
                    o.pendingUpdate = false
                    updatedList.removeAll { $0 === o }
                    o.faultState = .unfulfillable
                } else {
                    throw PersistenceError(
                        .conflict, "Could not save: \(id) was deleted from the store", objectIDs: [id])
                }
                continue
            }
            if o.pendingDelete {
                if mergePolicy == .rollback {
                    // Take the store's state: the deletion is dropped.
                    o.pendingDelete = false
                    deletedList.removeAll { $0 === o }
                    o.values = row.values
                    o.snapshot = row.values
                    o.version = row.version
                    o.awakeFromSnapshotEvents(.undoDeletion)
                } else {
                    // Delete the row as it is now (hooks see its current values).
                    o.values = row.values
                    o.snapshot = row.values
                    o.version = row.version
                }
                continue
            }
            var values = row.values
            for slot in values.indices where o.snapshot.isEmpty || o.values[slot] != o.snapshot[slot] {
                switch mergePolicy {
                case .mergeByPropertyStoreTrump:
                    if row.values[slot] == o.snapshot[slot] { values[slot] = o.values[slot] }
                case .mergeByPropertyObjectTrump, .overwrite: values[slot] = o.values[slot]
                case .rollback, .error: break
                }
            }
            o.values = values
            o.snapshot = row.values
            o.version = row.version
            if mergePolicy == .rollback {
                o.pendingUpdate = false
                updatedList.removeAll { $0 === o }
            }
        }
    }

    /// Applies a child's save to this context's objects.
    private func absorb(_ saved: SavedObjects, from child: ManagedObjectContext) {
        for c in saved.inserted {
            if let existing = registered[c.objectID] {
                existing.values = c.values
                if !existing.pendingInsert {
                    // A fault for the ID (handed out early): it becomes the inserted object.
                    existing.snapshot = []
                    existing.faultState = .loaded
                    existing.faultBatch = nil
                    existing.pendingInsert = true
                    insertedList.append(existing)
                }
                continue
            }
            let o = c.entity.objectType.init(ObjectInitToken(entity: c.entity, objectID: c.objectID, context: self))
            o.values = c.values
            registerInserted(o)
        }
        for c in saved.updated {
            let o = object(with: c.objectID)
            o.fireFaultIfNeeded()
            for slot in c.values.indices where c.snapshot.isEmpty || c.values[slot] != c.snapshot[slot] {
                o.setValue(c.values[slot], atSlot: slot, observed: true)
            }
        }
        for c in saved.deleted {
            let o = object(with: c.objectID)
            delete(o)
        }
    }

    private func childDidSave(_ note: SaveNotification, from child: ManagedObjectContext) {
        for weak in children.withLock({ $0 }) {
            guard let other = weak.context, other !== child, other.automaticallyMergesChangesFromParent else {
                continue
            }
            let box = UncheckedBox(other)
            other.queue.async { box.value.mergeChanges(from: note) }
        }
    }

    // MARK: - Undoing

    /// Discards every unsaved change: deleted objects come back (their
    /// ``ManagedObject/awakeFromSnapshotEvents(_:)`` gets `.undoDeletion`),
    /// inserted ones leave the context, changed values return to their
    /// committed state.
    public func rollback() {
        deferredErrors = []
        pendingRows = []
        pendingStreams = []
        pendingDeletions = []
        for o in insertedList {
            registered[o.objectID] = nil
            o.pendingInsert = false
            o.pendingDelete = false
            o.pendingUpdate = false
            o.managedObjectContext = nil
        }
        let undeleted = deletedList.filter { !$0.pendingInsert && $0.pendingDelete }
        for o in updatedList + deletedList where !o.pendingInsert {
            let changed = o.pendingUpdate
            o.pendingDelete = false
            o.pendingUpdate = false
            if !o.snapshot.isEmpty { o.values = o.snapshot }
            if changed && !undeleted.contains(where: { $0 === o }) { o.awakeFromSnapshotEvents(.rollback) }
        }
        // Changes made with primitive setters only.
        for o in registered.values where o.faultState == .loaded && !o.snapshot.isEmpty && o.values != o.snapshot {
            o.values = o.snapshot
            o.awakeFromSnapshotEvents(.rollback)
        }
        insertedList = []
        updatedList = []
        deletedList = []
        for o in undeleted { o.awakeFromSnapshotEvents(.undoDeletion) }
    }

    /// Forgets every object: each loaded one turns into a fault and leaves
    /// the context. Unsaved changes are lost; unsaved deletions are reported
    /// to ``discardedDeletionsHandler``.
    public func reset() {
        // Deletions forgotten unsaved are discarded, as if the context were.
        let discarded = deletedList.filter { $0.pendingDelete && !$0.pendingInsert }.map(\.objectID)
        defer { if !discarded.isEmpty { discardedDeletionsHandler?(Set(discarded)) } }
        let objects = Array(registered.values)
        registered = [:]
        insertedList = []
        updatedList = []
        deletedList = []
        pendingRows = []
        pendingStreams = []
        pendingDeletions = []
        deferredErrors = []
        for o in objects {
            o.pendingInsert = false
            o.pendingDelete = false
            o.pendingUpdate = false
            turnIntoFault(o, detach: true)
        }
    }

    /// Re-reads `object` from the parent store. Without `mergeChanges`, its
    /// unsaved changes are dropped and it turns into a fault; with it, the
    /// store's values are taken and the object's own changes kept on top.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) {
        guard object.managedObjectContext === self, !object.pendingInsert, object.faultState == .loaded else { return }
        if !mergeChanges {
            guard !object.pendingDelete else { return }
            if object.pendingUpdate {
                object.pendingUpdate = false
                updatedList.removeAll { $0 === object }
            }
            turnIntoFault(object, detach: false)
            return
        }
        guard let row = try? sourceRows(entity: object.entity, ids: [object.objectID.rowID]).first else { return }
        var values = row.values
        for slot in values.indices where object.values[slot] != object.snapshot[slot] {
            values[slot] = object.values[slot]
        }
        object.values = values
        object.snapshot = row.values
        object.version = row.version
        object.awakeFromSnapshotEvents(.refresh)
    }

    private func turnIntoFault(_ object: ManagedObject, detach: Bool) {
        if object.faultState == .loaded {
            object.willTurnIntoFault()
            object.values = []
            object.snapshot = []
            object.faultState = .fault
            object.didTurnIntoFault()
        }
        if detach {
            registered[object.objectID] = nil
            object.managedObjectContext = nil
        }
    }

    // MARK: - Merging

    /// Brings this context up to date with a save made elsewhere: updated
    /// objects are re-read (their unsaved changes kept on top), deleted ones
    /// without unsaved changes leave the context.
    public func mergeChanges(from notification: SaveNotification) {
        for id in notification.updatedObjectIDs {
            if let o = registered[id], o.faultState == .loaded { refresh(o, mergeChanges: true) }
        }
        for id in notification.deletedObjectIDs {
            guard let o = registered[id], !isDirty(o) else { continue }
            turnIntoFault(o, detach: true)
        }
        guard !notification.deletedRowRanges.isEmpty else { return }
        let deleted = notification.deletedRowRanges.mapValues { RowIDSet($0) }
        for o in Array(registered.values) where deleted[o.objectID.entityName]?.contains(o.objectID.rowID) == true {
            if !isDirty(o) { turnIntoFault(o, detach: true) }
        }
    }

    func mergeAsync(_ note: SaveNotification) {
        let box = UncheckedBox(self)
        queue.async { box.value.mergeChanges(from: note) }
    }

    // MARK: - Batch operations

    /// Adds `count` rows of `T` to the next ``save()``, written in its transaction together
    /// with the context's own changes, without making objects: the bulk form of inserting
    /// objects, for an import of many records that must commit with other changes or not
    /// at all. `configure` sets each row's values (others keep their defaults; a to-one
    /// relationship is set by ID). Returns the rows' IDs, reserved now, so that later rows
    /// and objects can point at them.
    ///
    /// No object stands for these rows, so `awakeFromInsert`, `validateForInsert` and
    /// `willSave` do not run for them: the save calls the entity's
    /// ``ManagedObject/willInsertRows(_:in:effects:)`` once, with all of them, instead.
    /// The context does not register them (fetch them to work with them as objects);
    /// ``rollback()`` and ``reset()`` drop them, and a failed save keeps them for the
    /// next. Only a context without a parent takes rows: they go to the store.
    ///
    /// ```swift
    /// let ids = try context.insertRows(Note.self, count: titles.count) { i, row in
    ///     row[\.title] = titles[i]
    /// }
    /// context.delete(draft)
    /// try context.save()  // the notes and the deletion: one transaction
    /// ```
    @discardableResult
    public func insertRows<T: ManagedObject>(
        _ type: T.Type, count: Int, _ configure: (Int, inout BatchInsertRow<T>) -> Void
    ) throws -> [ManagedObjectID] {
        try requireRowsAllowed()
        guard count > 0 else { return [] }
        let entity = self.entity(for: type)
        let ids = try core.store.reserveIDs(entity: entity, count: count)
        let rows = Self.rowValues(entity, 0..<count, configure)
        pendingRows += zip(ids, rows).map { .init(entity: entity, id: $0, values: $1) }
        return ids.map { ManagedObjectID(entityName: entity.name, rowID: $0) }
    }

    /// Adds `count` rows of `T` to the next ``save()`` like ``insertRows(_:count:_:)``, but
    /// produced by the save itself, `batchSize` at a time: an import of any size runs in
    /// constant memory. Returns the rows' IDs, reserved now and contiguous (row `i` gets
    /// `lowerBound + i`), so that later rows and objects can point at them; an empty range
    /// when `count` is 0.
    ///
    /// Nothing runs at the call. The save, inside its transaction and after writing the
    /// context's own changes (rows may point at objects it inserts), makes the rows in
    /// index order, a batch at a time: each starts from the entity's defaults and
    /// `configure` sets it; then the batch is checked as rows of ``insertRows(_:count:_:)``
    /// are, handed to the entity's ``ManagedObject/willInsertRows(_:in:effects:)`` and
    /// written. Only one batch is in memory. Rows planned through the hook's effects and
    /// its `beforeCommit` work come after every row is written. Several streams are written
    /// in the order they were added, after the rows of ``insertRows(_:count:_:)``.
    ///
    /// If `configure` or the hook throws, the save throws that error and writes nothing;
    /// the rows stay pending. A later save, or a save that restarts after the merge policy
    /// resolved a conflict, makes them again from index 0: `configure` must give the same
    /// row each time it is called for an index. ``rollback()`` and ``reset()`` drop them;
    /// the save notification names them by range (``SaveNotification/insertedRowRanges``),
    /// not by ID. Only a context without a parent takes rows.
    ///
    /// Write `batchSize:` or `streaming:` out: a trailing closure that does not throw,
    /// alone, calls ``insertRows(_:count:_:)``.
    ///
    /// ```swift
    /// let ids = try context.insertRows(Note.self, count: file.recordCount, batchSize: 1_000) { i, row in
    ///     row[\.title] = try file.record(at: i).title  // read during the save
    /// }
    /// context.delete(draft)
    /// try context.save()  // the notes, 1,000 at a time, and the deletion: one transaction
    /// ```
    @discardableResult
    public func insertRows<T: ManagedObject>(
        _ type: T.Type, count: Int, batchSize: Int = 1_000,
        streaming configure: @escaping (Int, inout BatchInsertRow<T>) throws -> Void
    ) throws -> Range<Int64> {
        try requireRowsAllowed()
        guard batchSize > 0 else { throw PersistenceError(.misuse, "batchSize must be at least 1, not \(batchSize)") }
        guard count > 0 else { return 0..<0 }
        let entity = self.entity(for: type)
        let reserved = try core.store.reserveIDs(entity: entity, count: count)
        let ids = reserved.lowerBound..<reserved.upperBound + 1
        pendingStreams.append(
            .init(entity: entity, ids: ids, batchSize: batchSize) { indexes in
                try Self.rowValues(entity, indexes, configure)
            })
        return ids
    }

    /// Deletes rows of `T` by ID in the next ``save()``, in its transaction, without making
    /// an object for any of them: the bulk form of deleting objects, for a change that
    /// replaces many records and must commit with its inserts or not at all. `pages` names
    /// the rows a page at a time, so a deletion of any size runs in constant memory.
    ///
    /// Nothing runs at the call. The save, inside its transaction — after the context's own
    /// deletions and updates, before its inserts and rows — calls `pages` with 0, then
    /// with the last ID of each page it got, until a page is empty; each page must list
    /// IDs in ascending order above the one asked for. An ID with no row is passed over.
    /// For each page, as ``batchDelete(_:)`` does: delete rules apply (cascade, a page of
    /// members at a time; nullify; deny refuses the save), each entity whose rows go gets
    /// ``ManagedObject/willBatchDelete(_:effects:)`` with this save's effects, and the rows
    /// it plans are written with the page. `prepareForDeletion` and `willSave` do not run:
    /// no object stands for these rows. A row or object this save inserts must not point at
    /// a deleted row, nor may an object it updates, or a row the hooks plan (the save throws
    /// `validation`).
    ///
    /// If `pages` or a `willBatchDelete` hook throws, the save throws that error and writes nothing; the
    /// deletions stay pending, and the next save, or one that restarts after the merge
    /// policy resolved a conflict, asks for the pages again from 0. ``rollback()`` and
    /// ``reset()`` drop them. Objects of this context for deleted rows leave it after the
    /// save; the save notification names the rows by range
    /// (``SaveNotification/deletedRowRanges``), not by ID, and the rows the hooks planned
    /// in ``SaveNotification/insertedRowRanges``. Only a context without a parent takes
    /// row deletions.
    ///
    /// ```swift
    /// context.deleteRows(Note.self) { after in try replaced.ids(after: after, limit: 500) }
    /// _ = try context.insertRows(Note.self, count: incoming.count, streaming: { i, row in
    ///     row[\.title] = try incoming.record(at: i).title
    /// })
    /// try context.save()  // the old notes go and the new ones come: one transaction
    /// ```
    public func deleteRows<T: ManagedObject>(_ type: T.Type, pages: @escaping (_ after: Int64) throws -> [Int64])
        throws
    {
        try requireRowsAllowed(deleting: true)
        pendingDeletions.append(.init(entity: entity(for: type), page: pages))
    }

    /// The pending streams as this save writes them: each batch checked like the rows of
    /// ``announcePendingRows(_:)``, then handed to its entity's
    /// ``ManagedObject/willInsertRows(_:in:effects:)``.
    private func streamsToWrite(_ effects: SaveEffects) -> [StoreChanges.Stream] {
        guard !pendingStreams.isEmpty else { return [] }
        // What this save deletes, read now: the batches are made on the store's writer.
        var deleting: [String: Set<Int64>] = [:]
        for o in deletedList where o.pendingDelete && registered[o.objectID] === o {
            deleting[o.entity.name, default: []].insert(o.objectID.rowID)
        }
        return pendingStreams.map { stream in
            let entity = stream.entity
            let produce = stream.rows
            // The to-one relationships that could point at a deleted object.
            let checked = entity.storedProperties.compactMap { property -> (PropertyDescription, String, Set<Int64>)? in
                guard case .toOne(let destination) = property.kind, let ids = deleting[destination] else { return nil }
                return (property, destination, ids)
            }
            var announced = stream
            announced.rows = { indexes in
                let rows = try produce(indexes)
                var snapshots: [ObjectSnapshot] = []
                snapshots.reserveCapacity(rows.count)
                for (i, values) in zip(indexes, rows) {
                    let id = stream.ids.lowerBound + Int64(i)
                    for (property, destination, deleted) in checked {
                        guard case .integer(let target) = values[property.slot!], deleted.contains(target) else {
                            continue
                        }
                        throw PersistenceError.pointsAtDeleted(
                            ManagedObjectID(entityName: entity.name, rowID: id), property,
                            ManagedObjectID(entityName: destination, rowID: target))
                    }
                    snapshots.append(ObjectSnapshot(entity: entity, id: id, values: values))
                }
                try entity.objectType.willInsertRows(snapshots, in: self, effects: effects)
                return rows
            }
            return announced
        }
    }

    /// Rows go to the store (no parent), and are added before a save, not during one.
    private func requireRowsAllowed(deleting: Bool = false) throws {
        guard parent == nil else {
            throw PersistenceError(
                .misuse,
                "Rows are written to the store; \(deleting ? "delete" : "insert") them in a context without a parent")
        }
        guard !isSaving else {
            throw PersistenceError(
                .misuse,
                deleting
                    ? "deleteRows was called during a save (from a save hook); delete rows before save()"
                    : "insertRows was called during a save (from a save hook); add rows before save()")
        }
    }

    /// The values of the rows at `indexes` of an entity: its defaults, then what `configure` sets.
    private static func rowValues<T: ManagedObject>(
        _ entity: EntityDescription, _ indexes: Range<Int>, _ configure: (Int, inout BatchInsertRow<T>) throws -> Void
    ) rethrows -> [[StoreValue]] {
        var rows: [[StoreValue]] = []
        rows.reserveCapacity(indexes.count)
        var row = BatchInsertRow<T>(entity: entity)
        for i in indexes {
            row.values = entity.defaultValues
            try configure(i, &row)
            rows.append(row.values)
        }
        return rows
    }

    /// Hands each entity's pending rows to its ``ManagedObject/willInsertRows(_:in:effects:)``,
    /// after checking, as for objects, that no row points at an object this save deletes.
    private func announcePendingRows(_ effects: SaveEffects) throws {
        guard !pendingRows.isEmpty else { return }
        var order: [ObjectIdentifier] = []
        var byEntity: [ObjectIdentifier: [ObjectSnapshot]] = [:]
        for row in pendingRows {
            for property in row.entity.storedProperties {
                guard case .toOne(let destination) = property.kind,
                    case .integer(let target) = row.values[property.slot!],
                    let object = registered[ManagedObjectID(entityName: destination, rowID: target)],
                    object.pendingDelete
                else { continue }
                throw PersistenceError.pointsAtDeleted(
                    ManagedObjectID(entityName: row.entity.name, rowID: row.id), property, object.objectID)
            }
            let key = ObjectIdentifier(row.entity)
            if byEntity[key] == nil { order.append(key) }
            byEntity[key, default: []].append(ObjectSnapshot(entity: row.entity, id: row.id, values: row.values))
        }
        for key in order {
            let rows = byEntity[key]!
            try rows[0].entity.objectType.willInsertRows(rows, in: self, effects: effects)
        }
    }

    /// Inserts `count` rows of `T` with one prepared statement in one
    /// transaction, without creating objects (so `awakeFromInsert` does not
    /// run): `configure` sets each row's values. Returns their IDs, and
    /// publishes a save notification so that auto-merging contexts see them.
    ///
    /// ```swift
    /// let ids = try context.batchInsert(Note.self, count: 1000) { i, row in
    ///     row[\.title] = "Note \(i)"
    /// }
    /// ```
    @discardableResult
    public func batchInsert<T: ManagedObject>(
        _ type: T.Type, count: Int, _ configure: (Int, inout BatchInsertRow<T>) -> Void
    ) throws -> [ManagedObjectID] {
        guard parent == nil else {
            throw PersistenceError(
                .misuse, "Batch operations write to the store; run them on a context without a parent")
        }
        let entity = self.entity(for: type)
        let rows = Self.rowValues(entity, 0..<count, configure)
        let ids = try core.store.batchInsert(entity: entity, rows: rows).map {
            ManagedObjectID(entityName: entity.name, rowID: $0)
        }
        core.broadcast(SaveNotification(inserted: ids, updated: [], deleted: [], contextName: name), from: nil)
        return ids
    }

    /// Deletes every row `request` matches, in set-based SQL without loading
    /// objects. Delete rules apply (cascade, nullify, deny), and each entity
    /// whose rows go gets ``ManagedObject/willBatchDelete(_:effects:)`` inside
    /// the transaction — so clean-up planned there (journal rows, after-commit
    /// work) happens for batch deletes too. Returns a notification with the
    /// deleted and nullified IDs: pass it to ``mergeChanges(from:)`` of live
    /// contexts (contexts that merge automatically get it anyway).
    @discardableResult
    public func batchDelete<T: ManagedObject>(_ request: FetchRequest<T>) throws -> SaveNotification {
        guard parent == nil else {
            throw PersistenceError(
                .misuse, "Batch operations write to the store; run them on a context without a parent")
        }
        let effects = SaveEffects(commitsToStore: true, userInfo: userInfo)
        let outcome: BatchDeleteOutcome
        do {
            outcome = try core.store.batchDelete(request.storeFetch, effects: effects)
        } catch {
            effects.runOnFailure()
            throw error
        }
        effects.runAfterCommit()
        let note = SaveNotification(
            inserted: [], updated: outcome.nullified,
            deleted: outcome.deleted.flatMap { name, ids in ids.map { ManagedObjectID(entityName: name, rowID: $0) } },
            contextName: name, insertedRowRanges: effects.rowRanges.mapValues(\.ranges))
        core.broadcast(note, from: nil)
        return note
    }
}

@available(*, unavailable)
extension ManagedObjectContext: Sendable {}

/// One row of a ``ManagedObjectContext/batchInsert(_:count:_:)``.
public struct BatchInsertRow<Root: ManagedObject> {
    let entity: EntityDescription
    var values: [StoreValue] = []

    init(entity: EntityDescription) { self.entity = entity }

    /// The value of an attribute of this row.
    public subscript<Value: AttributeValue>(keyPath: KeyPath<Root, Value>) -> Value {
        get {
            let property = entity.propertyOrDie(for: keyPath)
            return Value(storeValue: values[property.slot!]) ?? Value(storeValue: property.defaultValue)!
        }
        set { values[entity.slotOrDie(for: keyPath)] = newValue.storeValue }
    }

    /// The destination of a to-one relationship of this row, by ID.
    public subscript<Destination: ManagedObject>(keyPath: KeyPath<Root, Destination?>) -> ManagedObjectID? {
        get {
            guard case .integer(let row) = values[entity.slotOrDie(for: keyPath)] else { return nil }
            return ManagedObjectID(entityName: Destination.entityName, rowID: row)
        }
        set { values[entity.slotOrDie(for: keyPath)] = newValue.map { .integer($0.rowID) } ?? .null }
    }
}

/// Objects of a `fetchBatchSize` fetch that load together.
final class FaultBatch {
    let ids: [Int64]
    init(ids: [Int64]) { self.ids = ids }
}

/// The contexts whose queue the current thread is running work for.
final class HeldQueues {
    var tags: [ObjectIdentifier] = []

    static var current: HeldQueues {
        let dictionary = Thread.current.threadDictionary
        if let held = dictionary["Persistence.HeldQueues"] as? HeldQueues { return held }
        let held = HeldQueues()
        dictionary["Persistence.HeldQueues"] = held
        return held
    }
}

struct WeakContext {
    weak var context: ManagedObjectContext?
    init(_ context: ManagedObjectContext) { self.context = context }
}

/// Carries a value the compiler cannot prove safe across a queue hop; used
/// only where the queue discipline guarantees exclusive access.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
