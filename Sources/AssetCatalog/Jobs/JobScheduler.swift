import Foundation
import Locking
import Logging
import Persistence

/// The worker side of a ``JobQueue``: the loops that work the queue (``work(only:progress:)``
/// for ``JobQueue/runUntilIdle(progress:)``, ``startWorker()`` for the background worker),
/// its claims of jobs, many per transaction and some ahead of the free slots, and the start
/// and end of each run (``JobScheduler+Runs.swift``).
final class JobScheduler: Sendable {
    private struct Pace {
        var rate = ClaimRate(windowStart: .now)
        var worker: Task<Void, Never>?
        /// The background worker's loop is running (until it sees its cancellation).
        var workerActive = false
        /// The last claim got every job it asked for: more are likely queued, and the next
        /// claim goes without the look that keeps a worker with nothing to claim out of a
        /// write transaction (a statement, a round trip on PostgreSQL, a claim saved).
        var lastClaimFilled = false
    }
    private let pace = Locked(Pace())
    let rows: JobRows
    let kinds: JobKinds
    let runs: JobRuns
    let batcher: JobResultBatcher
    let watcher: JobStoreWatcher
    let sleep: JobWorkerSleep
    let tuning: JobQueue.Tuning
    let hooks: JobQueue.Hooks
    let metrics: JobQueue.Metrics
    /// How many jobs run at once.
    let concurrency: Int
    /// This process, as job rows name their owner (`pid-id`, then `#run`).
    let owner: String
    let slots: RunSlots
    /// Where runs execute: threads of the queue's own, never the concurrency pool, which
    /// processors that block their thread would otherwise fill (``JobRunThreads``).
    let runThreads: JobRunThreads
    let pruner: JobPruner

    init(
        rows: JobRows, kinds: JobKinds, runs: JobRuns, batcher: JobResultBatcher, watcher: JobStoreWatcher,
        sleep: JobWorkerSleep, tuning: JobQueue.Tuning, hooks: JobQueue.Hooks, metrics: JobQueue.Metrics,
        pruner: JobPruner, concurrency: Int, owner: String
    ) {
        self.rows = rows
        self.kinds = kinds
        self.runs = runs
        self.batcher = batcher
        self.watcher = watcher
        self.sleep = sleep
        self.tuning = tuning
        self.hooks = hooks
        self.metrics = metrics
        self.concurrency = concurrency
        self.owner = owner
        self.pruner = pruner
        slots = RunSlots(concurrency)
        runThreads = JobRunThreads(width: concurrency)
    }

    /// Works the queue — all of it, or only the jobs `selection` matches — until nothing
    /// this process can run is queued or running; with a selection, also until none of its
    /// jobs is running in another process.
    func work(
        only selection: FetchPredicate<Job>?, progress: (@Sendable (JobRecord) -> Void)?,
        recoverAbandoned: () -> Void
    ) async throws -> JobRunSummary {
        recoverAbandoned()
        watcher.markBaseline()
        defer { if pace.withLock({ $0.worker == nil }) { watcher.stopWatching() } }
        let summary = SummaryBox()
        var lastCheck = Date()
        do {
            while true {
                try Task.checkCancellation()
                let started = try claimAndStart(summary: summary, progress: progress, only: selection)
                if Date().timeIntervalSince(lastCheck) >= watcher.pollInterval {
                    watcher.poll()
                    lastCheck = Date()
                }
                let (running, lost) = runs.state.withLock { ($0.running.count, $0.sessionLost) }
                if started == 0 && running == 0 {
                    // Its runs stopped, for another host: this run has not worked the queue.
                    if let lost { throw JobQueue.sessionLost(lost) }
                    if let wait = try nextBackoff(only: selection) {
                        try await Task.sleep(for: .seconds(min(wait, 1)))
                        continue
                    }
                    guard let selection, try runningElsewhere(selection) else { break }
                    // Another process runs some of them: wait for it (or for its death, which
                    // queues them again for this run).
                    try await Task.sleep(for: .milliseconds(100))
                    recoverAbandoned()
                    continue
                }
                try await Task.sleep(for: .milliseconds(5))
            }
        } catch is CancellationError {
            stopRunning()
            summary.value.withLock { $0.wasInterrupted = true }
        }
        pruner.pruneQuietly()
        return summary.value.withLock { $0 }
    }

    /// Whether any job `selection` matches is running (in another process: this one runs none).
    private func runningElsewhere(_ selection: FetchPredicate<Job>) throws -> Bool {
        guard let catalog = rows.catalog else { return false }
        return try catalog.withContext { context in
            try context.count(for: FetchRequest<Job>(predicate: selection && \.state == JobState.running)) > 0
        }
    }

    /// Starts the background worker's loop, in place of any.
    func startWorker() {
        watcher.markBaseline()
        pruner.pruneAtNextLook()
        let worker = Task { [weak self] in
            let summary = SummaryBox()
            var lastCheck = Date()
            defer { self?.pace.withLock { $0.workerActive = false } }
            while !Task.isCancelled, let self {
                self.metrics.turned()
                self.pruner.pruneIfDue(every: self.tuning.pruneInterval)
                let started = (try? self.claimAndStart(summary: summary, progress: nil)) ?? 0
                if Date().timeIntervalSince(lastCheck) >= self.watcher.pollInterval {
                    self.watcher.poll()
                    lastCheck = Date()
                }
                guard started == 0 else { continue }
                // Hearing the store's announcements, the worker sleeps until one (work queued,
                // a run stopped, on SQLite any other connection's commit) or this process's
                // own work wakes it, or the next backoff runs out — looking anyway after
                // ``JobQueue/Tuning/listeningLookInterval``; else it polls. With every slot
                // taken, no backoff counts: the end of a run wakes it (and jobs runnable now,
                // waiting for a slot, would wake it every 10 ms).
                let full = self.runs.state.withLock { $0.running.count >= self.concurrency }
                var wait = self.tuning.idlePollInterval
                if self.watcher.hearsAnnouncements {
                    wait = .seconds(self.tuning.listeningLookInterval)
                    if !full, let backoff = try? self.nextBackoff() { wait = min(wait, .seconds(backoff)) }
                }
                await self.sleep.wait(upTo: wait)
            }
        }
        pace.withLock {
            $0.worker?.cancel()
            $0.worker = worker
            $0.workerActive = true
        }
    }

    /// Stops the background worker; this process's running jobs are queued again at once
    /// (not counted as attempts), for the next worker.
    func stop() {
        let worker = pace.withLock { s -> Task<Void, Never>? in
            defer { s.worker = nil }
            return s.worker
        }
        worker?.cancel()
        watcher.stopWatching()
        stopRunning()
    }

    /// Whether a run of this process or its background worker's loop still goes on.
    var isBusy: Bool { runs.isRunningAnything || pace.withLock { $0.workerActive } }

    /// Cancels this process's running jobs and queues them again.
    private func stopRunning() {
        let stopped = runs.state.withLock { $0.stopAll() }
        for run in stopped.values { run.task.cancel() }
        rows.requeue(stopped.mapValues(\.token))
    }

    /// Claims queued jobs, in one transaction, and starts them: as many as run at once
    /// plus about 100 ms of work ahead (the rate at which results recently committed, at
    /// most ``JobQueue/Tuning/maxClaimAhead``), less those this process holds claimed
    /// already; none while every slot has a run and over half of those ahead still wait. Jobs
    /// claimed ahead wait, as `running` with their own run tokens, for a free slot
    /// (``concurrency``); a killed process leaves them to the next open, like its running ones.
    ///
    /// The claim is ``ManagedObjectContext/claimRows(_:limit:update:)``: rows that another
    /// worker's claim (or any other transaction) holds are passed over, not fought for. A
    /// claimed job whose asset is gone is cancelled right after the claim.
    private func claimAndStart(
        summary: SummaryBox, progress: (@Sendable (JobRecord) -> Void)?, only selection: FetchPredicate<Job>? = nil
    ) throws -> Int {
        guard let catalog = rows.catalog else { return 0 }
        let processors = kinds.processors
        let ahead = pace.withLock { p in
            let now = ContinuousClock.now
            let claimWorth = max(p.rate.claimAhead, tuning.minimumClaimAhead) + concurrency
            // The results counted since the window started, taken (and the count restarted) when due.
            let finished = runs.state.withLock { s -> Int? in
                guard p.rate.isDue(at: now, finished: s.resultsSincePace, claimWorth: claimWorth) else { return nil }
                defer { s.resultsSincePace = 0 }
                return s.resultsSincePace
            }
            if let finished { p.rate.read(at: now, finished: finished, limit: tuning.maxClaimAhead) }
            return max(p.rate.claimAhead, tuning.minimumClaimAhead)
        }
        let (held, running, firstRun, wanted) = runs.state.withLock { s in
            var wanted = concurrency + ahead - s.running.count
            // Each claim is a transaction: topped up as jobs end, a few at a time, they would
            // cost more than short jobs do. While every slot has a run and over half of the
            // jobs claimed ahead still wait for one, none is made.
            if s.running.count >= concurrency && wanted * 2 < ahead { wanted = 0 }
            let first = s.runNumbers + 1
            s.runNumbers += max(0, wanted)
            return (s.holds.heldAssets, s.running.keys.map(JobRows.objectID), first, wanted)
        }
        guard wanted > 0 else { return 0 }
        // From before the claim's transaction until its jobs are registered: a deletion another
        // process commits meanwhile is checked again once they are (``JobStoreWatcher/checkExternalChanges(force:)``).
        runs.state.withLock { $0.claimsUnderWay += 1 }
        defer {
            let recheck = runs.state.withLock { s -> Bool in
                s.claimsUnderWay -= 1
                return s.claimsUnderWay == 0 && s.recheckExternal
            }
            if recheck { watcher.checkExternalChanges() }
        }
        // Rows no other worker's claim holds, claimed in one transaction of their own: workers on
        // other connections (processes, hosts) claim others, and none has to try again.
        let owner = self.owner
        let looksFirst = !pace.withLock { $0.lastClaimFilled }
        let claimed: [ObjectSnapshot]
        do {
            claimed = try catalog.withContext { context in
                let now = Date()
                var runnable: FetchPredicate<Job> =
                    \.state == JobState.queued && \.runAfter <= now && .in(\.kind, Array(processors.keys))
                    && !(.in(\.assetID, held)) && !(.objectIDs(running))
                if let selection { runnable = runnable && selection }
                // Read first: a worker with nothing to claim takes no write transaction (SQLite's one
                // write lock, a PostgreSQL connection held while another transaction of it waits) —
                // unless its last claim got all it asked for (``Pace/lastClaimFilled``).
                // A count, unordered: any runnable job will do, not the oldest of them all.
                if looksFirst, try context.count(for: FetchRequest<Job>(predicate: runnable, limit: 1)) == 0 {
                    return []
                }
                var index = 0
                return try context.claimRows(FetchRequest<Job>(predicate: runnable), limit: wanted) { _, row in
                    row[\.state] = .running
                    row[\.owner] = "\(owner)#\(firstRun + index)"
                    row[\.attempts] += 1
                    row[\.updated] = now
                    index += 1
                }
            }
        } catch let error as PersistenceError where error.code == .readOnly {
            pace.withLock { $0.lastClaimFilled = false }
            metrics.claimFailed()
            // As a claim always did: a store that refuses it (read-only) leaves nothing to run.
            rows.logger.warning("could not claim jobs: \(error)")
            return 0
        } catch {
            pace.withLock { $0.lastClaimFilled = false }
            metrics.claimFailed()
            return try catalog.storeErrors { () -> Int in throw error }  // as every store error is thrown
        }
        pace.withLock { $0.lastClaimFilled = claimed.count >= wanted }
        guard !claimed.isEmpty else { return 0 }
        hooks.afterClaimCommit?()
        let started = try start(claimed, summary: summary, progress: progress, processors: processors, in: catalog)
        return started
    }

    private func nextBackoff(only selection: FetchPredicate<Job>? = nil) throws -> TimeInterval? {
        guard let catalog = rows.catalog else { return nil }
        let processors = kinds.processors
        let held = runs.state.withLock { $0.holds.heldAssets }
        return try catalog.withContext { context in
            var waiting: FetchPredicate<Job> =
                \.state == JobState.queued && .in(\.kind, Array(processors.keys)) && !(.in(\.assetID, held))
            if let selection { waiting = waiting && selection }
            // The soonest only: a fetch of every queued job read them all, at each look.
            let soonest = FetchRequest<Job>(predicate: waiting, sortBy: [.init(\.runAfter)], limit: 1)
            guard let job = try context.fetch(soonest).first else { return nil }
            return max(0.01, job.runAfter.timeIntervalSinceNow)
        }
    }
}

/// How far ahead of its running jobs a claim takes more: about 100 ms of work, at the rate
/// at which results committed in the window before (on a clock that never steps back).
struct ClaimRate {
    /// Jobs to claim beyond the free slots.
    private(set) var claimAhead = 0
    private(set) var windowStart: ContinuousClock.Instant

    init(windowStart: ContinuousClock.Instant) { self.windowStart = windowStart }

    /// Seconds from the window's start to `now`.
    private func window(until now: ContinuousClock.Instant) -> Double {
        windowStart.duration(to: now) / .seconds(1)
    }

    /// Whether the rate is read now, `finished` results having committed since the window
    /// started, a process holding at most `claimWorth` jobs claimed at once: after 100 ms;
    /// sooner once two claims' worth of jobs ended in it (each took well under the window).
    /// Short jobs would otherwise start with claims of a few jobs for 100 ms, each a
    /// transaction and its round trips (at 0.5 ms a round trip, a tenth of a 10,000-job run).
    /// Long jobs that end together do not trigger it: no more than a claim's worth can.
    func isDue(at now: ContinuousClock.Instant, finished: Int, claimWorth: Int) -> Bool {
        let window = window(until: now)
        return window >= 0.1 || (window > 0 && finished >= 2 * claimWorth)
    }

    /// Reads the rate: `finished` results since the window started, until `now`.
    mutating func read(at now: ContinuousClock.Instant, finished: Int, limit: Int) {
        let window = max(window(until: now), 1e-6)
        claimAhead = min(limit, Int((Double(finished) * 0.1 / window).rounded(.up)))
        windowStart = now
    }
}
