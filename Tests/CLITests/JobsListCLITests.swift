import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `assetcat jobs ls --asset ID --state S`: the catalog filters, the CLI prints.
@Suite struct JobsListCLITests {
    @Test func jobsLsFiltersByAssetAndState() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let photos = [try t.file("one.png", png), try t.file("two.png", png + [0])]
        #expect(try await t.run(["add", "--queue-only"] + photos).stdout.contains("queued 4 jobs"))
        #expect(try await t.run(["jobs", "cancel", "1"]).status == 0)
        let header = "     ID  KIND              ASSET  STATE       PROGRESS  ATTEMPTS  ERROR\n"
        let one = "      1  metadata              1  cancelled         0%         0  cancelled\n"
        let oneThumbnail = "      2  thumbnail             1  queued            0%         0  \n"
        let two = "      3  metadata              2  queued            0%         0  \n"
        let twoThumbnail = "      4  thumbnail             2  queued            0%         0  \n"

        #expect(try await t.run(["jobs", "ls"]).stdout == header + one + oneThumbnail + two + twoThumbnail)
        #expect(try await t.run(["jobs", "ls", "--asset", "2"]).stdout == header + two + twoThumbnail)
        #expect(try await t.run(["jobs", "ls", "--state", "cancelled"]).stdout == header + one)
        #expect(try await t.run(["jobs", "ls", "--asset", "2", "--state", "cancelled"]).stdout == header)
        let json = Data(try await t.run(["jobs", "ls", "--state", "queued", "--json"]).stdout.utf8)
        let jobs = try #require(try JSONSerialization.jsonObject(with: json) as? [[String: Any]])
        #expect(jobs.map { $0["id"] as? Int } == [2, 3, 4])

        let bad = try await t.run(["jobs", "ls", "--state", "done"])
        #expect(bad.status == 64)  // a usage error
        #expect(bad.stderr.contains("Unknown --state 'done': use queued, running, succeeded, failed or cancelled"))
        #expect(bad.stdout == "")
    }
}
