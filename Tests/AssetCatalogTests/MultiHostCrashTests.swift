import ArchiveIO
import AssetCatalogTestSupport
import Foundation
import Locking
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

@testable import AssetCatalog

#if canImport(Glibc)
    import Glibc
#endif

/// Four hosts on one catalog in PostgreSQL, killed at random: each host is an `assetcat`
/// process with its own `ASSETCAT_HOST_ID` (its own sessions, so its own staging folders),
/// all sharing one directory. In each round the four run at once — one adds files and an
/// archive and runs the archive's index job, one adds with `--queue-only`, one removes
/// assets (among them some whose content the adders are adding again, and archives whose
/// index job may be running on another host), one runs the queued jobs — and some are
/// killed: at a fault point where a crash is most dangerous (between staging and commit,
/// between a deletion's commit and its unlink: `_exit`, as SIGKILL), or by SIGKILL at a
/// random moment. A killed command is started again on its host. After a final quiet open,
/// the invariants of the SQLite crash tests hold: every managed asset's content is in
/// `objects/` (`verify` is clean) and every file there is a managed asset's, `staging/` is
/// empty, no journal or removal plan is left, every surviving archive has each of its
/// members once (its index job landed once), and no member of a deleted archive landed.
///
/// The plan comes from a seed, printed with any failure (`ASSETCAT_TEST_SEED` runs another;
/// the processes' timing still varies from run to run). Run through Scripts/with-postgres.sh.
@Suite struct MultiHostCrashTests {
    static let hosts = ["h1", "h2", "h3", "h4"]
    static let rounds = 6
    static let seed: UInt64 =
        ProcessInfo.processInfo.environment["ASSETCAT_TEST_SEED"].flatMap { UInt64($0) } ?? 20_261_126
    /// Each archive's members: six small files, indexed 20 ms apart (`slow-jobs`).
    static let members = (0..<6).map { "m\($0).txt" }
    /// Contents every host adds again and again (the dedup across hosts).
    static let sharedContents = 4

    enum Role: String, Hashable {
        case add, queueOnly = "add --queue-only", remove = "rm", runJobs = "jobs run"
    }

    /// How a command is made to die, if it is.
    enum Kill: CustomStringConvertible {
        case none
        /// `ASSETCAT_FAULT=point` with `ASSETCAT_FAULT_AT=at`: `_exit(86)` there.
        case fault(String, at: Int)
        /// SIGKILL that many milliseconds after its start.
        case signal(afterMilliseconds: Int)
        /// SIGKILL once a job it runs has read some of its asset.
        case whileItsJobRuns

        var description: String {
            switch self {
            case .none: "not killed"
            case .fault(let point, let at): "dies at \(point) (reach \(at))"
            case .signal(let ms): "SIGKILL after \(ms) ms"
            case .whileItsJobRuns: "SIGKILL while its job runs"
            }
        }
    }

    /// The catalog, its store and the log of what was run, for the failure messages.
    final class Run: Sendable {
        let t: TestCatalog
        let url: URL
        private let lines: Locked<[String]>

        init(seed: UInt64) throws {
            t = try TestCatalog()
            url = try PostgreSQLTestServer.newSchema().url!
            lines = Locked(["seed \(seed) (replay: ASSETCAT_TEST_SEED=\(seed))"])
        }

        func note(_ line: String) { lines.withLock { $0.append(line) } }
        var log: String { lines.withLock { $0.joined(separator: "\n") } }

        /// The environment of a process of `host`: one config folder for all (it holds the
        /// URL with its password), jobs slowed down so that kills and deletions meet them.
        func env(_ host: String, fault: String? = nil, at: Int = 1) -> [String: String?] {
            [
                "XDG_CONFIG_HOME": t.directory.appending(path: "config").path, "ASSETCAT_HOST_ID": host,
                "ASSETCAT_CATALOG": nil,
                "ASSETCAT_FAULT": (["slow-jobs"] + (fault.map { [$0] } ?? [])).joined(separator: ","),
                "ASSETCAT_FAULT_AT": String(at),
            ]
        }

        /// Runs `assetcat ARGUMENTS` on `host`, killed as `kill` says; returns how it ended.
        func command(_ host: String, _ arguments: [String], kill: Kill = .none) async throws -> ChildProcess.Outcome {
            var environment = env(host)
            if case .fault(let point, let at) = kill { environment = env(host, fault: point, at: at) }
            let process = try ChildProcess(
                TestCatalog.executable().path, arguments + ["--catalog", t.root.path], environment: environment,
                workingDirectory: t.directory.path)
            var killedWhileRunning = false
            switch kill {
            case .signal(let ms):
                // A random moment, not a wait for an event: the kill may come before the
                // command has done anything, in the middle, or after it ended.
                try await offThePool {
                    usleep(UInt32(ms) * 1_000)
                    process.signal(SIGKILL)
                }
            case .whileItsJobRuns:
                killedWhileRunning = try await killWhileItsJobRuns(process, host: host)
            case .none, .fault: break
            }
            let outcome = try await process.finish()
            let shown = arguments.map { $0.replacingOccurrences(of: t.sources.path + "/", with: "") }
            note(
                "\(host): assetcat \(shown.joined(separator: " ")) [\(kill)\(killedWhileRunning ? ": it ran" : "")] → "
                    + "\(outcome.termination)"
                    + (outcome.status == 0 ? "" : ": \(outcome.stdoutText)\(outcome.stderrText)"))
            return outcome
        }

        /// Sends SIGKILL to `process` once a job it claimed (its session's, in the store)
        /// has reported progress; says whether one did before the process ended. Polled from
        /// a thread of its own (the store every 5 ms), until the process ends its output.
        func killWhileItsJobRuns(_ process: ChildProcess, host: String) async throws -> Bool {
            let store = try store()
            defer { store.close() }
            return try await offThePool {
                let label = "\(host) \(process.pid)"
                let deadline = Date().addingTimeInterval(120)  // meets a hang only
                while process.stdout(within: 0, until: { _ in false }) == nil, Date() < deadline {
                    if let session = try store.sessions().first(where: { $0.label == label }) {
                        let context = store.newBackgroundContext()
                        let running = try context.performAndWait {
                            try context.fetch(FetchRequest<Job>(predicate: \.state == JobState.running)).contains {
                                $0.owner?.hasPrefix(SessionLiveness.owner(of: session.id) + "#") == true
                                    && $0.progress > 0
                            }
                        }
                        if running {
                            process.signal(SIGKILL)
                            return true
                        }
                    }
                    usleep(5_000)
                }
                return false
            }
        }

        /// The store, read-only, as the test looks at it.
        func store() throws -> PersistentContainer {
            var options = PersistentContainer.Options()
            options.readOnly = true
            return try PersistentContainer.open(url: url, schema: try Catalog.schema(with: []), options: options)
        }
    }

    /// An archive of ``members`` (texts of their own: `label`) at `path`.
    static func archive(_ path: String, label: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let writer = try ArchiveWriter(path: path, format: .tar)
        for member in members {
            try writer.writeEntry(ArchiveEntry(path: member, kind: .file), contents: Array("\(label) \(member)\n".utf8))
        }
        try writer.finish()
    }

    /// The files `host` adds in `round`: three of its own, two whose content every host adds
    /// (a new path each time, the content from a small pool), and an archive — its own, or
    /// one that other hosts add too.
    static func files(
        _ run: Run, host: String, round: Int, using g: inout RecordJSONTests.Generator
    ) throws -> [String] {
        let folder = "\(host)/r\(round)"
        var paths = try (0..<3).map { try run.t.file("\(folder)/own\($0).txt", "\(host) round \(round) file \($0)\n") }
        for k in 0..<2 {
            let shared = Int.random(in: 0..<sharedContents, using: &g)
            paths.append(try run.t.file("\(folder)/shared\(k).txt", "shared content \(shared)\n"))
        }
        if Bool.random(using: &g) {
            let path = run.t.sources.appending(path: "\(folder)/pack.tar").path
            try archive(path, label: "\(host) round \(round)")
            paths.append(path)
        } else {
            let common = Int.random(in: 0..<2, using: &g)
            paths.append(run.t.sources.appending(path: "common/pack\(common).tar").path)
        }
        return paths
    }

    /// Where an add dies when it is made to die where it is most dangerous: between staging
    /// and commit, or while its archive's job runs.
    static let addPoints = ["after-stage", "after-add-journal", "before-add-commit", "job"]
    /// Where a removal dies: between its commit and its unlink.
    static let removalPoints = ["after-commit", "before-unlink"]

    /// Half the commands die where it is most dangerous — each role's points in turn
    /// (`targeted` counts the role's turns so far), so that a few rounds meet them all —,
    /// three in ten by SIGKILL at a random moment, and two in ten are not killed.
    static func kill(
        for role: Role, targeted: inout [Role: Int], using g: inout RecordJSONTests.Generator
    ) -> Kill {
        let roll = Int.random(in: 0..<10, using: &g)
        if roll < 2 { return .none }
        if roll < 7 {
            let turn = targeted[role, default: 0]
            targeted[role] = turn + 1
            switch role {
            case .add, .queueOnly:
                // `--queue-only` runs no job: it dies between staging and commit.
                let points = role == .add ? addPoints : addPoints.dropLast()
                let point = points[turn % points.count]
                if point == "job" { return .whileItsJobRuns }
                return .fault(point, at: point == "after-stage" ? Int.random(in: 1...6, using: &g) : 1)
            case .remove:
                return .fault(removalPoints[turn % removalPoints.count], at: 1)
            case .runJobs:
                return .whileItsJobRuns
            }
        }
        return .signal(afterMilliseconds: Int.random(in: 20...700, using: &g))
    }

    /// Whether `outcome` is the death `kill` asked for.
    static func wasKilled(_ outcome: ChildProcess.Outcome) -> Bool {
        outcome.termination == .exited(86) || outcome.termination == .signalled(SIGKILL)
    }

    /// The assets and jobs the store holds.
    static func rows(_ store: PersistentContainer) throws -> (assets: [AssetRecord], jobs: [JobRecord]) {
        let context = store.newBackgroundContext()
        return try context.performAndWait {
            (
                try context.fetch(FetchRequest<Asset>()).map(AssetRecord.init),
                try context.fetch(FetchRequest<Job>()).map(JobRecord.init)
            )
        }
    }

    /// Every file in the catalog's `objects/`, by name (`ab` + the rest: a digest, for the
    /// catalog's own files).
    static func objectFiles(_ t: TestCatalog) -> Set<String> {
        let objects = t.root.appending(path: "objects").path
        let manager = FileManager.default
        var names = Set<String>()
        for shard in (try? manager.contentsOfDirectory(atPath: objects)) ?? [] {
            for rest in (try? manager.contentsOfDirectory(atPath: objects + "/" + shard)) ?? [] {
                names.insert(shard + rest)
            }
        }
        return names
    }

    static func count<T: ManagedObject>(_ type: T.Type, in store: PersistentContainer) throws -> Int {
        let context = store.newBackgroundContext()
        return try context.performAndWait { try context.count(for: FetchRequest<T>()) }
    }

    @Test func fourHostsKilledAtRandomLoseNothingAndLeaveNothingBehind() async throws {
        var g = RecordJSONTests.Generator(state: Self.seed)
        let run = try Run(seed: Self.seed)
        let t = run.t
        let made = try await ChildProcess.run(
            TestCatalog.executable().path, ["init", "--store", run.url.absoluteString, t.root.path],
            environment: run.env("h1"), workingDirectory: t.directory.path)
        try #require(made.status == 0, "\(made.stderrText)")
        for common in 0..<2 {
            try Self.archive(t.sources.appending(path: "common/pack\(common).tar").path, label: "common \(common)")
        }
        // Something to remove in the first round.
        let first = try await run.command("h1", ["add"] + (try Self.files(run, host: "h1", round: -1, using: &g)))
        try #require(first.status == 0, "\(run.log)")
        let store = try run.store()
        defer { store.close() }
        var everSeen = Set<Int64>()  // top-level assets, to tell which were deleted
        var unexpected: [String] = []

        let roles: [Role] = [.add, .queueOnly, .remove, .runJobs]
        var targeted: [Role: Int] = [:]
        for round in 0..<Self.rounds {
            run.note("round \(round)")
            let (assets, _) = try Self.rows(store)
            let topLevel = assets.filter { $0.storage == .managed }
            everSeen.formUnion(topLevel.map(\.id.rawValue))
            // The plan of the round, drawn in host order: the same seed, the same plan.
            var steps: [(host: String, role: Role, arguments: [String], kill: Kill)] = []
            for (index, host) in Self.hosts.enumerated() {
                let role = roles[(index + round) % roles.count]
                var arguments: [String]
                switch role {
                case .add: arguments = ["add"] + (try Self.files(run, host: host, round: round, using: &g))
                case .queueOnly:
                    arguments = ["add", "--queue-only"] + (try Self.files(run, host: host, round: round, using: &g))
                case .remove:
                    // Shared content and archives first: what other hosts add or index now.
                    let contended = topLevel.filter { $0.name.hasPrefix("shared") || $0.name.hasSuffix(".tar") }
                    let other = topLevel.filter { !$0.name.hasPrefix("shared") && !$0.name.hasSuffix(".tar") }
                    let chosen =
                        Array(contended.shuffled(using: &g).prefix(4)) + Array(other.shuffled(using: &g).prefix(1))
                    arguments = chosen.isEmpty ? ["stats"] : ["rm"] + chosen.map { "\($0.id)" }
                case .runJobs: arguments = ["jobs", "run"]
                }
                steps.append((host, role, arguments, Self.kill(for: role, targeted: &targeted, using: &g)))
            }
            let outcomes = try await withThrowingTaskGroup(of: String?.self) { group in
                for step in steps {
                    group.addTask {
                        let outcome = try await run.command(step.host, step.arguments, kill: step.kill)
                        if case .none = step.kill {
                            return outcome.status == 0 ? nil : "\(step.host) \(step.arguments): \(outcome.termination)"
                        }
                        guard Self.wasKilled(outcome) else {
                            return outcome.status == 0 ? nil : "\(step.host) \(step.arguments): \(outcome.termination)"
                        }
                        // Started again on its host: a removal, of what is still there.
                        var again = step.arguments
                        if step.role == .remove {
                            let present = Set(try Self.rows(store).assets.map(\.id.rawValue))
                            let ids = step.arguments.dropFirst().filter { present.contains(Int64($0)!) }
                            again = ids.isEmpty ? ["stats"] : ["rm"] + ids
                        }
                        let restarted = try await run.command(step.host, again)
                        return restarted.status == 0
                            ? nil : "\(step.host) \(again) (restarted): \(restarted.termination)"
                    }
                }
                var failures: [String] = []
                for try await failure in group { if let failure { failures.append(failure) } }
                return failures
            }
            unexpected += outcomes
            // Between rounds, with every process ended: content that a dead process's work
            // left may wait for the next open, but a record without its content never.
            let missing = try Self.rows(store).assets.filter {
                $0.storage == .managed && !FileManager.default.fileExists(atPath: t.objectPath($0.sha256))
            }
            #expect(missing.isEmpty, "after round \(round), assets without content: \(missing.map(\.id))\n\(run.log)")
        }
        let failedJobs = try Self.rows(store).jobs.filter { $0.state == .failed }.map {
            "job \($0.id) (\($0.kind) of asset \($0.asset), \($0.attempts) attempts): \($0.error ?? "")"
        }
        #expect(unexpected.isEmpty, "commands that failed: \(unexpected); failed jobs: \(failedJobs)\n\(run.log)")

        // The final quiet open: once the server has seen every killed process's connection
        // close, a writable open takes over their sessions' work; then the jobs left run.
        #expect(try await waitUntil { try store.sessions().allSatisfy { !$0.isAlive } }, "\(run.log)")
        let jobsRun = try await run.command("h1", ["jobs", "run"])
        #expect(jobsRun.status == 0, "\(run.log)")
        let quiet = try await run.command("h2", ["stats"])
        #expect(quiet.status == 0, "\(run.log)")

        let (assets, jobs) = try Self.rows(store)
        let log = run.log
        let verify = try await run.command("h3", ["verify"])
        #expect(verify.status == 0, "verify: \(verify.stdoutText)\(verify.stderrText)\n\(log)")
        // No record without its content, no content without its record.
        let managed = Set(assets.filter { $0.storage == .managed }.map(\.sha256))
        #expect(Self.objectFiles(t) == managed, "objects/ against the managed assets\n\(log)")
        // No staging debris: every session ended or was reaped, and its folder went with it.
        #expect(t.stagingEntries() == [], "\(log)")
        #expect(try store.sessions() == [], "\(log)")
        #expect(try Self.count(PendingImport.self, in: store) == 0, "\(log)")
        #expect(try Self.count(RemovalPlan.self, in: store) == 0, "\(log)")
        // Every surviving archive has each member once: its index job landed once.
        let archives = Dictionary(
            uniqueKeysWithValues: assets.filter { $0.storage == .managed && $0.name.hasSuffix(".tar") }.map {
                ($0.id, $0)
            })
        let members = assets.filter { $0.storage == .member }
        for id in archives.keys {
            let own = members.filter { $0.archive == id }.map { "\($0.memberOrdinal) \($0.member ?? "")" }.sorted()
            #expect(own == Self.members.map { "0 \($0)" }, "members of archive \(id)\n\(log)")
            let indexJobs = jobs.filter { $0.asset == id && $0.kind == BuiltInProcessors.indexArchive }
            #expect(indexJobs.count == 1 && indexJobs[0].state == .succeeded, "\(indexJobs)\n\(log)")
        }
        // Nothing of a deleted asset's job landed: no member without its archive, and no
        // job of a deleted asset left to run.
        let orphans = members.filter { $0.archive.map { archives[$0] == nil } ?? true }
        #expect(orphans.isEmpty, "members of no surviving archive: \(orphans.map(\.id))\n\(log)")
        let present = Set(assets.map(\.id.rawValue))
        let deleted = everSeen.subtracting(present)
        #expect(!deleted.isEmpty, "the run removed nothing: it tests nothing\n\(log)")
        let leftToRun = jobs.filter { deleted.contains($0.asset.rawValue) && [.queued, .running].contains($0.state) }
        #expect(leftToRun.isEmpty, "\(leftToRun)\n\(log)")
        #expect(jobs.allSatisfy { $0.state != .queued && $0.state != .running }, "\(jobs)\n\(log)")
    }
}
