import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `ls --json` of a catalog that imported a committed bundle (TestAssets/bundles/records-v1)
/// is the committed listing, byte for byte: the CLI's JSON form of an asset does not drift.
@Suite struct RecordsFixtureCLITests {
    static func fixture(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "TestAssets/bundles").appending(path: name).path
    }

    @Test func lsJSONOfAnImportedBundleIsTheCommittedListing() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let bundle = Self.fixture("records-v1")
        let imported = try await t.run(["import", bundle])
        #expect(imported.stdout == "imported 13 assets from \(bundle)\n", "\(imported.stderr)")
        let expected = try String(contentsOfFile: Self.fixture("records-v1.ls.json"), encoding: .utf8)
        #expect(try await t.run(["ls", "--json"]).stdout == expected)
    }
}
