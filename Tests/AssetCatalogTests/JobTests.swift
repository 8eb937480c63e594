import AssetCatalogTestSupport
import Foundation
import Locking
@_spi(Testing) import Persistence
import Synchronization
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog

/// A processor that works in observable steps: it records each step and
/// sleeps between them (a cancellation-aware sleep, like a real processor's
/// `checkCancellation()` between steps).
struct Stepper: JobProcessor {
    let log: StepLog
    var steps = 3
    var stepDuration: Duration = .milliseconds(20)
    /// The first step of an asset's first run takes this long instead (a test that stops
    /// that run: it never ends by itself before the test acts, however loaded the machine).
    var firstRunLasts: Duration?

    func run(_ job: JobContext) async throws -> JobOutput {
        for step in 1...steps {
            log.record("asset \(job.asset.id) step \(step)")
            let firstRun = step == 1 && log.all.filter { $0 == "asset \(job.asset.id) step 1" }.count == 1
            do {
                try await Task.sleep(for: firstRun ? firstRunLasts ?? stepDuration : stepDuration)
            } catch {
                log.record("asset \(job.asset.id) cancelled")
                throw error
            }
            job.reportProgress(Double(step) / Double(steps))
        }
        return JobOutput(metadata: ["stepped": String(steps)], tags: ["processed"])
    }
}

final class StepLog: Sendable {
    private let events = Mutex<[String]>([])
    func record(_ event: String) { events.withLock { $0.append(event) } }
    var all: [String] { events.withLock { $0 } }
    func contains(_ event: String) -> Bool { all.contains(event) }
}

/// Reports progress 0.25 at once, then, let go (`letGo`), 0.75 after 0.6 s (more than the
/// half second before a run's progress is written), then ends when let go again.
final class Reporter: JobProcessor {
    let log = StepLog()
    /// What lets the run go on: one element a step.
    let (steps, letGo) = AsyncStream.makeStream(of: Void.self)

    func run(_ job: JobContext) async throws -> JobOutput {
        var gate = steps.makeAsyncIterator()
        job.reportProgress(0.25)
        log.record("reported 0.25")
        await gate.next()
        // The run itself lasting past the half second is what is tested: not a wait for an event.
        try await Task.sleep(for: .milliseconds(600))
        job.reportProgress(0.75)
        log.record("reported 0.75")
        await gate.next()
        return JobOutput()
    }
}

/// Fails: transiently `transientFailures` times, then for good (or succeeds).
final class Flaky: JobProcessor {
    let attempts = Mutex(0)
    let transientFailures: Int
    let thenFails: Bool
    init(transientFailures: Int, thenFails: Bool) {
        self.transientFailures = transientFailures
        self.thenFails = thenFails
    }
    func run(_ job: JobContext) async throws -> JobOutput {
        let attempt = attempts.withLock { n in
            n += 1
            return n
        }
        if attempt <= transientFailures { throw TransientJobError("busy, attempt \(attempt)") }
        if thenFails { throw CatalogError(.io, "the remote service refused \(job.asset.name)") }
        return JobOutput(metadata: ["attempts": String(attempt)])
    }
}

@Suite struct JobTests {
    func catalogWithAsset(_ name: String = "a.txt") async throws -> (TestCatalog, Catalog, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let asset = try #require(try await catalog.add([try t.file(name, "content of \(name)")]).added.first)
        return (t, catalog, asset)
    }

    /// Waits (bounded) until `condition` holds.
    func eventually(
        _ condition: () throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        if try await !waitUntil(condition) { Issue.record("condition never held", sourceLocation: sourceLocation) }
    }

    func state(_ catalog: Catalog, _ jobID: Int64) throws -> JobRecord {
        try #require(try catalog.jobs.list().first { $0.id == jobID })
    }

    @Test func aJobRunsAndItsResultLandsOnTheAsset() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary == JobRunSummary(succeeded: 1))
        #expect(try state(catalog, id).state == .succeeded && state(catalog, id).progress == 1)
        let updated = try catalog.asset(asset.id)
        #expect(updated.metadata["stepped"] == "3" && updated.tags == ["processed"])
    }

    /// A run's progress is published to the run's callers at once, but written to its row
    /// (for `jobs ls` and other processes) only once the run has lasted half a second: a
    /// short job's report — a digest of a small file reports once — cost every job a write
    /// transaction of its own (a sixth of a digest job's CPU).
    @Test func aRunsProgressIsWrittenOnlyOnceItHasLastedHalfASecond() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let reporter = Reporter()
        catalog.jobs.register(reporter, as: "reporter")
        let id = try catalog.jobs.submit("reporter", for: asset.id)
        let heard = Mutex<[Double]>([])
        let run = Task { try await catalog.jobs.runUntilIdle { job in heard.withLock { $0.append(job.progress) } } }
        try await eventually { reporter.log.contains("reported 0.25") }
        #expect(heard.withLock { $0.contains(0.25) })  // published
        #expect(try state(catalog, id).state == .running && state(catalog, id).progress == 0)  // not written
        reporter.letGo.yield()
        try await eventually { reporter.log.contains("reported 0.75") }
        try await eventually { try state(catalog, id).progress == 0.75 }  // written: the run lasted 0.6 s
        reporter.letGo.yield()
        #expect(try await run.value == JobRunSummary(succeeded: 1))
        #expect(try state(catalog, id).progress == 1)
    }

    @Test func runUntilIdleReturnsOnlyOnceEveryOutcomeIsWritten() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let assets = try await catalog.add((0..<25).map { try t.file("q\($0)", "quick \($0)") }).added
        catalog.jobs.register(Stepper(log: StepLog(), steps: 1, stepDuration: .zero), as: "quick")
        catalog.jobs.register(Stepper(log: StepLog(), steps: 1, stepDuration: .zero), as: "quick-too")
        // Two kinds per asset: their results land on one asset at the same time.
        _ = try catalog.jobs.submit(["quick", "quick-too"], for: assets.map(\.id))
        #expect(try catalog.jobs.submit(["quick"], for: [assets[0].id]).count == 1)  // not queued twice
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == 50)
        #expect(try catalog.jobs.list([.queued, .running]).isEmpty)
        #expect(try catalog.jobs.list([.succeeded]).count == 50)
    }

    /// When `runUntilIdle` returns, its caller has heard of every job it ran: the progress
    /// callback of a job's end (slow here, as drawing a bar on a busy terminal can be) comes
    /// before the run stops counting as running.
    @Test func runUntilIdleReturnsOnlyOnceItsCallerHeardOfEveryEnd() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let assets = try await catalog.add((0..<3).map { try t.file("q\($0)", "quick \($0)") }).added
        catalog.jobs.register(Stepper(log: StepLog(), steps: 1, stepDuration: .zero), as: "quick")
        let ids = try catalog.jobs.submit(["quick"], for: assets.map(\.id))
        let heard = Locked<Set<Int64>>([])
        let summary = try await catalog.jobs.runUntilIdle(jobs: ids.map { $0...$0 }) { job in
            guard job.state == .succeeded else { return }
            Thread.sleep(forTimeInterval: 0.2)
            heard.withLock { _ = $0.insert(job.id) }
        }
        #expect(summary.succeeded == 3)
        #expect(heard.withLock { $0 } == Set(ids))
    }

    @Test func deletingAnAssetStopsItsRunningJobPromptlyAndNoResultLands() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        // Three steps of thirty seconds: long enough that the suite's load (two cores, a few
        // hundred tests, child processes) never lets a step end before the deletion comes.
        catalog.jobs.register(Stepper(log: log, steps: 3, stepDuration: .seconds(30)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        try await eventually { log.contains("asset \(asset.id) step 1") }
        let context = catalog.newContext()
        try context.performAndWait {
            context.delete(try context.existingObject(with: asset.objectID))  // prepareForDeletion cancels now
        }
        try await eventually { log.contains("asset \(asset.id) cancelled") }
        // Stopped inside its first thirty-second step, not at a step boundary: the
        // step's sleep was cut short. (Timed, this would measure the suite's
        // load; the jobs benchmark measures the latency.)
        #expect(log.all == ["asset \(asset.id) step 1", "asset \(asset.id) cancelled"])
        try context.performAndWait { try context.save() }
        try await eventually { try state(catalog, id).state == .cancelled }
        #expect(try state(catalog, id).error == "its asset was deleted")
        #expect(!log.contains("asset \(asset.id) step 2"))
    }

    @Test(arguments: ["rollback", "failed save", "discarded child"])
    func anInterruptedJobRunsAgainWhenTheDeletionDoesNotCommit(how: String) async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(
            Stepper(log: log, steps: 3, stepDuration: .milliseconds(1), firstRunLasts: .seconds(600)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        try await eventually { log.contains("asset \(asset.id) step 1") }
        let context = catalog.newContext()
        switch how {
        case "rollback":
            context.performAndWait {
                context.delete(try! context.existingObject(with: asset.objectID))
                context.rollback()
            }
        case "failed save":
            struct DiskFull: Error {}
            try context.performAndWait {
                context.delete(try context.existingObject(with: asset.objectID))
                catalog.container.failNextCommit(with: DiskFull())
                #expect(throws: PersistenceError.self) { try context.save() }
                context.rollback()
            }
        default:
            try context.performAndWait {
                do {
                    let child = context.newChildContext()
                    child.delete(try child.existingObject(with: asset.objectID))
                }  // the child is thrown away
            }
        }
        try await eventually { try state(catalog, id).state == .succeeded }
        #expect(log.contains("asset \(asset.id) cancelled"))  // it was interrupted…
        #expect(log.all.filter { $0 == "asset \(asset.id) step 1" }.count == 2)  // …and ran again from the start
        #expect(try catalog.asset(asset.id).metadata["stepped"] == "3")
    }

    /// Two contexts delete the same asset; the first one's save fails and it rolls back. Its
    /// deletion is over, the second's is not: the asset's jobs stay held. A failed save
    /// releases nothing by itself — its rollback, or the context thrown away, does, once.
    @Test func aFailedSaveDoesNotReleaseAnotherDeletionsHold() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 1, stepDuration: .milliseconds(1)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        let pending = catalog.newContext()
        try pending.performAndWait { pending.delete(try pending.existingObject(with: asset.objectID)) }
        let failing = catalog.newContext()
        struct DiskFull: Error {}
        try failing.performAndWait {
            failing.delete(try failing.existingObject(with: asset.objectID))
            catalog.container.failNextCommit(with: DiskFull())
            #expect(throws: PersistenceError.self) { try failing.save() }
            failing.rollback()
        }
        _ = try await catalog.jobs.runUntilIdle()
        #expect(log.all.isEmpty)  // held by the deletion still pending
        #expect(try state(catalog, id).state == .queued)
        try pending.performAndWait { try pending.save() }
        #expect(try state(catalog, id).state == .cancelled)
    }

    @Test func noResultLandsForAnAssetWhoseDeletionCommittedEvenInTheLastInstant() async throws {
        // A processor that finishes at once, racing deletions: whatever the
        // interleaving, a job's result never lands after its asset's deletion.
        for round in 0..<15 {
            let t = try TestCatalog()
            let catalog = try t.create()
            let assets = try await catalog.add((0..<8).map { try t.file("r\(round)-\($0).txt", "\(round) \($0)") })
                .added
            catalog.jobs.register(
                Stepper(log: StepLog(), steps: 1, stepDuration: .microseconds(Int64(round * 50))), as: "quick")
            _ = try catalog.jobs.submit(["quick"], for: assets.map(\.id))
            catalog.jobs.start()
            try catalog.remove(assets.filter { $0.id.rawValue % 2 == 0 }.map(\.id))
            try await eventually { try catalog.jobs.list([.queued, .running]).isEmpty }
            catalog.jobs.stop()
            let remaining = Set(try catalog.assets().map(\.id))
            for job in try catalog.jobs.list() {
                if remaining.contains(job.asset) {
                    #expect(job.state == .succeeded)
                } else {
                    // Either cancelled, or it succeeded before the deletion committed (and was deleted with it).
                    #expect(job.state == .cancelled || job.state == .succeeded)
                }
            }
            #expect(try catalog.assets().allSatisfy { $0.id.rawValue % 2 == 1 })
            catalog.close()
        }
    }

    @Test func archiveMembersAreNeverRecordedForADeletedArchive() async throws {
        for round in 0..<5 {
            let t = try TestCatalog()
            let catalog = try t.create()
            let archive = try generatedArchive(in: t, members: 600, name: "big\(round).tar")
            let asset = try #require(try await catalog.add([archive]).added.first)
            catalog.jobs.start()
            // Delete while the index job is recording members.
            try await eventually { try catalog.assets().count > 1 || catalog.jobs.list([.succeeded]).count == 1 }
            try catalog.remove(asset.id)
            try await eventually { try catalog.jobs.list([.queued, .running]).isEmpty }
            catalog.jobs.stop()
            #expect(try catalog.assets().isEmpty, "round \(round): members outlived their archive")
            catalog.close()
        }
    }

    @Test func membersOfALargeArchiveAppearWhileItIsIndexed() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let archive = try generatedArchive(in: t, members: 2_000, name: "large.tar")
        let result = try await catalog.add([archive])
        #expect(result.added.count == 1 && result.queuedJobs.count == 1)  // add returned at once
        let saves = catalog.saveNotifications()
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        var counts: [Int] = []
        for await note in saves {
            let members = note.insertedObjectIDs.filter { $0.entityName == "Asset" }.count
            if members > 0 { counts.append(members) }
            if counts.reduce(0, +) >= 2_000 { break }
        }
        #expect(counts.count > 1)  // several batches, committed as the job read
        try await eventually { try catalog.jobs.list([.succeeded]).count == 1 }
        #expect(try catalog.assets(AssetQuery(storage: .member)).count == 2_000)
        #expect(try catalog.asset(result.added[0].id).metadata["members"] == "2000")
    }

    @Test func aFailingProcessorRecordsItsErrorAndAttemptsAndTransientFailuresRetry() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        catalog.jobs.register(Flaky(transientFailures: 2, thenFails: false), as: "flaky")
        catalog.jobs.register(Flaky(transientFailures: 1, thenFails: true), as: "broken")
        let flaky = try catalog.jobs.submit("flaky", for: asset.id)
        let broken = try catalog.jobs.submit("broken", for: asset.id)
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.retried == 3 && summary.succeeded == 1 && summary.failed == 1)
        #expect(try state(catalog, flaky).state == .succeeded && state(catalog, flaky).attempts == 3)
        let failed = try state(catalog, broken)
        #expect(failed.state == .failed && failed.attempts == 2)
        #expect(failed.error == "the remote service refused a.txt")
        #expect(try catalog.jobs.retry(broken).state == .queued)
        #expect(throws: CatalogError.self) { try catalog.jobs.retry(flaky) }
    }

    /// Every turn of an idle worker ends asleep until it is woken (or its next look at other
    /// processes' commits): counted in turns and sleeps, not in time. A worker that spins
    /// never sleeps, and the wait for its third sleep fails.
    @Test func anIdleWorkerSleepsInsteadOfSpinning() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        let slept = try await waitUntil { catalog.jobs.metrics.workerWaits >= 3 }
        let (turns, waits) = (catalog.jobs.metrics.workerTurns, catalog.jobs.metrics.workerWaits)
        #expect(slept, "in five minutes the idle worker turned \(turns) times and slept \(waits) times")
        // The turn under way, and a first turn woken at once by the start, need not have slept.
        #expect(turns <= waits + 2, "the idle worker turned \(turns) times and slept \(waits) times")
        // And it still wakes for new work.
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 1), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        try await eventually { try state(catalog, id).state == .succeeded }
    }

    @Test func closingTheCatalogWhileAJobRunsQueuesItAgainWithoutCountingIt() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 2, stepDuration: .seconds(600)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        catalog.jobs.start()
        try await eventually { log.contains("asset \(asset.id) step 1") }
        catalog.close()  // stops the worker and waits for the job to leave the store alone
        let reopened = try t.open()
        defer { reopened.close() }
        let job = try #require(try reopened.jobs.list().first { $0.id == id })
        #expect(job.state == .queued && job.attempts == 0)
        reopened.jobs.register(Stepper(log: log, steps: 2), as: "stepper")
        #expect(try await reopened.jobs.runUntilIdle().succeeded == 1)
    }

    @Test func deferredHashingRunsAsADigestJob() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let source = try t.file("later.bin", Data(repeating: 1, count: 3 << 20))
        let added = try await catalog.add([source], options: .init(mode: .reference, defersHashing: true))
        #expect(added.added[0].sha256 == "" && added.queuedJobs.count == 1)
        _ = try await catalog.jobs.runUntilIdle()
        let hashed = try catalog.asset(added.added[0].id)
        #expect(hashed.sha256 == (try ContentStore.digest(ofFileAt: source).digest))
        #expect(hashed.size == 3 << 20)
        #expect(try await catalog.verify().issues.isEmpty)
    }

    @Test func metadataJobsReadMediaTypeAndPixelSize() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let png = testAsset("demo/photos/red.png")
        let added = try await catalog.addAndRunJobs([png])
        #expect(added[0].metadata == ["mediaType": "image/png", "width": "4", "height": "4"])
        #expect(MediaType.pixelSize(Array("GIF89a".utf8) + [3, 0, 2, 0]).map { [$0.0, $0.1] } == [3, 2])
        let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 7, 0, 9, 3, 0, 0, 0]
        #expect(MediaType.of(jpeg) == "image/jpeg")
        #expect(MediaType.pixelSize(jpeg).map { [$0.0, $0.1] } == [9, 7])
        #expect(MediaType.of(Array("plain text".utf8)) == "text/plain")
        #expect(MediaType.of([0, 1, 2, 3]) == "application/octet-stream")
    }
}

/// A tar of `members` small files, written by bsdtar.
func generatedArchive(in t: TestCatalog, members: Int, name: String) throws -> String {
    let folder = "gen-\(name)"
    for i in 0..<members { try t.file("\(folder)/m\(String(format: "%05d", i)).txt", "member \(i)\n") }
    let archive = t.sources.appending(path: name).path
    _ = try ChildProcess(
        "/usr/bin/bsdtar", ["-cf", archive, "-C", t.sources.appending(path: folder).path, "."], stdout: .inherit,
        stderr: .inherit
    ).wait()
    return archive
}
