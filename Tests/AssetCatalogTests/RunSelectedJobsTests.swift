import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// `runUntilIdle(jobs:)`: the jobs a caller queued (an add's, an import's), run to the end,
/// and no others; and the job IDs an add gives for it, whatever its options.
@Suite struct RunSelectedJobsTests {
    func catalogWithAssets(_ count: Int) async throws -> (Catalog, [AssetRecord]) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let assets = try await catalog.add((0..<count).map { try t.file("f\($0).txt", "file \($0)") }).added
        return (catalog, assets)
    }

    @Test func onlyTheGivenJobsRunAndTheOthersStayQueued() async throws {
        let (catalog, assets) = try await catalogWithAssets(4)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        let ids = try catalog.jobs.submit(["parked"], for: assets.map(\.id))
        let summary = try await catalog.jobs.runUntilIdle(jobs: [ids[1]...ids[2], ids[3]...ids[3]])
        #expect(summary == JobRunSummary(succeeded: 3))
        #expect(try catalog.jobs.list().map(\.state) == [.queued, .succeeded, .succeeded, .succeeded])
        // Nothing selected, nothing run.
        #expect(try await catalog.jobs.runUntilIdle(jobs: []) == JobRunSummary())
        #expect(try catalog.jobs.job(id: ids[0])?.state == .queued)
    }

    /// More ranges than one predicate holds are run a window at a time: all of them, and
    /// only them. Failures and retries are counted as the whole queue's run counts them.
    @Test func manyScatteredJobsAreAllRunWithTheirOutcomes() async throws {
        let (catalog, assets) = try await catalogWithAssets(3 * JobQueue.rangesPerRun)
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        catalog.jobs.register(Flaky(transientFailures: 0, thenFails: true), as: "broken")
        let ids = try catalog.jobs.submit(["parked"], for: assets.map(\.id))
        let even = ids.enumerated().filter { $0.offset % 2 == 0 }.map { $0.element...$0.element }
        let broken = try catalog.jobs.submit("broken", for: assets[1].id)
        let summary = try await catalog.jobs.runUntilIdle(jobs: even.reversed() + [broken...broken])
        #expect(summary == JobRunSummary(succeeded: even.count, failed: 1))
        let states = try catalog.jobs.list().map(\.state)
        #expect(states.count == ids.count + 1)
        #expect(states.last == .failed)
        #expect(states.dropLast().enumerated().allSatisfy { $0.element == ($0.offset % 2 == 0 ? .succeeded : .queued) })
    }

    @Test func rangesAreSortedAndMergedWhereTheyTouch() {
        #expect(JobQueue.coalesced([8...9, 1...2, 3...3, 5...6, 6...7, 20...20]) == [1...3, 5...9, 20...20])
        #expect(JobQueue.coalesced([]) == [])
    }

    /// Without records kept (as the CLI adds), an add still gives its jobs' IDs, as ranges.
    @Test(arguments: [false, true])
    func anAddGivesTheIDsOfTheJobsItQueued(keepsRecords: Bool) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        // Images without thumbnails: a metadata job each.
        let earlier = try await catalog.add(
            [try t.file("early.png", "\u{89}PNG")], options: .init(makesThumbnails: false))
        #expect(earlier.queuedJobIDs == [1...1])
        let files = try (0..<3).map { try t.file("p\($0).png", "\u{89}PNG \($0)") } + [try t.file("a.txt", "text")]
        let result = try await catalog.add(files, options: .init(makesThumbnails: false, keepsRecords: keepsRecords))
        #expect(result.queuedJobIDs == [2...4])
        #expect(result.queuedJobs == (keepsRecords ? [2, 3, 4] : []))
        let summary = try await catalog.jobs.runUntilIdle(jobs: result.queuedJobIDs)
        #expect(summary.succeeded == 3)
        #expect(try catalog.jobs.job(id: 1)?.state == .queued)
    }

    /// A job another worker claimed first is waited for: when the call returns, it is done.
    @Test func aSelectedJobAnotherWorkerRunsIsWaitedFor() async throws {
        let t = try TestCatalog()
        let worker = try t.create()
        defer { worker.close() }
        let asset = try #require(try await worker.add([try t.file("a.txt", "a")]).added.first)
        let log = StepLog()
        worker.jobs.register(Stepper(log: log, steps: 3, stepDuration: .milliseconds(200)), as: "slow")
        let id = try worker.jobs.submit("slow", for: asset.id)
        let running = Task { try await worker.jobs.runUntilIdle() }
        // Its first step is logged as it starts (a fact that stays true): a poll for the row's
        // `running` state could miss the whole run on a loaded machine, and wait in vain.
        #expect(try await waitUntil { log.contains("asset \(asset.id) step 1") })
        let adder = try t.open()
        defer { adder.close() }
        adder.jobs.register(Stepper(log: log, steps: 3, stepDuration: .milliseconds(200)), as: "slow")
        let summary = try await adder.jobs.runUntilIdle(jobs: [id...id])
        #expect(summary == JobRunSummary())  // the worker ran it
        #expect(try adder.jobs.job(id: id)?.state == .succeeded)
        #expect(try await running.value.succeeded == 1)
    }
}
