import AssetCatalogTestSupport
import Foundation
import Locking
import Persistence
import Synchronization
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog

/// Counts each job's runs, by job ID, and returns a result that lands in the asset.
final class RunCounter: JobProcessor {
    let runs = Mutex<[Int64: Int]>([:])
    func run(_ job: JobContext) async throws -> JobOutput {
        runs.withLock { $0[job.jobID, default: 0] += 1 }
        return JobOutput(metadata: ["counted": "yes"])
    }
}

/// Runs wait at a gate the test opens (they do not notice cancellation while they wait,
/// like a blocking library call), then check for it.
final class Gate: JobProcessor {
    private let state = Mutex<(open: Bool, waiting: [CheckedContinuation<Void, Never>], started: [Int64])>(
        (false, [], []))
    func run(_ job: JobContext) async throws -> JobOutput {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let open = state.withLock { s -> Bool in
                s.started.append(job.asset.id.rawValue)
                if s.open { return true }
                s.waiting.append(continuation)
                return false
            }
            if open { continuation.resume() }
        }
        try job.checkCancellation()
        return JobOutput(metadata: ["gate": "passed"])
    }
    var started: [Int64] { state.withLock { $0.started } }
    func open() {
        for c in state.withLock({ s -> [CheckedContinuation<Void, Never>] in
            s.open = true
            defer { s.waiting = [] }
            return s.waiting
        }) { c.resume() }
    }
}

@Suite struct JobBatchTests {
    /// A catalog of `count` referenced tiny files.
    func catalogWithAssets(
        _ count: Int, jobs tuning: JobQueue.Tuning = JobQueue.Tuning(), hooks: JobQueue.Hooks = JobQueue.Hooks()
    ) async throws -> (TestCatalog, Catalog, [AssetRecord]) {
        let t = try TestCatalog()
        for n in 0..<count { _ = try t.file("d/a\(n).txt", "asset \(n)\n") }
        let catalog = try t.create(testing: CatalogTesting(jobs: tuning, jobHooks: hooks))
        let added = try await catalog.add(
            [t.sources.appending(path: "d").path], options: AddOptions(mode: .reference, recursive: true)
        ).added
        try #require(added.count == count)
        return (t, catalog, added.sorted { $0.id.rawValue < $1.id.rawValue })
    }

    func eventually(
        _ what: String, _ condition: () throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        if try await !waitUntil(condition) { Issue.record("never: \(what)", sourceLocation: sourceLocation) }
    }

    /// Two queues on one store (as two processes: each its own connections and owner)
    /// claim batches of the same jobs at once: every job runs exactly once, and succeeds.
    @Test func batchClaimsOfTwoQueuesNeverHandOneJobToBoth() async throws {
        var tuning = JobQueue.Tuning()
        tuning.minimumClaimAhead = 64  // large batches from the first claim on
        let (t, first, assets) = try await catalogWithAssets(400, jobs: tuning)
        let second = try t.open(testing: CatalogTesting(jobs: tuning))
        defer { second.close() }
        let counter = RunCounter()
        for catalog in [first, second] { catalog.jobs.register(counter, as: "count") }
        let ids = try first.jobs.submit(["count"], for: assets.map(\.id))
        async let a = first.jobs.runUntilIdle()
        async let b = second.jobs.runUntilIdle()
        let (sa, sb) = try await (a, b)
        #expect(sa.succeeded + sb.succeeded == ids.count)
        let runs = counter.runs.withLock { $0 }
        #expect(runs.count == ids.count && runs.values.allSatisfy { $0 == 1 }, "jobs run twice or never")
        let rows = try first.jobs.list()
        #expect(rows.allSatisfy { $0.state == .succeeded && $0.attempts == 1 })
        first.close()
    }

    /// Results committed in one group: the one whose asset another process deleted
    /// meanwhile does not land (its job is cancelled), the others do, in the same commit.
    @Test func aGroupedResultWhoseAssetWasDeletedMeanwhileDoesNotLand() async throws {
        var tuning = JobQueue.Tuning()
        tuning.holdsResults = true
        tuning.minimumClaimAhead = 8  // every job claimed at once, whatever the core count
        let (t, catalog, assets) = try await catalogWithAssets(3, jobs: tuning)
        defer { catalog.close() }
        let counter = RunCounter()
        catalog.jobs.register(counter, as: "count")
        let ids = try catalog.jobs.submit(["count"], for: assets.map(\.id))
        let run = Task { try await catalog.jobs.runUntilIdle() }
        try await eventually("three results waiting") { catalog.jobs.batcher.pendingCount == 3 }
        let token = try catalog.withContext { context in
            try context.existingObject(with: catalog.jobs.jobObjectID(ids[1]), as: Job.self).owner
        }
        let other = try t.open()
        try other.remove(assets[1].id)  // committed by another "process": no cancelAll here
        other.close()
        // The instant between that commit and the one that cancels the asset's jobs: the
        // row is still this run's, so only the check of the asset keeps the result out.
        try catalog.jobs.changeJob(ids[1]) { row in
            row.state = .running
            row.owner = token
            row.lastError = nil
        }
        let commits = catalog.jobs.metrics.resultCommits
        catalog.jobs.batcher.releaseHeldResults()
        _ = try await run.value
        #expect(catalog.jobs.metrics.resultCommits == commits + 1, "the three results were not one group")
        let rows = Dictionary(uniqueKeysWithValues: try catalog.jobs.list().map { ($0.id, $0) })
        #expect(rows[ids[0]]?.state == .succeeded && rows[ids[2]]?.state == .succeeded)
        #expect(rows[ids[1]]?.state == .cancelled && rows[ids[1]]?.error == "its asset was deleted")
        let metadata = try catalog.assets().filter { $0.metadata["counted"] == "yes" }.map(\.id)
        #expect(Set(metadata) == [assets[0].id, assets[2].id])
    }

    /// A success is reported (event, summary) only once its grouped commit is durable:
    /// while results wait for their commit, no success is published and the rows are still
    /// running; every success published is then read back by another connection.
    @Test func groupedCompletionsAreReportedOnlyOnceCommitted() async throws {
        var tuning = JobQueue.Tuning()
        tuning.holdsResults = true
        tuning.minimumClaimAhead = 8  // every job claimed at once, whatever the core count
        let (t, catalog, assets) = try await catalogWithAssets(6, jobs: tuning)
        defer { catalog.close() }
        catalog.jobs.register(RunCounter(), as: "count")
        let events = catalog.jobs.events()
        let succeeded = Task {
            var ids: [Int64] = []
            for await record in events where record.state == .succeeded {
                ids.append(record.id)
                if ids.count == assets.count { break }
            }
            return ids
        }
        let ids = try catalog.jobs.submit(["count"], for: assets.map(\.id))
        let run = Task { try await catalog.jobs.runUntilIdle() }
        try await eventually("every result waiting") { catalog.jobs.batcher.pendingCount == assets.count }
        let other = try t.open()
        defer { other.close() }
        #expect(try other.jobs.list().allSatisfy { $0.state == .running })
        #expect(catalog.jobs.runs.isRunningAnything, "runs ended before their results were committed")
        catalog.jobs.batcher.releaseHeldResults()
        let summary = try await run.value
        #expect(summary.succeeded == assets.count)
        let reported = await succeeded.value
        #expect(Set(reported) == Set(ids))
        let stored = try other.jobs.list()
        #expect(stored.count == ids.count && stored.allSatisfy { $0.state == .succeeded })
    }

    /// Jobs claimed ahead of a free slot wait as `running`. Deleting the asset of one of
    /// them stops it before its processor ever runs: a committed deletion cancels it, a
    /// rolled-back one queues it again and it runs once.
    @Test func aJobClaimedAheadIsHeldByItsAssetsDeletionAndResumedByTheRollback() async throws {
        var tuning = JobQueue.Tuning()
        tuning.minimumClaimAhead = 2
        let (_, catalog, assets) = try await catalogWithAssets(
            ProcessInfo.processInfo.activeProcessorCount + 2, jobs: tuning)
        defer { catalog.close() }
        let gate = Gate()
        catalog.jobs.register(gate, as: "gate")
        let ids = try catalog.jobs.submit(["gate"], for: assets.map(\.id))
        let run = Task { try await catalog.jobs.runUntilIdle() }
        // Every job claimed: the first ones wait at the gate, the last two for a slot.
        try await eventually("every job claimed") {
            try catalog.jobs.list(state: .running).count == ids.count && gate.started.count == catalog.jobs.concurrency
        }
        let waiting = assets.map(\.id.rawValue).filter { !gate.started.contains($0) }
        try #require(waiting.count == 2)
        let rolledBack = catalog.newContext()
        let committed = catalog.newContext()
        rolledBack.performAndWait {
            rolledBack.delete(
                try! rolledBack.existingObject(with: ManagedObjectID(entityName: "Asset", rowID: waiting[0])))
        }
        try committed.performAndWait {
            committed.delete(
                try committed.existingObject(with: ManagedObjectID(entityName: "Asset", rowID: waiting[1])))
            try committed.save()
        }
        rolledBack.performAndWait { rolledBack.rollback() }
        gate.open()
        let summary = try await run.value
        #expect(summary.succeeded == ids.count - 1)
        let byAsset = Dictionary(uniqueKeysWithValues: try catalog.jobs.list().map { ($0.asset.rawValue, $0) })
        #expect(byAsset[waiting[1]]?.state == .cancelled && byAsset[waiting[1]]?.error == "its asset was deleted")
        #expect(byAsset[waiting[0]]?.state == .succeeded && byAsset[waiting[0]]?.attempts == 1)
        #expect(gate.started.filter { $0 == waiting[0] }.count == 1 && !gate.started.contains(waiting[1]))
    }

    /// A worker that died holding a claimed batch (rows `running` under its tokens, most of
    /// them never started) leaves every one of them to run again, to completion.
    @Test func aDeadWorkersClaimedBatchRunsAgain() async throws {
        let (_, catalog, assets) = try await catalogWithAssets(20)
        defer { catalog.close() }
        let counter = RunCounter()
        catalog.jobs.register(counter, as: "count")
        let ids = try catalog.jobs.submit(["count"], for: assets.map(\.id))
        for (n, id) in ids.enumerated() {
            try catalog.jobs.changeJob(id) { job in
                job.state = .running
                job.owner = "999999999-gone#\(n + 1)"  // no lock file: its process is gone
                job.attempts = 1
            }
        }
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == ids.count)
        #expect(try catalog.jobs.list().allSatisfy { $0.state == .succeeded && $0.attempts == 2 })
        #expect(counter.runs.withLock { $0.count } == ids.count)
    }

    /// A deletion committed by another process stops a running job through the watch on
    /// the store's `-wal`, with polling turned off (an hour apart): without the watch, the
    /// run would go on until the catalog closes, and the wait below fails.
    @Test func anotherProcesssDeletionIsSeenThroughTheStoreWatch() async throws {
        var tuning = JobQueue.Tuning()
        tuning.externalPollInterval = 3600
        let (t, catalog, assets) = try await catalogWithAssets(1, jobs: tuning)
        defer { catalog.close() }
        let processor = UntilCancelled()
        catalog.jobs.register(processor, as: "until-cancelled")
        let id = try catalog.jobs.submit("until-cancelled", for: assets[0].id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        try await eventually("the job running") { processor.runs.withLock { $0 } == 1 }
        #expect(catalog.jobs.watcher.isWatchingStore)
        let other = try t.open()
        try other.remove(assets[0].id)  // its commit marks the row cancelled; the run here goes on
        other.close()
        try await eventually("the run stopped") { processor.cancellations.withLock { $0 } == 1 }
        try await eventually("the run ended") { catalog.jobs.runs.tasksInFlight == 0 }
        #expect(try catalog.jobs.job(id: id)?.state == .cancelled)
        #expect(try catalog.jobs.job(id: id)?.error == "its asset was deleted")
    }

    /// Another process's deletion committed between a claim's commit and the registration of
    /// the claimed job, and the watch's check of it run in that window too (when the job is
    /// not yet among those it checks): the job is still stopped, by the check the end of the
    /// claim makes again. Without it the store's change counter is spent and the run goes on.
    @Test func aDeletionCommittedWhileAClaimIsUnderWayStopsTheClaimedJob() async throws {
        var tuning = JobQueue.Tuning()
        tuning.externalPollInterval = 3600
        tuning.watchesStore = false  // the check below stands for the watch's
        let deletion = Mutex<(catalog: Catalog, asset: AssetID)?>(nil)
        let fired = Mutex(false)
        var hooks = JobQueue.Hooks()
        hooks.afterClaim = { catalog in
            guard !fired.withLock({ $0 }), let other = deletion.withLock({ $0 }) else { return }
            fired.withLock { $0 = true }
            _ = try? other.catalog.remove(other.asset)
            catalog.jobs.watcher.checkExternalChanges()  // as the watch would, at the commit
        }
        let (t, catalog, assets) = try await catalogWithAssets(1, jobs: tuning, hooks: hooks)
        defer { catalog.close() }
        let processor = UntilCancelled()
        catalog.jobs.register(processor, as: "until-cancelled")
        let id = try catalog.jobs.submit("until-cancelled", for: assets[0].id)
        let opened = try t.open()
        defer { opened.close() }
        deletion.withLock { $0 = (opened, assets[0].id) }
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        // Once the claim is over (its job registered, the hook's deletion and check done),
        // the run must end: without a second look it would go on until the queue stops.
        try await eventually("the claim made, and its run ended") {
            fired.withLock { $0 } && catalog.jobs.runs.claimsUnderWay == 0 && catalog.jobs.runs.tasksInFlight == 0
        }
        #expect(processor.cancellations.withLock { $0 } == processor.runs.withLock { $0 })
        #expect(try catalog.jobs.job(id: id)?.state == .cancelled)
    }

    /// A job whose asset another process deletes between the claim's commit and the read of
    /// its asset never starts: it ends cancelled, and the run that claimed it counts it so
    /// (`jobs run` printed "0 cancelled" for it).
    @Test func aClaimedJobWhoseAssetGoesBeforeItStartsCountsAsCancelled() async throws {
        let deletion = Mutex<(catalog: Catalog, asset: AssetID)?>(nil)
        let fired = Mutex(false)
        var hooks = JobQueue.Hooks()
        hooks.afterClaimCommit = {
            guard !fired.withLock({ $0 }), let other = deletion.withLock({ $0 }) else { return }
            fired.withLock { $0 = true }
            _ = try? other.catalog.remove(other.asset)
        }
        let (t, catalog, assets) = try await catalogWithAssets(1, hooks: hooks)
        defer { catalog.close() }
        let counter = RunCounter()
        catalog.jobs.register(counter, as: "count")
        let id = try catalog.jobs.submit("count", for: assets[0].id)
        let opened = try t.open()
        defer { opened.close() }
        deletion.withLock { $0 = (opened, assets[0].id) }
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(fired.withLock { $0 })
        #expect(summary.cancelled == 1 && summary.succeeded == 0 && summary.failed == 0)
        #expect(counter.runs.withLock { $0.isEmpty })
        let job = try catalog.jobs.job(id: id)
        #expect(job?.state == .cancelled && job?.error == "its asset was deleted")
    }

    /// A started queue whose slots all hold runs, with jobs queued behind them, sleeps until a
    /// run ends (or its next look). It looked every 10 ms instead — the "backoff" of a job
    /// runnable now — and read every queued job each time: 57% of a core for two runs that
    /// sleep, with 10,000 jobs queued.
    @Test func aWorkerWhoseSlotsAreAllTakenSleepsUntilARunEnds() async throws {
        var tuning = JobQueue.Tuning()
        tuning.listeningLookInterval = 3_600  // only a wake can end its sleep
        let (_, catalog, assets) = try await catalogWithAssets(12, jobs: tuning)
        defer { catalog.close() }
        let turnstile = Turnstile()
        catalog.jobs.register(turnstile, as: "turn")
        _ = try catalog.jobs.submit(["turn"], for: assets.map(\.id))
        catalog.jobs.start()
        defer {
            turnstile.openForGood()
            catalog.jobs.stopAndWait()
        }
        // Asleep with every slot taken, for as long as nothing wakes it: before, each of its
        // sleeps lasted 10 ms at most.
        try await eventually("the worker asleep until woken, every slot running") {
            let sleep = catalog.jobs.sleep.current
            return catalog.jobs.runs.tasksInFlight >= catalog.jobs.concurrency && sleep.isAsleep
                && sleep.timeout == .seconds(3_600)
        }
    }

    /// Cancelling a job that runs in this process cancels it, whichever writes its row first:
    /// this call, or the run it stops (here given all the time it needs to end first). The
    /// run was stopped before the row was written, and when the run wrote it first the call
    /// failed with "Job 1 is cancelled; only queued or running jobs can be cancelled".
    @Test func cancellingARunningJobCancelsItWhateverItsRunDoes() async throws {
        var hooks = JobQueue.Hooks()
        hooks.afterCancellingRun = { catalog in
            let deadline = Date().addingTimeInterval(10)
            while catalog.jobs.runs.tasksInFlight > 0 && Date() < deadline { usleep(1000) }  // the run has ended
        }
        let (_, catalog, assets) = try await catalogWithAssets(1, hooks: hooks)
        defer { catalog.close() }
        let processor = UntilCancelled()
        catalog.jobs.register(processor, as: "until-cancelled")
        let id = try catalog.jobs.submit("until-cancelled", for: assets[0].id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        try await eventually("the job running") { processor.runs.withLock { $0 } == 1 }
        let record = try catalog.jobs.cancel(id)
        #expect(record.state == .cancelled && record.error == "cancelled")
        try await eventually("the run ended") { catalog.jobs.runs.tasksInFlight == 0 }
        #expect(processor.cancellations.withLock { $0 } == 1)
        let job = try catalog.jobs.job(id: id)
        #expect(job?.state == .cancelled && job?.error == "cancelled")
    }

    /// A run stopped because another process deleted its asset says so in its row, even when
    /// this process writes the row before that one marks it — here, never: the deletion is
    /// made as a process that dies right after its commit leaves it (the row not marked).
    @Test func aRunStoppedByAnotherProcesssDeletionSaysWhyInItsRow() async throws {
        var tuning = JobQueue.Tuning()
        tuning.externalPollInterval = 3600
        tuning.watchesStore = false  // the check below stands for the watch's
        let (t, catalog, assets) = try await catalogWithAssets(1, jobs: tuning)
        defer { catalog.close() }
        let processor = UntilCancelled()
        catalog.jobs.register(processor, as: "until-cancelled")
        let id = try catalog.jobs.submit("until-cancelled", for: assets[0].id)
        catalog.jobs.start()
        defer { catalog.jobs.stop() }
        try await eventually("the job running") { processor.runs.withLock { $0 } == 1 }
        let deletion = try await ChildProcess.run(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "c.execute('DELETE FROM Asset WHERE id = ?', (int(sys.argv[2]),)); c.commit()",
                t.root.appending(path: "catalog.sqlite").path, assets[0].id.description,
            ])
        #expect(deletion.termination == .exited(0), "\(deletion.stderrText)")
        catalog.jobs.watcher.checkExternalChanges()
        try await eventually("the run ended") { catalog.jobs.runs.tasksInFlight == 0 }
        let job = try catalog.jobs.job(id: id)
        #expect(job?.state == .cancelled)
        #expect(job?.error == "its asset was deleted")
    }

    /// A result that would be committed alone waits a moment for a run that ends just after
    /// it (``JobQueue/Tuning/resultGroupDelay``, here long enough for any machine): both results
    /// share one transaction. Without the wait the first run's result was committed at once,
    /// alone, and the first two runs of every claim cost two commits.
    @Test(.enabled(if: ProcessInfo.processInfo.activeProcessorCount >= 2))
    func aLoneResultWaitsForARunThatEndsJustAfterIt() async throws {
        var tuning = JobQueue.Tuning()
        tuning.minimumClaimAhead = 8  // both claimed at once, and run together
        tuning.resultGroupDelay = .seconds(60)
        let (_, catalog, assets) = try await catalogWithAssets(2, jobs: tuning)
        defer { catalog.close() }
        catalog.jobs.register(EndsAfterAnother(queue: catalog.jobs, leader: assets[0].id), as: "pair")
        _ = try catalog.jobs.submit(["pair"], for: assets.map(\.id))
        let commits = catalog.jobs.metrics.resultCommits
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == 2)
        #expect(catalog.jobs.metrics.resultCommits == commits + 1, "the two results were not one commit")
    }

    /// Claims are not made a few jobs at a time as runs end: while every slot has a run and
    /// over half of the jobs claimed ahead still wait for one, the worker claims nothing;
    /// then it tops them up in one claim. Before, each run that ended made a claim of one.
    @Test func aClaimWaitsUntilHalfTheJobsClaimedAheadHaveStarted() async throws {
        var tuning = JobQueue.Tuning()
        tuning.minimumClaimAhead = 8
        let (_, catalog, assets) = try await catalogWithAssets(30, jobs: tuning)
        defer { catalog.close() }
        let turnstile = Turnstile()
        catalog.jobs.register(turnstile, as: "turn")
        let ahead = 8
        let slots = catalog.jobs.concurrency
        _ = try catalog.jobs.submit(["turn"], for: assets.map(\.id))
        catalog.jobs.start()
        defer {
            turnstile.openForGood()
            catalog.jobs.stopAndWait()
        }
        try await eventually("the first claim") { catalog.jobs.metrics.claimCommits == 1 }
        func claimedRows() throws -> Int { try catalog.jobs.list().filter { $0.state != .queued }.count }
        #expect(try claimedRows() == slots + ahead)
        // Let runs end one at a time; after each, the worker wakes, and decides.
        for ended in 1...(ahead / 2) {
            let waits = catalog.jobs.metrics.workerWaits
            turnstile.letOneThrough()
            try await eventually("run \(ended) committed") { catalog.jobs.metrics.resultCommits == ended }
            try await eventually("the worker's turn after run \(ended)") {
                catalog.jobs.metrics.workerWaits > waits
            }
            if ended < ahead / 2 {
                try await Task.sleep(for: .milliseconds(50))  // a claim it made would be committed by now
                #expect(catalog.jobs.metrics.claimCommits == 1, "a claim after \(ended) of \(ahead) ended")
            }
        }
        // Half of them have started: the next claim tops them up, at once.
        try await eventually("the second claim") { catalog.jobs.metrics.claimCommits == 2 }
        #expect(try claimedRows() == slots + ahead + ahead / 2)
    }
}

/// The run for `leader`'s asset ends at once; every other run ends once a result waits
/// for its commit (or after 20 s).
final class EndsAfterAnother: JobProcessor {
    let queue: JobQueue
    let leader: AssetID
    init(queue: JobQueue, leader: AssetID) {
        self.queue = queue
        self.leader = leader
    }
    /// How many runs have started: the leader ends only once the other run has started too
    /// (under load, the leader could end before the other was started, and then no run was
    /// under way for its result to wait for).
    private let started = Locked(0)

    func run(_ job: JobContext) async throws -> JobOutput {
        started.withLock { $0 += 1 }
        let deadline = ContinuousClock.now + .seconds(20)
        if job.asset.id == leader {
            while started.withLock({ $0 }) < 2 && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(1))
            }
        } else {
            while queue.batcher.pendingCount == 0 && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        return JobOutput()
    }
}

/// Runs wait in line until the test lets them through, one at a time or all.
final class Turnstile: JobProcessor {
    private let state = Mutex<(passes: Int, open: Bool, waiting: [CheckedContinuation<Void, Never>])>((0, false, []))
    func run(_ job: JobContext) async throws -> JobOutput {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let go = state.withLock { s -> Bool in
                if s.open { return true }
                if s.passes > 0 {
                    s.passes -= 1
                    return true
                }
                s.waiting.append(continuation)
                return false
            }
            if go { continuation.resume() }
        }
        return JobOutput()
    }
    /// Lets the longest-waiting run through (or the next one to come).
    func letOneThrough() {
        state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard !s.waiting.isEmpty else {
                s.passes += 1
                return nil
            }
            return s.waiting.removeFirst()
        }?.resume()
    }
    /// Lets every run through, now and from now on.
    func openForGood() {
        for c in state.withLock({ s -> [CheckedContinuation<Void, Never>] in
            s.open = true
            defer { s.waiting = [] }
            return s.waiting
        }) { c.resume() }
    }
}

/// Runs until its task is cancelled, counting runs and cancellations seen.
final class UntilCancelled: JobProcessor {
    let runs = Mutex(0)
    let cancellations = Mutex(0)
    func run(_ job: JobContext) async throws -> JobOutput {
        runs.withLock { $0 += 1 }
        do {
            while true { try await Task.sleep(for: .milliseconds(5)) }
        } catch {
            cancellations.withLock { $0 += 1 }
            throw error
        }
    }
}
