public import Foundation

/// A value as a store holds it: the five storage classes of SQLite.
///
/// Every attribute type converts to and from a `StoreValue`
/// (see ``AttributeValue``). Contexts, snapshots and save notifications carry
/// `StoreValue`s, never driver types, so that a store other than SQLite can be
/// added without touching contexts or entities.
public enum StoreValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)

    /// Whether this is ``null``.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}

extension StoreValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .text(let v): "'\(v)'"
        case .blob(let v): "<\(v.count) bytes>"
        }
    }
}

extension StoreValue: Comparable {
    /// SQLite's ordering: NULL < numbers < text < blobs.
    public static func < (lhs: StoreValue, rhs: StoreValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return false
        case (.null, _): return true
        case (_, .null): return false
        case (.integer(let a), .integer(let b)): return a < b
        case (.integer(let a), .real(let b)): return Double(a) < b
        case (.real(let a), .integer(let b)): return a < Double(b)
        case (.real(let a), .real(let b)): return a < b
        case (.integer, _), (.real, _): return true
        case (_, .integer), (_, .real): return false
        case (.text(let a), .text(let b)): return a.utf8.lexicographicallyPrecedes(b.utf8)
        case (.text, .blob): return true
        case (.blob, .text): return false
        case (.blob(let a), .blob(let b)): return a.lexicographicallyPrecedes(b)
        }
    }
}

/// The storage type of an attribute, as declared in an entity.
public enum AttributeType: String, Hashable, Sendable {
    case integer
    case real
    case text
    case blob
    case boolean
    case date
    case uuid

    /// The SQL column type used for this attribute.
    var sqlType: String {
        switch self {
        case .integer, .boolean: "INTEGER"
        case .real, .date: "REAL"
        case .text, .uuid: "TEXT"
        case .blob: "BLOB"
        }
    }
}

/// A Swift type that can be stored in an attribute.
///
/// `String`, `Int`, `Int64`, `Int32`, `Double`, `Bool`, `Date`, `Data`, `UUID`
/// and `Optional`s of them conform. Conform your own `RawRepresentable` enums
/// by declaring the conformance: their raw value is stored.
public protocol AttributeValue: Sendable {
    /// The declared storage type.
    static var attributeType: AttributeType { get }
    /// Whether `nil` is a valid value (true for `Optional`).
    static var isOptional: Bool { get }
    /// Decodes a stored value; `nil` when the value cannot represent `Self`.
    init?(storeValue: StoreValue)
    /// The stored form of the value.
    var storeValue: StoreValue { get }
}

extension AttributeValue {
    public static var isOptional: Bool { false }
}

extension String: AttributeValue {
    public static var attributeType: AttributeType { .text }
    public init?(storeValue: StoreValue) {
        guard case .text(let v) = storeValue else { return nil }
        self = v
    }
    public var storeValue: StoreValue { .text(self) }
}

extension Int64: AttributeValue {
    public static var attributeType: AttributeType { .integer }
    public init?(storeValue: StoreValue) {
        switch storeValue {
        case .integer(let v): self = v
        case .real(let v): self.init(exactly: v)
        default: return nil
        }
    }
    public var storeValue: StoreValue { .integer(self) }
}

extension Int: AttributeValue {
    public static var attributeType: AttributeType { .integer }
    public init?(storeValue: StoreValue) {
        guard let v = Int64(storeValue: storeValue) else { return nil }
        self.init(exactly: v)
    }
    public var storeValue: StoreValue { .integer(Int64(self)) }
}

extension Int32: AttributeValue {
    public static var attributeType: AttributeType { .integer }
    public init?(storeValue: StoreValue) {
        guard let v = Int64(storeValue: storeValue) else { return nil }
        self.init(exactly: v)
    }
    public var storeValue: StoreValue { .integer(Int64(self)) }
}

extension Double: AttributeValue {
    public static var attributeType: AttributeType { .real }
    public init?(storeValue: StoreValue) {
        switch storeValue {
        case .real(let v): self = v
        case .integer(let v): self = Double(v)
        default: return nil
        }
    }
    public var storeValue: StoreValue { .real(self) }
}

extension Bool: AttributeValue {
    public static var attributeType: AttributeType { .boolean }
    public init?(storeValue: StoreValue) {
        guard case .integer(let v) = storeValue else { return nil }
        self = v != 0
    }
    public var storeValue: StoreValue { .integer(self ? 1 : 0) }
}

extension Date: AttributeValue {
    public static var attributeType: AttributeType { .date }
    /// Dates are stored as seconds since 1970 (a `REAL`).
    public init?(storeValue: StoreValue) {
        guard let v = Double(storeValue: storeValue) else { return nil }
        self.init(timeIntervalSince1970: v)
    }
    public var storeValue: StoreValue { .real(timeIntervalSince1970) }
}

extension Data: AttributeValue {
    public static var attributeType: AttributeType { .blob }
    public init?(storeValue: StoreValue) {
        guard case .blob(let v) = storeValue else { return nil }
        self = v
    }
    public var storeValue: StoreValue { .blob(self) }
}

extension UUID: AttributeValue {
    public static var attributeType: AttributeType { .uuid }
    public init?(storeValue: StoreValue) {
        guard case .text(let v) = storeValue else { return nil }
        self.init(uuidString: v)
    }
    public var storeValue: StoreValue { .text(uuidString) }
}

extension Optional: AttributeValue where Wrapped: AttributeValue {
    public static var attributeType: AttributeType { Wrapped.attributeType }
    public static var isOptional: Bool { true }
    public init?(storeValue: StoreValue) {
        if storeValue.isNull {
            self = .none
        } else if let v = Wrapped(storeValue: storeValue) {
            self = .some(v)
        } else {
            return nil
        }
    }
    public var storeValue: StoreValue { self?.storeValue ?? .null }
}

extension RawRepresentable where RawValue: AttributeValue, Self: Sendable {
    public static var attributeType: AttributeType { RawValue.attributeType }
    public init?(storeValue: StoreValue) {
        guard let raw = RawValue(storeValue: storeValue) else { return nil }
        self.init(rawValue: raw)
    }
    public var storeValue: StoreValue { rawValue.storeValue }
}
