import AssetCatalog

/// An asset named on the command line: by its ID or by its name.
///
/// A reference that is an asset's ID written canonically (`7`, not `007` or `+7`) names that
/// asset; anything else, or an ID no asset has, is a name. A name must be unique: when
/// several assets have it, the message lists their IDs to use instead.
enum AssetReference {
    /// The asset `reference` designates.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when none does;
    ///   ``CatalogError/Code/invalidArgument`` when a name is ambiguous.
    static func resolve(_ reference: String, in catalog: Catalog) throws -> AssetRecord {
        let id = Int64(reference).flatMap { $0 > 0 && String($0) == reference ? AssetID($0) : nil }
        if let id {
            do {
                return try catalog.asset(id)
            } catch let error as CatalogError where error.code == .notFound {
                // Not an ID any asset has: it may still be a name.
            }
        }
        let named = try catalog.assets(named: reference)
        switch named.count {
        case 0:
            if let id { throw CatalogError(.notFound, "No asset with ID \(id); list assets with `assetcat ls`") }
            throw CatalogError(.notFound, "No asset named \(reference); list assets with `assetcat ls`")
        case 1: return named[0]
        default:
            let ids = named.map { String(describing: $0.id) }.joined(separator: ", ")
            throw CatalogError(.invalidArgument, "\(named.count) assets are named \(reference) (IDs \(ids)); use an ID")
        }
    }

    /// The IDs of the assets `references` designate, in their order.
    static func resolve(_ references: [String], in catalog: Catalog) throws -> [AssetID] {
        try references.map { try resolve($0, in: catalog).id }
    }
}
