import Foundation
import Persistence

/// One page of a search (``Catalog/search(_:limit:offset:)``).
public struct SearchPage: Sendable, Hashable {
    /// The assets of the page, each with its archive's name when it is a member.
    public var assets: [ListedAsset]
    /// Whether the matches are ranked, the best first (the query has words, and at most
    /// ``Catalog/rankedSearchLimit`` assets match); otherwise they come in ID order, the
    /// order in which they were recorded.
    public var isRanked: Bool
    /// Whether more assets match after this page.
    public var hasMore: Bool
}

extension Catalog {
    /// The most matches a search ranks. Ranking reads every match, and knowing that there are
    /// no more reads one more: a query that more assets match (a common word) lists them in
    /// ID order, which the index walks a page at a time, so that its first page costs a page
    /// whatever the number of matches. At 10,000, telling a word in a million names apart
    /// cost more than its page (4 ms beside 0.25 ms on SQLite; on PostgreSQL, whose GIN index
    /// is read as a whole bitmap, a third of a second).
    public static let rankedSearchLimit = 1_000

    /// The assets `query` finds: words in their names (for a member: its path, and its
    /// archive's name), tags and metadata, and filters on kind, tags, storage, archive,
    /// extension, size and date added (``SearchQuery``) — skipping `offset` of them, at most
    /// `limit`.
    ///
    /// ```swift
    /// let page = try catalog.search(SearchQuery(parsing: "beach tag:trip ext:png"), limit: 20)
    /// for found in page.assets { print(found.record.id, found.location) }
    /// ```
    ///
    /// The index is the store's, written in the same transaction as the assets: a search sees
    /// every committed asset, on SQLite and PostgreSQL alike.
    public func search(_ query: SearchQuery, limit: Int = 20, offset: Int = 0) throws -> SearchPage {
        try search(query, limit: limit, offset: offset, rankingAtMost: Self.rankedSearchLimit)
    }

    /// ``search(_:limit:offset:)``, ranking at most `rankLimit` matches (tests: a few).
    func search(_ query: SearchQuery, limit: Int, offset: Int, rankingAtMost rankLimit: Int) throws -> SearchPage {
        guard limit > 0, offset >= 0 else {
            throw CatalogError(.invalidArgument, "A search page needs a limit above 0 and an offset of 0 or more")
        }
        return try storeErrors {
            try withContext { context in
                guard let predicate = try searchPredicate(query, context) else {
                    return SearchPage(assets: [], isRanked: false, hasMore: false)
                }
                let ranked = try isRanked(query, predicate, context, atMost: rankLimit)
                let request = FetchRequest<Asset>(
                    predicate: predicate, sortBy: [ranked ? .relevance : .objectID()], limit: limit + 1,
                    offset: offset)
                let records = try context.fetchSnapshots(request).map(AssetRecord.init(snapshot:))
                let page = Array(records.prefix(limit))
                let names = try archiveNames(Set(page.compactMap(\.archive)))
                return SearchPage(
                    assets: page.map { ListedAsset(record: $0, archiveName: $0.archive.flatMap { names[$0] }) },
                    isRanked: ranked, hasMore: records.count > limit)
            }
        }
    }

    /// Calls `body` with every asset `query` finds: ranked, the best first, when the query
    /// has words and at most ``rankedSearchLimit`` assets match; otherwise in ID order, a
    /// page at a time (memory stays bounded whatever the number of matches).
    public func forEachSearchResult(_ query: SearchQuery, _ body: (ListedAsset) throws -> Void) throws {
        let pageSize = 1_000
        let start = try storeErrors {
            try withContext { context -> (FetchPredicate<Asset>, Bool)? in
                guard let predicate = try searchPredicate(query, context) else { return nil }
                return (predicate, try isRanked(query, predicate, context, atMost: Self.rankedSearchLimit))
            }
        }
        guard let (predicate, ranked) = start else { return }
        var offset = 0
        var last: Int64 = 0
        while true {
            let records = try storeErrors {
                try withContext { context in
                    let request =
                        ranked
                        ? FetchRequest<Asset>(
                            predicate: predicate, sortBy: [.relevance], limit: pageSize, offset: offset)
                        : FetchRequest<Asset>(
                            predicate: predicate && .objectIDs(after: last), sortBy: [.objectID()], limit: pageSize)
                    return try context.fetchSnapshots(request).map(AssetRecord.init(snapshot:))
                }
            }
            let names = try archiveNames(Set(records.compactMap(\.archive)))
            for record in records {
                try body(ListedAsset(record: record, archiveName: record.archive.flatMap { names[$0] }))
            }
            guard records.count == pageSize, let end = records.last else { return }
            offset += pageSize
            last = end.id.rawValue
        }
    }

    /// Whether `query`'s matches are ranked: it has words, and at most `limit` assets match.
    /// Counted, not read: up to `limit` + 1 matches, and no ID of them made.
    private func isRanked(
        _ query: SearchQuery, _ predicate: FetchPredicate<Asset>, _ context: ManagedObjectContext, atMost limit: Int
    ) throws -> Bool {
        guard query.hasFullText else { return false }
        return try context.count(for: FetchRequest<Asset>(predicate: predicate, limit: limit + 1)) <= limit
    }

    /// The store's predicate of `query`; `nil` when it can match nothing (an archive name no
    /// archive has). The words the query looks for, and an extension when it names only one,
    /// are one full-text condition, which drives the search through the index.
    func searchPredicate(_ query: SearchQuery, _ context: ManagedObjectContext) throws -> FetchPredicate<Asset>? {
        func term(_ t: SearchTerm) -> TextSearch.Term {
            TextSearch.Term(words: t.tokens, isPrefix: t.isPrefix)
        }
        func ext(_ value: String) -> TextSearch.Term {
            TextSearch.Term(words: [value], field: Asset.extensionField)
        }
        var wanted = query.terms.filter { !$0.isExcluded }.map(term)
        var p = FetchPredicate<Asset>.all
        if query.extensions.count == 1 {
            wanted.append(ext(query.extensions[0]))
        } else if !query.extensions.isEmpty {
            p = p && query.extensions.map { FetchPredicate<Asset>.matches(TextSearch([ext($0)])) }.reduce(.none, ||)
        }
        if !wanted.isEmpty { p = .matches(TextSearch(wanted)) && p }
        for excluded in query.terms where excluded.isExcluded {
            p = p && !.matches(TextSearch([term(excluded)]))
        }
        for value in query.excludingExtensions { p = p && !.matches(TextSearch([ext(value)])) }
        for tag in query.tags { p = p && AssetTag.tagged(tag) }
        for tag in query.excludingTags { p = p && !AssetTag.tagged(tag) }
        if !query.kinds.isEmpty { p = p && .in(\.kind, query.kinds) }
        if !query.excludingKinds.isEmpty { p = p && !.in(\.kind, query.excludingKinds) }
        if !query.storages.isEmpty { p = p && .in(\.storage, query.storages) }
        if let minimum = query.minimumSize { p = p && \.size >= minimum }
        if let maximum = query.maximumSize { p = p && \.size <= maximum }
        if let from = query.addedFrom { p = p && \.created >= from }
        if let before = query.addedBefore { p = p && \.created < before }
        if !query.archives.isEmpty {
            // The archives by name (an index), then their members by link.
            let archives = try context.fetchObjectIDs(
                FetchRequest<Asset>(predicate: .in(\.name, query.archives) && \.kind == "archive"))
            guard !archives.isEmpty else { return nil }
            p = p && archives.map { \Asset.archive == $0 }.reduce(FetchPredicate<Asset>.none, ||)
        }
        return p
    }
}
