public import AssetCatalog

extension Catalog {
    /// The one asset named `name`: tests name their fixtures uniquely, and look them up by name
    /// as the CLI lets a person do.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` unless exactly one asset has that name.
    public func asset(named name: String) throws -> AssetRecord {
        let named = try assets(named: name)
        guard named.count == 1 else {
            throw CatalogError(.notFound, "\(named.count) assets are named \(name); a test expects one")
        }
        return named[0]
    }
}
