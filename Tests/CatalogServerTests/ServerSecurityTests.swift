import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import Testing

@testable import CatalogServer

@Suite("CatalogServer: security")
struct ServerSecurityTests {
    static let unauthorized =
        "This server needs its token: open the URL `assetcat serve` printed (it ends in ?token=…)."

    @Test("With a token, every request without it is refused, static files too")
    func tokenRequired() async throws {
        let f = try await ServerFixture.make(token: "s3cret")
        try await f.test { client in
            for uri in ["/", "/static/style.css", "/assets/\(f.notes.id)", "/assets/\(f.notes.id)/download", "/jobs"] {
                let response = try await client.execute(uri: uri, method: .get)
                #expect(response.status == .unauthorized, "\(uri)")
                #expect(!response.text.contains("hello notes"))
                #expect(response.text.contains(HTML.escape(Self.unauthorized)), "\(uri)")
            }
            let wrong = try await client.execute(uri: "/?token=s3cre7", method: .get)
            #expect(wrong.status == .unauthorized)
            let wrongCookie = try await client.execute(
                uri: "/", method: .get, headers: [.cookie: "assetcat_token=nope"])
            #expect(wrongCookie.status == .unauthorized)
            // Once in the query: a cookie, and the token out of the address.
            let first = try await client.execute(uri: "/?q=notes&token=s3cret", method: .get)
            #expect(first.status == .seeOther)
            #expect(first.header("Location") == "/?q=notes")
            #expect(first.header("Set-Cookie") == "assetcat_token=s3cret; Path=/; HttpOnly; SameSite=Strict")
            let withCookie = try await client.execute(
                uri: "/static/style.css", method: .get, headers: [.cookie: "theme=x; assetcat_token=s3cret"])
            #expect(withCookie.status == .ok)
            let bearer = try await client.execute(
                uri: "/assets/\(f.notes.id)", method: .get, headers: [.authorization: "Bearer s3cret"])
            #expect(bearer.status == .ok)
            #expect(bearer.text.contains("hello notes"))
        }
    }

    @Test("A server on an address that is not loopback gets a token when given none")
    func generatedToken() async throws {
        let f = try await ServerFixture.make(host: "0.0.0.0")
        let token = try #require(f.server.configuration.token)
        #expect(f.server.generatedToken)
        #expect(token.count == 64)
        #expect(f.server.url(port: 8080).absoluteString == "http://0.0.0.0:8080/?token=\(token)")
        try await f.test { client in
            let response = try await client.execute(uri: "/", method: .get)
            #expect(response.status == .unauthorized)
        }
        let loopback = try await ServerFixture.make()
        #expect(loopback.server.configuration.token == nil)
        #expect(!loopback.server.generatedToken)
    }

    @Test("A loopback server without a token answers to loopback names only")
    func hostChecked() async throws {
        let f = try await ServerFixture.make()
        try await f.test { client in
            let rebound = try await client.execute(uri: "/", method: .get, headers: [hostField: "evil.example:8080"])
            #expect(rebound.status == .forbidden)
            #expect(rebound.text.contains("Forbidden: this server answers to 127.0.0.1 or localhost only."))
            for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"] {
                #expect(try await client.execute(uri: "/", method: .get, headers: [hostField: host]).status == .ok)
            }
        }
    }

    @Test("A POST without the CSRF token, or with a wrong one, is refused and changes nothing")
    func csrfRefused() async throws {
        let f = try await ServerFixture.make()
        let tags = "/assets/\(f.notes.id)/tags"
        try await f.test { client in
            for body in [f.form([("add", "x")], csrf: .some(nil)), f.form([("add", "x")], csrf: "forged")] {
                let response = try await client.execute(uri: tags, method: .post, headers: formHeaders, body: body)
                #expect(response.status == .forbidden)
                #expect(
                    response.text.contains("Forbidden: the form&#39;s CSRF token is missing or wrong; reload the page.")
                )
            }
            let delete = try await client.execute(
                uri: "/assets/\(f.notes.id)/delete", method: .post, headers: formHeaders, body: f.form([], csrf: "x"))
            #expect(delete.status == .forbidden)
            let export = try await client.execute(
                uri: "/export", method: .post, headers: formHeaders,
                body: f.form([("id", "\(f.notes.id)")], csrf: .some(nil)))
            #expect(export.status == .forbidden)
        }
        #expect(try f.catalog.asset(f.notes.id).tags == ["demo"])
        #expect(f.t.hasObject(f.notes.sha256))
    }

    @Test("GET never changes anything: a deletion's GET is its confirmation page")
    func getDoesNotDelete() async throws {
        let f = try await ServerFixture.make()
        try await f.test { client in
            let confirm = try await client.execute(uri: "/assets/\(f.notes.id)/delete", method: .get)
            #expect(confirm.status == .ok)
            #expect(confirm.text.contains("<h1>Delete notes.txt?</h1>"))
            #expect(confirm.text.contains("<form method=\"post\" action=\"/assets/\(f.notes.id)/delete\">"))
            for uri in ["/assets/\(f.notes.id)/tags?add=x", "/export?id=\(f.notes.id)"] {
                let response = try await client.execute(uri: uri, method: .get)
                #expect(response.status == .methodNotAllowed, "\(uri)")
                #expect(
                    response.text.contains("Method not allowed: this address takes a POST from its page&#39;s form."))
            }
            let deleteMethod = try await client.execute(uri: "/assets/\(f.notes.id)", method: .delete)
            #expect(deleteMethod.status == .methodNotAllowed)
        }
        #expect(try f.catalog.asset(f.notes.id).tags == ["demo"])
        #expect(f.t.hasObject(f.notes.sha256))
    }

    @Test("No path reaches the file system: traversal attempts get 404 or 400 and no file's content")
    func pathTraversal() async throws {
        let f = try await ServerFixture.make()
        let attempts = [
            "/assets/../../etc/passwd", "/assets/%2e%2e/%2e%2e/etc/passwd", "/static/../../etc/passwd",
            "/static/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/static/..%2F..%2Fetc%2Fpasswd",
            "/assets/1%2f..%2f..%2fetc%2fpasswd",
            "/assets/\(f.notes.id)/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
            "/static/style.css/../../../etc/passwd",
            "/..%5c..%5cetc%5cpasswd", "/etc/passwd", "//etc/passwd", "/assets//etc/passwd", "/static/",
            "/static/../Package.swift", "/assets/\(f.notes.id)/download/../../../../etc/passwd",
        ]
        try await f.test { client in
            for uri in attempts {
                let response = try await client.execute(uri: uri, method: .get)
                #expect([.notFound, .badRequest].contains(response.status), "\(uri): \(response.status)")
                #expect(!response.text.contains("root:"), "\(uri)")
                #expect(!response.text.contains("swift-tools-version"), "\(uri)")
            }
        }
    }

    @Test("A hostile name shows as text on every page, and a text preview is escaped")
    func hostileNamesEscaped() async throws {
        let f = try await ServerFixture.make()
        let escapedName = "&lt;img src=x onerror=alert(1)&gt;&#39;&quot;&amp;.txt"
        try await f.test { client in
            let list = try await client.execute(uri: "/", method: .get)
            let page = try await client.execute(uri: "/assets/\(f.hostile.id)", method: .get)
            let search = try await client.execute(uri: "/?q=alert", method: .get)
            let confirm = try await client.execute(uri: "/assets/\(f.hostile.id)/delete", method: .get)
            for response in [list, page, search, confirm] {
                #expect(response.status == .ok)
                #expect(response.text.contains(escapedName))
                #expect(!response.text.contains("<script"))
                #expect(!response.text.contains("<img src=x"))
            }
            #expect(page.text.contains("<pre class=\"text-preview\" id=\"preview-text\">&lt;script&gt;alert(2)"))
            let notes = try await client.execute(uri: "/assets/\(f.notes.id)", method: .get)
            #expect(notes.text.contains("hello notes\n&lt;b&gt;not bold&lt;/b&gt;\n</pre>"))
            let download = try await client.execute(uri: "/assets/\(f.hostile.id)/download", method: .get)
            #expect(
                download.header("Content-Disposition")
                    == "attachment; filename=\"_img src=x onerror=alert(1)_'_&.txt\"; "
                    + "filename*=UTF-8''_img%20src%3Dx%20onerror%3Dalert%281%29_%27_%26.txt")
            #expect(download.header("Content-Type") == "application/octet-stream")
        }
    }

    @Test("Bad query strings get 400 or 404 with a short message, never a crash")
    func badQueries() async throws {
        let f = try await ServerFixture.make()
        let number = "Bad request: after must be a whole number from 0 to 999999999999999999."
        let cases: [(String, HTTPResponse.Status, String)] = [
            ("/?after=abc", .badRequest, number),
            ("/?after=-1", .badRequest, number),
            ("/?after=1e3", .badRequest, number),
            ("/?after=99999999999999999999", .badRequest, number),
            ("/?after=9223372036854775807", .badRequest, number),
            ("/assets/\(f.archive.id)?after=x", .badRequest, number),
            ("/?bogus=1", .badRequest, "Bad request: unknown parameter &quot;bogus&quot;."),
            ("/jobs?x", .badRequest, "Bad request: unknown parameter &quot;x&quot;."),
            (
                "/assets/\(f.notes.id)/download?name=/etc/passwd", .badRequest,
                "Bad request: unknown parameter &quot;name&quot;."
            ),
            ("/?q=%FF%FE", .badRequest, "Bad request: the query&#39;s percent-escapes are not UTF-8."),
            ("/?q=%G1", .badRequest, "Bad request: a % in the query is not followed by two hex digits."),
            ("/?q=abc%", .badRequest, "Bad request: a % in the query is not followed by two hex digits."),
            ("/?%FF=1", .badRequest, "Bad request: the query&#39;s percent-escapes are not UTF-8."),
            ("/?offset=5", .badRequest, "Bad request: offset pages search results; the list pages with after."),
            (
                "/?q=notes&after=5", .badRequest,
                "Bad request: after pages the list; search results page with offset."
            ),
            (
                "/?q=notes&offset=100001", .badRequest,
                "Bad request: offset goes up to 100000; narrow the search instead."
            ),
            ("/assets/abc", .notFound, "Not found: no page has this address."),
            ("/assets/-1", .notFound, "Not found: no page has this address."),
            ("/assets/0", .notFound, "Not found: no page has this address."),
            ("/assets/0x10", .notFound, "Not found: no page has this address."),
            ("/assets/99999999999999999999999", .notFound, "Not found: no page has this address."),
            ("/assets/987654", .notFound, "No asset with ID 987654; list assets with `assetcat ls`"),
            ("/assets/987654/download", .notFound, "No asset with ID 987654; list assets with `assetcat ls`"),
        ]
        try await f.test { client in
            for (uri, status, message) in cases {
                let response = try await client.execute(uri: uri, method: .get)
                #expect(response.status == status, "\(uri)")
                #expect(
                    response.text.contains("<p class=\"error\" id=\"error\">\(message)</p>"), "\(uri): \(response.text)"
                )
            }
        }
    }

    @Test("Every kind of response carries the CSP, nosniff and no-referrer headers")
    func securityHeadersEverywhere() async throws {
        let f = try await ServerFixture.make()
        let guarded = try await ServerFixture.make(token: "t0ken")
        var responses: [(String, TestResponse)] = try await f.test { client in
            var responses: [(String, TestResponse)] = []
            for uri in [
                "/", "/?q=notes", "/?q=%22", "/assets/\(f.notes.id)", "/assets/\(f.image.id)/content",
                "/assets/\(f.notes.id)/content", "/assets/\(f.hello.id)/download", "/static/style.css", "/jobs",
                "/nope", "/?after=x", "/assets/\(f.notes.id)/delete",
            ] {
                responses.append((uri, try await client.execute(uri: uri, method: .get)))
            }
            let tags = "/assets/\(f.notes.id)/tags"
            responses.append(
                (
                    "POST tags",
                    try await client.execute(
                        uri: tags, method: .post, headers: formHeaders, body: f.form([("add", "k")]))
                ))
            responses.append(
                (
                    "POST no csrf",
                    try await client.execute(
                        uri: tags, method: .post, headers: formHeaders, body: f.form([("add", "k")], csrf: .some(nil)))
                ))
            responses.append(
                (
                    "POST export",
                    try await client.execute(
                        uri: "/export", method: .post, headers: formHeaders, body: f.form([("id", "\(f.notes.id)")]))
                ))
            return responses
        }
        responses += try await guarded.test { client in
            [
                ("401", try await client.execute(uri: "/static/style.css", method: .get)),
                ("303", try await client.execute(uri: "/?token=t0ken", method: .get)),
            ]
        }
        #expect(Set(responses.map { $0.1.status.code }) == [200, 303, 400, 401, 403, 404])
        for (what, response) in responses {
            for (name, value) in expectedSecurityHeaders {
                #expect(response.header(name) == value, "\(what): \(name)")
            }
        }
    }

    @Test("An image preview is served with its sniffed type only; anything else is not served to render")
    func previewsDoNotExecute() async throws {
        let f = try await ServerFixture.make()
        try await f.test { client in
            let image = try await client.execute(uri: "/assets/\(f.image.id)/content", method: .get)
            #expect(image.status == .ok)
            #expect(image.header("Content-Type") == "image/png")
            #expect(image.data == (try Data(contentsOf: testAssets.appending(path: "demo/photos/red.png"))))
            for asset in [f.fakeImage, f.notes, f.hostile] {
                let response = try await client.execute(uri: "/assets/\(asset.id)/content", method: .get)
                #expect(response.status == .notFound)
                #expect(response.header("Content-Type") == "text/html; charset=utf-8")
                #expect(!response.text.contains("alert(3)"))
                #expect(response.text.contains("No preview: only PNG, JPEG, GIF and WebP images are shown."))
            }
            let page = try await client.execute(uri: "/assets/\(f.image.id)", method: .get)
            #expect(
                page.text.contains("<img id=\"preview-image\" src=\"/assets/\(f.image.id)/content\" alt=\"red.png\">"))
            let fake = try await client.execute(uri: "/assets/\(f.fakeImage.id)", method: .get)
            #expect(!fake.text.contains("<img"))
        }
    }
}
