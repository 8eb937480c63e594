import Foundation
import Locking
import Logging
import Persistence

/// The default ``JobProvider``: runs jobs with Swift concurrency, a bounded
/// number at a time (the core count by default), keeping their state in the
/// catalog so that a restarted process resumes what was queued or running.
/// Runs execute on threads of the queue's own, never on the concurrency pool: a
/// processor that blocks its thread cannot starve the queue's worker or listener.
///
/// Cancellation semantics, as implemented:
/// - `prepareForDeletion` of an asset calls ``cancelAll(for:)``: its running
///   jobs are cancelled at once (processors see it at their next
///   `checkCancellation()`), and its queued jobs are held.
/// - A result is written in a transaction that checks, before its commit and
///   with the asset locked against deletion until then, that the asset still
///   exists and the job is still this process's: no result or metadata ever
///   lands for an asset whose deletion committed, even one finishing in the
///   instant before, or one committing on another host at the same time.
/// - When the deletion commits, the asset's unfinished jobs are marked
///   cancelled. When it ends without a commit (rolled back, reset, a context
///   thrown away), ``resume(for:)`` queues the interrupted jobs again, once
///   the last context holding the deletion let go (``JobProvider`` states the
///   rule of holds).
/// - A deletion committed by another process or host is heard as it commits:
///   it announces the deleted assets (`PersistentContainer.announcements()`;
///   on PostgreSQL `LISTEN`/`NOTIFY`), and their running jobs here are
///   cancelled without reading the store. On SQLite, and when announcements
///   may have been missed (a lost connection, a deletion of too many assets to
///   name), the queue reads the store instead: an inotify watch on the store's
///   `-wal` wakes it at another process's commit. While the queue cannot hear
///   announcements (a lost `LISTEN` connection, until it is made again; a `-wal`
///   that cannot be watched), it polls the store's change counter every 0.1 s while
///   jobs run; while it hears them, it looks only every 5 s (for what no commit
///   announced: a process of an older version).
/// - Work queued anywhere is heard as it commits: a save that queues jobs (a
///   submit, an add, a retry, a run queued again) or cancels a running one
///   announces it, once for the save. An idle background worker (``start()``) in
///   another process or on another host claims it at once, instead of at its
///   next look; it sleeps until the next backoff it knows of runs out, or 5 s.
///   While announcements are interrupted, it looks for work every 250 ms.
/// - Jobs are claimed many per transaction: as many as run at once plus about
///   100 ms of work ahead (judged by the recent rate, at most
///   `maxClaimAhead`), topped up once half of those ahead have started; the ones
///   ahead wait as `running` for a free slot. A claim
///   takes only rows no other claim holds (on PostgreSQL `FOR UPDATE SKIP
///   LOCKED`), so workers in several processes or on several hosts claim
///   different jobs at once, and no job runs twice.
///   Results of runs that end together are committed in one transaction, and
///   a success is reported (event, summary) only once its commit is durable.
/// - A process killed while running jobs leaves them `running`, with those it
///   had claimed ahead; the next open, in any process, queues them again (each
///   such crash counts as an attempt for the jobs that had started, not for those
///   only claimed ahead).
/// - On a catalog that several hosts share (PostgreSQL), a process whose session with
///   the store is lost (its connection ended) or reaped by another host stops every run at
///   once: each is cancelled and writes nothing, its result included, and no job it had
///   claimed starts. The host that reaps the session queues those jobs again and runs
///   them, and the store refuses whatever this process would still write.
public final class JobQueue: JobProvider, Sendable {
    /// The attempts a kind allows when it is registered without saying.
    public static let defaultMaxAttempts = 5

    /// How many jobs run at once.
    public let concurrency: Int
    /// This process, as job rows name their owner (`pid-id`, then `#run`).
    let owner: String
    let rows: JobRows
    let kinds = JobKinds()
    let runs = JobRuns()
    let pruner: JobPruner
    let sleep: JobWorkerSleep
    let watcher: JobStoreWatcher
    let batcher: JobResultBatcher
    let scheduler: JobScheduler
    let hooks: Hooks
    /// What the queue counts of its work (for tests).
    let metrics: Metrics
    private let logger: Logger

    /// A queue for `owner` (this process), running `concurrency` jobs at once (at least 1),
    /// paced by `tuning`, calling a test's `hooks`, counting into `metrics`.
    init(
        owner: String, concurrency: Int, logger: Logger, tuning: Tuning = Tuning(), hooks: Hooks = Hooks(),
        metrics: Metrics = Metrics()
    ) {
        self.owner = owner
        self.concurrency = max(1, concurrency)
        self.logger = logger
        self.hooks = hooks
        self.metrics = metrics
        rows = JobRows(logger: logger)
        pruner = JobPruner(rows: rows)
        sleep = JobWorkerSleep(metrics: metrics)
        watcher = JobStoreWatcher(rows: rows, runs: runs, sleep: sleep, tuning: tuning, metrics: metrics)
        batcher = JobResultBatcher(
            rows: rows, kinds: kinds, runs: runs, sleep: sleep, tuning: tuning, metrics: metrics,
            concurrency: self.concurrency)
        scheduler = JobScheduler(
            rows: rows, kinds: kinds, runs: runs, batcher: batcher, watcher: watcher, sleep: sleep, tuning: tuning,
            hooks: hooks, metrics: metrics, pruner: pruner, concurrency: self.concurrency, owner: owner)
    }

    func attach(_ catalog: Catalog) { rows.attach(catalog) }

    var catalog: Catalog? { rows.catalog }

    /// Where runs execute (``JobRunThreads``).
    var runThreads: JobRunThreads { scheduler.runThreads }

    // MARK: - Processors

    /// Registers the processor that runs jobs of `kind` (replacing any).
    ///
    /// A kind must be registered in the process that submits its jobs (even one that
    /// never runs the queue) and in the one that runs them.
    ///
    /// - Parameters:
    ///   - processor: What runs the jobs.
    ///   - kind: The kind's name, as ``submit(_:for:)-(String,_)`` and `assetcat jobs` name it.
    ///   - maxAttempts: how many times a job of this kind runs when its processor
    ///     throws ``TransientJobError`` (retried with a backoff that doubles from 0.1 s, up to
    ///     30 s) or its worker process dies; the last such failure fails the job. Values below
    ///     1 count as 1 (no retry). The registration of the process that runs the job decides.
    public func register(_ processor: any JobProcessor, as kind: String, maxAttempts: Int = defaultMaxAttempts) {
        kinds.register(processor, as: kind, maxAttempts: maxAttempts)
    }

    /// The retention rule for finished jobs: applied after each ``runUntilIdle(progress:)``,
    /// when a background worker starts and then hourly, and by ``pruneFinishedJobs(now:)``.
    /// ``JobRetention/standard`` unless set.
    public var retention: JobRetention {
        get { pruner.retention }
        set { pruner.retention = newValue }
    }

    // MARK: - JobProvider

    /// Queues work of `kind` for an asset; returns the job's ID (that of the job already
    /// queued or running, if there is one).
    ///
    /// - Throws: ``CatalogError/Code/invalidArgument`` when no processor is registered for
    ///   `kind` in this process; ``CatalogError/Code/notFound`` when no asset has that ID.
    ///   Nothing is queued then.
    @discardableResult
    public func submit(_ kind: String, for assetID: AssetID) throws -> Int64 {
        guard let id = try submit([kind], for: [assetID]).first else { throw Self.closed }
        return id
    }

    /// Queues work of each kind for each asset, in one transaction; returns the job IDs,
    /// asset by asset, kind by kind. A kind already queued or running for an asset is not
    /// queued twice: its existing job's ID is returned.
    ///
    /// All or nothing: when a kind has no processor registered in this process
    /// (``CatalogError/Code/invalidArgument``) or an asset does not exist
    /// (``CatalogError/Code/notFound``, checked for the whole batch before the commit, each
    /// asset locked against deletion until then, so an asset deleted meanwhile — by any
    /// process or host — counts as missing), nothing is queued.
    @discardableResult
    public func submit(_ kinds: [String], for assetIDs: [AssetID]) throws -> [Int64] {
        guard let catalog else { throw Self.closed }
        let assetIDs = assetIDs.map(\.rawValue)
        let limits = self.kinds.attemptLimits
        if let unknown = kinds.first(where: { limits[$0] == nil }) { throw Self.unregisteredKind(unknown) }
        guard !kinds.isEmpty, !assetIDs.isEmpty else { return [] }
        let ids = try catalog.storeErrors {
            try catalog.withContext { context in
                let pending = try context.fetch(
                    FetchRequest<Job>(
                        predicate: .in(\.assetID, assetIDs) && .in(\.kind, kinds)
                            && .in(\.state, [JobState.queued, .running])))
                var existing: [String: Job] = [:]
                for job in pending { existing["\(job.assetID)/\(job.kind)"] = job }
                var jobs: [Job] = []
                for assetID in assetIDs {
                    for kind in kinds {
                        if let job = existing["\(assetID)/\(kind)"] {
                            jobs.append(job)
                            continue
                        }
                        let job = Job(context: context)
                        job.kind = kind
                        job.assetID = assetID
                        job.maxAttempts = limits[kind] ?? Self.defaultMaxAttempts
                        job.submitRequiresAsset = true
                        existing["\(assetID)/\(kind)"] = job
                        jobs.append(job)
                    }
                }
                try context.save()
                return jobs.map(\.objectID.rowID)
            }
        }
        wakeWorker()
        return ids
    }

    public func events() -> AsyncStream<JobRecord> { kinds.events() }

    // MARK: - Control

    /// Cancels one job (queued or running, in this process or another).
    public func cancel(_ jobID: Int64) throws -> JobRecord {
        // The row first, then the run here: a run stopped first writes its row itself, as
        // cancelled, and the job was then no longer one this call could cancel.
        let record = try changeJob(jobID) { job in
            guard job.state == .queued || job.state == .running else {
                throw CatalogError(
                    .invalidArgument,
                    "Job \(jobID) is \(job.state.rawValue); only queued or running jobs can be cancelled")
            }
            job.state = .cancelled
            job.lastError = "cancelled"
            job.owner = nil
        }
        runs.state.withLock { $0.running[jobID]?.task }?.cancel()
        if let hook = hooks.afterCancellingRun, let catalog { hook(catalog) }
        return record
    }

    /// Queues a failed or cancelled job again, with its attempts reset.
    public func retry(_ jobID: Int64) throws -> JobRecord {
        defer { wakeWorker() }
        return try changeJob(jobID) { job in
            guard job.state == .failed || job.state == .cancelled else {
                throw CatalogError(
                    .invalidArgument,
                    "Job \(jobID) is \(job.state.rawValue); only failed or cancelled jobs can be retried")
            }
            job.state = .queued
            job.attempts = 0
            job.lastError = nil
            job.progress = 0
            job.runAfter = Date(timeIntervalSince1970: 0)
        }
    }

    // MARK: - Running

    /// Works the queue until nothing this process can run is queued or
    /// running (waiting out backoffs), then returns what happened. Jobs held
    /// for a deletion still pending in this process are not waited for.
    /// Cancelling the calling task stops: running jobs are queued again (the
    /// attempt not counted) and the summary says it was interrupted.
    ///
    /// - Throws: ``CatalogError/Code/store`` when the store fails, and when this process's
    ///   session with a shared store (PostgreSQL) is lost or reaped meanwhile: its runs
    ///   are then stopped, for the host that takes over its work (see ``JobQueue``).
    public func runUntilIdle(progress: (@Sendable (JobRecord) -> Void)? = nil) async throws -> JobRunSummary {
        try await work(only: nil, progress: progress)
    }

    /// Works only the jobs with these IDs (as ``AddResult/queuedJobIDs`` and
    /// ``ImportResult/queuedJobIDs`` give them) until none of them is left to run, then
    /// returns what happened: how ``runUntilIdle(progress:)`` works the whole queue, with
    /// the other queued jobs left queued, for another run or worker.
    ///
    /// It waits out the backoffs of the given jobs, and for those of them another process
    /// is running (a worker that claimed them first), so that when it returns none of them is
    /// queued or running — unless it was interrupted, or they are held for a deletion still
    /// pending in this process. Their outcome is in the summary when this process ran them;
    /// ``list(ids:state:limit:)`` shows every one's. IDs of jobs that do not exist (pruned,
    /// never queued) are ignored. Cancelling the calling task stops as
    /// ``runUntilIdle(progress:)`` does: running jobs are queued again.
    ///
    /// ```swift
    /// let added = try await catalog.add(["/srv/photos.zip"])
    /// let summary = try await catalog.jobs.runUntilIdle(jobs: added.queuedJobIDs)
    /// ```
    public func runUntilIdle(
        jobs jobIDs: [ClosedRange<Int64>], progress: (@Sendable (JobRecord) -> Void)? = nil
    ) async throws -> JobRunSummary {
        catalog?.content.faults.reach(.beforeRunningJobs)
        var total = JobRunSummary()
        for selection in Self.selections(jobIDs) {
            let summary = try await work(only: selection, progress: progress)
            total.succeeded += summary.succeeded
            total.failed += summary.failed
            total.cancelled += summary.cancelled
            total.retried += summary.retried
            if summary.wasInterrupted {
                total.wasInterrupted = true
                break
            }
        }
        return total
    }

    /// Starts working the queue in the background until ``stop()`` (for
    /// pipelines and `jobs run --watch`).
    public func start() {
        recoverAbandoned()
        scheduler.startWorker()
    }

    /// Stops the background worker; this process's running jobs are queued
    /// again at once (not counted as attempts), for the next worker.
    public func stop() { scheduler.stop() }

    /// Works the queue (``JobScheduler/work(only:progress:recoverAbandoned:)``).
    private func work(
        only selection: FetchPredicate<Job>?, progress: (@Sendable (JobRecord) -> Void)?
    ) async throws -> JobRunSummary {
        try await scheduler.work(only: selection, progress: progress) { recoverAbandoned() }
    }

    /// This process's session with the store (a catalog that several hosts share) ended.
    /// When its program did not end it — its connection was lost, or another host reaped it
    /// — other hosts take its running jobs over: the reaper queues them again, and the store
    /// refuses whatever this process writes. So every run of this process stops now: each
    /// is cancelled (processors see it at their next `checkCancellation()`) and writes
    /// nothing when it ends, not even a result it had already; no job claimed ahead, nor
    /// any claimed from now on, starts. The rows are left as they are, for the reaper.
    func sessionEnded(_ ending: StoreSession.Ending) {
        guard ending.reason != .ended else { return }  // closed by its program: stop() did the work
        let stopped = runs.state.withLock { s -> [JobRuns.Run] in
            s.sessionLost = ending
            return Array(s.stopAll().values)  // their ends write nothing (isInterrupted)
        }
        for run in stopped { run.task.cancel() }
        // Said where it stops work; a command that ran no job reports the store's error itself.
        guard !stopped.isEmpty else {
            logger.debug("\(ending.message): no job was running here")
            return
        }
        let jobs = stopped.count == 1 ? "running job is" : "\(stopped.count) running jobs are"
        let message =
            "\(ending.message): this process's \(jobs) stopped, for the host that takes over its work to run; "
            + "open the catalog again to run jobs here"
        logger.error("\(message)")
    }

    /// What ``runUntilIdle(progress:)`` throws once this process's session was lost or reaped.
    static func sessionLost(_ ending: StoreSession.Ending) -> CatalogError {
        CatalogError(
            .store,
            "The jobs were not run: \(ending.message), and another host takes over this process's work (its running "
                + "jobs were stopped). Open the catalog again")
    }

    /// Wakes the background worker (new work was queued).
    func wakeWorker() { sleep.wake() }

    /// Stops, then waits (at most `timeout`) until no job and no worker loop
    /// of this process still touches the store: called before the store closes.
    func stopAndWait(timeout: TimeInterval = 10) {
        stop()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !scheduler.isBusy { return }
            sleep.resume()
            usleep(2_000)
        }
        logger.warning("closing the catalog while jobs still run (a processor ignores cancellation)")
    }

    // MARK: - Helpers

    func jobObjectID(_ id: Int64) -> ManagedObjectID { JobRows.objectID(id) }

    /// Changes one job row as a compare-and-set (``JobRows/change(_:_:)``).
    @discardableResult
    func changeJob(_ jobID: Int64, _ change: @escaping (Job) throws -> Void) throws -> JobRecord {
        try rows.change(jobID, change)
    }

    static let closed = CatalogError(.store, "The catalog is closed")

    /// The refusal to submit a kind this process has no processor for.
    static func unregisteredKind(_ kind: String) -> CatalogError {
        CatalogError(
            .invalidArgument,
            "No processor is registered for the job kind '\(kind)'; register one before submitting (no job was queued)")
    }

    /// The refusal to submit work for an asset that does not exist.
    static func noSuchAsset(_ id: Int64) -> CatalogError {
        CatalogError(.notFound, "No asset with ID \(id) (no job was queued)")
    }
}
