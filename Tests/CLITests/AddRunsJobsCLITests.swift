import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `add` finishes what it starts: it runs the jobs it queued (archive indexing, image
/// metadata) before it returns — only those — and names the jobs that failed; `--queue-only`
/// leaves them queued; Ctrl-C while they run leaves the files added and the jobs queued.
@Suite struct AddRunsJobsCLITests {
    /// An archive made by bsdtar (`name`'s extension chooses the format) of `members`,
    /// files under `pack/` in the sources; returns its path.
    static func archive(_ t: TestCatalog, _ name: String, _ members: [String: String]) async throws -> String {
        let folder = "pack-\(name)"
        for (path, text) in members { try t.file("\(folder)/\(path)", text) }
        let archive = t.sources.appending(path: name).path
        let outcome = try await ChildProcess.run(
            "/usr/bin/bsdtar",
            ["-a", "-cf", archive, "-C", t.sources.appending(path: folder).path] + members.keys.sorted(),
            stdout: .inherit, stderr: .inherit)
        #expect(outcome.status == 0)
        return archive
    }

    /// The names `ls --json` lists (its fields are stable), in ID order.
    static func listedNames(_ t: TestCatalog) async throws -> [String] {
        let listed = try await t.run(["ls", "--json"]).stdout
        let array = try #require(try JSONSerialization.jsonObject(with: Data(listed.utf8)) as? [[String: Any]])
        return array.compactMap { $0["name"] as? String }
    }

    @Test func addOfAnArchiveListsItsMembersWhenItReturns() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let zip = try await Self.archive(t, "pack.zip", ["inner/a.txt": "alpha\n", "inner/b.txt": "beta\n"])
        let add = try await t.run(["add", zip])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout == "added 1 file\n")
        #expect(add.stderr == "")  // no progress bar in a pipe
        // No `jobs run`: the members are there.
        #expect(try await Self.listedNames(t) == ["pack.zip", "inner/a.txt", "inner/b.txt"])
        #expect(try await t.run(["cat", "inner/b.txt"]).stdout == "beta\n")
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.jobs.list().map(\.state) == [.succeeded])
    }

    /// A corrupt archive's index job fails: the files stay added, the summary is printed,
    /// and one line on stderr names the asset, the job and the error; exit 1.
    @Test func aFailedJobIsNamedWithItsAssetAndErrorAndExitsOne() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let good = try await Self.archive(t, "good.tar", ["g.txt": "good\n"])
        let broken = try t.file("broken.zip", "not really a zip")
        let add = try await t.run(["add", good, broken])
        #expect(add.status == 1)
        #expect(add.stdout == "added 2 files\n")
        #expect(
            add.stderr
                == "assetcat: asset 2 broken.zip: index-archive job 2 failed: Could not index the archive broken.zip: "
                + "Unrecognized archive format (`assetcat jobs retry 2` runs it again)\n")
        #expect(try await Self.listedNames(t) == ["good.tar", "broken.zip", "g.txt"])
    }

    @Test func queueOnlyQueuesTheJobsAndReturns() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let zip = try await Self.archive(t, "pack.zip", ["a.txt": "alpha\n"])
        let add = try await t.run(["add", "--queue-only", zip])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout == "added 1 file\nqueued 1 job; run them with `assetcat jobs run`\n")
        #expect(try await Self.listedNames(t) == ["pack.zip"])
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.jobs.list().map(\.state) == [.queued])
    }

    /// Jobs queued before (by another add, a pipeline) are not this add's: they stay queued.
    @Test func addRunsItsOwnJobsAndNoOthers() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let photo = try t.file("photo.png", Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
        #expect(try await t.run(["add", "--queue-only", photo]).status == 0)
        let zip = try await Self.archive(t, "pack.zip", ["a.txt": "alpha\n"])
        let add = try await t.run(["add", zip])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout == "added 1 file\n")
        let catalog = try t.open()
        defer { catalog.close() }
        let jobs = try catalog.jobs.list()
        #expect(jobs.map(\.kind) == ["metadata", "thumbnail", "index-archive"])
        #expect(jobs.map(\.state) == [.queued, .queued, .succeeded])
    }

    /// `--defer-hash` asks for the digests later: its jobs stay queued, as with `--queue-only`.
    @Test func deferredDigestsStayQueued() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let file = try t.file("big.bin", "bytes\n")
        let add = try await t.run(["add", "--reference", "--defer-hash", file])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout == "added 1 file\nqueued 1 job; run them with `assetcat jobs run`\n")
    }

    /// On a terminal (a pty made by `script`), one bar goes over the files, then the jobs,
    /// on one line.
    @Test func oneProgressBarGoesOverTheFilesThenTheJobs() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let zip = try await Self.archive(t, "pack.zip", ["a.txt": "alpha\n"])
        let command = [TestCatalog.executable().path, "add", "--catalog", t.root.path, zip]
            .map { "'\($0)'" }.joined(separator: " ")
        let run = try await ChildProcess.run("/usr/bin/script", ["-qefc", command, "/dev/null"], stderr: .inherit)
        #expect(run.status == 0)
        let output = run.stdoutText
        // The pty ends lines with "\r\n"; the bar redraws itself after "\r".
        let full = String(repeating: "#", count: 30)
        let lines = output.split(separator: "\r\n")
        #expect(
            lines.contains {
                $0.contains("adding [\(full)] 100%  1/1") && $0.hasSuffix("\rjobs [\(full)] 100%  1/1\u{1B}[K")
            },
            "the files' bar and the jobs' are not one line: \(lines)")
        #expect(lines.last == "added 1 file")
    }

    /// Ctrl-C or SIGTERM while the jobs run: the archive stays added, its job is queued
    /// again (the attempt not counted), one line says so, and the exit is the signal's.
    /// `assetcat jobs run` then finishes the job. (400 members, each 20 ms slower to
    /// index: the job lasts 8 s, the signal comes once it runs.)
    @Test(arguments: [(SIGINT, Int32(130)), (SIGTERM, Int32(143))])
    func interruptedJobsStayQueuedAndTheFilesAdded(signal: Int32, status: Int32) async throws {
        let t = try TestCatalog()
        try t.create().close()
        var members: [String: String] = [:]
        for i in 0..<400 { members["m\(String(format: "%03d", i)).txt"] = "member \(i)\n" }
        let tar = try await Self.archive(t, "many.tar", members)
        let process = try ChildProcess(
            TestCatalog.executable().path, ["add", "--catalog", t.root.path, tar],
            environment: ["ASSETCAT_FAULT": "slow-jobs"])
        let catalog = try t.open()
        defer { catalog.close() }
        let running = try await TestCatalog.signal(signal, to: process) {
            try catalog.jobs.list([.running]).count == 1
        }
        let run = try await process.finish()
        #expect(running, "the job never ran: the signal came in the files phase")
        #expect(run.termination == .exited(status))
        #expect(run.stdoutText == "")
        #expect(
            run.stderrText
                == "interrupted: added 1 file; the jobs not finished for them are queued again — "
                + "`assetcat jobs run` finishes them\n")
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .queued && job.attempts == 0)
        #expect(try catalog.asset(AssetID(1)).name == "many.tar")
        let jobs = try await t.run(["jobs", "run"])
        #expect(jobs.stdout == "ran jobs: 1 succeeded, 0 failed, 0 cancelled\n")
        #expect(try catalog.assets().count == 401)
    }

    /// Ctrl-C while the files are added: the jobs queued for the files committed stay queued
    /// (the same add run again does not run them: it skips those files), and the line says
    /// how to run them.
    @Test func ctrlCWhileAddingFilesSaysHowToRunTheJobsQueuedForThem() async throws {
        let t = try TestCatalog()
        try t.create().close()
        var paths: [String] = []
        for i in 0..<200 {
            paths.append(
                try t.file("png/p\(String(format: "%03d", i)).png", Data(repeating: UInt8(i), count: 32 << 10)))
        }
        let process = try ChildProcess(
            TestCatalog.executable().path, ["add", "--catalog", t.root.path] + paths,
            environment: ["ASSETCAT_FAULT": "slow-ingest"])
        let staged = try await t.signal(SIGINT, to: process, onceStagingHolds: 20)
        #expect(staged, "the interrupt came before the add staged anything: it tests nothing")
        let run = try await process.finish()
        #expect(run.termination == .exited(130))
        let catalog = try t.open()
        defer { catalog.close() }
        let recorded = try catalog.assets().count
        #expect(recorded > 0 && recorded < 200)
        // A metadata job and a thumbnail job for each image recorded.
        #expect(try catalog.jobs.list().map(\.state) == Array(repeating: .queued, count: 2 * recorded))
        let jobs = "\(2 * recorded) jobs"
        #expect(
            run.stderrText
                == "interrupted: added \(recorded) of 200 files (0 archive members); nothing was left half-done — "
                + "run the same command again to add the rest; `assetcat jobs run` runs the \(jobs) queued for them\n")
    }

    /// Ctrl-C while an import of a bag from another tool runs its jobs: the import stays
    /// committed, the job is queued again, one line says so, exit 130.
    @Test func ctrlCWhileAnImportRunsItsJobsLeavesThemQueued() async throws {
        let source = try TestCatalog()
        try source.create().close()
        var members: [String: String] = [:]
        for i in 0..<400 { members["m\(String(format: "%03d", i)).txt"] = "member \(i)\n" }
        let tar = try await Self.archive(source, "many.tar", members)
        #expect(try await source.run(["add", "--queue-only", tar]).status == 0)
        let bag = source.directory.appending(path: "foreign").path
        #expect(try await source.run(["export", bag]).status == 0)
        for tag in ["assetcat-records.json", "tagmanifest-sha256.txt"] {
            try FileManager.default.removeItem(atPath: bag + "/" + tag)
        }
        let t = try TestCatalog()
        try t.create().close()
        let process = try ChildProcess(
            TestCatalog.executable().path, ["import", "--catalog", t.root.path, bag],
            environment: ["ASSETCAT_FAULT": "slow-jobs"])
        let catalog = try t.open()
        defer { catalog.close() }
        let running = try await TestCatalog.signal(SIGINT, to: process) {
            try catalog.jobs.list([.running]).count == 1
        }
        let run = try await process.finish()
        #expect(running, "the job never ran")
        #expect(run.termination == .exited(130))
        #expect(run.stdoutText == "")
        #expect(
            run.stderrText
                == "interrupted: imported 1 asset; the jobs not finished for them are queued again — "
                + "`assetcat jobs run` finishes them\n")
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .queued && job.attempts == 0)
        #expect(try catalog.assets().first?.name == "many.tar")
    }

    /// Past a hundred failed jobs, one line counts the rest (the first hundred to fail are
    /// named, by job ID).
    @Test func pastAHundredFailedJobsOneLineCountsTheRest() async throws {
        let t = try TestCatalog()
        try t.create().close()
        for i in 0..<102 { try t.file("broken/b\(String(format: "%03d", i)).zip", "not a zip \(i)") }
        let add = try await t.run(["add", "--recursive", t.sources.appending(path: "broken").path])
        #expect(add.status == 1)
        #expect(add.stdout == "added 102 files\n")
        let lines = add.stderr.split(separator: "\n")
        #expect(lines.count == 101)
        let named = lines.dropLast().compactMap { $0.firstMatch(of: /index-archive job (\d+) failed/)?.1 }.compactMap {
            Int($0)
        }
        #expect(named.count == 100 && named == named.sorted())
        #expect(lines.last == "assetcat: and 2 more failed jobs; `assetcat jobs ls --state failed` lists them")
    }
}

extension AddRunsJobsCLITests {
    /// A job of this add that another process ran (a worker that claimed it first) and that
    /// failed is named as this add's own, and the add exits 1.
    @Test func aFailedJobAnotherProcessRanIsNamedToo() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let broken = try t.file("broken.zip", "not really a zip")
        let add = try await t.startPaused(["add", broken], at: "before-running-jobs")
        let worker = try await t.run(["jobs", "run"])
        #expect(worker.status == 1, "\(worker.stderr)")
        add.resume()
        let added = try await add.process.finish()
        #expect(added.status == 1)
        #expect(added.stdoutText == "added 1 file\n")
        #expect(
            added.stderrText
                == "assetcat: asset 1 broken.zip: index-archive job 1 failed: Could not index the archive broken.zip: "
                + "Unrecognized archive format (`assetcat jobs retry 1` runs it again)\n")
    }
}
