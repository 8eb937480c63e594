import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import Testing

@testable import CatalogServer

/// The repository's `TestAssets/`.
let testAssets = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appending(path: "TestAssets")

/// The name of a file that would run a script if a page put it in as markup (a file's name
/// has no `/`; the browser test has `<script>alert(1)</script>.txt` as an archive's member).
let hostileName = "<img src=x onerror=alert(1)>'\"&.txt"

/// The security headers every response carries, exactly.
let expectedSecurityHeaders: [(String, String)] = [
    (
        "Content-Security-Policy",
        "default-src 'none'; img-src 'self'; style-src 'self'; script-src 'self'; form-action 'self'; "
            + "frame-ancestors 'none'; base-uri 'none'"
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]

/// A catalog with a text file, a file with a hostile name, a PNG image, a file that says it
/// is a PNG but holds HTML, and a tar archive with its members indexed; and a server for it.
struct ServerFixture {
    let t: TestCatalog
    let catalog: Catalog
    let server: CatalogServer
    let notes: AssetRecord
    let hostile: AssetRecord
    let image: AssetRecord
    let fakeImage: AssetRecord
    let archive: AssetRecord
    let hello: AssetRecord

    /// Makes it; `token` guards the server.
    static func make(token: String? = nil, host: String = "127.0.0.1", temporaryDirectory: String? = nil)
        async throws -> ServerFixture
    {
        let t = try TestCatalog()
        let catalog = try t.create()
        let notes = try t.file("notes.txt", "hello notes\n<b>not bold</b>\n")
        let hostile = try t.file(hostileName, "<script>alert(2)</script>\n")
        let image = try t.file("red.png", Data(contentsOf: testAssets.appending(path: "demo/photos/red.png")))
        let fake = try t.file("fake.png", "<html><script>alert(3)</script></html>")
        let archive = try t.file("sample.tar", Data(contentsOf: testAssets.appending(path: "archives/sample-gnu.tar")))
        let added = try await catalog.addAndRunJobs(
            [notes, hostile, image, fake, archive], options: AddOptions(tags: ["demo"]))
        func named(_ name: String) throws -> AssetRecord { try #require(added.first { $0.name == name }) }
        var configuration = CatalogServer.Configuration(host: host, port: 0, token: token)
        configuration.temporaryDirectory = temporaryDirectory
        return ServerFixture(
            t: t, catalog: catalog, server: try CatalogServer(catalog: catalog, configuration: configuration),
            notes: try named("notes.txt"), hostile: try named(hostileName), image: try named("red.png"),
            fakeImage: try named("fake.png"), archive: try named("sample.tar"),
            hello: try #require(added.first { $0.member == "sample/hello.txt" }))
    }

    /// Runs `body` with a client of the server, which listens on a free port meanwhile.
    func test<Value: Sendable>(_ body: @Sendable (LiveClient) async throws -> Value) async throws -> Value {
        try await server.withLiveClient(body)
    }

    /// A form's body: the fields, and the server's CSRF token unless `csrf` says otherwise.
    func form(_ fields: [(String, String)], csrf: String?? = .none) -> ByteBuffer {
        let token = csrf ?? server.csrfToken
        return ByteBuffer(string: URLText.query(fields + (token.map { [("csrf", $0)] } ?? [])))
    }
}

/// `Host`, which HTTPTypes keeps as the request's authority but a client may still send.
let hostField = HTTPField.Name("Host")!

/// The headers of a form's POST.
let formHeaders: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]

extension TestResponse {
    /// The body as text.
    var text: String { String(buffer: body) }

    /// The body's bytes.
    var data: Data { Data(body.readableBytesView) }

    /// The value of the header `name`.
    func header(_ name: String) -> String? { headers[HTTPField.Name(name)!] }
}

/// How many times `needle` occurs in `text`.
func occurrences(of needle: String, in text: String) -> Int {
    text.components(separatedBy: needle).count - 1
}
