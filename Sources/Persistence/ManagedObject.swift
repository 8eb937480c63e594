import Foundation

/// The token the persistence layer passes to ``ManagedObject/init(_:)``.
///
/// Only the persistence layer makes one; subclasses never declare
/// initializers of their own (as in Core Data, set defaults in
/// ``ManagedObject/awakeFromInsert()``).
public struct ObjectInitToken {
    let entity: EntityDescription?
    let objectID: ManagedObjectID
    let context: ManagedObjectContext?
    let isPrototype: Bool

    init(prototypeOf type: ManagedObject.Type) {
        entity = nil
        objectID = ManagedObjectID(entityName: type.entityName, rowID: 0)
        context = nil
        isPrototype = true
    }

    init(entity: EntityDescription, objectID: ManagedObjectID, context: ManagedObjectContext?) {
        self.entity = entity
        self.objectID = objectID
        self.context = context
        isPrototype = false
    }
}

/// A change to one property of an object, as observers see it.
public struct PropertyChange: Sendable, Hashable {
    /// The object that changed.
    public let objectID: ManagedObjectID
    /// The property's name.
    public let property: String
}

/// An object of the object graph: one row of an entity's table, living in one
/// ``ManagedObjectContext``.
///
/// Subclass it and declare persistent properties with ``Attribute``,
/// ``ToOne`` and ``ToMany``; override the lifecycle hooks you need:
///
/// ```swift
/// final class Note: ManagedObject {
///     @Attribute(.indexed) var title = ""
///     @Attribute var created = Date.distantPast
///     @Attribute var modified = Date.distantPast
///     @ToOne var folder: Folder?
///
///     override func awakeFromInsert() {
///         setPrimitiveValue(Date(), for: \.created)   // once in the object's life
///     }
///     override func willSave() {
///         if !isDeleted { setPrimitiveValue(Date(), for: \.modified) }   // no second willSave
///     }
/// }
///
/// let note = Note(context: context)   // awakeFromInsert
/// note.title = "Groceries"            // observed: recorded in changedValues()
/// try context.save()                  // willSave → one transaction → didSave
/// ```
///
/// An object belongs to the context it was inserted or fetched in and must
/// only be used on that context's queue; pass its ``objectID`` to reach the
/// same row from another context.
///
/// - Important: Do not declare designated initializers in subclasses.
open class ManagedObject: Hashable, CustomStringConvertible {
    /// The object's permanent identity.
    public let objectID: ManagedObjectID
    /// The entity this object belongs to.
    let entity: EntityDescription!
    /// The context the object lives in; `nil` after the context was reset,
    /// the object's insertion was rolled back or its deletion was saved.
    public internal(set) weak var managedObjectContext: ManagedObjectContext?

    /// Current values, by slot; empty while the object is a fault.
    var values: [StoreValue]
    /// The values last committed to (or read from) the parent store, by slot;
    /// empty for an inserted object and for a fault.
    var snapshot: [StoreValue]
    /// The row version `snapshot` was read at (optimistic locking).
    var version: Int64 = 0
    var faultState: FaultState
    var pendingInsert = false
    var pendingDelete = false
    var pendingUpdate = false
    /// The save pass in which `willSave` last ran (0: none in this save).
    var willSavePass = 0
    /// For a fault of a `fetchBatchSize` fetch: the objects that load with it.
    var faultBatch: FaultBatch?
    /// `saveEffects` while the object's context is saving.
    var currentSaveEffects: SaveEffects?
    let isPrototype: Bool
    /// In a prototype: the marker a wrapper's getter tags itself with.
    var probeMarker: Int32 = 0
    private var observers: [Int: (PropertyChange) -> Void] = [:]
    private var nextObserver = 0

    enum FaultState {
        case loaded
        case fault
        /// The row no longer exists; values are the entity's defaults.
        case unfulfillable
    }

    /// Called by the persistence layer only; see ``ObjectInitToken``.
    public required init(_ token: ObjectInitToken) {
        objectID = token.objectID
        entity = token.entity
        managedObjectContext = token.context
        isPrototype = token.isPrototype
        values = token.entity?.defaultValues ?? []
        snapshot = []
        faultState = .loaded
    }

    /// Inserts a new object into `context`, with its declared default values,
    /// then calls ``awakeFromInsert()``.
    ///
    /// The object gets a permanent ``objectID`` at once. It is written to the
    /// store by the next ``ManagedObjectContext/save()``.
    public convenience init(context: ManagedObjectContext) {
        let entity = context.entity(for: Self.self)
        self.init(ObjectInitToken(entity: entity, objectID: context.newObjectID(for: entity), context: context))
        context.registerInserted(self)
        awakeFromInsert()
    }

    /// The entity's name, which is also its table's name. Defaults to the
    /// class name; override to keep a table name when renaming a class.
    open class var entityName: String { String(describing: self) }

    /// Indexes over several properties that the store keeps for the entity, besides the
    /// one-property indexes its attributes declare (``AttributeOptions/indexed``). None by
    /// default; override to add some:
    ///
    /// ```swift
    /// override class var compositeIndexes: [CompositeIndex] {
    ///     [CompositeIndex(\Label.text, \Label.note, unique: true)]
    /// }
    /// ```
    ///
    /// An index is created when the store opens and lacks it (a unique one fails the open
    /// when rows already break it).
    open class var compositeIndexes: [CompositeIndex] { [] }

    /// Counts the store keeps of the entity's rows, exact in every transaction that writes
    /// them (``Tally``). None by default; override to declare some. Read them with
    /// ``PersistentContainer/tally(_:of:)``.
    open class var tallies: [Tally] { [] }

    /// The full-text index the store keeps of the entity's rows (``SearchIndex``), in every
    /// transaction that writes them. None by default; override to declare one, and query it
    /// with ``FetchPredicate/matches(_:)``.
    open class var searchIndex: SearchIndex? { nil }

    /// The description of this entity, built once from its property wrappers.
    static var entityDescription: EntityDescription { EntityRegistry.description(for: self) }

    /// The entity's to-one relationships, as its property wrappers declare them: for a
    /// program that checks another module's entities before it opens a store with them
    /// (that a link to one of its own entities says what deleting the destination does).
    public class var toOneRelationships: [ToOneRelationship] {
        entityDescription.properties.compactMap { property in
            guard case .toOne(let destination) = property.kind else { return nil }
            return ToOneRelationship(
                name: property.name, destination: destination, onDestinationDelete: property.destinationDeleteRule)
        }
    }

    // MARK: - Lifecycle hooks

    /// Called once in the object's whole life, when it is first inserted.
    /// Set creation dates and computed defaults here, with primitive setters.
    open func awakeFromInsert() {}

    /// Called each time the object is materialised from its parent store.
    /// Compute transient values here; never change relationships.
    open func awakeFromFetch() {}

    /// Called before the object's changes are written, for every inserted,
    /// updated or deleted object of a save. Check ``isDeleted`` to plan
    /// clean-up through ``saveEffects``. Changes made with primitive setters
    /// do not call `willSave` again; changes made with observed setters do.
    open func willSave() {}

    /// Called after the object's changes were committed.
    open func didSave() {}

    /// Called when the object is deleted (by `delete(_:)` or a cascade),
    /// before any save. Cancel work in progress here; do not remove files:
    /// the deletion may still be rolled back.
    open func prepareForDeletion() {}

    /// Called before the context drops the object's values (refresh, reset,
    /// after its deletion was saved).
    open func willTurnIntoFault() {}

    /// Called after the context dropped the object's values. Release
    /// transient resources here.
    open func didTurnIntoFault() {}

    /// Called when the context brings the object back to an earlier state:
    /// a rolled-back deletion (`.undoDeletion`), rolled-back changes
    /// (`.rollback`), values re-read from the store (`.refresh`). Restart
    /// here what ``prepareForDeletion()`` stopped.
    open func awakeFromSnapshotEvents(_ events: SnapshotEvents) {}

    /// Throw to refuse saving this newly inserted object.
    open func validateForInsert() throws {}

    /// Throw to refuse saving the changes of this object.
    open func validateForUpdate() throws {}

    /// Throw to refuse saving the deletion of this object.
    open func validateForDelete() throws {}

    /// Called inside the transaction of a ``ManagedObjectContext/batchDelete(_:)``,
    /// or of a save that deletes rows without objects
    /// (``ManagedObjectContext/deleteRows(_:pages:)``, and members a save's deletions
    /// reach in the store), with a snapshot of rows of this entity it deletes
    /// (cascades included), a page at a time, before they are deleted. The
    /// saving context's `userInfo` is `effects.userInfo`.
    ///
    /// Batch deletes do not materialise objects, so ``willSave()`` and
    /// ``prepareForDeletion()`` do not run for them: override this to do, for
    /// a whole batch, what those hooks do for one object. Rows inserted
    /// through `effects` are written in the same transaction; its
    /// `afterCommit` work runs only if the batch delete commits.
    open class func willBatchDelete(_ rows: [ObjectSnapshot], effects: SaveEffects) throws {}

    /// Called in a save with a snapshot of the rows of this entity that one call of
    /// ``ManagedObjectContext/insertRows(_:count:_:)`` added, after the objects' `willSave`,
    /// inside the store's transaction as the save writes them.
    ///
    /// No object stands for these rows, so ``validateForInsert()`` and ``willSave()``
    /// do not run for them: override this to do, for all of them at once, what those
    /// hooks do for one object — throw to refuse the save, or plan work through
    /// `effects` (a ``SaveEffects/beforeCommit(_:)`` check, rows, `afterCommit` work).
    ///
    /// For rows of ``ManagedObjectContext/insertRows(_:count:batchSize:streaming:)`` it is
    /// called once per batch, with that batch's rows, as the save makes them. Either way it
    /// runs on the store's writer, in the order the rows were added. Do not fetch through `context` there: a fetch
    /// reads the store outside the transaction, and sees neither the save's writes nor the
    /// rows written so far (a ``SaveEffects/beforeCommit(_:)`` check reads the transaction).
    /// Work planned through `effects` comes after the last batch is written. The hook is
    /// called again for the same rows when a failed save is tried again, or a save restarts.
    open class func willInsertRows(
        _ rows: [ObjectSnapshot], in context: ManagedObjectContext, effects: SaveEffects
    ) throws {}

    // MARK: - State

    /// Whether the object was inserted and that insertion is not saved yet.
    public var isInserted: Bool { pendingInsert }
    /// Whether the object was deleted and that deletion is not saved yet.
    public var isDeleted: Bool { pendingDelete }
    /// Whether the object has unsaved changes made through observed setters.
    public var isUpdated: Bool { pendingUpdate && !pendingInsert && !pendingDelete }
    /// Whether the object will be written by the next save.
    public var hasChanges: Bool { pendingInsert || pendingDelete || pendingUpdate }
    /// Whether the object's values are not loaded.
    public var isFault: Bool { faultState == .fault }

    /// While the object's context is saving (in ``willSave()`` and the
    /// `validateFor…` hooks): the save's side effects. `nil` otherwise.
    public var saveEffects: SaveEffects? { currentSaveEffects }

    /// The values changed since the last save, by property name. Includes
    /// changes made with primitive setters.
    public func changedValues() -> [String: StoreValue] {
        fireFaultIfNeeded()
        var changes: [String: StoreValue] = [:]
        for property in entity.storedProperties {
            let slot = property.slot!
            if snapshot.isEmpty || snapshot[slot] != values[slot] { changes[property.name] = values[slot] }
        }
        return changes
    }

    /// The committed values of all stored properties, by name; empty for an
    /// inserted object.
    public func committedValues() -> [String: StoreValue] {
        fireFaultIfNeeded()
        guard !snapshot.isEmpty else { return [:] }
        var result: [String: StoreValue] = [:]
        for property in entity.storedProperties { result[property.name] = snapshot[property.slot!] }
        return result
    }

    // MARK: - Observation

    /// Calls `handler` after each change made through an observed setter.
    /// Primitive setters do not notify. Keep the returned token: the
    /// observation ends when ``ChangeObservation/cancel()`` is called.
    public func addChangeObserver(_ handler: @escaping (PropertyChange) -> Void) -> ChangeObservation {
        let key = nextObserver
        nextObserver += 1
        observers[key] = handler
        return ChangeObservation { [weak self] in self?.observers[key] = nil }
    }

    // MARK: - Storage

    func fireFaultIfNeeded() {
        guard faultState == .fault else { return }
        if let context = managedObjectContext {
            if let batch = faultBatch {
                faultBatch = nil
                context.fulfillBatch(batch, entity: entity)
                if faultState == .loaded { return }
            }
            context.fulfillFault(self)
        } else {
            values = entity.defaultValues
            faultState = .unfulfillable
        }
    }

    @inline(__always)
    func value(atSlot slot: Int) -> StoreValue {
        fireFaultIfNeeded()
        return values[slot]
    }

    func setValue(_ value: StoreValue, atSlot slot: Int, observed: Bool) {
        fireFaultIfNeeded()
        values[slot] = value
        guard observed else { return }
        managedObjectContext?.objectDidChange(self)
        if !observers.isEmpty {
            let change = PropertyChange(objectID: objectID, property: entity.storedProperties[slot].name)
            for handler in observers.values { handler(change) }
        }
    }

    // MARK: - Hashable, CustomStringConvertible

    public static func == (lhs: ManagedObject, rhs: ManagedObject) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    open var description: String { objectID.description }
}

/// An observation made with ``ManagedObject/addChangeObserver(_:)``.
public final class ChangeObservation {
    private var onCancel: (() -> Void)?
    init(_ onCancel: @escaping () -> Void) { self.onCancel = onCancel }
    /// Stops the observation.
    public func cancel() {
        onCancel?()
        onCancel = nil
    }
}

/// Key-path accessors of managed objects. Every ``ManagedObject`` has them.
public protocol ManagedObjectAccessors: ManagedObject {}

extension ManagedObject: ManagedObjectAccessors {}

extension ManagedObjectAccessors {
    /// The value of an attribute, read without any side effect.
    public func primitiveValue<Value: AttributeValue>(for keyPath: KeyPath<Self, Value>) -> Value {
        let property = entity.propertyOrDie(for: keyPath)
        return Value(storeValue: value(atSlot: property.slot!)) ?? Value(storeValue: property.defaultValue)!
    }

    /// Changes an attribute without notifying observers and without marking
    /// the object as updated. The value is still written when the object
    /// saves (because it is inserted, deleted or changed otherwise). Use it in
    /// ``ManagedObject/awakeFromInsert()`` and ``ManagedObject/willSave()``.
    public func setPrimitiveValue<Value: AttributeValue>(_ value: Value, for keyPath: KeyPath<Self, Value>) {
        setValue(value.storeValue, atSlot: entity.slotOrDie(for: keyPath), observed: false)
    }

    /// Changes a to-one relationship without notifying observers and without
    /// marking the object as updated.
    public func setPrimitiveValue<Destination: ManagedObject>(
        _ value: Destination?, for keyPath: KeyPath<Self, Destination?>
    ) {
        let slot = entity.slotOrDie(for: keyPath)
        setValue(value.map { .integer($0.objectID.rowID) } ?? .null, atSlot: slot, observed: false)
    }

    /// The value of an attribute as last committed; `nil` for an inserted object.
    public func committedValue<Value: AttributeValue>(for keyPath: KeyPath<Self, Value>) -> Value? {
        fireFaultIfNeeded()
        guard !snapshot.isEmpty else { return nil }
        return Value(storeValue: snapshot[entity.slotOrDie(for: keyPath)])
    }

    /// The committed values of the given properties (`committedValues(forKeys:)`
    /// of Core Data, with key paths); empty for an inserted object.
    public func committedValues(forKeys keyPaths: [PartialKeyPath<Self>]) -> [PartialKeyPath<Self>: StoreValue] {
        fireFaultIfNeeded()
        guard !snapshot.isEmpty else { return [:] }
        var result: [PartialKeyPath<Self>: StoreValue] = [:]
        for keyPath in keyPaths {
            if let slot = entity.propertyOrDie(for: keyPath).slot { result[keyPath] = snapshot[slot] }
        }
        return result
    }

    /// Whether the property at `keyPath` differs from its committed value.
    public func hasChangedValue(for keyPath: PartialKeyPath<Self>) -> Bool {
        fireFaultIfNeeded()
        guard let slot = entity.propertyOrDie(for: keyPath).slot else { return false }
        return snapshot.isEmpty || snapshot[slot] != values[slot]
    }
}

/// Objects belong to one context and its queue: pass ``ManagedObject/objectID`` instead.
@available(*, unavailable)
extension ManagedObject: Sendable {}

/// An index over several stored properties of an entity, in order
/// (``ManagedObject/compositeIndexes``): a lookup by the first, or by the first few,
/// uses it.
public struct CompositeIndex {
    /// The properties, as key paths of the entity (attributes or to-one relationships);
    /// none for an index of row IDs (``init(rowIDsWhere:is:)``).
    let keyPaths: [AnyKeyPath]
    /// Whether no two rows may hold the same values in all of them.
    let isUnique: Bool
    /// For a partial index: the attribute and the value of the only rows it holds.
    let filter: (keyPath: AnyKeyPath, value: StoreValue)?

    /// An index over `keyPaths`, in that order; `unique` when no two rows may share
    /// the values of all of them.
    public init<Root: ManagedObject>(_ keyPaths: PartialKeyPath<Root>..., unique: Bool = false) {
        self.keyPaths = keyPaths
        isUnique = unique
        filter = nil
    }

    /// A partial index over `keyPaths`, in that order, that holds only the rows whose
    /// `filter` is `value`: writes of the other rows never touch it. A fetch uses it when
    /// its predicate requires `filter == value` (``FetchPredicate``'s `==` with that value)
    /// besides a lookup by the first of `keyPaths`; a fetch without that condition does
    /// not, so it scans or uses another index.
    ///
    /// ```swift
    /// override class var compositeIndexes: [CompositeIndex] {
    ///     [CompositeIndex(\Item.digest, where: \Item.state, is: .stored)]
    /// }
    /// ```
    public init<Root: ManagedObject, Filter: AttributeValue>(
        _ keyPaths: PartialKeyPath<Root>..., where filter: KeyPath<Root, Filter>, is value: Filter
    ) {
        self.keyPaths = keyPaths
        isUnique = false
        self.filter = (filter, value.storeValue)
    }

    /// A partial index of the row IDs of the rows whose `filter` is `value`: a fetch that
    /// requires `filter == value` and reads in ID order (the default order, as a queue's
    /// oldest first) walks only those rows, however many others the table holds. Without
    /// it such a fetch walks the rows in ID order and steps over every other one, or reads
    /// all of that value's rows to sort them.
    ///
    /// ```swift
    /// override class var compositeIndexes: [CompositeIndex] {
    ///     [CompositeIndex(rowIDsWhere: \Task.state, is: .waiting)]
    /// }
    /// ```
    public init<Root: ManagedObject, Filter: AttributeValue>(
        rowIDsWhere filter: KeyPath<Root, Filter>, is value: Filter
    ) {
        keyPaths = []
        isUnique = false
        self.filter = (filter, value.storeValue)
    }
}
