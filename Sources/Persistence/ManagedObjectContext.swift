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
    /// The typed values the context carries (``subscript(_:)``).
    var values = ContextValues()
    /// How many `willSave` passes a save allows before it stops with
    /// ``PersistenceError/Code/willSaveLoop``.
    public var maximumWillSavePasses = 10

    let core: ContainerCore
    /// Where the context's work runs. Work on it is marked as this context's in the running
    /// thread's ``HeldQueues`` (not with `setSpecific`: libdispatch frees a queue's specific
    /// values with an `async` to a global queue, a thread woken for every context discarded).
    private let queue: DispatchQueue
    private let queueTag = QueueTag()

    var registered: [ManagedObjectID: ManagedObject] = [:]
    var insertedList: [ManagedObject] = []
    var updatedList: [ManagedObject] = []
    var deletedList: [ManagedObject] = []
    /// Errors found outside a save (a misuse, an ID that could not be
    /// reserved), thrown by the next save.
    var deferredErrors: [PersistenceError] = []
    var isSaving = false
    var redirtied: [ManagedObject] = []
    /// What the last commit's transaction did beyond the changes it was given: rows it
    /// deleted or cleared while completing delete rules, the rows its row deletions removed.
    var committed = StoreSaveResult()
    private var entityCache: [ObjectIdentifier: EntityDescription] = [:]
    let children = Locked<[WeakContext]>([])

    private final class QueueTag: Sendable {}

    init(core: ContainerCore, parent: ManagedObjectContext?, name: String?) {
        self.core = core
        self.parent = parent
        self.name = name
        queue = DispatchQueue(label: "Persistence.context.\(name ?? "unnamed")")
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
    /// of its ``userInfo``, its typed values (``subscript(_:)``) and
    /// ``discardedDeletionsHandler``.
    public func newChildContext(name: String? = nil) -> ManagedObjectContext {
        let child = ManagedObjectContext(core: core, parent: self, name: name)
        child.discardedDeletionsHandler = discardedDeletionsHandler
        child.userInfo = userInfo
        child.values = values
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
        if HeldQueues.current.tags.contains(tag) { return try body() }
        return try queue.sync {
            let held = HeldQueues.current
            held.tags.append(tag)
            defer { held.tags.removeLast() }
            return try body()
        }
    }

    /// Runs `body` on the context's queue later, as this context's work (what the store's
    /// merges of other contexts' saves use).
    func async(_ body: @escaping @Sendable () -> Void) {
        let tag = ObjectIdentifier(queueTag)
        queue.async {
            let held = HeldQueues.current
            held.tags.append(tag)
            defer { held.tags.removeLast() }
            body()
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
        !insertedList.isEmpty || !deletedList.isEmpty || !pendingRowChanges.isEmpty
            || updatedList.contains { $0.isUpdated }
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

    /// Rows added by ``insertRows(_:count:_:)`` and
    /// ``insertRows(_:count:batchSize:streaming:)``, and deleted by ``deleteRows(_:pages:)``:
    /// written by the next save. The values of a batch come from `configure` only (check
    /// and hook are the save's).
    var pendingRowChanges = RowChanges()

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

    func load(_ object: ManagedObject, _ row: StoreRow) {
        object.values = row.values
        object.snapshot = row.values
        object.version = row.version
        object.faultState = .loaded
        object.awakeFromFetch()
    }

    func materialize(entity: EntityDescription, row: StoreRow) -> ManagedObject {
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

    func members(of owner: ManagedObject, toMany property: PropertyDescription) throws -> [ManagedObject] {
        let inverse = try owner.entity.inverse(of: property)
        guard case .toMany(let destinationName) = property.kind,
            let destination = core.schema.entity(named: destinationName)
        else { return [] }
        return try objects(of: destination, pointingAt: owner, through: inverse)
    }

    /// The objects of `destination` whose to-one `inverse` points at `owner`, unsaved
    /// changes included.
    func objects(
        of destination: EntityDescription, pointingAt owner: ManagedObject, through inverse: PropertyDescription
    )
        throws -> [ManagedObject]
    {
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
        // To-one relationships of other entities that say themselves what deleting their
        // destination does to them (deny is checked at save).
        for link in core.schema.incomingLinks(into: object.entity) where link.rule != .deny {
            let members: [ManagedObject]
            do {
                members = try objects(of: link.source, pointingAt: object, through: link.property)
            } catch {
                recordMisuse(
                    "Could not apply the delete rule of \(link.source.name).\(link.property.name) to \(object.objectID): "
                        + "\(error)")
                continue
            }
            for member in members where !member.pendingDelete {
                if link.rule == .cascade {
                    delete(member)
                } else {
                    member.setValue(.null, atSlot: link.property.slot!, observed: true)
                }
            }
        }
    }
}

@available(*, unavailable)
extension ManagedObjectContext: Sendable {}

/// The contexts whose queue the current thread is running work for.
final class HeldQueues {
    var tags: [ObjectIdentifier] = []

    /// Each thread's, released when the thread ends. A thread-specific key of its own: read at
    /// every `performAndWait`, Foundation's `threadDictionary` bridged its key to an
    /// `NSString` and boxed the value (2 % of `Catalog.search`).
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let created = pthread_key_create(&key) { held in
            if let held { Unmanaged<HeldQueues>.fromOpaque(held).release() }
        }
        precondition(created == 0, "pthread_key_create failed: \(created)")
        return key
    }()

    static var current: HeldQueues {
        if let held = pthread_getspecific(key) { return Unmanaged<HeldQueues>.fromOpaque(held).takeUnretainedValue() }
        let held = HeldQueues()
        pthread_setspecific(key, Unmanaged.passRetained(held).toOpaque())
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
