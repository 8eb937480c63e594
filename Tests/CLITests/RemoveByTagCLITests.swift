import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `rm --tag T`: every asset with the tag in one deletion, its content gone only after the
/// deletion commits and only when no other asset uses it.
@Suite struct RemoveByTagCLITests {
    @Test func rmTagRemovesTheTaggedAssetsAndKeepsSharedContent() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let a = try t.file("a.txt", "hello\n")
        let copy = try t.file("copy.txt", "hello\n")
        let b = try t.file("b.txt", "bye\n")
        #expect(try await t.run(["add", a, b, "--tag", "go"]).status == 0)
        #expect(try await t.run(["add", copy]).status == 0)
        let shared = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        let catalog = try t.open()
        let bDigest = try #require(try catalog.assets(named: "b.txt").first).sha256
        catalog.close()

        let dry = try await t.run(["rm", "--tag", "go", "--dry-run"])
        #expect(
            dry.stdout == "would remove 1  a.txt\nwould remove 2  b.txt\n"
                + "would remove 2 assets tagged go and 1 file from objects/\n")
        #expect(t.hasObject(shared) && t.hasObject(bDigest))
        #expect(try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n")

        let rm = try await t.run(["rm", "--tag", "go"])
        #expect(rm.status == 0)
        #expect(rm.stdout == "removed 2 assets tagged go\n")
        #expect(!t.hasObject(bDigest))  // its last user is gone
        #expect(t.hasObject(shared))  // copy.txt still uses it
        #expect(
            try await t.run(["ls", "--jsonl", "--fields", "id,name"]).stdout == "{\"id\":3,\"name\":\"copy.txt\"}\n")
        let reopened = try t.open()
        #expect(try reopened.stats().pendingRemovals == 0)
        reopened.close()

        #expect(try await t.run(["rm", "--tag", "go"]).stdout == "removed 0 assets tagged go\n")
    }

    @Test func rmNeedsAssetsOrATagNotBoth() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let neither = try await t.run(["rm"])
        #expect(neither.status == 64)
        #expect(neither.stderr.hasPrefix("Error: Give asset IDs or names, or --tag TAG.\n"))
        let both = try await t.run(["rm", "1", "--tag", "go"])
        #expect(both.status == 64)
        #expect(both.stderr.hasPrefix("Error: Give asset IDs or names, or --tag TAG, not both.\n"))
    }
}
