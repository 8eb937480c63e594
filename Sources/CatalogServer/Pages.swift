import AssetCatalog
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The pages: each reads the catalog afresh through its public API and answers with
/// server-rendered HTML (escaped: ``HTML``), or with an asset's bytes.
struct Pages: Sendable {
    let server: CatalogServer
    var catalog: Catalog { server.catalog }

    /// Assets a page lists at a time (the list, search results, an archive's members).
    static let pageSize = 50

    // MARK: - Layout

    /// A whole page: the header (brand, navigation, search box holding `query`) and `body`.
    func page(_ title: String, query: String = "", status: HTTPResponse.Status = .ok, _ body: HTML) -> Response {
        let html: HTML = """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(title) · assetcat</title>
            <link rel="stylesheet" href="/static/style.css?v=\(StaticFiles.version)">
            </head>
            <body>
            <header class="top">
            <a class="brand" href="/">assetcat</a>
            <nav><a href="/">Assets</a><a href="/jobs">Jobs</a></nav>
            <form class="search" action="/" method="get" role="search">
            <input type="search" name="q" value="\(query)" aria-label="Search" \
            placeholder="Search: words, tag:x, kind:image, ext:png">
            <button type="submit">Search</button>
            </form>
            </header>
            <main>
            \(body)
            </main>
            </body>
            </html>

            """
        return Self.html(html, status: status)
    }

    /// An HTML response.
    static func html(_ html: HTML, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: html.text)))
    }

    /// A redirect after a change (POST, then GET: a reload does not repeat it).
    static func redirect(to location: String) -> Response {
        Response(status: .seeOther, headers: [.location: location])
    }

    /// The page of an error: its message, one line.
    func error(_ error: PageError) -> Response {
        page(
            error.status.reasonPhrase, status: error.status,
            """
            <h1>\(error.status.reasonPhrase)</h1>
            <p class="error" id="error">\(error.message)</p>
            <p><a href="/">Back to the assets</a></p>
            """)
    }

    /// The hidden field that carries the CSRF token in every form that changes something.
    var csrfField: HTML { "<input type=\"hidden\" name=\"csrf\" value=\"\(server.csrfToken)\">" }

    // MARK: - Formatting

    /// A byte count as people read it: `512 B`, `1.4 KB`, `3.2 MB` (powers of 1000, as `assetcat stats`).
    static func bytes(_ count: Int64) -> String {
        if count < 1_000 { return "\(count) B" }
        let units = ["KB", "MB", "GB", "TB", "PB", "EB"]
        var value = Double(count) / 1_000
        var unit = 0
        while value >= 999.95 && unit < units.count - 1 {
            value /= 1_000
            unit += 1
        }
        return String(format: "%.1f", value) + " " + units[unit]
    }

    /// A date in UTC, to the minute: `2026-11-29 07:45`.
    static func date(_ date: Date) -> String {
        String(date.formatted(.iso8601).prefix(16)).replacingOccurrences(of: "T", with: " ")
    }

    /// The address of an asset's page.
    static func assetPath(_ id: AssetID) -> String { "/assets/\(id.rawValue)" }

    /// A link to the list with `query` (none: the whole list).
    static func searchPath(_ query: String, _ extra: [(String, String)] = []) -> String {
        let text = URLText.query([("q", query)] + extra)
        return text.isEmpty ? "/" : "/?" + text
    }

    /// `query` with a filter added (`tag:X`, `kind:Y`), the value quoted when it needs to be;
    /// unchanged when it has the filter already.
    static func adding(_ filter: String, _ value: String, to query: String) -> String {
        let simple =
            !value.isEmpty
            && value.unicodeScalars.allSatisfy {
                CharacterSet.alphanumerics.contains($0) || "-_.+@".unicodeScalars.contains($0)
            }
        let item =
            filter + ":"
            + (simple
                ? value
                : "\"" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                    + "\"")
        let trimmed = query.trimmingCharacters(in: .whitespaces)
        if trimmed.split(separator: " ").contains(where: { $0 == item }) { return trimmed }
        return trimmed.isEmpty ? item : trimmed + " " + item
    }
}
