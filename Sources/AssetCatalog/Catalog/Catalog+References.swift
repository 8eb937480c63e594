import Persistence

extension Catalog {
    /// The IDs of the assets that `references` designate, in their order, each once (a
    /// reference repeated, or two references to one asset, give its ID once, where it first
    /// comes). Resolved a page of references at a time, with one query for the IDs and one for
    /// the names of each page, so that thousands of references (`assetcat rm --from-file`)
    /// cost a few queries each rather than a lookup each.
    ///
    /// A reference that is an asset's ID written canonically (`7`, not `007` or `+7`) names
    /// that asset; anything else, or an ID no asset has, is a name, which must be unique.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` for the first reference no asset has (as an
    ///   ID or a name); ``CatalogError/Code/invalidArgument`` for a name several assets have,
    ///   listing their IDs.
    public func assetIDs(for references: some Sequence<String>, pageSize: Int = 500) throws -> [AssetID] {
        var result: [AssetID] = []
        var seen = Set<AssetID>()
        var page: [String] = []
        func resolvePage() throws {
            for id in try resolve(page) where seen.insert(id).inserted { result.append(id) }
            page.removeAll(keepingCapacity: true)
        }
        for reference in references {
            page.append(reference)
            if page.count >= max(1, pageSize) { try resolvePage() }
        }
        if !page.isEmpty { try resolvePage() }
        return result
    }

    /// The IDs `references` designate (as ``assetIDs(for:pageSize:)`` resolves them), in one
    /// context: the IDs among them that assets have, then the names of the rest.
    private func resolve(_ references: [String]) throws -> [AssetID] {
        func canonicalID(_ reference: String) -> Int64? {
            Int64(reference).flatMap { $0 > 0 && String($0) == reference ? $0 : nil }
        }
        return try storeErrors {
            try withContext { context in
                let ids = references.compactMap(canonicalID)
                let existing = Set(
                    try context.fetchObjectIDs(
                        FetchRequest<Asset>(
                            predicate: .objectIDs(ids.map { ManagedObjectID(entityName: Asset.entityName, rowID: $0) })
                        )
                    ).map(\.rowID))
                let names = references.filter { canonicalID($0).map { !existing.contains($0) } ?? true }
                var named: [String: [AssetID]] = [:]
                if !names.isEmpty {
                    let request = FetchRequest<Asset>(predicate: .in(\.name, Set(names)), sortBy: [.objectID()])
                    for asset in try context.fetch(request) { named[asset.name, default: []].append(asset.assetID) }
                }
                return try references.map { reference in
                    if let id = canonicalID(reference), existing.contains(id) { return AssetID(id) }
                    let matches = named[reference] ?? []
                    switch matches.count {
                    case 1: return matches[0]
                    case 0:
                        if let id = canonicalID(reference) {
                            throw CatalogError(.notFound, "No asset with ID \(id); list assets with `assetcat ls`")
                        }
                        throw CatalogError(.notFound, "No asset named \(reference); list assets with `assetcat ls`")
                    default:
                        let list = matches.map { String(describing: $0) }.joined(separator: ", ")
                        throw CatalogError(
                            .invalidArgument, "\(matches.count) assets are named \(reference) (IDs \(list)); use an ID")
                    }
                }
            }
        }
    }
}
