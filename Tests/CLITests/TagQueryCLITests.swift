import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// Several `--tag` flags combine (an asset needs all of them); `--not-tag` leaves out the
/// assets with a tag — on ls, export and rm alike.
@Suite struct TagQueryCLITests {
    /// A catalog of x.txt (red, big), y.txt (red), z.txt (no tag): IDs 1, 2, 3.
    func catalog() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        #expect(try await t.run(["add", try t.file("x.txt", "x\n"), "--tag", "red", "--tag", "big"]).status == 0)
        #expect(try await t.run(["add", try t.file("y.txt", "y\n"), "--tag", "red"]).status == 0)
        #expect(try await t.run(["add", try t.file("z.txt", "z\n")]).status == 0)
        return t
    }

    @Test func lsCombinesTagsAndExclusions() async throws {
        let t = try await catalog()
        func ls(_ args: [String]) async throws -> String {
            let run = try await t.run(["ls"] + args + ["--jsonl", "--fields", "id,name"])
            #expect(run.status == 0, "\(run.stderr)")
            return run.stdout
        }
        #expect(try await ls(["--tag", "red"]) == "{\"id\":1,\"name\":\"x.txt\"}\n{\"id\":2,\"name\":\"y.txt\"}\n")
        #expect(try await ls(["--tag", "red", "--tag", "big"]) == "{\"id\":1,\"name\":\"x.txt\"}\n")
        #expect(try await ls(["--tag", "big", "--tag", "red"]) == "{\"id\":1,\"name\":\"x.txt\"}\n")
        #expect(try await ls(["--tag", "red", "--not-tag", "big"]) == "{\"id\":2,\"name\":\"y.txt\"}\n")
        #expect(try await ls(["--not-tag", "red"]) == "{\"id\":3,\"name\":\"z.txt\"}\n")
        #expect(try await ls(["--not-tag", "big", "--not-tag", "nothing"]).split(separator: "\n").count == 2)
        #expect(try await ls(["--tag", "no-such-tag"]) == "")
        #expect(try await t.run(["ls", "--tag", "red", "--tag", "big", "--json"]).stdout.contains("\"x.txt\""))
    }

    @Test func exportCombinesTagsAndExclusions() async throws {
        let t = try await catalog()
        let path = t.directory.appending(path: "red.tar").path
        let run = try await t.run(["export", path, "--tag", "red", "--not-tag", "big"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "exported 1 asset (2 B) to \(path)\n")
        let both = try await t.run(["export", path, "--tag", "red", "--tag", "big", "--force"])
        #expect(both.stdout == "exported 1 asset (2 B) to \(path)\n")
        // With IDs, the tags narrow them too.
        let picked = try await t.run(["export", path, "1", "2", "3", "--not-tag", "red", "--force"])
        #expect(picked.stdout == "exported 1 asset (2 B) to \(path)\n")
    }

    @Test func rmCombinesTagsAndExclusions() async throws {
        let t = try await catalog()
        let dry = try await t.run(["rm", "--tag", "red", "--not-tag", "big", "--dry-run"])
        #expect(
            dry.stdout
                == "would remove 2  y.txt\nwould remove 1 asset tagged red but not big and 1 file from objects/\n")
        let rm = try await t.run(["rm", "--tag", "red", "--tag", "big"])
        #expect(rm.stdout == "removed 1 asset tagged red and big\n")
        #expect(try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout == "{\"id\":2}\n{\"id\":3}\n")

        let alone = try await t.run(["rm", "--not-tag", "red"])
        #expect(alone.status == 64)
        #expect(
            alone.stderr.hasPrefix(
                "Error: --not-tag narrows --tag: give --tag TAG too (rm never selects by --not-tag alone).\n"))
        let withIDs = try await t.run(["rm", "2", "--not-tag", "red"])
        #expect(withIDs.status == 64)
        #expect(withIDs.stderr.hasPrefix("Error: --not-tag goes with --tag, not with IDs.\n"))
        #expect(try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout == "{\"id\":2}\n{\"id\":3}\n")
    }
}
