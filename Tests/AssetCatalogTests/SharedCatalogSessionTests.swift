import AssetCatalogTestSupport
import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

@testable import AssetCatalog

#if canImport(Glibc)
    import Glibc
#endif

/// Several hosts on one catalog in PostgreSQL (``SessionLiveness``): each `assetcat` process
/// is a host of its own (`ASSETCAT_HOST_ID`), all sharing one directory, and tells the others'
/// liveness by their sessions, not by file locks: what hosts do to each other's work
/// (staging, jobs, journals, temporaries). Run through Scripts/with-postgres.sh.
@Suite struct SharedCatalogSessionTests {
    /// A catalog made with `init --store` on host h1, and what the tests read of its store.
    struct Shared {
        let t: TestCatalog
        let url: URL

        init() async throws {
            t = try TestCatalog()
            url = try PostgreSQLTestServer.newSchema().url!
            let made = try await t.run(["init", "--store", url.absoluteString, t.root.path], environment: env("h1"))
            #expect(made.status == 0, "\(made.stderr)")
        }

        /// The environment of a process of host `host`: one config folder for all (it holds
        /// the URL with its password).
        func env(_ host: String, _ extra: [String: String] = [:]) -> [String: String] {
            ["XDG_CONFIG_HOME": t.directory.appending(path: "config").path, "ASSETCAT_HOST_ID": host]
                .merging(extra) { $1 }
        }

        func run(_ host: String, _ arguments: [String], _ extra: [String: String] = [:]) async throws
            -> TestCatalog.Run
        {
            try await t.run(arguments, environment: env(host, extra))
        }

        /// The store, read-only: its sessions and rows, as the tests look at them.
        func store() throws -> PersistentContainer {
            var options = PersistentContainer.Options()
            options.readOnly = true
            return try PersistentContainer.open(url: url, schema: try Catalog.schema(with: []), options: options)
        }

        /// Waits until no session of the store is alive (a killed process's connection is
        /// closed by the server a moment after its death).
        func waitUntilNoSessionIsAlive(_ store: PersistentContainer) async throws {
            #expect(try await waitUntil { try store.sessions().allSatisfy { !$0.isAlive } })
        }

        /// The session that `staging/` names (`s<id>` and `s<id>.slots`, nothing else).
        func stagingSession() -> Int64? {
            let entries = t.stagingEntries()
            guard entries.count == 2, entries[1] == entries[0] + ".slots" else { return nil }
            return SessionLiveness.session(of: entries[0])
        }
    }

    static func count<T: ManagedObject>(_ type: T.Type, in store: PersistentContainer) throws -> Int {
        let context = store.newBackgroundContext()
        return try context.performAndWait { try context.count(for: FetchRequest<T>()) }
    }

    /// h1 dies with its content staged and linked into objects/ and its journal committed,
    /// its records not: h2's next command reaps h1's session (its row is gone: fenced), gives
    /// up its journal (the content goes: no orphan) and removes its staging (no debris).
    @Test func aHostKilledBetweenStagingAndCommitIsClearedByAnotherHostsOpen() async throws {
        let shared = try await Shared()
        let file = try shared.t.file("a.txt", "killed before its commit\n")
        let digest = "8a82695a046201251b1e25b83393b209f62551d6592df214dc1117fbc033f276"
        let killed = try await shared.run("h1", ["add", file], ["ASSETCAT_FAULT": "before-add-commit"])
        #expect(killed.status == 86, "\(killed.stderr)")
        // h1 staged by session: staging/s<id>/ and its slots file, no lock file.
        let id = try #require(shared.stagingSession(), "\(shared.t.stagingEntries())")
        #expect(shared.t.hasObject(digest))
        let store = try shared.store()
        defer { store.close() }
        #expect(try Self.count(PendingImport.self, in: store) == 1)
        try await shared.waitUntilNoSessionIsAlive(store)
        #expect(try store.sessions().map(\.id) == [id])

        let ls = try await shared.run("h2", ["stats"])
        #expect(ls.status == 0, "\(ls.stderr)")
        #expect(shared.t.stagingEntries() == [])
        #expect(!shared.t.hasObject(digest))
        #expect(try Self.count(PendingImport.self, in: store) == 0)
        #expect(try Self.count(RemovalPlan.self, in: store) == 0)
        #expect(try store.sessions() == [])  // h1's reaped, h2's ended
    }

    /// h1's add is paused with its content staged: h2 adds and closes meanwhile, and h1's
    /// staging is untouched (h1's session is alive); h1 then commits.
    @Test func aLiveHostsStagingIsNeverTouched() async throws {
        let shared = try await Shared()
        let paused = try await shared.t.startPaused(
            ["add", try shared.t.file("a.txt", "a\n")], at: "after-stage", environment: shared.env("h1"))
        let id = try #require(shared.stagingSession(), "\(shared.t.stagingEntries())")
        let staging = shared.t.root.appending(path: "staging").path
        let staged = try FileManager.default.subpathsOfDirectory(atPath: staging).sorted()
        #expect(staged.count > 2, "\(staged)")  // the staged file, in h1's folder
        let other = try await shared.run("h2", ["add", try shared.t.file("b.txt", "b\n")])
        #expect(other.status == 0, "\(other.stderr)")
        #expect(try FileManager.default.subpathsOfDirectory(atPath: staging).sorted() == staged)
        let store = try shared.store()
        defer { store.close() }
        #expect(try store.sessions().map(\.id) == [id])
        paused.resume()
        let finished = try await paused.process.finish()
        #expect(finished.status == 0, "\(finished.stderrText)")
        #expect(try Self.count(Asset.self, in: store) == 2)
        #expect(shared.t.stagingEntries() == [])
    }

    /// h1's worker is SIGKILLed while its job runs. Its slots file is then made to say that
    /// no run had started — as a slots file written on another host may read here (written
    /// back late, or lost with that host's power). Reopened on h1, the file is trusted (same
    /// host, same page cache): the run was only claimed ahead, and its attempt is given
    /// back. Reopened on h2, it is not: the run counts as started. Either way the job is
    /// queued again and h1's session reaped.
    @Test(arguments: ["h1", "h2"])
    func aKilledHostsRunningJobIsQueuedAgainCountedUnlessItsOwnHostSaysOtherwise(reopenedOn host: String)
        async throws
    {
        let shared = try await Shared()
        let big = try shared.t.file("big.bin", Data())
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: big))
        try handle.truncate(atOffset: 1 << 40)  // its digest job reads for hours
        try handle.close()
        #expect(try await shared.run("h1", ["add", "--reference", "--defer-hash", big]).status == 0)
        var environment: [String: String?] = [:]
        for (key, value) in shared.env("h1", ["ASSETCAT_FAULT": "slow-jobs"]) { environment[key] = value }
        environment["ASSETCAT_CATALOG"] = nil
        let worker = try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--catalog", shared.t.root.path], environment: environment,
            stdout: .null, stderr: .null)
        let store = try shared.store()
        defer { store.close() }
        let running = try await TestCatalog.signal(SIGKILL, to: worker, atMost: 120) {
            let context = store.newBackgroundContext()
            return try context.performAndWait {
                try context.fetch(FetchRequest<Job>(predicate: \.state == JobState.running)).contains {
                    $0.progress > 0
                }
            }
        }
        #expect(running)
        _ = try await worker.finish()
        let id = try #require(shared.stagingSession(), "\(shared.t.stagingEntries())")
        let slots = shared.t.root.appending(path: "staging/s\(id).slots").path
        let marked = try Data(contentsOf: URL(fileURLWithPath: slots))
        #expect(marked.contains { $0 != 0 })  // the run marked its slot
        try Data(count: marked.count).write(to: URL(fileURLWithPath: slots))
        try await shared.waitUntilNoSessionIsAlive(store)

        let stats = try await shared.run(host, ["stats"])
        #expect(stats.status == 0, "\(stats.stderr)")
        let context = store.newBackgroundContext()
        let job = try #require(try context.performAndWait { try context.fetch(FetchRequest<Job>()).first })
        #expect(job.state == .queued && job.owner == nil)
        if host == "h1" {
            #expect(job.attempts == 0 && job.lastError == "its worker process died before running it")
        } else {
            #expect(job.attempts == 1 && job.lastError == "its worker process died")
        }
        #expect(shared.t.stagingEntries() == [])
        #expect(try store.sessions() == [])
    }

    /// An export killed on h1 leaves a hidden folder beside its target, on h1's file system
    /// (a path outside the catalog). h2's commands leave it and its record alone — on another
    /// host the path would name another file — and h1's next command removes both.
    @Test func aTemporaryOfHostH1IsLeftAloneByH2AndRemovedByH1() async throws {
        let shared = try await Shared()
        #expect(try await shared.run("h1", ["add", try shared.t.file("a.txt", "a\n")]).status == 0)
        let out = shared.t.directory.appending(path: "out").path
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let killed = try await shared.run("h1", ["export", out + "/b"], ["ASSETCAT_FAULT": "after-export-payload"])
        #expect(killed.status == 86, "\(killed.stderr)")
        let left = try FileManager.default.contentsOfDirectory(atPath: out)
        #expect(left.count == 1 && left[0].hasPrefix(".b.partial-"), "\(left)")
        let store = try shared.store()
        defer { store.close() }
        let context = store.newBackgroundContext()
        let hosts = try context.performAndWait { try context.fetch(FetchRequest<PendingTemporary>()).map(\.host) }
        #expect(hosts == ["h1"])
        try await shared.waitUntilNoSessionIsAlive(store)

        #expect(try await shared.run("h2", ["stats"]).status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: out) == left)
        #expect(try Self.count(PendingTemporary.self, in: store) == 1)
        #expect(shared.t.stagingEntries() == [])  // h1's staging went all the same

        #expect(try await shared.run("h1", ["stats"]).status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: out) == [])
        #expect(try Self.count(PendingTemporary.self, in: store) == 0)
    }

    /// h1's add of a folder is killed after its first batch committed. h2 adding the same
    /// path does not resume it (on another host the path names other files): it adds every
    /// file. h1 adding it again resumes its own add.
    @Test func anAddIsResumedOnlyByItsOwnHost() async throws {
        let shared = try await Shared()
        let folder = shared.t.sources.appending(path: "in").path
        for i in 0..<600 { try shared.t.file("in/f\(String(format: "%04d", i)).txt", "file \(i)\n") }
        let killed = try await shared.run(
            "h1", ["add", "--recursive", folder], ["ASSETCAT_FAULT": "before-add-commit", "ASSETCAT_FAULT_AT": "2"])
        #expect(killed.status == 86, "\(killed.stderr)")
        let store = try shared.store()
        defer { store.close() }
        #expect(try Self.count(AddMark.self, in: store) == 1)
        try await shared.waitUntilNoSessionIsAlive(store)

        let other = try await shared.run("h2", ["add", "--recursive", folder])
        #expect(other.status == 0, "\(other.stderr)")
        #expect(other.stdout == "added 600 files\n")
        let again = try await shared.run("h1", ["add", "--recursive", folder])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(
            again.stdout
                == "resumed an interrupted add of the same paths: skipped 512 files it had recorded\nadded 88 files\n")
        #expect(try Self.count(AddMark.self, in: store) == 0)
    }

    /// On a catalog in PostgreSQL, `staging/` entries that are not a session's (`s<digits>`)
    /// are not this catalog's to judge: a folder of a version that staged by file locks,
    /// whose lock is free and which is old, stays (on SQLite it would go).
    @Test func stagingEntriesThatAreNotASessionsAreLeftAlone() async throws {
        let shared = try await Shared()
        let staging = shared.t.root.appending(path: "staging").path
        let manager = FileManager.default
        try manager.createDirectory(atPath: staging + "/999999-deadbeef/1", withIntermediateDirectories: true)
        #expect(manager.createFile(atPath: staging + "/999999-deadbeef.lock", contents: nil))
        try manager.createDirectory(atPath: staging + "/notes", withIntermediateDirectories: true)
        let old = Date(timeIntervalSinceNow: -3_600)
        for entry in ["999999-deadbeef", "999999-deadbeef.lock", "notes"] {
            try manager.setAttributes([.modificationDate: old], ofItemAtPath: staging + "/" + entry)
        }
        let before = try manager.subpathsOfDirectory(atPath: staging).sorted()
        #expect(try await shared.run("h2", ["stats"]).status == 0)
        #expect(try manager.subpathsOfDirectory(atPath: staging).sorted() == before)
    }
}
