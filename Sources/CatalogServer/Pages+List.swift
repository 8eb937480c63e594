import AssetCatalog
import Foundation
import Hummingbird

/// The list of assets and the search results: one table, a page at a time, with checkboxes
/// for an export, and the kinds and tags as facets beside it.
extension Pages {
    /// The deepest offset a search pages to (a search's pages are counted by offset, which
    /// the store walks: past this, narrow the query).
    static let maximumSearchOffset: Int64 = 100_000

    /// `/`: the list by ID from `after` (keyset paging: each page one range of the index), or,
    /// with `q`, the search's results from `offset`.
    func list(_ fields: FormFields) async throws -> Response {
        let text = fields["q"] ?? ""
        let after = try fields.number("after")
        let offset = try fields.number("offset")
        let catalog = self.catalog
        let stats = try await blocking { try catalog.stats() }
        let isSearch = !text.trimmingCharacters(in: .whitespaces).isEmpty
        let rows: [ListedAsset]
        let next: String?
        var heading: HTML
        if !isSearch {
            guard offset == nil else {
                throw PageError(.badRequest, "Bad request: offset pages search results; the list pages with after.")
            }
            let limit = Self.pageSize
            let page = try await blocking {
                try catalog.listedAssets(after: after.map { AssetID($0) }, limit: limit + 1)
            }
            rows = Array(page.prefix(limit))
            next = page.count > limit ? rows.last.map { "/?after=\($0.record.id.rawValue)" } : nil
            heading = "<h1>Assets</h1><p class=\"summary\">\(stats.assets) assets, \(Self.bytes(stats.totalBytes))"
            if after != nil { heading = "\(heading) · <a href=\"/\">first page</a>" }
            heading = "\(heading)</p>"
        } else {
            guard after == nil else {
                throw PageError(.badRequest, "Bad request: after pages the list; search results page with offset.")
            }
            let query: SearchQuery
            do {
                query = try SearchQuery(parsing: text)
            } catch {
                return page(
                    "Search", query: text, status: .badRequest,
                    """
                    <h1>Search</h1>
                    <p class="error" id="search-error">search: \(error.description)</p>
                    <p><a href="/">All assets</a></p>
                    """)
            }
            let start = offset ?? 0
            guard start <= Self.maximumSearchOffset else {
                throw PageError(
                    .badRequest,
                    "Bad request: offset goes up to \(Self.maximumSearchOffset); narrow the search instead.")
            }
            let limit = Self.pageSize
            let found = try await blocking { try catalog.search(query, limit: limit, offset: Int(start)) }
            rows = found.assets
            next = found.hasMore ? Self.searchPath(text, [("offset", String(start + Int64(limit)))]) : nil
            let shown =
                rows.isEmpty
                ? "No assets found"
                : start == 0 && !found.hasMore
                    ? "\(rows.count) result\(rows.count == 1 ? "" : "s")"
                    : "Results \(start + 1)–\(start + Int64(rows.count))\(found.hasMore ? " (more follow)" : "")"
            heading = """
                <h1>Search</h1>
                <p class="summary">\(shown) \
                for <code>\(text)</code>\(found.isRanked ? ", best first" : "") · <a href="/">all assets</a></p>
                """
        }
        let body: HTML = """
            <div class="layout">
            <aside class="facets">\(facets(stats, query: text))</aside>
            <section class="results">
            \(heading)
            \(table(rows, next: next))
            </section>
            </div>
            """
        return page(isSearch ? "Search" : "Assets", query: text, body)
    }

    /// The kinds and the most used tags, each a link that adds its filter to `query`.
    func facets(_ stats: CatalogStats, query: String) -> HTML {
        let kinds = stats.kinds.sorted { $0.key < $1.key }.map { kind, count -> HTML in
            "<li><a href=\"\(Self.searchPath(Self.adding("kind", kind, to: query)))\">\(kind)</a> <span class=\"count\">\(count)</span></li>"
        }
        let tags = stats.tags.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.prefix(40).map { tag, count -> HTML in
            "<li><a href=\"\(Self.searchPath(Self.adding("tag", tag, to: query)))\">\(tag)</a> <span class=\"count\">\(count)</span></li>"
        }
        return """
            <h2>Kinds</h2>
            <ul class="facet" id="kinds">\(kinds.isEmpty ? ["<li class=\"none\">none</li>"] : kinds)</ul>
            <h2>Tags</h2>
            <ul class="facet" id="tags">\(tags.isEmpty ? ["<li class=\"none\">none</li>"] : Array(tags))</ul>
            """
    }

    /// The table of `rows` inside the export form, and the link to the next page.
    func table(_ rows: [ListedAsset], next: String?) -> HTML {
        guard !rows.isEmpty else { return "<p class=\"empty\">No assets here.</p>" }
        let nextLink: HTML = next.map { "<a class=\"button\" id=\"next\" href=\"\($0)\">Next page →</a>" } ?? ""
        return """
            <form method="post" action="/export" class="selection">
            \(csrfField)
            <table class="assets">
            <thead><tr><th class="select"><span class="visually-hidden">Select</span></th><th>Name</th><th>Kind</th>\
            <th class="num">Size</th><th>Tags</th><th>Added</th></tr></thead>
            <tbody>
            \(rows.map(row))
            </tbody>
            </table>
            <div class="actions">
            <button type="submit" id="export">Export selected as .tar</button>
            \(nextLink)
            </div>
            </form>
            """
    }

    /// One asset's row: its thumbnail (an image whose `thumbnail` job made one; an empty
    /// frame otherwise) before its name.
    func row(_ asset: ListedAsset) -> HTML {
        let record = asset.record
        let id = record.id.rawValue
        let thumbnail: HTML =
            record.thumbnail == nil
            ? "<span class=\"thumb\"></span>"
            : "<img class=\"thumb\" src=\"\(Self.assetPath(record.id))/thumbnail\" alt=\"\" loading=\"lazy\">"
        return """
            <tr id="asset-\(id)">
            <td class="select"><input type="checkbox" name="id" value="\(id)" aria-label="Select \(asset.location)"></td>
            <td class="name">\(thumbnail)<a href="\(Self.assetPath(record.id))">\(asset.location)</a></td>
            <td><span class="kind">\(record.kind)</span></td>
            <td class="num">\(Self.bytes(record.size))</td>
            <td class="tags">\(record.tags.map { tag -> HTML in "<span class=\"tag\">\(tag)</span>" })</td>
            <td class="date">\(Self.date(record.created))</td>
            </tr>

            """
    }
}
