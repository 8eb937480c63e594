/// An asset's ID: the number the CLI prints and takes (`assetcat show 7`), typed so that a
/// program cannot pass a job's ID, a count or a name where an asset is meant.
///
/// It is the asset's row in the store (``Asset/assetID``, ``AssetRecord/id``), stable for the
/// asset's whole life and never reused while the asset exists. Its `Codable` form is the bare
/// number (`7`, not `{"rawValue":7}`), so JSON output and bundle records read as before.
public struct AssetID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The number itself.
    public var rawValue: Int64

    /// The ID whose number is `rawValue`.
    public init(_ rawValue: Int64) { self.rawValue = rawValue }

    /// Orders IDs by their numbers: the order assets were added in.
    public static func < (lhs: AssetID, rhs: AssetID) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The bare number: `7`.
    public var description: String { String(rawValue) }

    /// Decodes the bare number.
    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(Int64.self)
    }

    /// Encodes the bare number.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

extension AssetID: ExpressibleByIntegerLiteral {
    /// The ID written as a number: `catalog.asset(7)`.
    public init(integerLiteral value: Int64) { self.rawValue = value }
}
