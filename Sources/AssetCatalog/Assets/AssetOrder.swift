import Foundation
import Persistence

/// The order of a listing (``Catalog/forEachAsset(_:orderedBy:pageSize:_:)``, `assetcat ls
/// --sort`). Every order breaks ties by ID, so a listing's order is always the same.
///
/// Each order is answered by an index of the store (ID, ``Asset/name``, ``Asset/size``,
/// ``Asset/created``), a page at a time from where the last page ended: memory stays bounded
/// and each page costs O(page + log n), whatever the catalog's size.
public enum AssetOrder: String, CaseIterable, Sendable, Hashable {
    /// By ID: the order in which the assets were recorded in this catalog (the default).
    case id
    /// By name, byte by byte (`B` before `a`, `a` before `é`).
    case name
    /// Smallest first. Size has no index (one would slow every add): each page is a scan of
    /// the assets keeping the next 50,000 sizes (``pageSize``), so a listing of a million
    /// costs some twenty scans, in bounded memory.
    case size
    /// By the date the asset was added (its `created` date; an imported asset keeps the
    /// date it was added to the catalog it came from).
    case added

    /// The page of an order without an index: a scan of the catalog per page, so large.
    static let unindexedPageSize = 50_000

    /// How many assets a listing in this order reads at a time, unless told: 1,000, or
    /// 50,000 for ``size`` (each of its pages is a scan of the catalog).
    public var pageSize: Int { self == .size ? Self.unindexedPageSize : 1_000 }

    /// The store's order.
    var sort: Persistence.SortDescriptor<Asset> {
        switch self {
        case .id: .objectID()
        case .name: .init(\.name)
        case .size: .init(\.size)
        case .added: .init(\.created)
        }
    }

    /// The assets after `last` in this order: a key at least `last`'s (a range of the key's
    /// index), and then a greater key or, for the same key, a greater ID.
    func after(_ last: AssetRecord) -> FetchPredicate<Asset> {
        let id = FetchPredicate<Asset>.objectIDs(after: last.id.rawValue)
        switch self {
        case .id: return id
        case .name: return \.name >= last.name && (\.name > last.name || id)
        case .size: return \.size >= last.size && (\.size > last.size || id)
        case .added: return \.created >= last.created && (\.created > last.created || id)
        }
    }

    /// For an order with an index: the assets after `last` with `last`'s key (read by ID:
    /// the index keeps a key's entries in ID order), and those with a greater key — two
    /// ranges of the index, so that a page costs O(page + log n) even inside a long run of
    /// one key (every asset of a batch has one `created` date). `nil` for ``id`` and
    /// ``size``.
    func indexedRanges(after last: AssetRecord) -> (sameKey: FetchPredicate<Asset>, greaterKey: FetchPredicate<Asset>)?
    {
        let id = FetchPredicate<Asset>.objectIDs(after: last.id.rawValue)
        switch self {
        case .id, .size: return nil
        case .name: return (\.name == last.name && id, \.name > last.name)
        case .added: return (\.created == last.created && id, \.created > last.created)
        }
    }
}

/// An asset as a listing shows it: its record and, for an archive member, the name of its
/// archive (``location``).
public struct ListedAsset: Sendable, Hashable {
    /// The asset.
    public var record: AssetRecord
    /// For an archive member: the name of the archive asset it is a member of.
    public var archiveName: String?

    /// Where the asset lives, as `ls` and `show` print it: `ARCHIVE-NAME:member/path` for an
    /// archive member (two archives' `sample/hello.txt` are told apart), the name otherwise.
    /// A member whose archive's name is not known is shown with the archive's ID
    /// (`#12:member/path`).
    public var location: String {
        guard record.storage == .member, let member = record.member else { return record.name }
        return (archiveName ?? record.archive.map { "#\($0)" } ?? "?") + ":" + member
    }
}

extension Catalog {
    /// Calls `body` with every asset `query` selects, in `order` (ties by ID), loading them a
    /// page at a time (`pageSize`, by default ``AssetOrder/pageSize``): memory stays bounded
    /// whatever the catalog's size.
    public func forEachAsset(
        _ query: AssetQuery = AssetQuery(), orderedBy order: AssetOrder, pageSize: Int? = nil,
        _ body: (AssetRecord) throws -> Void
    ) throws {
        try forEachAssetPage(query, orderedBy: order, pageSize: pageSize ?? order.pageSize) { page in
            for record in page { try body(record) }
        }
    }

    /// Calls `body` with every asset `query` selects, in `order` (ties by ID), each with the
    /// name of its archive when it is a member (``ListedAsset/location``): what `assetcat ls`
    /// prints. A page at a time, with one more read per page for the archives' names.
    public func forEachListedAsset(
        _ query: AssetQuery = AssetQuery(), orderedBy order: AssetOrder = .id, pageSize: Int? = nil,
        _ body: (ListedAsset) throws -> Void
    ) throws {
        try forEachAssetPage(query, orderedBy: order, pageSize: pageSize ?? order.pageSize) { page in
            let names = try archiveNames(Set(page.compactMap(\.archive)))
            for record in page {
                try body(ListedAsset(record: record, archiveName: record.archive.flatMap { names[$0] }))
            }
        }
    }

    /// One page of a listing in ID order: up to `limit` assets that `query` selects with IDs
    /// above `after` (from the first when `nil`), each with its archive's name when it is a
    /// member. The next page starts after this page's last ID (keyset paging): each page
    /// is one range of the ID index, so it costs the same however deep it is and whatever
    /// the catalog's size, and nothing but the page is loaded.
    ///
    /// ```swift
    /// var page = try catalog.listedAssets(limit: 50)
    /// while let last = page.last {
    ///     for asset in page { print(asset.record.id, asset.location) }
    ///     page = try catalog.listedAssets(after: last.record.id, limit: 50)
    /// }
    /// ```
    ///
    /// - Throws: ``CatalogError/Code/invalidArgument`` when `limit` is not above 0.
    public func listedAssets(_ query: AssetQuery = AssetQuery(), after: AssetID? = nil, limit: Int) throws
        -> [ListedAsset]
    {
        guard limit > 0 else { throw CatalogError(.invalidArgument, "A page of assets needs a limit above 0") }
        let page = try assetPage(query, after: after?.rawValue ?? 0, limit: limit)
        let names = try archiveNames(Set(page.compactMap(\.archive)))
        return page.map { ListedAsset(record: $0, archiveName: $0.archive.flatMap { names[$0] }) }
    }

    /// `record` with the name of its archive when it is a member: what `assetcat show` prints.
    public func listed(_ record: AssetRecord) throws -> ListedAsset {
        let names = try archiveNames(Set(record.archive.map { [$0] } ?? []))
        return ListedAsset(record: record, archiveName: record.archive.flatMap { names[$0] })
    }

    /// The names of the assets `ids`, by ID (one read, no objects).
    func archiveNames(_ ids: Set<AssetID>) throws -> [AssetID: String] {
        guard !ids.isEmpty else { return [:] }
        return try storeErrors {
            try withContext { context in
                let objectIDs = ids.map { ManagedObjectID(entityName: Asset.entityName, rowID: $0.rawValue) }
                var names: [AssetID: String] = [:]
                for row in try context.fetchSnapshots(FetchRequest<Asset>(predicate: .objectIDs(objectIDs))) {
                    names[AssetID(row.objectID.rowID)] = row.value(for: \Asset.name)
                }
                return names
            }
        }
    }

    /// Calls `body` with the pages of the assets `query` selects, in `order`: each page starts
    /// after the last page's last asset (no offset), so each costs the same.
    ///
    /// A query (a tag, a kind) with an order other than ID: SQLite reads a page from the
    /// query's index and sorts all the matches for it, O(matches) a page — quadratic over a
    /// listing of many matches. When `matches² > total × pageSize` (``scansOrder(matches:total:pageSize:)``),
    /// the whole order is read instead, a page at a time through its index, and the matches
    /// kept: O(total) for the listing. `scanningOrder` forces one way (tests).
    func forEachAssetPage(
        _ query: AssetQuery, orderedBy order: AssetOrder, pageSize: Int, scanningOrder: Bool? = nil,
        _ body: ([AssetRecord]) throws -> Void
    ) throws {
        if order != .id, query != AssetQuery() {
            let scans =
                try scanningOrder
                ?? storeErrors {
                    try withContext { context in
                        let total = try container.tally(Asset.storageTally, of: Asset.self).reduce(0) { $0 + $1.count }
                        let matches = try context.count(for: FetchRequest<Asset>(predicate: query.predicate))
                        return Self.scansOrder(matches: matches, total: total, pageSize: pageSize)
                    }
                }
            if scans {
                var kept: [AssetRecord] = []
                try forEachAssetPage(AssetQuery(), orderedBy: order, pageSize: pageSize) { page in
                    kept += page.lazy.filter(query.matches)
                    guard kept.count >= pageSize else { return }
                    try body(kept)
                    kept.removeAll(keepingCapacity: true)
                }
                if !kept.isEmpty { try body(kept) }
                return
            }
        }
        func fetch(_ predicate: FetchPredicate<Asset>, _ sort: Persistence.SortDescriptor<Asset>, _ limit: Int) throws
            -> [AssetRecord]
        {
            try storeErrors {
                try withContext { context in
                    let request = FetchRequest<Asset>(
                        predicate: query.predicate && predicate, sortBy: [sort], limit: limit)
                    return try context.fetchSnapshots(request).map(AssetRecord.init(snapshot:))
                }
            }
        }
        var last: AssetRecord?
        while true {
            var page: [AssetRecord]
            if order == .id {
                page = try assetPage(query, after: last?.id.rawValue ?? 0, limit: pageSize)
            } else if let last, let ranges = order.indexedRanges(after: last) {
                page = try fetch(ranges.sameKey, .objectID(), pageSize)
                if page.count < pageSize { page += try fetch(ranges.greaterKey, order.sort, pageSize - page.count) }
            } else {
                page = try fetch(last.map(order.after) ?? .all, order.sort, pageSize)
            }
            try body(page)
            guard page.count == pageSize, let end = page.last else { return }
            last = end
        }
    }

    /// Whether a listing of `matches` of `total` assets in an order other than ID reads the
    /// whole order (O(total)) rather than the query's matches for every page (O(matches²
    /// / pageSize)).
    static func scansOrder(matches: Int, total: Int, pageSize: Int) -> Bool {
        matches > pageSize && Double(matches) * Double(matches) > Double(total) * Double(pageSize)
    }
}
