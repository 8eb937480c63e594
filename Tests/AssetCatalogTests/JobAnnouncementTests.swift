import AssetCatalogTestSupport
import Foundation
import Locking
import Persistence
import PostgresNIO
import Synchronization
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog
@testable import PersistencePostgreSQL

/// What a queue's saves announce (``JobQueue/jobsTopic``), and what a worker does with it: an
/// idle worker in another opening of the catalog (another process's, another host's) claims
/// work as its submit commits, and polls the store only while it cannot hear announcements.
/// The queues' own looks at the store are set to an hour, so only an announcement (or, while
/// they are interrupted, the poll under test) can wake them.
@Suite struct JobAnnouncementTests {
    /// What `catalog`'s announcements of ``JobQueue/jobsTopic`` said, in order.
    final class JobAnnouncements: @unchecked Sendable {
        private let lock = NSLock()
        private var heard: [String] = []
        private var task: Task<Void, Never>?

        init(_ catalog: Catalog) {
            let stream = catalog.container.announcements()
            task = Task { [weak self] in
                for await announcement in stream where announcement.topic == JobQueue.jobsTopic {
                    self?.append(announcement.payload)
                }
            }
        }

        private func append(_ payload: String) { lock.withLock { heard.append(payload) } }
        var payloads: [String] { lock.withLock { heard } }
        func stop() { task?.cancel() }
    }

    /// A processor whose first run of each job fails as transient, and whose second succeeds.
    final class FailsOnce: JobProcessor {
        private let seen = Mutex<Set<Int64>>([])
        func run(_ job: JobContext) async throws -> JobOutput {
            let first = seen.withLock { $0.insert(job.jobID).inserted }
            if first { throw TransientJobError("not yet") }
            return JobOutput()
        }
    }

    /// One announcement a save, whatever the number of jobs it queues; none for the claims and
    /// results of running them; one for a transient failure's retry, and one for a running
    /// job's cancellation. Shown by order: a later announcement arrives, and none came between.
    @Test func aSaveAnnouncesOnceWhatItDoesToJobsAndRunningThemAnnouncesNothing() async throws {
        let t = try TestCatalog()
        var tuning = JobQueue.Tuning()
        tuning.retryBaseDelay = 0.001
        let catalog = try t.create(testing: CatalogTesting(jobs: tuning))
        defer { catalog.close() }
        let assets = try await catalog.add(
            (0..<3).map { try t.file("a\($0).dat", "asset \($0)") }, options: AddOptions(mode: .reference)
        ).added
        let heard = JobAnnouncements(catalog)
        defer { heard.stop() }
        let noted = NotedJob()
        for kind in ["one", "two"] { catalog.jobs.register(noted, as: kind) }
        catalog.jobs.register(FailsOnce(), as: "flaky")

        let six = try catalog.jobs.submit(["one", "two"], for: assets.map(\.id))
        #expect(six.count == 6)
        #expect(try await waitUntil(atMost: .seconds(60)) { heard.payloads == ["queued"] })
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == 6)
        // Six claims and results later: nothing between this submit and the last.
        try catalog.jobs.submit("flaky", for: assets[0].id)
        #expect(try await waitUntil(atMost: .seconds(60)) { heard.payloads.count == 2 })
        #expect(try await catalog.jobs.runUntilIdle().retried == 1)  // its retry is queued again

        let endless = EndlessJob()
        catalog.jobs.register(endless, as: "endless")
        let running = try catalog.jobs.submit("endless", for: assets[1].id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { endless.hasStarted })
        _ = try catalog.jobs.cancel(running)
        #expect(try await waitUntil(atMost: .seconds(60)) { heard.payloads.count == 5 })
        try catalog.jobs.submit("one", for: assets[2].id)
        #expect(try await waitUntil(atMost: .seconds(60)) { heard.payloads.count == 6 })
        #expect(heard.payloads == ["queued", "queued", "queued", "queued", "cancelled", "queued"])
    }

    /// PostgreSQL: `b` (another host) submits a job; `a`'s idle worker, which hears the
    /// store's announcements and looks at the store only hourly, claims and runs it. Before
    /// submits were announced, it waited for its next look.
    @Test func anIdleWorkerClaimsWhatAnotherHostSubmitsAtOnce() async throws {
        let (shared, a) = try JobsOnPostgreSQLTests.SharedCatalog.make(testing: Self.looksHourly)
        defer { a.close() }
        let b = try shared.open()
        defer { b.close() }
        try await Self.idleWorkerClaimsWhatTheOtherSubmits(a, b, try await JobsOnPostgreSQLTests.asset(shared, in: a))
    }

    /// The same on SQLite (two openings of one catalog): another connection's commit wakes
    /// the worker through the store's `-wal` watch (the re-read marker) — as it did before
    /// submits were announced.
    @Test func anIdleWorkerClaimsWhatAnotherProcessSubmitsAtOnceOnSQLite() async throws {
        let t = try TestCatalog()
        let a = try t.create(testing: Self.looksHourly)
        defer { a.close() }
        let b = try t.open()
        defer { b.close() }
        let file = try t.file("a.dat", "the asset")
        let asset = try #require(try await a.add([file], options: AddOptions(mode: .reference)).added.first)
        try await Self.idleWorkerClaimsWhatTheOtherSubmits(a, b, asset)
    }

    /// A queue's own looks at the store an hour apart: only announcements wake it.
    static var looksHourly: CatalogTesting {
        var tuning = JobQueue.Tuning()
        tuning.listeningLookInterval = 3_600
        tuning.externalPollInterval = 3_600
        tuning.idlePollInterval = .seconds(3_600)
        return CatalogTesting(jobs: tuning)
    }

    /// Whether `queue`'s worker hears announcements and sleeps until one wakes it (or an hour).
    static func sleepsUntilAnnounced(_ queue: JobQueue) -> Bool {
        let sleep = queue.sleep.current
        return queue.watcher.hearsAnnouncements && sleep.isAsleep && sleep.timeout == .seconds(3_600)
    }

    static func idleWorkerClaimsWhatTheOtherSubmits(_ a: Catalog, _ b: Catalog, _ asset: AssetRecord) async throws {
        let processor = NotedJob()
        a.jobs.register(processor, as: "noted")
        b.jobs.register(processor, as: "noted")
        a.jobs.start()
        defer { a.jobs.stop() }
        #expect(try await waitUntil { sleepsUntilAnnounced(a.jobs) })

        let jobID = try b.jobs.submit("noted", for: asset.id)
        #expect(
            try await waitUntil(atMost: .seconds(120)) { processor.ran.withLock { $0 } == [jobID] },
            "the idle worker did not claim the job another opening submitted")
        #expect(try await waitUntil { try a.jobs.job(id: jobID)?.state == .succeeded })
        #expect(a.jobs.metrics.externalPolls == 0)
    }

    /// PostgreSQL: while `a`'s `LISTEN` connection is down (ended by the server, and not made
    /// again until the test lets it), `a` hears nothing: its worker polls the store, and
    /// claims the job `b` submits. Once it listens again, the polling stops: the worker
    /// sleeps until an announcement wakes it, and works `b`'s next job without a poll.
    /// Before, the worker did not know its announcements were interrupted and slept on.
    @Test func whileTheListenConnectionIsDownTheWorkerPollsAndStopsOnceItHearsAgain() async throws {
        var tuning = JobQueue.Tuning()
        tuning.listeningLookInterval = 3_600
        tuning.idlePollInterval = .milliseconds(20)
        tuning.externalPollInterval = 0  // while interrupted, every turn polls
        let (shared, a) = try JobsOnPostgreSQLTests.SharedCatalog.make(testing: CatalogTesting(jobs: tuning))
        defer { a.close() }
        let b = try shared.open()
        defer { b.close() }
        let asset = try await JobsOnPostgreSQLTests.asset(shared, in: a)
        let processor = NotedJob()
        a.jobs.register(processor, as: "noted")
        b.jobs.register(processor, as: "noted")
        a.jobs.start()
        defer { a.jobs.stop() }
        #expect(try await waitUntil { Self.sleepsUntilAnnounced(a.jobs) })

        let schema = shared.schema
        PostgreSQLListener.keepFromListeningAgain(schema: schema)
        defer { PostgreSQLListener.letListenAgain(schema: schema) }
        let admin = try shared.admin()
        defer { admin.close() }
        let ended = try admin.run(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            [.text("persistence listen \(schema)")]
        ).rows.count
        #expect(ended >= 1)
        #expect(try await waitUntil(atMost: .seconds(120)) { !a.jobs.watcher.hearsAnnouncements })
        #expect(try await waitUntil(atMost: .seconds(120)) { a.jobs.sleep.current.timeout == .milliseconds(20) })
        let pollsBefore = a.jobs.metrics.externalPolls

        let first = try b.jobs.submit("noted", for: asset.id)
        #expect(
            try await waitUntil(atMost: .seconds(120)) { processor.ran.withLock { $0 } == [first] },
            "the worker did not poll for work while its announcements were interrupted")
        #expect(a.jobs.metrics.externalPolls > pollsBefore)

        PostgreSQLListener.letListenAgain(schema: schema)
        #expect(try await waitUntil(atMost: .seconds(120)) { Self.sleepsUntilAnnounced(a.jobs) })
        let polls = a.jobs.metrics.externalPolls
        let turns = a.jobs.metrics.workerTurns
        let second = try b.jobs.submit("noted", for: asset.id)
        #expect(
            try await waitUntil(atMost: .seconds(120)) { processor.ran.withLock { $0 } == [first, second] },
            "the worker did not hear the job submitted once it listened again")
        #expect(try await waitUntil { Self.sleepsUntilAnnounced(a.jobs) })
        #expect(a.jobs.metrics.workerTurns > turns)
        #expect(a.jobs.metrics.externalPolls == polls, "the worker went on polling once it heard announcements again")
    }

    /// PostgreSQL: `b` cancels the job `a` runs; `a`, which looks at the store only hourly,
    /// stops the run on hearing the cancellation. Before cancellations were announced, only
    /// `a`'s 0.1 s poll of the store stopped it.
    @Test func anotherHostsCancellationStopsARunByItsAnnouncement() async throws {
        let (shared, a) = try JobsOnPostgreSQLTests.SharedCatalog.make(testing: Self.looksHourly)
        defer { a.close() }
        let b = try shared.open()
        defer { b.close() }
        let asset = try await JobsOnPostgreSQLTests.asset(shared, in: a)
        let processor = EndlessJob()
        a.jobs.register(processor, as: "endless")
        let jobID = try a.jobs.submit("endless", for: asset.id)
        a.jobs.start()
        defer { a.jobs.stop() }
        #expect(try await waitUntil { processor.hasStarted })
        #expect(try b.jobs.cancel(jobID).state == .cancelled)
        #expect(
            try await waitUntil(atMost: .seconds(120)) { processor.sawCancellation && !a.jobs.runs.isRunningAnything },
            "the run went on after another host cancelled its job")
        #expect(try a.jobs.job(id: jobID)?.state == .cancelled)
        #expect(a.jobs.metrics.externalPolls == 0)
    }
}
