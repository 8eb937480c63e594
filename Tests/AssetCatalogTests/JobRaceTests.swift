import AssetCatalogTestSupport
import Dispatch
import Foundation
import Locking
import Persistence
import Synchronization
import Testing

@_spi(Testing) @testable import AssetCatalog

/// A processor with one step that does not notice cancellation (a blocking
/// library call), then checks for it: it records how many runs overlap.
final class Stubborn: JobProcessor {
    let log = StepLog()
    let active = Mutex(0)
    let maxActive = Mutex(0)
    let step: Duration
    init(step: Duration = .milliseconds(400)) { self.step = step }
    func run(_ job: JobContext) async throws -> JobOutput {
        let now = active.withLock { n in
            n += 1; return n
        }
        maxActive.withLock { $0 = max($0, now) }
        defer { active.withLock { $0 -= 1 } }
        log.record("start")
        let step = self.step
        await Task.detached { try? await Task.sleep(for: step) }.value
        try job.checkCancellation()
        log.record("done")
        return JobOutput(metadata: ["done": "yes"])
    }
}

@Suite struct JobRaceTests {
    func catalogWithAsset(
        _ name: String = "a.txt", testing: CatalogTesting = CatalogTesting()
    ) async throws -> (TestCatalog, Catalog, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try t.create(testing: testing)
        let asset = try #require(try await catalog.add([try t.file(name, "content of \(name)")]).added.first)
        return (t, catalog, asset)
    }

    func state(_ catalog: Catalog, _ jobID: Int64) throws -> JobRecord {
        try #require(try catalog.jobs.list().first { $0.id == jobID })
    }

    /// cancelAll, then resume (rollback) before the interrupted task has
    /// unwound: the job may be claimed again while the old task still runs; the
    /// old task's CancellationError must not mark the new run cancelled.
    @Test func rolledBackDeletionWhileTheInterruptedTaskStillRunsEndsSucceeded() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let p = Stubborn()
        catalog.jobs.register(p, as: "stubborn")
        let id = try catalog.jobs.submit("stubborn", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { p.log.contains("start") })
        let context = catalog.newContext()
        context.performAndWait {
            context.delete(try! context.existingObject(with: asset.objectID))
            context.rollback()
        }
        let finished = try await waitUntil { [.succeeded, .cancelled, .failed].contains(try state(catalog, id).state) }
        #expect(finished)
        // Every run of the job has ended, the interrupted one too: nothing writes to it any more.
        #expect(try await waitUntil { catalog.jobs.runs.tasksInFlight == 0 }, "a run never ended")
        let final = try state(catalog, id)
        #expect(final.state == .succeeded, "ended \(final.state) \(final.error ?? "")")
        #expect(p.maxActive.withLock { $0 } == 1, "the same job ran twice at once")
    }

    /// The same through cancel + retry: the cancelled run, ending while the retried one
    /// runs, must not mark it cancelled.
    @Test func retryOfAJobWhoseCancelledTaskStillRunsEndsSucceeded() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let p = Stubborn()
        catalog.jobs.register(p, as: "stubborn")
        let id = try catalog.jobs.submit("stubborn", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { p.log.contains("start") })
        _ = try catalog.jobs.cancel(id)
        _ = try catalog.jobs.retry(id)
        let ended = try await waitUntil {
            try [.succeeded, .cancelled, .failed].contains(state(catalog, id).state)
                && catalog.jobs.runs.tasksInFlight == 0
        }
        #expect(ended, "the retried job never ended")
        let final = try state(catalog, id)
        #expect(final.state == .succeeded, "ended \(final.state) \(final.error ?? "")")
        #expect(p.maxActive.withLock { $0 } == 1, "the same job ran twice at once")
    }

    /// 64 queued jobs of a kind only another process runs must not starve this process's
    /// jobs: the claim asks the store for jobs of the kinds registered here and assets not
    /// held, rather than fetching a page and filtering it afterwards.
    @Test func jobsOfUnregisteredKindsDoNotStarveTheQueue() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        catalog.jobs.register(Stepper(log: StepLog(), steps: 1, stepDuration: .zero), as: "quick")
        // Another opening of the catalog (another process, typically) submits a kind this one lacks.
        let other = try t.open()
        other.jobs.register(Parked(), as: "pipeline-thumbnail")
        _ = try other.jobs.submit(Array(repeating: "pipeline-thumbnail", count: 64), for: [asset.id])
        other.close()
        let id = try catalog.jobs.submit("quick", for: asset.id)
        let run = Task { try await catalog.jobs.runUntilIdle() }
        let ran = try await waitUntil { try state(catalog, id).state == .succeeded }
        run.cancel()
        _ = await run.result
        #expect(ran, "the quick job never ran; runUntilIdle spun")
    }

    /// reset() ends a pending deletion without a rollback: the discarded-deletions handler
    /// releases the hold, so the interrupted job runs again rather than staying `running`
    /// for the life of the process.
    @Test func aDeletionForgottenByResetReleasesTheJobs() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 3, stepDuration: .milliseconds(100)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { log.contains("asset \(asset.id) step 1") })
        let context = catalog.newContext()
        context.performAndWait {
            context.delete(try! context.existingObject(with: asset.objectID))
            context.reset()
        }
        let ok = try await waitUntil { try state(catalog, id).state == .succeeded }
        let st = try state(catalog, id).state
        #expect(ok, "job is \(st)")
        _ = context
    }

    /// Holds are counted per context: one context's rollback does not release the asset
    /// while another context's deletion of it is still pending. The rollback releases (or
    /// not) at once, on this thread: the state right after it is the answer, with no wait.
    @Test func aRollbackInOneContextDoesNotRestartJobsAnotherContextIsDeleting() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 1, firstRunLasts: .seconds(600)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { log.contains("asset \(asset.id) step 1") })
        let a = catalog.newContext()
        let b = catalog.newContext()
        a.performAndWait { a.delete(try! a.existingObject(with: asset.objectID)) }
        b.performAndWait { b.delete(try! b.existingObject(with: asset.objectID)) }
        #expect(catalog.jobs.runs.holds(on: asset.id.rawValue) == 2)
        let before = try state(catalog, id)
        a.performAndWait { a.rollback() }
        // Still held by b: not queued again (a release would have queued it before returning).
        #expect(catalog.jobs.runs.holds(on: asset.id.rawValue) == 1, "a's rollback released the asset b is deleting")
        let after = try state(catalog, id)
        #expect(after.state == .running && after.attempts == before.attempts, "the job was queued again")
        try b.performAndWait { try b.save() }
        #expect(try state(catalog, id).state == .cancelled)
        let starts = log.all.filter { $0 == "asset \(asset.id) step 1" }.count
        #expect(starts == 1, "the job ran again while b's deletion was pending")
    }

    /// runUntilIdle does not wait for jobs held by a deletion pending in this
    /// process (it could wait forever); once the deletion is rolled back, the
    /// next run completes them.
    @Test func aJobHeldByAPendingDeletionRunsInTheNextRunAfterTheRollback() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(
            Stepper(log: log, steps: 3, stepDuration: .milliseconds(1), firstRunLasts: .seconds(600)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        let run = Task { try await catalog.jobs.runUntilIdle() }
        #expect(try await waitUntil { log.contains("asset \(asset.id) step 1") })
        let context = catalog.newContext()
        context.performAndWait { context.delete(try! context.existingObject(with: asset.objectID)) }
        _ = try await run.value
        context.performAndWait { context.rollback() }
        #expect(try state(catalog, id).state == .queued)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try state(catalog, id).state == .succeeded)
    }
}

/// A run that lasts `lasting` (or until cancelled), then an end the log records: a run that
/// ended before its asset's deletion began is told apart from one the deletion missed.
struct LoggedRun: JobProcessor {
    let log: StepLog
    let lasting: Duration
    func run(_ job: JobContext) async throws -> JobOutput {
        log.record("asset \(job.asset.id) started")
        do {
            try await Task.sleep(for: lasting)
        } catch {
            log.record("asset \(job.asset.id) cancelled")
            throw error
        }
        log.record("asset \(job.asset.id) ended")
        return JobOutput(metadata: ["ran": "yes"])
    }
}

extension JobRaceTests {
    /// A job claimed just as its asset's deletion begins is stopped (or never started):
    /// the claim checks `held` under the lock that registers the task, so a cancelAll
    /// between the claim's fetch-and-save and the task's start is not missed.
    @Test func aJobClaimedWhileItsAssetIsBeingDeletedIsStopped() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let assets = try await catalog.add((0..<40).map { try t.file("s\($0)", "s \($0)") }).added
        let log = StepLog()
        catalog.jobs.register(LoggedRun(log: log, lasting: .seconds(6)), as: "stepper")
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        var contexts: [ManagedObjectContext] = []
        for asset in assets {
            _ = try catalog.jobs.submit("stepper", for: asset.id)
            // Pacing only, to meet the worker at every point of its claim: nothing is judged here.
            try await Task.sleep(for: .microseconds(Int64.random(in: 0...3000)))
            let context = catalog.newContext()
            context.performAndWait { context.delete(try! context.existingObject(with: asset.objectID)) }
            log.record("asset \(asset.id) deletion began")
            contexts.append(context)  // deletion pending
            try await Task.sleep(for: .milliseconds(60))
        }
        // Every asset is held now: a claim that began before the last deletion has ended once
        // the worker's loop has turned twice since, and none after it can claim these jobs.
        // Then every run started is over: a cancelled one ends at once, a missed one after
        // its 6 s. Only then is the log judged, whatever the timing of the claims.
        let turns = catalog.jobs.metrics.workerTurns
        #expect(
            try await waitUntil {
                catalog.jobs.metrics.workerTurns >= turns + 2 && catalog.jobs.runs.tasksInFlight == 0
            },
            "the runs never ended")
        // A run that ended before its asset's deletion began missed nothing (a loaded machine
        // can stall this loop between a submit and its deletion for longer than a run);
        // any other run that started must have been cancelled.
        let events = log.all
        let missed = assets.map(\.id).filter { id in
            guard events.contains("asset \(id) started"), !events.contains("asset \(id) cancelled") else {
                return false
            }
            let ended = events.firstIndex(of: "asset \(id) ended") ?? events.endIndex
            return ended > events.firstIndex(of: "asset \(id) deletion began")!
        }
        #expect(missed.isEmpty, "jobs running uncancelled while their asset's deletion was pending: \(missed)")
        for c in contexts { c.performAndWait { c.rollback() } }
    }
}

extension JobRaceTests {
    /// stop() leaves running jobs to be queued again: their tasks' CancellationError
    /// must not mark them `cancelled` for good.
    @Test func stoppedJobsRunAgainAfterStart() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        catalog.jobs.register(
            Stepper(log: log, steps: 3, stepDuration: .milliseconds(1), firstRunLasts: .seconds(600)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        catalog.jobs.start()
        #expect(try await waitUntil { log.contains("asset \(asset.id) step 1") })
        catalog.jobs.stop()
        // The stopped run has ended: whatever it writes is written.
        #expect(try await waitUntil { catalog.jobs.runs.tasksInFlight == 0 }, "the stopped run never ended")
        let afterStop = try state(catalog, id)
        #expect(afterStop.state == .queued, "after stop() the job was \(afterStop.state) \(afterStop.error ?? "")")
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        let ok = try await waitUntil { try state(catalog, id).state == .succeeded }
        #expect(ok, "after stop() the job was \(afterStop.state) \(afterStop.error ?? "")")
    }

    /// stop() cancels the running task and queues its job again; the task,
    /// ending on its cancellation on another thread, must not mark the job
    /// cancelled, whichever of the two writes first (seen under load in CI,
    /// as a Ctrl-C'd `jobs run` leaving a cancelled job). A job claimed just as
    /// stop() comes is queued again, not started. Repeated to meet every order.
    @Test func aStoppedRunIsQueuedAgainNeverCancelled() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        let log = StepLog()
        // A step that lasts until stop() cancels it: runs go on their own threads, so a test
        // whose task waits long for the concurrency pool (as under AddressSanitizer, in the
        // whole suite) must not find a run that ended by itself (a 30 s step did: "succeeded").
        catalog.jobs.register(Stepper(log: log, steps: 1, stepDuration: .seconds(3_600)), as: "stepper")
        for round in 1...25 {
            let id = try catalog.jobs.submit("stepper", for: asset.id)
            catalog.jobs.start()
            #expect(try await waitUntil { try state(catalog, id).state == .running })
            catalog.jobs.stop()
            // Until the stopped run has ended and the job is no longer running
            // (a run claimed as stop() came is queued again without starting).
            #expect(
                try await waitUntil { try !catalog.jobs.runs.isRunningAnything && state(catalog, id).state != .running }
            )
            let job = try state(catalog, id)
            #expect(job.state == .queued && job.attempts == 0, "round \(round): \(job.state) \(job.error ?? "")")
            _ = try? catalog.jobs.cancel(id)  // out of the next round's way
        }
    }

    /// Two index-archive jobs for one archive running at once both record every member.
    @Test func concurrentIndexJobsDoNotDuplicateMembers() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let archive = try generatedArchive(in: t, members: 300, name: "dup.tar")
        let added = try await catalog.add([archive])
        let asset = added.added[0]
        _ = try catalog.jobs.submit("index-archive", for: asset.id)
        _ = try await catalog.jobs.runUntilIdle()
        let members = try catalog.assets(AssetQuery(storage: .member)).count
        #expect(members == 300, "\(members) members recorded for 300")
    }
}

extension JobRaceTests {
    /// A deletion rolled back while its asset's cancelled run is still ending: the rollback
    /// queues the job again, and the run's end — a CancellationError — must not mark the job
    /// cancelled for good in between. The hook holds that window open until the run ended.
    @Test func aRunEndingWhileItsDeletionRollsBackIsQueuedAgainNotCancelled() async throws {
        let processor = SlowToStop()
        var hooks = JobQueue.Hooks()
        hooks.beforeResumeQueues = { catalog in
            processor.letGo.signal()
            let deadline = Date().addingTimeInterval(60)
            while catalog.jobs.runs.tasksInFlight > 0 && Date() < deadline { usleep(1_000) }
        }
        let (_, catalog, asset) = try await catalogWithAsset(testing: CatalogTesting(jobHooks: hooks))
        catalog.jobs.register(processor, as: "slow-to-stop")
        let id = try catalog.jobs.submit("slow-to-stop", for: asset.id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { processor.log.contains("run 1") })
        let context = catalog.newContext()
        context.performAndWait {
            context.delete(try! context.existingObject(with: asset.objectID))
            context.rollback()
        }
        #expect(processor.log.contains("run 1 ended"), "the run did not end inside the window")
        let ended = try await waitUntil { [.succeeded, .cancelled].contains(try state(catalog, id).state) }
        let final = try state(catalog, id).state
        #expect(ended && final == .succeeded)
        #expect(processor.log.all == ["run 1", "run 1 ended", "run 2"])
    }
}

/// A processor whose first run, once cancelled, ends only when let go (`letGo`); its later
/// runs end at once.
final class SlowToStop: JobProcessor {
    let log = StepLog()
    let letGo = DispatchSemaphore(value: 0)
    private let runs = Locked(0)

    func run(_ job: JobContext) async throws -> JobOutput {
        let run = runs.withLock { count in
            count += 1
            return count
        }
        log.record("run \(run)")
        if run == 1 {
            try? await Task.sleep(for: .seconds(600))  // until cancelled
            _ = letGo.wait(timeout: .now() + 60)
            log.record("run 1 ended")
            throw CancellationError()
        }
        return JobOutput(metadata: ["runs": String(run)])
    }
}

/// A processor whose run, once started, waits until let go (cancelled or not), then fails
/// as a run fails whose asset another process has just deleted: its file unlinked, or its
/// archive gone when it records members.
final class FailsOnceLetGo: JobProcessor {
    private let started = Locked(false)
    private let release = DispatchSemaphore(value: 0)
    /// The run's token, as its row names its owner while it runs.
    private let owner = Locked<String?>(nil)

    var hasStarted: Bool { started.withLock { $0 } }
    var runToken: String? { owner.withLock { $0 } }
    func letGo() { release.signal() }

    func run(_ job: JobContext) async throws -> JobOutput {
        owner.withLock { $0 = job.runToken }
        started.withLock { $0 = true }
        // Not on the concurrency pool, and deaf to cancellation: the run fails whatever it heard.
        let release = self.release
        try await offThePool { _ = release.wait(timeout: .now() + 300) }
        throw CatalogError(.notFound, "the file of asset \(job.asset.id) is gone")
    }
}

extension JobRaceTests {
    /// Another process deletes the asset of a running job, which then fails (its file went
    /// with the deletion) before it hears of it. Whether the deleting process marked the row
    /// `cancelled` after its commit (the run's write then changes nothing) or not (it died
    /// between its commit and the marking: the row still says the run has it), the job ends
    /// cancelled, and the run counts it so: not a failure, and `jobs run` does not exit 1
    /// for it.
    @Test(arguments: [true, false])
    func aRunThatFailsAfterItsAssetWasDeletedElsewhereEndsCancelled(markedByTheDeletion: Bool) async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        let processor = FailsOnceLetGo()
        catalog.jobs.register(processor, as: "fails")
        let id = try catalog.jobs.submit("fails", for: asset.id)
        let run = Task { try await catalog.jobs.runUntilIdle() }
        #expect(try await waitUntil { processor.hasStarted })
        let token = try #require(processor.runToken)
        let other = try t.open()  // as another process would
        try other.remove(asset.id)
        other.close()
        #expect(try catalog.jobs.job(id: id)?.state == .cancelled)
        if !markedByTheDeletion {
            // The row as the deleting process leaves it if it dies right after its commit.
            try catalog.jobs.changeJob(id) { row in
                row.state = .running
                row.owner = token
                row.lastError = nil
            }
        }
        processor.letGo()
        let summary = try await run.value
        #expect(summary.failed == 0 && summary.cancelled == 1, "\(summary)")
        let job = try #require(try catalog.jobs.job(id: id))
        #expect(job.state == .cancelled && job.error == "its asset was deleted", "\(job)")
    }
}
