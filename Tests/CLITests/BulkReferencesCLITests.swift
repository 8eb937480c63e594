import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

@testable import assetcat

/// `tag ID...` and `verify ID...` take their references past the first out of the command
/// line before ArgumentParser parses it (``BulkArguments``), as `rm ID...` does: thousands of
/// IDs cost no quadratic parse, and the output and errors are those of a few.
@Suite struct BulkReferencesCLITests {
    /// The references past the first of `tag` and `verify` are taken, around options, their
    /// values and after `--`; another command's arguments are left as they are.
    @Test func tagAndVerifyReferencesPastTheFirstAreTaken() {
        let valued: [String: Set<String>] = ["tag": ["--add", "--remove", "--catalog"], "verify": ["--catalog"]]
        let tag = BulkArguments.take(
            from: ["tag", "3", "--add", "7", "1", "--catalog", "c", "2", "--", "-x"], valued: valued)
        #expect(tag == ["tag", "3", "--add", "7", "--catalog", "c", "--"])
        #expect(BulkArguments.rest() == ["1", "2", "-x"])

        let verify = BulkArguments.take(from: ["verify", "--json", "5", "6", "7"], valued: valued)
        #expect(verify == ["verify", "--json", "5"])
        #expect(BulkArguments.rest() == ["6", "7"])

        let show = BulkArguments.take(from: ["show", "5", "6"], valued: valued)
        #expect(show == ["show", "5", "6"])
        #expect(BulkArguments.rest() == ["6", "7"])  // untouched: `show` reads no rest
    }

    /// A catalog of `count` managed files, `f/0.txt`… (IDs 1…count).
    static func catalog(_ count: Int) async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let files = try (0..<count).map { try t.file("f/\($0).txt", "file \($0)\n") }
        let add = try await t.run(["add"] + files)
        #expect(add.status == 0, "\(add.stderr)")
        return t
    }

    /// More references than a page resolves (500), shuffled, as arguments: `tag` tags every
    /// asset and lists each once; one unknown reference among them changes nothing and is
    /// reported as for one.
    @Test func tagTakesManyReferences() async throws {
        let t = try await Self.catalog(1_100)
        let ids = (1...1_100).map(String.init).shuffled()

        let refused = try await t.run(["tag"] + ids + ["1101", "--add", "bulk"])
        #expect(refused.status == 1)
        #expect(refused.stderr == "assetcat: No asset with ID 1101; list assets with `assetcat ls`\n")
        #expect(try await t.run(["ls", "--tag", "bulk", "--jsonl", "--fields", "id"]).stdout == "")

        let tag = try await t.run(["tag", "--add", "bulk"] + ids)
        #expect(tag.status == 0, "\(tag.stderr)")
        let lines = tag.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 1_100)
        #expect(Set(lines) == Set((1...1_100).map { "\($0)  \($0 - 1).txt  [bulk]" }))
        let listed = try await t.run(["ls", "--tag", "bulk", "--jsonl", "--fields", "id"]).stdout
        #expect(listed.split(separator: "\n").count == 1_100)
    }

    /// `verify` of more references than a page resolves checks each once; an unknown one
    /// among them is reported as for one, and nothing is checked.
    @Test func verifyTakesManyReferences() async throws {
        let t = try await Self.catalog(1_100)
        let ids = (1...1_100).map(String.init).shuffled()

        let refused = try await t.run(["verify"] + ids + ["nope.txt"])
        #expect(refused.status == 1)
        #expect(refused.stderr == "assetcat: No asset named nope.txt; list assets with `assetcat ls`\n")
        #expect(refused.stdout == "")

        let verify = try await t.run(["verify"] + ids + ["--json"])
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.stdout.contains("\"checked\" : 1100"), "\(verify.stdout.prefix(300))")
        let text = try await t.run(["verify", "7", "--catalog", t.root.path, "--", "8", "9"])
        #expect(text.stdout == "checked 3 assets: 0 missing, 0 damaged\n", "\(text.stderr)")
    }
}
