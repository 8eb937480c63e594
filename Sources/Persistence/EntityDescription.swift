import Foundation
import Locking

/// A to-one relationship of an entity (``ManagedObject/toOneRelationships``).
public struct ToOneRelationship: Sendable, Hashable {
    /// The property's name.
    public let name: String
    /// The name of the entity it points at.
    public let destination: String
    /// What deleting the destination does to the object that points at it (``ToOne``'s
    /// `onDestinationDelete`); `nil` when the relationship does not say.
    public let onDestinationDelete: DeleteRule?
}

/// What happens to the objects on the other side of a relationship when the
/// object that owns it is deleted.
public enum DeleteRule: String, Sendable, Hashable {
    /// Leave the destination objects; clear their link to the deleted object.
    case nullify
    /// Delete the destination objects too (their `prepareForDeletion` runs).
    case cascade
    /// Refuse to save the deletion while the relationship is not empty.
    case deny
}

/// One persistent property of an entity: an attribute, a to-one relationship
/// (a stored reference) or a to-many relationship (the inverse of a to-one).
package struct PropertyDescription: Sendable, Hashable {
    /// What a property holds.
    package enum Kind: Sendable, Hashable {
        /// A value of this type, in the entity's own row.
        case attribute(AttributeType)
        /// A reference to one object of the entity named `destination`, stored in this row.
        case toOne(destination: String)
        /// The objects of `destination` whose to-one inverse points at this one; nothing
        /// is stored on this side.
        case toMany(destination: String)
    }

    /// The Swift property name; also the column name.
    package let name: String
    /// Attribute, to-one or to-many.
    package let kind: Kind
    /// Whether the property may be empty (`nil`).
    package let isOptional: Bool
    /// The value a newly inserted object starts with.
    package let defaultValue: StoreValue
    /// Whether the store keeps an index on the property (``AttributeOptions/indexed``).
    package let isIndexed: Bool
    /// Whether no two rows may hold the same value (``AttributeOptions/unique``).
    package let isUnique: Bool
    /// What deleting an object does to the objects this relationship reaches.
    package let deleteRule: DeleteRule
    /// For a to-one relationship that no to-many names as its inverse: what deleting its
    /// destination does to the object that points at it (``ToOne``'s
    /// `onDestinationDelete`); `nil` when nothing is done.
    package let destinationDeleteRule: DeleteRule?
    /// The position of the value in an object's storage; `nil` for to-many
    /// relationships, which store nothing on this side.
    package let slot: Int?

    /// Whether this property is an attribute.
    package var isAttribute: Bool {
        if case .attribute = kind { return true }
        return false
    }
}

/// The description of an entity: a ``ManagedObject`` subclass and its
/// persistent properties, built once per type from its property wrappers.
///
/// Built by ``ManagedObject/entityDescription``; internal to the module: a program
/// declares entities with property wrappers and never reads their description.
/// The entity's table is named ``name``; each attribute and to-one relationship
/// is a column; every table also has `id` (the row ID) and `_version` (the
/// optimistic-locking counter).
package final class EntityDescription: Sendable, CustomStringConvertible {
    /// The entity name, which is also the table name.
    package let name: String
    /// The `ManagedObject` subclass.
    package let objectType: ManagedObject.Type
    /// The properties in declaration order (superclass properties last).
    package let properties: [PropertyDescription]
    /// The properties that occupy a storage slot, indexed by slot.
    package let storedProperties: [PropertyDescription]
    let propertyByName: [String: PropertyDescription]
    let defaultValues: [StoreValue]
    /// The Swift type of each property, by name.
    private let valueTypes: [String: ObjectIdentifier]
    /// The inverses of to-many relationships, resolved on first use (the
    /// destination's description may not exist yet when this one is built).
    private let inverseResolvers: [String: @Sendable () -> PropertyDescription?]
    private let inverses = Locked<[String: PropertyDescription]>([:])
    /// ``resolvedSearchIndex()``, once resolved (every search fetch asks for it).
    let resolvedSearch = Locked<Result<ResolvedSearchIndex?, PersistenceError>?>(nil)

    /// One prototype instance, probed to map key paths to properties.
    private let probe: Locked<Probe>
    /// Key paths resolved so far, by object identity: the compiler passes the
    /// same key path object at each use, so no key path is hashed on the hot
    /// path. Each entry retains its key path, so an identity is never reused.
    private let storageSlots = SlotTable(limit: EntityDescription.cacheLimit)
    private let wrappedProperties = Locked<[ObjectIdentifier: (AnyKeyPath, PropertyDescription)]>([:])
    /// Slots by key path, for the hot accessors (rows, snapshots, primitive values): a
    /// lookup that copies no ``PropertyDescription`` and takes no lock. Holds its key paths,
    /// so that an identifier is never reused for another.
    private let keyPathSlots = SlotTable(limit: EntityDescription.cacheLimit)
    /// Key paths made at run time are new objects each time; stop caching past this.
    private static let cacheLimit = 4096

    private struct Probe {
        let prototype: ManagedObject
        var nextMarker: Int32 = 1
    }

    package var description: String { "entity \(name)" }

    /// The properties that occupy a slot (attributes and to-one relationships).
    var attributes: [PropertyDescription] { properties.filter(\.isAttribute) }

    /// The property named `name`, if any.
    package func property(named name: String) -> PropertyDescription? { propertyByName[name] }

    /// The columns of the entity's ``ManagedObject/compositeIndexes``.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` when a key path is not a stored
    ///   property of the entity (a to-many relationship, a plain property).
    package func compositeIndexColumns() throws -> [(columns: [String], isUnique: Bool)] {
        try compositeIndexDescriptions().map { ($0.columns, $0.isUnique) }
    }

    /// The entity's ``ManagedObject/compositeIndexes``: their columns (`id` for an index of
    /// row IDs), and for a partial index the column and value of the rows it holds.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` when a key path is not a stored
    ///   property of the entity (a to-many relationship, a plain property).
    package func compositeIndexDescriptions() throws -> [(
        columns: [String], isUnique: Bool, filter: (column: String, value: StoreValue)?
    )] {
        try objectType.compositeIndexes.map { index in
            func column(_ keyPath: AnyKeyPath) throws -> String {
                guard let property = property(for: keyPath), property.slot != nil else {
                    throw PersistenceError(
                        .misuse,
                        "An index of \(name) names \(keyPath), which is not an attribute or to-one relationship of it")
                }
                return property.name
            }
            let columns = index.keyPaths.isEmpty ? ["id"] : try index.keyPaths.map(column)
            let filter = try index.filter.map { (column: try column($0.keyPath), value: $0.value) }
            return (columns, index.isUnique, filter)
        }
    }

    /// The name of the store's index of `property` (indexed, unique or a to-one
    /// relationship), the same in every store.
    package func indexName(of property: PropertyDescription) -> String {
        "\(name)_\(property.name)_\(property.isUnique ? "unique" : "index")"
    }

    /// The name of the store's index for a ``ManagedObject/compositeIndexes`` entry: named
    /// by its columns, and for a partial index by its filter's column too.
    package func indexName(columns: [String], isUnique: Bool, filterColumn: String?) -> String {
        let partial = filterColumn.map { "_where_\($0)" } ?? ""
        return "\(name)_\(columns.joined(separator: "_"))\(partial)_\(isUnique ? "unique" : "index")"
    }

    /// The names of every index the stores make for this entity.
    package func indexNames() throws -> [String] {
        let single = storedProperties.filter { $0.isIndexed || $0.isUnique || !$0.isAttribute }.map(indexName(of:))
        let composite = try compositeIndexDescriptions().map {
            indexName(columns: $0.columns, isUnique: $0.isUnique, filterColumn: $0.filter?.column)
        }
        return single + composite
    }

    init(type: ManagedObject.Type) throws {
        name = type.entityName
        objectType = type
        let prototype = type.init(ObjectInitToken(prototypeOf: type))
        var drafts: [(label: String, property: any PersistentPropertyWrapper)] = []
        var mirror: Mirror? = Mirror(reflecting: prototype)
        while let m = mirror, m.subjectType != ManagedObject.self {
            for child in m.children {
                guard let label = child.label, let wrapper = child.value as? any PersistentPropertyWrapper else {
                    continue
                }
                guard label.hasPrefix("_") else { continue }
                drafts.append((String(label.dropFirst()), wrapper))
            }
            mirror = m.superclassMirror
        }
        var properties: [PropertyDescription] = []
        var stored: [PropertyDescription] = []
        var resolvers: [String: @Sendable () -> PropertyDescription?] = [:]
        var types: [String: ObjectIdentifier] = [:]
        for (label, wrapper) in drafts {
            guard label != "id", !label.hasPrefix("_") else {
                throw PersistenceError(
                    .misuse, "\(type.entityName).\(label): the names 'id' and '_…' are reserved for the store")
            }
            let isToMany = wrapper.draft.isToMany
            types[label] = wrapper.draft.valueType
            let property = wrapper.draft.description(name: label, slot: isToMany ? nil : stored.count)
            if isToMany {
                resolvers[label] = wrapper.draft.inverseResolver
            } else {
                stored.append(property)
            }
            properties.append(property)
        }
        self.properties = properties
        storedProperties = stored
        propertyByName = Dictionary(properties.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        defaultValues = stored.map(\.defaultValue)
        inverseResolvers = resolvers
        valueTypes = types
        probe = Locked(Probe(prototype: prototype))
    }

    /// The storage slot of the wrapper at `storage` in objects of this entity.
    ///
    /// Resolved once per key path: the prototype's wrapper is tagged with a
    /// marker and found again by reflection; afterwards a dictionary lookup.
    func slot<Object: ManagedObject, Wrapper: PersistentPropertyWrapper>(
        forStorage storage: ReferenceWritableKeyPath<Object, Wrapper>
    ) -> Int {
        if let slot = storageSlots.slot(for: storage) { return slot }
        let name: String? = probe.withLock { probe in
            guard let prototype = probe.prototype as? Object else { return nil }
            let marker = probe.nextMarker
            probe.nextMarker += 1
            prototype[keyPath: storage].marker = marker
            return Self.label(ofWrapperMarked: marker, in: prototype)
        }
        guard let name, let slot = propertyByName[name]?.slot else {
            preconditionFailure("\(storage) is not a stored persistent property of \(self.name)")
        }
        storageSlots.insert(slot, for: storage)
        return slot
    }

    /// The property a key path such as `\Note.title` names, or `nil` when the
    /// key path does not name a persistent property of this entity.
    func property(for keyPath: AnyKeyPath) -> PropertyDescription? {
        let key = ObjectIdentifier(keyPath)
        if let property = wrappedProperties.withLock({ $0[key]?.1 }) { return property }
        let name: String? = probe.withLock { probe in
            let prototype = probe.prototype
            let marker = probe.nextMarker
            probe.nextMarker += 1
            // In a prototype, a wrapper's getter tags itself with `probeMarker`.
            prototype.probeMarker = marker
            defer { prototype.probeMarker = 0 }
            guard prototype[keyPath: keyPath] != nil else { return nil }
            return Self.label(ofWrapperMarked: marker, in: prototype)
        }
        // `\Note.folder?.name` reaches the folder's wrapper too: the types tell them apart.
        guard let name, let found = propertyByName[name],
            valueTypes[name] == ObjectIdentifier(type(of: keyPath).valueType)
        else { return nil }
        wrappedProperties.withLock { if $0.count < Self.cacheLimit { $0[key] = (keyPath, found) } }
        return found
    }

    private static func label(ofWrapperMarked marker: Int32, in prototype: ManagedObject) -> String? {
        var mirror: Mirror? = Mirror(reflecting: prototype)
        while let m = mirror {
            for child in m.children {
                if let w = child.value as? any PersistentPropertyWrapper, w.marker == marker, let label = child.label {
                    return String(label.dropFirst())
                }
            }
            mirror = m.superclassMirror
        }
        return nil
    }

    /// The to-one property of the destination entity that is the inverse of
    /// the to-many relationship `toMany` of this entity.
    package func inverse(of toMany: PropertyDescription) throws(PersistenceError) -> PropertyDescription {
        if let found = inverses.withLock({ $0[toMany.name] }) { return found }
        guard let resolver = inverseResolvers[toMany.name], let found = resolver(), found.slot != nil else {
            throw PersistenceError(
                .misuse, "\(name).\(toMany.name): its inverse is not a @ToOne relationship of the destination entity")
        }
        inverses.withLock { $0[toMany.name] = found }
        return found
    }

    /// The storage slot of the property `keyPath` names: `nil` when it names no persistent
    /// property, or a to-many relationship (which stores nothing on this side).
    func slot(for keyPath: AnyKeyPath) -> Int? {
        if let slot = keyPathSlots.slot(for: keyPath) { return slot }
        guard let slot = property(for: keyPath)?.slot else { return nil }
        keyPathSlots.insert(slot, for: keyPath)
        return slot
    }

    /// The storage slot of the stored property `keyPath` names; anything else is a
    /// programming error caught at the first use.
    func slotOrDie(for keyPath: AnyKeyPath) -> Int {
        guard let slot = slot(for: keyPath) else {
            preconditionFailure("\(keyPath) is not a stored persistent property of \(name)")
        }
        return slot
    }

    /// The property for `keyPath`, or a misuse error naming the key path.
    func requireProperty(for keyPath: AnyKeyPath) throws(PersistenceError) -> PropertyDescription {
        guard let property = property(for: keyPath) else {
            throw PersistenceError(.misuse, "\(keyPath) is not a persistent property of \(name)")
        }
        return property
    }

    /// The property for `keyPath`; a key path that names no persistent
    /// property is a programming error caught at the first use.
    func propertyOrDie(for keyPath: AnyKeyPath) -> PropertyDescription {
        guard let property = property(for: keyPath) else {
            preconditionFailure("\(keyPath) is not a persistent property of \(name)")
        }
        return property
    }
}

/// The registry of entity descriptions, one per `ManagedObject` subclass.
enum EntityRegistry {
    private static let descriptions = Locked<[ObjectIdentifier: EntityDescription]>([:])

    static func description(for type: ManagedObject.Type) -> EntityDescription {
        let key = ObjectIdentifier(type)
        if let d = descriptions.withLock({ $0[key] }) { return d }
        let built: EntityDescription
        do {
            built = try EntityDescription(type: type)
        } catch {
            preconditionFailure("\(error)")
        }
        return descriptions.withLock { table in
            if let existing = table[key] { return existing }
            table[key] = built
            return built
        }
    }
}
