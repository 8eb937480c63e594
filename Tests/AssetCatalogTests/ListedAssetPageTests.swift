import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// `listedAssets(_:after:limit:)` (the pages of `assetcat serve`): a page of a listing by ID
/// that starts after a given ID, with archive names; and `AssetQuery.archive`, an archive's
/// members.
@Suite struct ListedAssetPageTests {
    @Test func pagesStartAfterTheGivenIDAndNameTheirArchive() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let zip = testAsset("archives/sample.zip")
        let texts = try (1...3).map { try t.file("t\($0).txt", "text \($0)\n") }
        let all = try await catalog.addAndRunJobs([zip] + texts).map(\.id)
        #expect(all.count == 10)  // the archive, its six members, three texts

        var seen: [AssetID] = []
        var page = try catalog.listedAssets(limit: 4)
        while let last = page.last {
            #expect(page.count <= 4)
            seen += page.map(\.record.id)
            page = try catalog.listedAssets(after: last.record.id, limit: 4)
        }
        #expect(seen == all.sorted())

        let archive = try #require(try catalog.assets(named: "sample.zip").first)
        let members = try catalog.listedAssets(AssetQuery(archive: archive.id), limit: 100)
        #expect(members.count == 6)
        #expect(members.allSatisfy { $0.record.archive == archive.id && $0.archiveName == "sample.zip" })
        #expect(members.first?.location == "sample.zip:sample/hello.txt")
        let rest = try catalog.listedAssets(AssetQuery(archive: archive.id), after: members[1].record.id, limit: 100)
        #expect(rest.map(\.record.id) == members.dropFirst(2).map(\.record.id))
        #expect(try catalog.assets(AssetQuery(archive: archive.id)).count == 6)
        #expect(try catalog.assets(AssetQuery(archive: AssetID(999_999))).isEmpty)
        #expect(AssetQuery(archive: archive.id).matches(members[0].record))
        #expect(!AssetQuery(archive: archive.id).matches(archive))

        #expect(throws: CatalogError.self) { try catalog.listedAssets(limit: 0) }
    }
}
