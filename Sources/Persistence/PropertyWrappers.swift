/// How a property wrapper describes itself to the entity description.
struct PropertyDraft: Sendable {
    var kind: PropertyDescription.Kind
    var isOptional: Bool
    var defaultValue: StoreValue
    var isIndexed = false
    var isUnique = false
    var deleteRule: DeleteRule = .nullify
    /// For a to-one relationship: what deleting its destination does to the object.
    var destinationDeleteRule: DeleteRule?
    var inverseResolver: (@Sendable () -> PropertyDescription?)?
    /// The Swift type of the wrapped property, to refuse key paths that only pass through it.
    var valueType: ObjectIdentifier = ObjectIdentifier(Void.self)

    var isToMany: Bool {
        if case .toMany = kind { return true }
        return false
    }

    func description(name: String, slot: Int?) -> PropertyDescription {
        PropertyDescription(
            name: name, kind: kind, isOptional: isOptional, defaultValue: defaultValue, isIndexed: isIndexed,
            isUnique: isUnique, deleteRule: deleteRule, destinationDeleteRule: destinationDeleteRule, slot: slot)
    }
}

/// The persistence layer's property wrappers.
protocol PersistentPropertyWrapper {
    /// Tags a prototype's wrapper so reflection can find which one a key path reached.
    var marker: Int32 { get set }
    var draft: PropertyDraft { get }
}

/// Options of an ``Attribute``.
public struct AttributeOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// The column gets an index (fast fetches by this attribute).
    public static let indexed = AttributeOptions(rawValue: 1)
    /// No two rows may have the same value; a save that would break this fails.
    public static let unique = AttributeOptions(rawValue: 2)
}

/// A persistent attribute of a ``ManagedObject`` subclass.
///
/// ```swift
/// final class Note: ManagedObject {
///     @Attribute(.indexed) var title = ""      // a default is required…
///     @Attribute var body: String?             // …except for optionals
///     @Attribute(.unique) var slug = UUID()
/// }
/// ```
///
/// Setting the property (`note.title = "x"`) is an observed change: it marks
/// the object as updated and notifies observers. Use
/// ``ManagedObjectAccessors/setPrimitiveValue(_:for:)-(Value,_)`` for a change
/// that does neither.
@propertyWrapper
public struct Attribute<Value: AttributeValue>: PersistentPropertyWrapper {
    let initialValue: Value
    let options: AttributeOptions
    var marker: Int32 = 0

    /// Declares an attribute whose new objects start with `wrappedValue`.
    public init(wrappedValue: Value, _ options: AttributeOptions = []) {
        initialValue = wrappedValue
        self.options = options
    }

    /// Declares an optional attribute whose new objects start with `nil`.
    public init(_ options: AttributeOptions = []) where Value: ExpressibleByNilLiteral {
        initialValue = nil
        self.options = options
    }

    var draft: PropertyDraft {
        PropertyDraft(
            kind: .attribute(Value.attributeType), isOptional: Value.isOptional, defaultValue: initialValue.storeValue,
            isIndexed: options.contains(.indexed), isUnique: options.contains(.unique),
            valueType: ObjectIdentifier(Value.self))
    }

    @available(*, unavailable, message: "@Attribute can only be used in a ManagedObject subclass")
    public var wrappedValue: Value {
        get { fatalError() }
        set { fatalError() }
    }

    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Value {
        get {
            if object.isPrototype {
                object[keyPath: storageKeyPath].marker = object.probeMarker
                return object[keyPath: storageKeyPath].initialValue
            }
            let slot = object.entity.slot(forStorage: storageKeyPath)
            return Value(storeValue: object.value(atSlot: slot)) ?? object[keyPath: storageKeyPath].initialValue
        }
        set {
            guard !object.isPrototype else { return }
            object.setValue(newValue.storeValue, atSlot: object.entity.slot(forStorage: storageKeyPath), observed: true)
        }
    }
}

/// A to-one relationship of a ``ManagedObject`` subclass: a stored reference
/// to another object.
///
/// ```swift
/// final class Note: ManagedObject {
///     @ToOne var folder: Folder?                          // nullify (default)
///     @ToOne(deleteRule: .cascade) var attachment: Blob?  // deleting the note deletes the blob
/// }
/// ```
///
/// The destination must live in the same context. A to-many relationship on
/// the other side (``ToMany``) names this one as its inverse, and its delete rule
/// says what deleting the destination does to this object.
///
/// When the destination's type cannot declare that to-many (it belongs to another
/// module, say), the to-one says it itself with `onDestinationDelete`:
///
/// ```swift
/// final class Review: ManagedObject {
///     @ToOne(onDestinationDelete: .cascade) var note: Note?  // deleting the note deletes its reviews
/// }
/// ```
@propertyWrapper
public struct ToOne<Destination: ManagedObject>: PersistentPropertyWrapper {
    let deleteRule: DeleteRule
    let destinationDeleteRule: DeleteRule?
    var marker: Int32 = 0

    /// Declares a to-one relationship; `deleteRule` says what deleting this
    /// object does to the destination.
    ///
    /// `onDestinationDelete` says what deleting the destination does to this object,
    /// for a relationship that no ``ToMany`` names as its inverse: ``DeleteRule/nullify``
    /// clears the link, ``DeleteRule/cascade`` deletes this object too (its
    /// `prepareForDeletion` runs), ``DeleteRule/deny`` refuses the destination's deletion
    /// while this object points at it. `nil` (the default) does nothing: the link is left
    /// pointing at a deleted object. A schema refuses both an inverse and this rule.
    public init(deleteRule: DeleteRule = .nullify, onDestinationDelete: DeleteRule? = nil) {
        self.deleteRule = deleteRule
        destinationDeleteRule = onDestinationDelete
    }

    var draft: PropertyDraft {
        PropertyDraft(
            kind: .toOne(destination: Destination.entityName), isOptional: true, defaultValue: .null,
            deleteRule: deleteRule, destinationDeleteRule: destinationDeleteRule,
            valueType: ObjectIdentifier(Destination?.self))
    }

    @available(*, unavailable, message: "@ToOne can only be used in a ManagedObject subclass")
    public var wrappedValue: Destination? {
        get { fatalError() }
        set { fatalError() }
    }

    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, Destination?>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> Destination? {
        get {
            if object.isPrototype {
                object[keyPath: storageKeyPath].marker = object.probeMarker
                return nil
            }
            let slot = object.entity.slot(forStorage: storageKeyPath)
            guard case .integer(let row) = object.value(atSlot: slot), let context = object.managedObjectContext else {
                return nil
            }
            let id = ManagedObjectID(entityName: Destination.entityName, rowID: row)
            return context.object(with: id, as: Destination.self)
        }
        set {
            guard !object.isPrototype else { return }
            let slot = object.entity.slot(forStorage: storageKeyPath)
            if let newValue, newValue.managedObjectContext !== object.managedObjectContext {
                object.managedObjectContext?.recordMisuse(
                    "\(object.objectID).\(object.entity.storedProperties[slot].name) was set to \(newValue.objectID), "
                        + "which lives in another context; pass its objectID and fetch it in this context")
                return
            }
            object.setValue(newValue.map { .integer($0.objectID.rowID) } ?? .null, atSlot: slot, observed: true)
        }
    }
}

/// A to-many relationship of a ``ManagedObject`` subclass: the objects whose
/// ``ToOne`` inverse points at this one.
///
/// ```swift
/// final class Folder: ManagedObject {
///     @ToMany(inverse: \Note.folder, deleteRule: .cascade) var notes: [Note]
/// }
/// ```
///
/// Reading it fetches the members in the object's context, unsaved changes
/// included, ordered by row ID. Setting it re-points the inverses: members
/// left out get `nil`, new members get this object.
@propertyWrapper
public struct ToMany<Destination: ManagedObject>: PersistentPropertyWrapper {
    let inverse: AnyKeyPath
    let deleteRule: DeleteRule
    var marker: Int32 = 0

    /// Declares a to-many relationship whose members are the `Destination`
    /// objects whose `inverse` is this object. `deleteRule` says what deleting
    /// this object does to them.
    public init<Owner: ManagedObject>(inverse: KeyPath<Destination, Owner?>, deleteRule: DeleteRule = .nullify) {
        self.inverse = inverse
        self.deleteRule = deleteRule
    }

    var draft: PropertyDraft {
        let inverse = UncheckedBox(inverse)
        return PropertyDraft(
            kind: .toMany(destination: Destination.entityName), isOptional: true, defaultValue: .null,
            deleteRule: deleteRule, inverseResolver: { Destination.entityDescription.property(for: inverse.value) },
            valueType: ObjectIdentifier([Destination].self))
    }

    @available(*, unavailable, message: "@ToMany can only be used in a ManagedObject subclass")
    public var wrappedValue: [Destination] {
        get { fatalError() }
        set { fatalError() }
    }

    public static subscript<Object: ManagedObject>(
        _enclosingInstance object: Object,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<Object, [Destination]>,
        storage storageKeyPath: ReferenceWritableKeyPath<Object, Self>
    ) -> [Destination] {
        get {
            if object.isPrototype {
                object[keyPath: storageKeyPath].marker = object.probeMarker
                return []
            }
            guard let context = object.managedObjectContext else { return [] }
            let property = object.entity.propertyOrDie(for: wrappedKeyPath)
            return context.members(of: object, toMany: property, as: Destination.self)
        }
        set {
            guard !object.isPrototype, let context = object.managedObjectContext else { return }
            let property = object.entity.propertyOrDie(for: wrappedKeyPath)
            context.setMembers(newValue, of: object, toMany: property)
        }
    }
}
