import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import Testing

@testable import CatalogServer

@Suite("CatalogServer: the list, search, facets and jobs")
struct ServerPageTests {
    /// The IDs of the asset rows of a page, in order.
    static func rowIDs(_ html: String) -> [Int64] {
        html.components(separatedBy: "<tr id=\"asset-").dropFirst().compactMap { Int64($0.prefix { $0.isNumber }) }
    }

    @Test("The list pages by ID: each page starts after the last one's last ID")
    func pagingWithAfter() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let paths = try (1...120).map { try t.file(String(format: "f%03d.txt", $0), "file \($0)\n") }
        let ids = try await catalog.add(paths).added.map(\.id.rawValue).sorted()
        let server = try CatalogServer(catalog: catalog, configuration: .init(port: 0))
        try await server.withLiveClient { client in
            let first = try await client.execute(uri: "/", method: .get)
            #expect(Self.rowIDs(first.text) == Array(ids[0..<50]))
            #expect(first.text.contains("<a class=\"button\" id=\"next\" href=\"/?after=\(ids[49])\">Next page →</a>"))
            #expect(first.text.contains("<p class=\"summary\">120 assets, 972 B</p>"))
            let second = try await client.execute(uri: "/?after=\(ids[49])", method: .get)
            #expect(Self.rowIDs(second.text) == Array(ids[50..<100]))
            #expect(second.text.contains("<a href=\"/\">first page</a>"))
            let last = try await client.execute(uri: "/?after=\(ids[99])", method: .get)
            #expect(Self.rowIDs(last.text) == Array(ids[100..<120]))
            #expect(!last.text.contains("id=\"next\""))
            let past = try await client.execute(uri: "/?after=999999999999999999", method: .get)
            #expect(past.status == .ok)
            #expect(past.text.contains("<p class=\"empty\">No assets here.</p>"))
            // Search results page by offset.
            let search = try await client.execute(uri: "/?q=ext%3Atxt&offset=100", method: .get)
            #expect(Self.rowIDs(search.text).count == 20)
            #expect(search.text.contains("Results 101–120"))
        }
    }

    @Test("An image's thumbnail is on its row and served as WebP; an asset without one has a 404")
    func thumbnails() async throws {
        let f = try await ServerFixture.make()
        let image = f.image.id.rawValue
        let notes = f.notes.id.rawValue
        // Should the image have no thumbnail, its jobs say why.
        let jobs = try f.catalog.jobs.list(asset: f.image.id).map { "\($0.kind) \($0.state) \($0.error ?? "")" }
        let file = try #require(try f.catalog.thumbnailURL(of: f.image.id), "the image's jobs: \(jobs)")
        try await f.test { client in
            let list = try await client.execute(uri: "/", method: .get)
            #expect(
                list.text.contains(
                    "<img class=\"thumb\" src=\"/assets/\(image)/thumbnail\" alt=\"\" loading=\"lazy\"><a href=\"/assets/\(image)\">"
                ))
            #expect(list.text.contains("<span class=\"thumb\"></span><a href=\"/assets/\(notes)\">"))
            let served = try await client.execute(uri: "/assets/\(image)/thumbnail", method: .get)
            #expect(served.status == .ok)
            #expect(served.header("Content-Type") == "image/webp")
            #expect(Data(served.body.readableBytesView) == (try Data(contentsOf: file)))
            let none = try await client.execute(uri: "/assets/\(notes)/thumbnail", method: .get)
            #expect(none.status == .notFound)
            #expect(none.text.contains("No thumbnail: this asset has none (yet)."))
        }
    }

    @Test("A search's syntax error is its one line, with its column, in a 400 page")
    func searchSyntaxError() async throws {
        let f = try await ServerFixture.make()
        try await f.test { client in
            let cases = [
                ("size%3E", "search: column 6: expected a size after `size&gt;`, like 10MB or 512KiB"),
                ("notes%20%22%22", "search: column 7: the phrase is empty: expected words between the quotes"),
            ]
            for (query, message) in cases {
                let response = try await client.execute(uri: "/?q=\(query)", method: .get)
                #expect(response.status == .badRequest)
                #expect(
                    response.text.contains("<p class=\"error\" id=\"search-error\">\(message)</p>"), "\(response.text)")
            }
        }
    }

    @Test("Search finds by words and filters; the facets add tag: and kind: to the query")
    func searchAndFacets() async throws {
        let f = try await ServerFixture.make()
        _ = try f.catalog.tag([f.image.id], adding: ["red things"])
        try await f.test { client in
            let list = try await client.execute(uri: "/", method: .get)
            #expect(
                list.text.contains("<li><a href=\"/?q=kind%3Aimage\">image</a> <span class=\"count\">2</span></li>"))
            #expect(list.text.contains("<li><a href=\"/?q=tag%3Ademo\">demo</a> <span class=\"count\">11</span></li>"))
            #expect(list.text.contains("<a href=\"/?q=tag%3A%22red%20things%22\">red things</a>"))
            let words = try await client.execute(uri: "/?q=notes", method: .get)
            #expect(Self.rowIDs(words.text) == [f.notes.id.rawValue])
            #expect(words.text.contains("value=\"notes\""))
            #expect(words.text.contains("<a href=\"/?q=notes%20kind%3Atext\">text</a>"))
            let faceted = try await client.execute(uri: "/?q=tag%3A%22red%20things%22%20kind%3Aimage", method: .get)
            #expect(Self.rowIDs(faceted.text) == [f.image.id.rawValue])
            let members = try await client.execute(uri: "/?q=hello", method: .get)
            #expect(members.text.contains("sample.tar:sample/hello.txt"))
        }
    }

    @Test("An asset's page: fields, tags, its archive with a link, an archive's members a page at a time")
    func assetPage() async throws {
        let f = try await ServerFixture.make()
        try await f.test { client in
            let member = try await client.execute(uri: "/assets/\(f.hello.id)", method: .get)
            #expect(member.text.contains("<h1 id=\"asset-name\">sample.tar:sample/hello.txt</h1>"))
            #expect(
                member.text.contains(
                    "<dt>In archive</dt><dd><a href=\"/assets/\(f.archive.id)\" id=\"archive\">sample.tar</a> "
                        + "<span class=\"muted\">as</span> sample/hello.txt</dd>"))
            #expect(member.text.contains("<code class=\"digest\">\(f.hello.sha256)</code>"))
            #expect(
                member.text.contains(
                    "<nav class=\"crumbs\"><a href=\"/\">Assets</a> / <a href=\"/assets/\(f.archive.id)\" "
                        + "id=\"archive\">sample.tar</a> / <span>sample/hello.txt</span></nav>"))
            #expect(member.text.contains("<pre class=\"text-preview\" id=\"preview-text\">hello, world\n</pre>"))
            let archive = try await client.execute(uri: "/assets/\(f.archive.id)", method: .get)
            let memberIDs = try f.catalog.assets(AssetQuery(archive: f.archive.id)).map(\.id.rawValue)
            #expect(memberIDs.count == 6)
            #expect(ServerPageTests.rowIDs(archive.text) == memberIDs)
            let after = try await client.execute(uri: "/assets/\(f.archive.id)?after=\(memberIDs[3])", method: .get)
            #expect(ServerPageTests.rowIDs(after.text) == Array(memberIDs[4...]))
        }
    }

    @Test("The jobs page lists running and queued jobs with their progress")
    func jobsPage() async throws {
        let f = try await ServerFixture.make()
        let path = try f.t.file("blue.png", Data(contentsOf: testAssets.appending(path: "demo/photos/blue.png")))
        let blue = try #require(try await f.catalog.add([path]).added.first)
        let job = try #require(try f.catalog.jobs.list(asset: blue.id).first)
        try await f.test { client in
            let page = try await client.execute(uri: "/jobs", method: .get)
            #expect(page.status == .ok)
            #expect(page.text.contains("<h2>Running <span class=\"count\">0</span></h2>"))
            #expect(page.text.contains("<h2>Queued <span class=\"count\">2</span></h2>"))  // metadata, thumbnail
            #expect(
                page.text.contains(
                    "<tr><td class=\"num\">\(job.id)</td><td>\(job.kind)</td><td><a href=\"/assets/\(blue.id)\">\(blue.id)</a></td>"
                ))
            #expect(page.text.contains("<progress max=\"100\" value=\"0\">0%</progress> 0%"))
            #expect(page.text.contains("<th>Kind</th><th>Asset</th><th>State</th>"))
            #expect(!page.text.contains("&lt;"))
        }
    }

    @Test("The style sheet is compiled in and served as CSS")
    func styleSheet() async throws {
        let f = try await ServerFixture.make()
        try await f.test { client in
            let css = try await client.execute(uri: "/static/style.css?v=\(StaticFiles.version)", method: .get)
            #expect(css.status == .ok)
            #expect(css.header("Content-Type") == "text/css; charset=utf-8")
            #expect(css.text == StaticFiles.style)
            #expect(try await client.execute(uri: "/static/app.js", method: .get).status == .notFound)
        }
    }
}
