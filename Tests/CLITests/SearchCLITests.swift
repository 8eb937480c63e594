import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `assetcat search`: a page of matches as `ls` prints them (or JSON), the next page named on
/// stderr, and a query it cannot read refused in one line that points at the column.
@Suite struct SearchCLITests {
    /// A catalog with beach.png (tagged trip), beach-notes.txt and other.txt.
    func populated() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let beach = try t.file("beach.png", try Data(contentsOf: CLITests.redPNG))
        let notes = try t.file("beach-notes.txt", "notes\n")
        let other = try t.file("other.txt", "other\n")
        #expect(try await t.run(["add", beach, "--tag", "trip"]).status == 0)
        #expect(try await t.run(["add", notes, other]).status == 0)
        return t
    }

    @Test func printsAPageOfMatchesAndNamesTheNext() async throws {
        let t = try await populated()
        let all = try await t.run(["search", "beach"])
        #expect(all.status == 0)
        #expect(all.stdout.split(separator: "\n").count == 3)  // the header and two matches
        #expect(all.stderr == "")
        let first = try await t.run(["search", "beach", "--limit", "1"])
        #expect(first.stdout.split(separator: "\n").count == 2)
        #expect(first.stderr == "more matches: --page 2, or --all\n")
        let second = try await t.run(["search", "beach", "--limit", "1", "--page", "2"])
        #expect(second.stdout.split(separator: "\n").count == 2 && second.stdout != first.stdout)
        #expect(second.stderr == "")
        #expect(
            try await t.run(["search", "beach", "tag:trip", "--jsonl", "--fields", "id,name"]).stdout
                == "{\"id\":1,\"name\":\"beach.png\"}\n")
        #expect(
            try await t.run(["search", "ext:txt", "--all", "--jsonl", "--fields", "name"]).stdout
                == "{\"name\":\"beach-notes.txt\"}\n{\"name\":\"other.txt\"}\n")
        #expect(try await t.run(["search", "zebra", "--json"]).stdout == "[]\n")
    }

    @Test func aQueryItCannotReadIsOneLineWithItsColumn() async throws {
        let t = try await populated()
        let cases: [([String], String)] = [
            (["beach", "size>"], "search: column 12: expected a size after `size>`, like 10MB or 512KiB"),
            (
                ["kind:photo"],
                "search: column 6: unknown kind `photo`; expected one of image, audio, video, text, document, archive, data"
            ),
            (["\"beach"], "search: column 1: a phrase opened here is not closed: expected `\"`"),
            (
                ["foo:bar"],
                "search: column 1: unknown filter `foo:`; expected one of tag:, kind:, ext:, storage:, archive:, size>, added<"
            ),
        ]
        for (query, message) in cases {
            let run = try await t.run(["search"] + query)
            #expect(run.status == 64)
            #expect(run.stdout == "")
            #expect(run.stderr == "assetcat: \(message)\n")
        }
        // With an unknown option too, the query's error is the one line: the command line is
        // parsed (the query checked) before the options are.
        let both = try await t.run(["search", "beach", "size>", "--bogus"])
        #expect(both.status == 64)
        #expect(both.stderr == "assetcat: search: column 12: expected a size after `size>`, like 10MB or 512KiB\n")
        let unknown = try await t.run(["search", "beach", "--bogus"])
        #expect(unknown.status == 64)
        #expect(
            unknown.stderr
                == "assetcat: unknown option '--bogus'; a name that begins with '-' goes after '--': "
                + "assetcat search -- --bogus\n")
    }
}
