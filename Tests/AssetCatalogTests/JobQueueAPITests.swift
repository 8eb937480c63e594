import AssetCatalogTestSupport
import Foundation
import Persistence
import Testing

@_spi(Testing) @testable import AssetCatalog

/// A processor registered so that its kind can be submitted, in tests that never run it.
struct Parked: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput { JobOutput() }
}

/// The job queue as a pipeline uses it: looking jobs up, submitting, retry limits, retention.
@Suite struct JobQueueAPITests {
    func catalogWithAssets(
        _ count: Int, testing: CatalogTesting = CatalogTesting()
    ) async throws -> (TestCatalog, Catalog, [AssetRecord]) {
        let t = try TestCatalog()
        let catalog = try t.create(testing: testing)
        let assets = try await catalog.add((0..<count).map { try t.file("f\($0).txt", "file \($0)") }).added
        return (t, catalog, assets)
    }

    // MARK: - Looking jobs up

    @Test func jobByIDIsThatJobsRecordOrNil() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(1)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        let id = try catalog.jobs.submit("parked", for: assets[0].id)
        let job = try #require(try catalog.jobs.job(id: id))
        #expect(job == (try catalog.jobs.list()).first)
        #expect(job.kind == "parked" && job.asset == assets[0].id && job.state == .queued)
        #expect(try catalog.jobs.job(id: id + 1) == nil)
    }

    @Test func listFiltersByAssetByStateOrBoth() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(2)
        defer { catalog.close() }
        let (a, b) = (assets[0].id, assets[1].id)
        catalog.jobs.register(Parked(), as: "first")
        catalog.jobs.register(Flaky(transientFailures: 0, thenFails: true), as: "broken")
        let ran = try catalog.jobs.submit(["first", "broken"], for: [a, b])  // a/first, a/broken, b/first, b/broken
        _ = try await catalog.jobs.runUntilIdle()
        catalog.jobs.register(Parked(), as: "second")
        let queued = try catalog.jobs.submit("second", for: a)

        #expect(try catalog.jobs.list().map(\.id) == ran + [queued])
        #expect(try catalog.jobs.list(asset: a).map(\.id) == [ran[0], ran[1], queued])
        #expect(try catalog.jobs.list(state: .failed).map(\.id) == [ran[1], ran[3]])
        #expect(try catalog.jobs.list(asset: a, state: .succeeded).map(\.id) == [ran[0]])
        #expect(try catalog.jobs.list(asset: b, state: .queued).isEmpty)
        #expect(try catalog.jobs.list(asset: 999).isEmpty)
        #expect(try catalog.jobs.list([.queued, .failed]).map(\.id) == [ran[1], ran[3], queued])
    }

    // MARK: - Refused submissions

    @Test func submittingAKindNobodyRegisteredIsRefusedAndQueuesNothing() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(1)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        let message =
            "No processor is registered for the job kind 'transcode'; register one before submitting (no job was queued)"
        let one = #expect(throws: CatalogError.self) { try catalog.jobs.submit("transcode", for: assets[0].id) }
        #expect(one?.code == .invalidArgument && one?.message == message)
        let batch = #expect(throws: CatalogError.self) {
            try catalog.jobs.submit(["parked", "transcode"], for: [assets[0].id])
        }
        #expect(batch?.message == message)
        #expect(try catalog.jobs.list().isEmpty)
    }

    @Test func theBuiltInKindsAreRegistered() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(1)
        defer { catalog.close() }
        let ids = try catalog.jobs.submit(["digest", "index-archive", "metadata"], for: [assets[0].id])
        #expect(ids.count == 3)
    }

    @Test func submittingForAnAssetThatDoesNotExistIsRefusedAndQueuesNothing() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(3)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        let missing = #expect(throws: CatalogError.self) { try catalog.jobs.submit("parked", for: 999) }
        #expect(missing?.code == .notFound && missing?.message == "No asset with ID 999 (no job was queued)")

        // A batch names the lowest missing ID, and queues nothing for the assets that exist.
        let batch = #expect(throws: CatalogError.self) {
            try catalog.jobs.submit(["parked"], for: [assets[0].id, 1_001, assets[1].id, 1_000])
        }
        #expect(batch?.message == "No asset with ID 1000 (no job was queued)")

        // A deleted asset is missing too.
        _ = try catalog.remove(assets[2].id)
        let deleted = #expect(throws: CatalogError.self) { try catalog.jobs.submit("parked", for: assets[2].id) }
        #expect(deleted?.message == "No asset with ID \(assets[2].id) (no job was queued)")
        #expect(try catalog.jobs.list().isEmpty)
    }

    /// Many assets go in one batch, checked in pages of IDs: all exist, or nothing is queued.
    @Test func aLargeBatchIsCheckedWhole() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(1_200)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        let ids = assets.map(\.id)
        let refused = #expect(throws: CatalogError.self) { try catalog.jobs.submit(["parked"], for: ids + [99_999]) }
        #expect(refused?.message == "No asset with ID 99999 (no job was queued)")
        #expect(try catalog.jobs.list().isEmpty)
        #expect(try catalog.jobs.submit(["parked"], for: ids).count == 1_200)
        #expect(try catalog.jobs.list(state: .queued).count == 1_200)
    }

    // MARK: - Attempts per kind

    @Test func eachKindRetriesTransientFailuresUpToItsOwnMaxAttempts() async throws {
        var tuning = JobQueue.Tuning()
        tuning.retryBaseDelay = 0.001
        let (_, catalog, assets) = try await catalogWithAssets(1, testing: CatalogTesting(jobs: tuning))
        defer { catalog.close() }
        // Six transient failures: more than the default five attempts allow.
        catalog.jobs.register(Flaky(transientFailures: 6, thenFails: false), as: "patient", maxAttempts: 7)
        catalog.jobs.register(Flaky(transientFailures: 6, thenFails: false), as: "default")
        catalog.jobs.register(Flaky(transientFailures: 6, thenFails: false), as: "hasty", maxAttempts: 2)
        catalog.jobs.register(Flaky(transientFailures: 6, thenFails: false), as: "once", maxAttempts: 0)
        let ids = try catalog.jobs.submit(["patient", "default", "hasty", "once"], for: [assets[0].id])
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == 1 && summary.failed == 3 && summary.retried == 6 + 4 + 1 + 0)
        let jobs = try ids.map { try #require(try catalog.jobs.job(id: $0)) }
        #expect(jobs.map(\.state) == [.succeeded, .failed, .failed, .failed])
        #expect(jobs.map(\.attempts) == [7, 5, 2, 1])
        #expect(jobs.map(\.error) == [nil, "busy, attempt 5", "busy, attempt 2", "busy, attempt 1"])
        // Each row records its kind's limit.
        let rows = try catalog.withContext { try $0.fetch(FetchRequest<Job>()).map(\.maxAttempts) }
        #expect(rows == [7, JobQueue.defaultMaxAttempts, 2, 1])
    }

    /// A job whose worker died counts the crash as an attempt, against its kind's limit.
    @Test func aDeadWorkersJobFailsAtItsKindsMaxAttempts() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(1)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "fragile", maxAttempts: 2)
        catalog.jobs.register(Parked(), as: "sturdy")
        let (fragile, sturdy) = try (
            catalog.jobs.submit("fragile", for: assets[0].id), catalog.jobs.submit("sturdy", for: assets[0].id)
        )
        /// As a claim by a process that then died leaves the row (no such process has a lock).
        func abandon(_ id: Int64, attempts: Int) throws {
            try catalog.jobs.changeJob(id) { job in
                job.state = .running
                job.owner = "gone-1#1"
                job.attempts = attempts
            }
        }
        try abandon(fragile, attempts: 1)
        try abandon(sturdy, attempts: 2)
        catalog.jobs.recoverAbandoned()
        #expect(try catalog.jobs.job(id: fragile)?.state == .queued)
        #expect(try catalog.jobs.job(id: sturdy)?.state == .queued)
        try abandon(fragile, attempts: 2)
        try abandon(sturdy, attempts: 4)
        catalog.jobs.recoverAbandoned()
        let failed = try #require(try catalog.jobs.job(id: fragile))
        #expect(failed.state == .failed && failed.error == "its worker process died 2 times")
        #expect(try catalog.jobs.job(id: sturdy)?.state == .queued)
    }

    // MARK: - Retention

    @Test func theStandardRetentionKeepsSevenDaysAndTenThousandJobs() async throws {
        #expect(JobRetention.standard == JobRetention(maxAge: 7 * 86_400, maxCount: 10_000))
        #expect(JobRetention(maxAge: -1, maxCount: -5) == JobRetention(maxAge: 0, maxCount: 0))
        let (_, catalog, _) = try await catalogWithAssets(0)
        defer { catalog.close() }
        #expect(catalog.jobs.retention == .standard)
    }

    @Test func finishedJobsArePrunedOnceOlderThanTheRetentionAge() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(3)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "ok")
        catalog.jobs.register(Flaky(transientFailures: 0, thenFails: true), as: "broken")
        catalog.jobs.register(Parked(), as: "parked")
        let succeeded = try catalog.jobs.submit("ok", for: assets[0].id)
        let failed = try catalog.jobs.submit("broken", for: assets[1].id)
        _ = try await catalog.jobs.runUntilIdle()  // prunes by the standard rule: nothing yet
        catalog.jobs.register(Parked(), as: "later")
        let cancelled = try catalog.jobs.cancel(try catalog.jobs.submit("later", for: assets[2].id)).id
        let queued = try catalog.jobs.submit("parked", for: assets[2].id)
        #expect(try catalog.jobs.list().map(\.id) == [succeeded, failed, cancelled, queued])

        // When each finished, as its row says; the rule counts seven days from there.
        let finishedAt = try catalog.jobs.list().filter { $0.state != .queued }.map(\.updated)
        let sevenDays: TimeInterval = 7 * 86_400
        let (first, last) = (finishedAt.min()!, finishedAt.max()!)
        #expect(try catalog.jobs.pruneFinishedJobs(now: first.addingTimeInterval(sevenDays - 0.01)) == 0)
        #expect(try catalog.jobs.list().count == 4)
        #expect(try catalog.jobs.pruneFinishedJobs(now: last.addingTimeInterval(sevenDays + 0.01)) == 3)
        #expect(try catalog.jobs.list().map(\.id) == [queued])  // the queued job is never pruned
        #expect(try catalog.jobs.job(id: succeeded) == nil)
    }

    @Test func atMostMaxCountFinishedJobsAreKeptTheMostRecentlyFinishedAfterEachRun() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(4)
        defer { catalog.close() }
        catalog.jobs.retention = JobRetention(maxAge: nil, maxCount: 2)
        catalog.jobs.register(Parked(), as: "ok")
        catalog.jobs.register(Flaky(transientFailures: 0, thenFails: true), as: "broken")
        // One run each (each run prunes): they finish in this order.
        var ok: [Int64] = []
        for asset in assets {
            ok.append(try catalog.jobs.submit("ok", for: asset.id))
            _ = try await catalog.jobs.runUntilIdle()
        }
        #expect(try catalog.jobs.list().map(\.id) == [ok[2], ok[3]])

        // Failed jobs count as finished too.
        let broken = try catalog.jobs.submit("broken", for: assets[0].id)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.jobs.list().map(\.id) == [ok[3], broken])
        let later = try catalog.jobs.submit("ok", for: assets[0].id)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.jobs.list().map(\.id) == [broken, later])
        // Retried, `broken` finishes last: the rule keeps it, though its ID is older than `later`'s.
        #expect(try catalog.jobs.retry(broken).state == .queued)
        _ = try await catalog.jobs.runUntilIdle()
        let third = try catalog.jobs.submit("ok", for: assets[1].id)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.jobs.list().map(\.id) == [broken, third])

        catalog.jobs.retention = .keepsEverything
        #expect(try catalog.jobs.pruneFinishedJobs(now: .distantFuture) == 0)
        #expect(try catalog.jobs.list().count == 2)
    }

    @Test func aBackgroundWorkerPrunesWhenItStarts() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(1)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "ok")
        let id = try catalog.jobs.submit("ok", for: assets[0].id)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.jobs.job(id: id)?.state == .succeeded)
        catalog.jobs.retention = JobRetention(maxAge: nil, maxCount: 0)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { try catalog.jobs.job(id: id) == nil }, "the worker never pruned")
    }

    @Test func pruningNeverTouchesQueuedOrRunningJobs() async throws {
        let (t, catalog, assets) = try await catalogWithAssets(3)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "ok")
        let finished = try catalog.jobs.submit("ok", for: assets[0].id)
        _ = try await catalog.jobs.runUntilIdle()
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 2, stepDuration: .seconds(30)), as: "slow")
        let running = try catalog.jobs.submit("slow", for: assets[1].id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        for _ in 0..<6_000 where !log.contains("asset \(assets[1].id) step 1") {
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(log.contains("asset \(assets[1].id) step 1"), "the slow job never started")
        // Submitted by another opening of the catalog: a kind this one's worker does not run.
        let other = try t.open()
        other.jobs.register(Parked(), as: "elsewhere")
        let queued = try other.jobs.submit("elsewhere", for: assets[2].id)
        other.close()

        catalog.jobs.retention = JobRetention(maxAge: 0, maxCount: 0)
        try catalog.jobs.pruneFinishedJobs(now: .distantFuture)
        let left = try catalog.jobs.list()
        #expect(left.map(\.id) == [running, queued] && left.map(\.state) == [.running, .queued])
        #expect(try catalog.jobs.job(id: finished) == nil)
    }
}
