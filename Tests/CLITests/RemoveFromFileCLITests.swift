import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `rm --from-file FILE` (`-`: standard input): the IDs or names to remove, one a line, read
/// rather than parsed as arguments; the same removal as `rm ID...`.
@Suite struct RemoveFromFileCLITests {
    /// A catalog with `a.txt`, `b.txt`, `c.txt` (IDs 1, 2, 3), each its own content.
    static func catalog() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let files = try ["a", "b", "c"].map { try t.file("\($0).txt", "\($0)\n") }
        #expect(try await t.run(["add"] + files).status == 0)
        return t
    }

    static func ids(_ t: TestCatalog) async throws -> String {
        try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout
    }

    @Test func removesTheListedAssetsSkippingEmptyLinesAndRepeats() async throws {
        let t = try await Self.catalog()
        let list = try t.file("list.txt", "3\n\n1\nc.txt\n3\n\n")
        let dry = try await t.run(["rm", "--from-file", list, "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(
            dry.stdout
                == "would remove 1  a.txt\nwould remove 3  c.txt\nwould remove 2 assets and 2 files from objects/\n")
        #expect(try await Self.ids(t) == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n")

        let rm = try await t.run(["rm", "--from-file", list])
        #expect(rm.status == 0, "\(rm.stderr)")
        #expect(rm.stdout == "removed 1  a.txt\nremoved 3  c.txt\nremoved 2 assets and 2 files from objects/\n")
        #expect(try await Self.ids(t) == "{\"id\":2}\n")
    }

    @Test func readsStandardInputForADash() async throws {
        let t = try await Self.catalog()
        let list = try t.file("list.txt", "b.txt\n2")  // the last line without a line break
        let rm = try await t.run(["rm", "--from-file", "-"], stdin: .file(list))
        #expect(rm.status == 0, "\(rm.stderr)")
        #expect(rm.stdout == "removed 2  b.txt\nremoved 1 asset and 1 file from objects/\n")
        #expect(try await Self.ids(t) == "{\"id\":1}\n{\"id\":3}\n")
    }

    @Test func anUnknownReferenceRemovesNothing() async throws {
        let t = try await Self.catalog()
        for (line, message) in [
            ("99", "assetcat: No asset with ID 99; list assets with `assetcat ls`\n"),
            ("nope.txt", "assetcat: No asset named nope.txt; list assets with `assetcat ls`\n"),
        ] {
            let list = try t.file("list.txt", "1\n\(line)\n3\n")
            let rm = try await t.run(["rm", "--from-file", list])
            #expect(rm.status == 1)
            #expect(rm.stderr == message)
            #expect(rm.stdout == "")
            #expect(try await Self.ids(t) == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n")
        }
    }

    @Test func anAmbiguousNameRemovesNothing() async throws {
        let t = try await Self.catalog()
        let twin = try t.file("twin/a.txt", "other\n")
        #expect(try await t.run(["add", twin]).status == 0)
        let rm = try await t.run(["rm", "--from-file", try t.file("list.txt", "2\na.txt\n")])
        #expect(rm.status == 1)
        #expect(rm.stderr == "assetcat: 2 assets are named a.txt (IDs 1, 4); use an ID\n")
        #expect(try await Self.ids(t) == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n{\"id\":4}\n")
    }

    @Test func aFileThatCannotBeReadIsNamed() async throws {
        let t = try await Self.catalog()
        let missing = t.directory.appending(path: "no-such-list").path
        let rm = try await t.run(["rm", "--from-file", missing])
        #expect(rm.status == 1)
        #expect(rm.stderr == "assetcat: Could not read \(missing): No such file or directory\n")
        let folder = try await t.run(["rm", "--from-file", t.directory.path])
        #expect(folder.status == 1)
        #expect(folder.stderr == "assetcat: Could not read \(t.directory.path): Is a directory\n")
        #expect(try await Self.ids(t) == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n")
    }

    @Test func fromFileGoesAlone() async throws {
        let t = try await Self.catalog()
        for extra in [["1"], ["--tag", "x"]] {
            let rm = try await t.run(["rm", "--from-file", "-"] + extra)
            #expect(rm.status == 64)
            #expect(rm.stderr.hasPrefix("Error: Give --from-file FILE alone, without asset IDs, names or --tag.\n"))
        }
        let help = try await t.run(["rm", "--help"], namesCatalog: false)
        #expect(help.stdout.contains("--from-file <FILE>"))
        #expect(help.stdout.contains("('-'"))
    }
}
