import Persistence

/// What ``Catalog/removeAll(_:dryRun:)`` removed, or would remove.
public struct QueryRemovalResult: Sendable, Hashable {
    /// The assets the query selected.
    public var assets: Int
    /// Archive members the query did not select, removed with their archives.
    public var members: Int
    /// For a dry run, the files in `objects/` that would be removed: the contents of selected
    /// managed assets that no asset left would use. `nil` after a real removal, whose files go
    /// after its commit (``Catalog/finishPendingRemovals()`` finishes any a crash left).
    public var files: Int?
    /// Whether this was a dry run (nothing was changed).
    public var wasDryRun: Bool
}

extension Catalog {
    /// Deletes every asset `query` selects, as ``removeAll(_:)`` does (one transaction,
    /// archive members with their archives, files only after the commit), and says how many
    /// assets and members went (the selection counted just before the deletion). With `dryRun`, changes nothing and says what would go,
    /// files in `objects/` included, or refuses as the deletion would (a program's deny rule).
    ///
    /// Both read the selection a page at a time: memory does not grow with the number of
    /// assets selected. A dry run reads it twice — by ID for the assets and the archives'
    /// members, by content for the files (each content once, with one count of the assets
    /// left that would still use it) — so it is as exact as the catalog is still while it runs.
    @discardableResult
    public func removeAll(_ query: AssetQuery, dryRun: Bool) throws -> QueryRemovalResult {
        guard dryRun else {
            let (selected, deleted) = try storeErrors {
                try withContext { context in
                    let request = FetchRequest<Asset>(predicate: query.predicate)
                    let selected = try context.count(for: request)
                    // Named by range: the notification stays small however many rows go.
                    return (selected, try context.batchDeleteNamingRanges(request).deletedRowRanges)
                }
            }
            let assets = (deleted[Asset.entityName] ?? []).reduce(0) { $0 + $1.count }
            return QueryRemovalResult(
                assets: min(selected, assets), members: max(0, assets - selected), files: nil, wasDryRun: false)
        }
        return try storeErrors {
            try withContext { context in
                let selected = query.predicate
                var result = QueryRemovalResult(assets: 0, members: 0, files: 0, wasDryRun: true)
                // The selection by ID: the assets, and the members of its archives it does not select.
                var after: Int64 = 0
                while true {
                    let page = try context.fetch(
                        FetchRequest<Asset>(
                            predicate: selected && .objectIDs(after: after), sortBy: [.objectID()], limit: 500))
                    guard let last = page.last else { break }
                    result.assets += page.count
                    // What the deletion would refuse (a program's deny rule), the dry run refuses.
                    try context.validateDeletion(of: page)
                    let archives = page.filter { $0.kind == "archive" }.map(\.objectID)
                    after = last.objectID.rowID
                    context.reset()  // objects of one page at a time
                    for archive in archives {
                        var afterMember: Int64 = 0
                        while true {
                            let members = try context.fetch(
                                FetchRequest<Asset>(
                                    predicate: \.archive == archive && !selected && .objectIDs(after: afterMember),
                                    sortBy: [.objectID()], limit: 500))
                            guard let lastMember = members.last else { break }
                            result.members += members.count
                            try context.validateDeletion(of: members)
                            afterMember = lastMember.objectID.rowID
                            context.reset()
                        }
                    }
                }
                // The selection's managed contents in order, each once: removed if no asset
                // outside the selection uses it.
                let managed = selected && \.storage == Storage.managed
                var lastDigest: String?
                var files = 0
                while true {
                    let next = lastDigest.map { managed && \.sha256 > $0 } ?? managed
                    let page = try context.fetch(
                        FetchRequest<Asset>(predicate: next, sortBy: [.init(\.sha256)], limit: 500)
                    ).map(\.sha256)
                    guard let last = page.last else { break }
                    for (i, digest) in page.enumerated() where i == 0 || page[i - 1] != digest {
                        let keeps = try context.count(
                            for: FetchRequest<Asset>(
                                predicate: \.sha256 == digest && \.storage == Storage.managed && !selected))
                        if keeps == 0 { files += 1 }
                    }
                    lastDigest = last  // the rest of its assets, on the next page, are passed over
                    context.reset()
                }
                result.files = files
                return result
            }
        }
    }
}
