import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// The `assetcat` binary, run as a user would, its output compared exactly.
@Suite struct CLITests {
    static let redPNG = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "TestAssets/demo/photos/red.png")

    /// A catalog with three files: a.txt and copy.txt (same content), photo.jpg (a 4 × 4 PNG,
    /// TestAssets/demo/photos/red.png: its thumbnail job makes a thumbnail).
    func populated() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).stdout == "Created an empty catalog in \(t.root.path)\n")
        let a = try t.file("a.txt", "hello\n")
        let copy = try t.file("copy.txt", "hello\n")
        let photo = try t.file("photo.jpg", try Data(contentsOf: Self.redPNG))
        let add = try await t.run(["add", a, copy, photo, "--tag", "demo"])
        #expect(add.status == 0)
        // photo.jpg gets a metadata job and a thumbnail job, which add runs before it returns.
        #expect(add.stdout == "added 3 files\n")
        #expect(add.stderr == "")  // no progress bar in a pipe
        return t
    }

    @Test func lsPrintsStableColumns() async throws {
        let t = try await populated()
        let ls = try await t.run(["ls"])
        #expect(
            ls.stdout == """
                     ID  KIND      STORAGE             SIZE  SHA256        NAME
                      1  text      managed                6  5891b5b522d5  a.txt
                      2  text      managed                6  5891b5b522d5  copy.txt
                      3  image     managed               73  3fd6e6be528c  photo.jpg

                """)
        #expect(try await t.run(["ls", "--kind", "image"]).stdout.components(separatedBy: "\n").count == 3)
        #expect(try await t.run(["ls", "--tag", "nope"]).stdout == ls.stdout.components(separatedBy: "\n")[0] + "\n")
    }

    @Test func lsJSONOfAnEmptyCatalogIsAnEmptyArray() async throws {
        let t = try TestCatalog()
        try t.create().close()
        #expect(try await t.run(["ls", "--json"]).stdout == "[]\n")
    }

    @Test func lsJSONHasTheStableFieldNames() async throws {
        let t = try await populated()
        let data = Data(try await t.run(["ls", "--json"]).stdout.utf8)
        let array = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
        #expect(array.count == 3)
        #expect(
            Set(array[0].keys) == [
                "id", "name", "kind", "size", "sha256", "storage", "path", "archive", "member", "tags", "created",
                "modified", "metadata",
            ])
        #expect(array[0]["storage"] as? String == "managed")
        #expect(array[0]["tags"] as? [String] == ["demo"])
        #expect(array[0]["archive"] is NSNull)
    }

    @Test func rmRemovesTheFileOnlyWithItsLastUser() async throws {
        let t = try await populated()
        let digest = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        let dry = try await t.run(["rm", "1", "2", "--dry-run"])
        #expect(
            dry.stdout
                == "would remove 1  a.txt\nwould remove 2  copy.txt\nwould remove 2 assets and 1 file from objects/\n")
        #expect(t.hasObject(digest))
        #expect(try await t.run(["rm", "1"]).stdout == "removed 1  a.txt\nremoved 1 asset and 0 files from objects/\n")
        #expect(t.hasObject(digest))
        #expect(
            try await t.run(["rm", "copy.txt"]).stdout
                == "removed 2  copy.txt\nremoved 1 asset and 1 file from objects/\n")
        #expect(!t.hasObject(digest))
    }

    @Test func catWritesBytesIncludingArchiveMembers() async throws {
        let t = try await populated()
        #expect(try await t.run(["cat", "1"]).stdout == "hello\n")
        try t.file("pack/inner/doc.txt", "inside the archive\n")
        let archive = t.sources.appending(path: "pack.zip").path
        _ = try await ChildProcess.run(
            "/usr/bin/bsdtar", ["-a", "-cf", archive, "-C", t.sources.appending(path: "pack").path, "inner/doc.txt"],
            stdout: .inherit, stderr: .inherit)
        // Its members are recorded by the index job, which add runs before it returns.
        #expect(try await t.run(["add", archive]).stdout == "added 1 file\n")
        #expect(try await t.run(["cat", "inner/doc.txt"]).stdout == "inside the archive\n")
    }

    @Test func tagShowAndStats() async throws {
        let t = try await populated()
        #expect(
            try await t.run(["tag", "3", "--add", "cover", "--remove", "demo"]).stdout == "3  photo.jpg  [cover]\n")
        let show = try await t.run(["show", "photo.jpg"]).stdout.components(separatedBy: "\n")
        #expect(
            Array(show.prefix(8)) == [
                "id:       3", "name:     photo.jpg", "kind:     image", "storage:  managed", "size:     73",
                "sha256:   3fd6e6be528c182d768563a63b65ac5a70d022149a01eeeaaa30396d75f426e0",
                "path:     \(t.sources.appending(path: "photo.jpg").path)", "tags:     cover",
            ])
        let stats = try await t.run(["stats"]).stdout.components(separatedBy: "\n")
        #expect(stats[0] == "assets:        3 (3 managed, 0 referenced, 0 members)")
        #expect(stats[3] == "objects/:      2 files, 79 B")
    }

    @Test func errorsAreOneLineNamingTheThingWithANonZeroExit() async throws {
        let t = try await populated()
        let missing = try await t.run(["show", "99"])
        #expect(missing.status == 1)
        #expect(missing.stderr == "assetcat: No asset with ID 99; list assets with `assetcat ls`\n")
        let ambiguous = try await t.run(["rm", "nope.txt"])
        #expect(ambiguous.stderr == "assetcat: No asset named nope.txt; list assets with `assetcat ls`\n")
        let directory = try await t.run(["add", t.sources.path])
        #expect(directory.status == 1)
        #expect(directory.stderr == "assetcat: \(t.sources.path) is a directory; add it with --recursive\n")
        let again = try await t.run(["init", t.root.path])
        #expect(again.stderr == "assetcat: A catalog already exists at \(t.root.path)\n")
        let nowhere = try await t.run(["ls", "--catalog", t.directory.appending(path: "none").path])
        #expect(
            nowhere.stderr
                == "assetcat: No catalog at \(t.directory.appending(path: "none").path); create one with `assetcat init`\n"
        )
        let usage = try await t.run(["tag", "1"])
        #expect(usage.status == 64)
        #expect(usage.stderr.hasPrefix("Error: Give --add TAG or --remove TAG."))
    }

    @Test func verifyExitsOneWhenContentIsMissingOrDamaged() async throws {
        let t = try await populated()
        #expect(try await t.run(["verify"]).stdout == "checked 3 assets: 0 missing, 0 damaged\n")
        try FileManager.default.removeItem(
            atPath: t.objectPath("5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"))
        let verify = try await t.run(["verify"])
        #expect(verify.status == 1)
        let objects = t.root.appending(
            path: "objects/58/91b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        ).path
        #expect(
            verify.stdout
                == "missing  1  a.txt  \(objects)\nmissing  2  copy.txt  \(objects)\nchecked 3 assets: 2 missing, 0 damaged\n"
        )
    }

    @Test func theCatalogIsFoundByOptionEnvironmentOrNearestDotAssetcat() async throws {
        let t = try TestCatalog()
        let project = t.directory.appending(path: "project")
        let deep = project.appending(path: "a/b")
        try FileManager.default.createDirectory(at: deep, withIntermediateDirectories: true)
        #expect(
            try await t.run(["init"], in: project).stdout == "Created an empty catalog in \(project.path)/.assetcat\n")
        let file = try t.file("x.txt", "x")
        // The nearest .assetcat above the working directory.
        let process = try await t.run(["add", file], namesCatalog: false, in: deep)
        #expect(process.stdout == "added 1 file\n")
        let viaEnvironment = try await t.run(
            ["ls"], namesCatalog: false, environment: ["ASSETCAT_CATALOG": "\(project.path)/.assetcat"], in: t.directory
        )
        #expect(viaEnvironment.stdout.hasSuffix("  x.txt\n"))
        let none = try await t.run(["ls"], namesCatalog: false, in: t.directory)
        #expect(none.status == 1)
        #expect(
            none.stderr
                == "assetcat: No catalog here: no .assetcat directory in \(t.directory.path) or above; run `assetcat init`, "
                + "or pass --catalog PATH or set ASSETCAT_CATALOG\n")
    }
}

/// On a terminal (a pty made by `script`), long work shows a progress bar on stderr.
@Test func addShowsAProgressBarOnATerminal() async throws {
    let t = try TestCatalog()
    try t.create().close()
    let files = try (0..<5).map { try t.file("p\($0).txt", "file \($0)") }
    let command = ([TestCatalog.executable().path, "add", "--catalog", t.root.path] + files)
        .map { "'\($0)'" }.joined(separator: " ")
    let run = try await ChildProcess.run("/usr/bin/script", ["-qefc", command, "/dev/null"], stderr: .inherit)
    let output = run.stdoutText
    #expect(run.status == 0)
    #expect(output.contains("adding [##############################] 100%  5/5"))
    #expect(output.contains("added 5 files"))
}

@Test func jobsCommandsListCancelRetryAndRun() async throws {
    let t = try TestCatalog()
    try t.create().close()
    let photo = try t.file("photo.png", Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
    #expect(
        try await t.run(["add", "--queue-only", photo]).stdout
            == "added 1 file\nqueued 2 jobs; run them with `assetcat jobs run`\n")
    #expect(
        try await t.run(["jobs"]).stdout == """
                 ID  KIND              ASSET  STATE       PROGRESS  ATTEMPTS  ERROR
                  1  metadata              1  queued            0%         0 \u{20}
                  2  thumbnail             1  queued            0%         0  \n
            """)
    #expect(try await t.run(["jobs", "cancel", "1"]).stdout == "1  metadata  asset 1  cancelled\n")
    let again = try await t.run(["jobs", "cancel", "1"])
    #expect(again.status == 1)
    #expect(again.stderr == "assetcat: Job 1 is cancelled; only queued or running jobs can be cancelled\n")
    let missing = try await t.run(["jobs", "retry", "99"])
    #expect(missing.stderr == "assetcat: No job with ID 99; list jobs with `assetcat jobs`\n")
    #expect(try await t.run(["jobs", "retry", "1"]).stdout == "1  metadata  asset 1  queued\n")
    // The thumbnail of a PNG that is only its signature cannot be made.
    #expect(try await t.run(["jobs", "run"]).stdout == "ran jobs: 1 succeeded, 1 failed, 0 cancelled\n")
    let data = Data(try await t.run(["jobs", "--json"]).stdout.utf8)
    let jobs = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
    #expect(
        Set(jobs[0].keys) == ["id", "kind", "asset", "state", "attempts", "progress", "error", "created", "updated"])
    #expect(jobs[0]["state"] as? String == "succeeded")
    #expect(try await t.run(["show", "photo.png", "--json"]).stdout.contains("\"mediaType\" : \"image/png\""))
    let deferWithoutReference = try await t.run(["add", photo, "--defer-hash"])
    #expect(deferWithoutReference.status == 64)
    #expect(deferWithoutReference.stderr.hasPrefix("Error: --defer-hash goes with --reference."))
}
