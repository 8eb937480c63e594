/// The identity of a managed object: its entity and its row ID.
///
/// IDs are permanent from the moment an object is inserted (they are reserved
/// in the store in blocks), so an ID can be handed to another context, task or
/// process before the object is even saved. IDs are never reused: a deleted
/// object's ID never names another object.
public struct ManagedObjectID: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    /// The entity's name (its table).
    public let entityName: String
    /// The row ID, unique within the entity. Negative for an object whose ID
    /// could not be reserved (such an object cannot be saved).
    public let rowID: Int64

    /// The ID of row `rowID` of the entity named `entityName` (for rows written without
    /// objects, whose IDs come as ranges).
    public init(entityName: String, rowID: Int64) {
        self.entityName = entityName
        self.rowID = rowID
    }

    /// `"Note 42"`: how errors and logs name an object.
    public var description: String { "\(entityName) \(rowID)" }

    /// A URI that names the object across processes, `x-persistence://Note/42`.
    public var uriRepresentation: String { "x-persistence://\(entityName)/\(rowID)" }

    /// Parses a URI made by ``uriRepresentation``.
    public init?(uriRepresentation uri: String) {
        let prefix = "x-persistence://"
        guard uri.hasPrefix(prefix) else { return nil }
        let parts = uri.dropFirst(prefix.count).split(separator: "/")
        guard parts.count == 2, let row = Int64(parts[1]) else { return nil }
        self.init(entityName: String(parts[0]), rowID: row)
    }

    public static func < (lhs: ManagedObjectID, rhs: ManagedObjectID) -> Bool {
        (lhs.entityName, lhs.rowID) < (rhs.entityName, rhs.rowID)
    }
}
