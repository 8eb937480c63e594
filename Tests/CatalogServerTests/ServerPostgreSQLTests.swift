import AssetCatalogTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog
@testable import CatalogServer

@Suite("CatalogServer: a PostgreSQL catalog")
struct ServerPostgreSQLTests {
    @Test("Every page reads afresh: what another host adds shows on the next load")
    func liveView() async throws {
        let components = try PostgreSQLTestServer.newSchema()
        let location = try CatalogStoreLocation(components.string!)
        let identity = CatalogIdentity(
            id: UUID(), created: Date(), store: try location.withoutPassword.redacted.absoluteString)
        let t = try TestCatalog()
        let catalog = try Catalog(
            root: t.root, options: .init(createIfMissing: true), creating: true, store: (location, identity))
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("first.txt", "first\n")])
        // A second opening: another host, with connections of its own.
        let other = try Catalog(root: t.root, options: .init(), creating: false, store: (location, identity))
        defer { other.close() }
        let server = try CatalogServer(catalog: catalog, configuration: .init(port: 0))
        try await server.withLiveClient { client in
            let before = try await client.execute(uri: "/", method: .get)
            #expect(before.text.contains(">first.txt</a>"))
            #expect(!before.text.contains("second.txt"))
            let second = try #require(try await other.add([try t.file("second.txt", "second\n")]).added.first)
            let after = try await client.execute(uri: "/", method: .get)
            #expect(after.text.contains("<a href=\"/assets/\(second.id)\">second.txt</a>"))
            let search = try await client.execute(uri: "/?q=second", method: .get)
            #expect(ServerPageTests.rowIDs(search.text) == [second.id.rawValue])
            // A deletion from the page on one host is seen by the other.
            let form = ByteBuffer(string: "csrf=\(server.csrfToken)")
            let deleted = try await client.execute(
                uri: "/assets/\(second.id)/delete", method: .post, headers: formHeaders, body: form)
            #expect(deleted.status == .ok)
            #expect(throws: CatalogError.self) { try other.asset(second.id) }
        }
    }
}
