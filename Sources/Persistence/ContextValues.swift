/// The key of a typed value a context carries for the program: the key's type names the
/// value and gives its type, as swift-service-context's keys do. A value is set and read
/// through ``ManagedObjectContext/subscript(_:)``, never looked up by a string and cast:
///
/// ```swift
/// enum Journal: ContextKey { typealias Value = JournalWriter }
///
/// context[Journal.self] = writer
/// // in a hook of an object of that context, or of its save:
/// saveEffects?[Journal.self]?.append(objectID)
/// ```
public protocol ContextKey {
    /// The type of the value the key names.
    associatedtype Value
}

/// The typed values of a context (``ManagedObjectContext/subscript(_:)``), one per
/// ``ContextKey``. A child context starts with a copy of its parent's; a save's effects
/// (``SaveEffects/subscript(_:)``) carry the saving context's.
public struct ContextValues {
    private var values: [ObjectIdentifier: Any] = [:]

    /// No values.
    public init() {}

    /// The value of `key`; `nil` when none is set.
    public subscript<Key: ContextKey>(_ key: Key.Type) -> Key.Value? {
        // Set only below, with the key's own type: the cast cannot fail.
        get { values[ObjectIdentifier(key)] as? Key.Value }
        set { values[ObjectIdentifier(key)] = newValue }
    }
}

extension ManagedObjectContext {
    /// The value this context carries for `key` (``ContextKey``); `nil` when none is set.
    /// Objects reach it through their ``ManagedObject/managedObjectContext``, save hooks
    /// through their ``SaveEffects``. A child context starts with a copy of its parent's values.
    public subscript<Key: ContextKey>(_ key: Key.Type) -> Key.Value? {
        get { values[key] }
        set { values[key] = newValue }
    }
}
