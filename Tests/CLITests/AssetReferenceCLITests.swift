import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// How the CLI reads an asset named on its command line: an ID written canonically that an
/// asset has, else a name; a name two assets share is refused with their IDs.
@Suite struct AssetReferenceCLITests {
    @Test func aSharedNameIsRefusedWithTheIDsToUseInstead() async throws {
        let t = try TestCatalog()
        let first = try t.file("one/x.txt", "one\n")
        let second = try t.file("two/x.txt", "two\n")
        #expect(try await t.run(["init", t.root.path]).status == 0)
        #expect(try await t.run(["add", first, second]).status == 0)
        for command in [["show"], ["cat"], ["rm"], ["tag", "--add", "t"], ["verify"], ["export", "out.tar"]] {
            let run = try await t.run(command + ["x.txt"], in: t.directory)
            #expect(run.status == 1, "\(command)")
            #expect(run.stderr == "assetcat: 2 assets are named x.txt (IDs 1, 2); use an ID\n", "\(command)")
        }
        // Nothing was removed, tagged or written.
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.assets().map { [$0.name] + $0.tags } == [["x.txt"], ["x.txt"]])
        #expect(!FileManager.default.fileExists(atPath: t.directory.appending(path: "out.tar").path))
        #expect(try await t.run(["cat", "2"]).stdout == "two\n")
    }

    @Test func aCanonicalIDWinsThenANameThatLooksLikeANumber() async throws {
        let t = try TestCatalog()
        let files =
            try [t.file("2024", "year\n"), t.file("1", "one\n"), t.file("007", "bond\n")]
            + (4...7).map { try t.file("f\($0)", "file \($0)\n") }
        #expect(try await t.run(["init", t.root.path]).status == 0)
        #expect(try await t.run(["add"] + files).status == 0)  // IDs 1 to 7
        // 1 is an ID (of the asset named 2024), though an asset is named 1.
        #expect(try await t.run(["cat", "1"]).stdout == "year\n")
        // No asset has ID 2024: it is the name.
        #expect(try await t.run(["cat", "2024"]).stdout == "year\n")
        // 007 is not how ID 7 is written: it is a name.
        #expect(try await t.run(["cat", "7"]).stdout == "file 7\n")
        #expect(try await t.run(["cat", "007"]).stdout == "bond\n")
        let missing = try await t.run(["cat", "99"])
        #expect(missing.status == 1)
        #expect(missing.stderr == "assetcat: No asset with ID 99; list assets with `assetcat ls`\n")
        let unnamed = try await t.run(["rm", "2", "nope"])
        #expect(unnamed.status == 1)
        #expect(unnamed.stderr == "assetcat: No asset named nope; list assets with `assetcat ls`\n")
        #expect(try await t.run(["cat", "2"]).stdout == "one\n")  // the whole command was refused
    }

    /// IDs are typed in the library; the JSON a script reads still has bare numbers.
    @Test func idsInJSONOutputAreBareNumbers() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let archive = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "TestAssets/archives/sample.tar").path
        #expect(try await t.run(["add", archive]).status == 0)
        #expect(try await t.run(["jobs", "run"]).status == 0)
        let ls = try await t.run(["ls", "--json"]).stdout.components(separatedBy: "\n")
        #expect(ls.contains("    \"id\" : 1,") && ls.contains("    \"id\" : 2,"))
        #expect(ls.contains("    \"archive\" : null,") && ls.contains("    \"archive\" : 1,"))
        let show = try await t.run(["show", "2", "--json"]).stdout.components(separatedBy: "\n")
        #expect(show.contains("  \"id\" : 2,") && show.contains("  \"archive\" : 1,"))
        let jobs = try await t.run(["jobs", "ls", "--json"]).stdout.components(separatedBy: "\n")
        #expect(jobs.contains("    \"asset\" : 1,"))
    }
}
