import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `rm ID...`: the references may stand before, between and after options, and after `--`;
/// however many there are, the output is the same as for a few (one line per asset, by ID).
@Suite struct RemoveByIDsCLITests {
    @Test func referencesAroundOptionsAndAfterTheTerminator() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let files = try ["a", "b", "c", "-d"].map { try t.file("\($0).txt", "\($0)\n") }
        #expect(try await t.run(["add"] + files).status == 0)
        let catalog = ["--catalog", t.root.path]

        let dry = try await t.run(["rm", "3", "--dry-run"] + catalog + ["1", "--", "-d.txt", "2"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(
            dry.stdout
                == "would remove 1  a.txt\nwould remove 2  b.txt\nwould remove 3  c.txt\nwould remove 4  -d.txt\n"
                + "would remove 4 assets and 4 files from objects/\n")
        // A value option takes the argument after it, whatever it looks like.
        let both = try await t.run(["rm", "--tag", "1", "2", "3"] + catalog)
        #expect(both.status == 64)
        #expect(both.stderr.hasPrefix("Error: Give asset IDs or names, or --tag TAG, not both.\n"))

        let rm = try await t.run(["rm"] + catalog + ["2", "--", "-d.txt"])
        #expect(rm.status == 0, "\(rm.stderr)")
        #expect(rm.stdout == "removed 2  b.txt\nremoved 4  -d.txt\nremoved 2 assets and 2 files from objects/\n")
        #expect(try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout == "{\"id\":1}\n{\"id\":3}\n")
    }

    /// More references than a page resolves (500), in a shuffled order: every asset goes,
    /// listed by ID; one unknown reference among them removes nothing.
    @Test func manyReferencesAsArguments() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let files = try (0..<1_100).map { try t.file("f/\($0).txt", "file \($0)\n") }
        let add = try await t.run(["add"] + files)
        #expect(add.status == 0, "\(add.stderr)")
        let ids = (1...1_100).map(String.init).shuffled()

        let refused = try await t.run(["rm"] + ids + ["1101"])
        #expect(refused.status == 1)
        #expect(refused.stderr == "assetcat: No asset with ID 1101; list assets with `assetcat ls`\n")
        #expect(try await t.run(["stats", "--json"]).stdout.contains("\"assets\" : 1100"))

        let rm = try await t.run(["rm"] + ids)
        #expect(rm.status == 0, "\(rm.stderr)")
        let lines = rm.stdout.split(separator: "\n")
        #expect(lines.count == 1_101)
        #expect(lines.first.map(String.init) == "removed 1  0.txt")
        #expect(lines.last.map(String.init) == "removed 1100 assets and 1100 files from objects/")
        #expect(lines.dropLast() == (1...1_100).map { "removed \($0)  \($0 - 1).txt" }[...])
        #expect(try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout == "")
    }
}
