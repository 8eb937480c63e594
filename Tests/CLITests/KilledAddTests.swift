import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The SHA-256 of every file in the catalog's `objects/`.
func objectDigests(_ t: TestCatalog) -> Set<String> {
    let objects = t.root.appending(path: "objects").path
    var digests = Set<String>()
    let manager = FileManager.default
    for shard in (try? manager.contentsOfDirectory(atPath: objects)) ?? [] {
        for rest in (try? manager.contentsOfDirectory(atPath: objects + "/" + shard)) ?? [] {
            digests.insert(shard + rest)
        }
    }
    return digests
}

/// The SHA-256 of every managed asset the catalog records.
func recordedDigests(_ t: TestCatalog) throws -> Set<String> {
    let catalog = try t.open()
    defer { catalog.close() }
    return Set(try catalog.assets().filter { $0.storage == .managed }.map(\.sha256))
}

/// An add killed at any point, then one more command: `objects/` holds exactly the content
/// of the recorded assets. The process dies at a fault point
/// (`_exit`, as SIGKILL would: no handler, no clean-up) chosen by `ASSETCAT_FAULT`, the n-th
/// time it is reached (`ASSETCAT_FAULT_AT`): 1,100 files make two batches (512 files, then
/// the rest: batches grow, and a batch takes the files in order).
@Suite struct KilledAddTests {
    static let files = 1_100

    /// A catalog holding one asset (`shared.txt`, whose content file 7 of the folder has
    /// too), and the folder of `files` files to add.
    static func setUp() async throws -> (TestCatalog, String, Set<String>) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let shared = try t.file("shared.txt", "content 7\n")
        let before = try await catalog.add([shared]).added
        catalog.close()
        #expect(before.count == 1)
        for i in 0..<files { try t.file("many/f\(String(format: "%04d", i)).txt", "content \(i)\n") }
        return (t, t.sources.appending(path: "many").path, Set(before.map(\.sha256)))
    }

    @Test(arguments: [
        ("after-add-journal", 1), ("after-add-journal", 2), ("before-add-commit", 1), ("before-add-commit", 2),
        ("after-stage", 1), ("after-stage", 700),
    ])
    func killedAddLeavesOnlyTheContentOfRecordedAssets(point: String, at count: Int) async throws {
        let (t, folder, before) = try await Self.setUp()
        let run = try await t.run(
            ["add", "--recursive", folder], environment: ["ASSETCAT_FAULT": point, "ASSETCAT_FAULT_AT": String(count)])
        #expect(run.status == 86, "\(run.stdout)\(run.stderr)")  // died at the fault point
        // One more command, and objects/ holds what the recorded assets use, nothing else.
        let next = try await t.run(["stats"])
        #expect(next.status == 0)
        let recorded = try recordedDigests(t)
        #expect(objectDigests(t) == recorded)
        #expect(recorded.isSuperset(of: before))  // the content an earlier add recorded stays
        let catalog = try t.open()
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
        #expect(try catalog.stats().pendingRemovals == 0)
        catalog.close()
        // Adding again completes the catalog.
        let again = try await t.run(["add", "--recursive", folder])
        #expect(again.status == 0)
        #expect(try recordedDigests(t).count == Self.files)  // file 7's content is shared.txt's
        #expect(objectDigests(t) == (try recordedDigests(t)))
    }

    /// Content the catalog holds when an add journals its batch, removed by another process
    /// before the add links its own copy, and the add killed before it commits: the journal
    /// names that content too, so the next command removes the copy the add linked — nothing
    /// in `objects/` that no asset uses, and `verify` finds nothing wrong.
    @Test func contentRemovedByAnotherProcessWhileAnAddRunsIsNotLeftBehind() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let first = try await catalog.add([try t.file("first.txt", "the same content\n")]).added
        catalog.close()
        let second = try t.file("second.txt", "the same content\n")
        let add = try await t.startPaused(
            ["add", second], at: "after-add-journal", environment: ["ASSETCAT_FAULT": "before-add-commit"])
        // Another process removes the one asset that used the content, and its file.
        let rm = try await t.run(["rm", "\(first[0].id)"])
        #expect(rm.status == 0, "\(rm.stdout)\(rm.stderr)")
        #expect(objectDigests(t).isEmpty)
        add.resume()
        let killed = try await add.process.finish()
        #expect(killed.termination == .exited(86), "\(killed.stdoutText)\(killed.stderrText)")  // at before-add-commit
        let verify = try await t.run(["verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(objectDigests(t).isEmpty)
        #expect(try recordedDigests(t).isEmpty)
    }

    /// The content an add pinned goes from objects/ with its folder (its last asset deleted
    /// by another process, the folder cleared) before the add's check: the check makes the
    /// folder again and links the pin back, and the record commits with its content.
    @Test func anAddPutsBackContentWhoseFolderWentWhileItRan() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let first = try await catalog.add([try t.file("first.txt", "the same content\n")]).added
        catalog.close()
        let add = try await t.startPaused(
            ["add", try t.file("second.txt", "the same content\n")], at: "before-add-commit")
        let rm = try await t.run(["rm", "\(first[0].id)"])
        #expect(rm.status == 0, "\(rm.stdout)\(rm.stderr)")
        let folder = (t.objectPath(first[0].sha256) as NSString).deletingLastPathComponent
        try FileManager.default.removeItem(atPath: folder)
        add.resume()
        let added = try await add.process.finish()
        #expect(added.status == 0, "\(added.stdoutText)\(added.stderrText)")
        #expect(t.hasObject(first[0].sha256))
        let verify = try await t.run(["verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(try recordedDigests(t) == [first[0].sha256])
    }

    /// A reference-mode add killed between two batches (as the second commits; the first
    /// committed while the second was read): the catalog holds the first batch, the first
    /// files found in order, and nothing else; the same command again skips them, says so,
    /// and adds the rest — every file recorded once. Once an add has completed, the same
    /// command is an add like any other: it records every file again.
    @Test func killedReferenceAddLeavesTheFirstBatchAndAddingAgainAddsTheRest() async throws {
        let (t, folder, _) = try await Self.setUp()
        let run = try await t.run(
            ["add", "--reference", "--recursive", folder],
            environment: ["ASSETCAT_FAULT": "before-add-commit", "ASSETCAT_FAULT_AT": "2"])
        #expect(run.status == 86, "\(run.stdout)\(run.stderr)")
        let all = (0..<Self.files).map { folder + "/f\(String(format: "%04d", $0)).txt" }
        #expect(try Self.referencedPaths(t) == Array(all.prefix(512)))
        let again = try await t.run(["add", "--reference", "--recursive", folder])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(
            again.stdout
                == "resumed an interrupted add of the same paths: skipped 512 files it had recorded\n"
                + "added 588 files\n")
        #expect(again.stderr == "")
        #expect(try Self.referencedPaths(t) == all)
        // Completed: the mark is gone, and the same command records every file again.
        let third = try await t.run(["add", "--reference", "--recursive", folder])
        #expect(third.stdout == "added \(Self.files) files\n")
        #expect(try Self.referencedPaths(t) == all + all)
    }

    /// Resuming looks each file up to the interrupted add's last committed file: a file
    /// changed since it was recorded (another size, or the same size written later) is
    /// recorded again, a file made since is added, and a recorded file deleted since is not
    /// added — even the one the mark names.
    @Test func resumedAddAddsChangedAndNewFilesAndSkipsOnlyTheUnchanged() async throws {
        let (t, folder, _) = try await Self.setUp()
        let run = try await t.run(
            ["add", "--reference", "--recursive", folder],
            environment: ["ASSETCAT_FAULT": "before-add-commit", "ASSETCAT_FAULT_AT": "2"])
        #expect(run.status == 86, "\(run.stdout)\(run.stderr)")
        let path = { (name: String) in folder + "/" + name + ".txt" }
        try "content 5, longer now\n".write(toFile: path("f0005"), atomically: false, encoding: .utf8)
        try "CONTENT 6\n".write(toFile: path("f0006"), atomically: false, encoding: .utf8)  // same size
        try "new\n".write(toFile: path("f0003a"), atomically: false, encoding: .utf8)
        try FileManager.default.removeItem(atPath: path("f0511"))  // the last file the mark names
        let again = try await t.run(["add", "--reference", "--recursive", folder])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(
            again.stdout
                == "resumed an interrupted add of the same paths: skipped 509 files it had recorded\n"
                + "added 591 files\n")
        let recorded = try Self.referencedPaths(t)
        var counts: [String: Int] = [:]
        for path in recorded { counts[path, default: 0] += 1 }
        #expect(counts.count == Self.files + 1)  // the files, the new one, and f0511 recorded before
        #expect(counts.filter { $0.value != 1 }.keys.sorted() == [path("f0005"), path("f0006")])
        #expect(counts[path("f0003a")] == 1)
        #expect(counts[path("f0511")] == 1)
        let catalog = try t.open()
        defer { catalog.close() }
        let sixes = try catalog.assets(named: "f0006.txt").map(\.sha256)
        #expect(sixes.count == 2 && sixes[0] != sixes[1])
    }

    /// An add killed, the same add killed again as it resumes, and once more: every file is
    /// recorded once, `objects/` holds exactly their content, and the last run says how many
    /// it skipped (the mark moved with the resumed add's own committed batch).
    @Test func addKilledTwiceThenCompletedRecordsEveryFileOnce() async throws {
        let (t, folder, _) = try await Self.setUp()
        let fault = ["ASSETCAT_FAULT": "before-add-commit", "ASSETCAT_FAULT_AT": "2"]
        let first = try await t.run(["add", "--recursive", folder], environment: fault)
        #expect(first.status == 86, "\(first.stdout)\(first.stderr)")
        // Resumed: 512 skipped, a batch of 512 committed, killed before the last 76.
        let second = try await t.run(["add", "--recursive", folder], environment: fault)
        #expect(second.status == 86, "\(second.stdout)\(second.stderr)")
        #expect(try Self.managedPaths(t).count == 1 + 1_024)  // shared.txt, and two batches
        #expect(objectDigests(t) == (try recordedDigests(t)))
        let third = try await t.run(["add", "--recursive", folder])
        #expect(third.status == 0, "\(third.stderr)")
        #expect(
            third.stdout
                == "resumed an interrupted add of the same paths: skipped 1024 files it had recorded\n"
                + "added 76 files\n")
        let all = (0..<Self.files).map { folder + "/f\(String(format: "%04d", $0)).txt" }
        #expect(try Self.managedPaths(t).dropFirst() == all[...])
        #expect(objectDigests(t) == (try recordedDigests(t)))
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
        #expect(try await catalog.verify().issues.isEmpty)
    }

    /// The paths of the referenced assets, by ID.
    static func referencedPaths(_ t: TestCatalog) throws -> [String] {
        let catalog = try t.open()
        defer { catalog.close() }
        return try catalog.assets().filter { $0.storage == .referenced }.sorted { $0.id < $1.id }.compactMap(\.path)
    }

    /// The paths the managed assets were added from, by ID.
    static func managedPaths(_ t: TestCatalog) throws -> [String] {
        let catalog = try t.open()
        defer { catalog.close() }
        return try catalog.assets().filter { $0.storage == .managed }.sorted { $0.id < $1.id }.compactMap(\.path)
    }

    /// SIGTERM (what `timeout`, systemd and container runtimes send) behaves like Ctrl-C:
    /// the complete files are committed, the rest undone, a message, exit 143.
    @Test(arguments: [5, 60])
    func sigtermDuringAddCommitsWhatIsCompleteAndExits143(afterStaging entries: Int) async throws {
        let t = try TestCatalog()
        try t.create().close()
        var paths: [String] = []
        for i in 0..<150 {
            paths.append(
                try t.file("big/f\(String(format: "%03d", i)).bin", Data(repeating: UInt8(i), count: 32 << 10)))
        }
        let process = try ChildProcess(
            TestCatalog.executable().path, ["add", "--catalog", t.root.path] + paths,
            environment: ["ASSETCAT_FAULT": "slow-ingest"])
        let staged = try await t.signal(SIGTERM, to: process, onceStagingHolds: entries)
        #expect(staged, "the kill came before the add staged anything: it tests nothing")
        let run = try await process.finish()
        let stderr = run.stderrText
        #expect(run.termination == .exited(143))
        // Closed before staging/ is looked at: this process's own catalog has a staging
        // folder while it is open (left to a deinit, it could still be there under load).
        let reader = try t.open()
        let recorded = try reader.assets()
        reader.close()
        #expect(recorded.count < 150)
        #expect(
            stderr
                == "interrupted: added \(recorded.count) of 150 files (0 archive members); nothing was left half-done — "
                + "run the same command again to add the rest\n")
        #expect(objectDigests(t) == Set(recorded.map(\.sha256)))
        #expect(t.stagingEntries().isEmpty)
    }
}
