public import Foundation
import Locking
import Logging
import Persistence

final class SummaryBox: Sendable {
    let value = Locked(JobRunSummary())
}

/// What ``JobQueue/runUntilIdle(progress:)`` did.
public struct JobRunSummary: Sendable, Hashable {
    public var succeeded = 0
    public var failed = 0
    public var cancelled = 0
    public var retried = 0
    /// Whether the run was stopped (its task cancelled) before the queue was idle.
    public var wasInterrupted = false
}

/// Which finished jobs (succeeded, failed, cancelled) the catalog keeps as history;
/// queued and running jobs are always kept. See ``JobQueue/retention``.
public struct JobRetention: Sendable, Hashable {
    /// Finished jobs are deleted this many seconds after they finished; `nil`: at any age.
    public var maxAge: TimeInterval?
    /// At most this many finished jobs are kept, the most recently finished; `nil`: any number.
    public var maxCount: Int?

    /// Negative limits count as 0 (keep none).
    public init(maxAge: TimeInterval? = 7 * 86_400, maxCount: Int? = 10_000) {
        self.maxAge = maxAge.map { max(0, $0) }
        self.maxCount = maxCount.map { max(0, $0) }
    }

    /// Seven days, and at most 10,000 finished jobs: the default.
    public static let standard = JobRetention()
    /// Finished jobs are never pruned.
    public static let keepsEverything = JobRetention(maxAge: nil, maxCount: nil)
}

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
///   it announces the deleted assets (``PersistentContainer/announcements()``;
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
    struct Running {
        var assetID: Int64
        /// The run's token, written in the row's `owner`: this run, not another one of the same job.
        var token: String
        var task: Task<Void, Never>
    }

    struct State {
        var processors: [String: any JobProcessor] = [:]
        /// The attempts each registered kind allows.
        var maxAttempts: [String: Int] = [:]
        var retention = JobRetention()
        /// When this process last pruned finished jobs.
        var lastPrune: Date?
        /// The delay before the first retry of a transient failure; it doubles with each attempt.
        var retryBaseDelay: TimeInterval = 0.1
        var running: [Int64: Running] = [:]
        /// Pending deletions per asset (two contexts may delete one asset): its jobs are held.
        var held: [Int64: Int] = [:]
        /// Runs stopped by `cancelAll`, by asset then job, with their tokens.
        var interrupted: [Int64: [Int64: String]] = [:]
        /// Runs that `stop`, an interrupted `runUntilIdle` or a resumed asset queues again,
        /// by job, with their tokens: their own ending must not write over that.
        var stopping: [Int64: String] = [:]
        var subscribers: [UUID: AsyncStream<JobRecord>.Continuation] = [:]
        var worker: Task<Void, Never>?
        /// The background worker's loop is running (until it sees its cancellation).
        var workerActive = false
        /// The worker sleeping until new work is queued, and a wake that came first.
        var waiter: CheckedContinuation<Void, Never>?
        var pendingWake = false
        var runs = 0
        /// Turns of the background worker's loop (an idle worker makes about four a second).
        var workerTurns = 0
        /// Times the background worker went to sleep until woken (an idle worker ends every turn so).
        var workerWaits = 0
        /// Run tasks started and not yet ended (their outcome written, or left to another run).
        var tasksInFlight = 0
        /// Succeeded runs whose results wait for the next grouped commit, and whether a
        /// run is committing them now.
        var pendingResults: [PendingResult] = []
        var committing = false
        /// How long a lone result waits for other runs' before its commit (``resultGroupDelay``).
        var resultGroupDelay = JobQueue.resultGroupDelay
        /// Jobs whose results committed since `rateWindowStart`, and in the window before:
        /// how far ahead of its running jobs a claim takes more (about 100 ms of work).
        var finishedInWindow = 0
        var rateWindowStart = Date()
        var claimAhead = 0
        /// Tests: claims take at least this many jobs ahead; results are held (not committed) while set.
        var minimumClaimAhead = 0
        var holdsResults = false
        /// Claim transactions and result transactions committed (for tests).
        var claimCommits = 0
        /// Claim transactions that failed and claimed nothing (for tests).
        var failedClaims = 0
        var resultCommits = 0
        /// What hears the store's announcements (``heard(_:)``): other processes' and hosts'
        /// deletions and changes of jobs, and other connections' commits.
        var listener: Task<Void, Never>?
        /// The listener heard the interruption marker and not yet the re-read marker that ends
        /// it: the store's announcements are not delivered, and the queue polls.
        var announcementsInterrupted = false
        /// Whether the queue may listen to the store (tests turn it off to see the polling alone).
        var watchesStore = true
        /// How often other processes' commits are polled for while jobs run, when the queue
        /// does not hear the store's announcements.
        var externalCheckInterval = JobQueue.externalCheckInterval
        /// How long an idle worker that does not hear the store's announcements waits before
        /// looking for work again.
        var idlePollInterval = JobQueue.idlePollInterval
        /// How often the queue looks at the store anyway while it hears the announcements.
        var listeningLookInterval = JobQueue.listeningLookInterval
        /// Polls of the store for other processes' commits (``checkExternalChanges(force:)``
        /// run by the clock, not by an announcement; for tests).
        var externalPolls = 0
        /// How long the background worker's current (or last) sleep lasts at most (for tests).
        var workerWaitTimeout: Duration?
        /// Claims whose jobs are not all registered as running yet.
        var claimsUnderWay = 0
        /// A check of other processes' commits ran while a claim was under way: the jobs it
        /// claimed were not among those checked, so the next check looks again even if the
        /// store has not changed since.
        var recheckExternal = false
        /// Runs between a claim's commit and the registration of its jobs (for tests).
        var afterClaim: (@Sendable () -> Void)?
        /// Runs between a claim's commit and the read of its jobs' assets (for tests).
        var afterClaimCommit: (@Sendable () -> Void)?
        /// Runs once ``cancel(_:)`` has cancelled the job's run in this process (for tests).
        var afterCancellingRun: (@Sendable () -> Void)?
        /// Runs between a resume's taking of its interrupted runs and their queueing (for tests).
        var beforeResumeQueues: (@Sendable () -> Void)?
        /// Runs (by token) stopped because another process deleted their asset: their row
        /// says so, whichever of the two processes writes it first.
        var assetGoneRuns: Set<String> = []
        /// How this process's session with the store was lost or reaped
        /// (``sessionEnded(_:)``): no claimed job starts any more.
        var sessionLost: StoreSession.Ending?
    }

    /// A succeeded run whose result waits for a grouped commit.
    struct PendingResult {
        var job: JobRecord
        var token: String
        var output: JobOutput
        var summary: SummaryBox
        var progress: (@Sendable (JobRecord) -> Void)?
    }

    /// The most jobs one claim takes (and one process holds claimed) beyond its concurrency.
    static let maxClaimAhead = 1024
    /// The most results one transaction commits.
    static let maxResultGroup = 512
    /// How long a result that would be committed alone waits for the results of other runs
    /// of this process, when some are running (as PostgreSQL's `commit_delay`): runs that
    /// end microseconds apart (short jobs, the first of a claim's jobs to end) then share a
    /// transaction and its sync. Each commit, on PostgreSQL, costs about ten statements.
    static let resultGroupDelay: Duration = .milliseconds(1)
    /// How often a queue that hears the store's announcements looks at the store anyway: an
    /// idle worker for work, a working one for changes of its running jobs. Every commit that
    /// queues work or stops a run announces it (``jobsTopic``), and a worker waits out the
    /// backoffs it has read: this look is for what nothing announced — a process of an
    /// older version, or a commit that SQLite's `-wal` watch saw too early (a sync of over half
    /// a second) — so it can be slow.
    static let listeningLookInterval: TimeInterval = 5

    /// How long an idle worker that does not hear the store's announcements (its `LISTEN`
    /// connection is lost, or the store's `-wal` cannot be watched) waits before looking for
    /// work again.
    static let idlePollInterval: Duration = .milliseconds(250)

    /// Tests: claims take at least this many jobs beyond the free slots.
    var minimumClaimAhead: Int {
        get { state.withLock { $0.minimumClaimAhead } }
        set { state.withLock { $0.minimumClaimAhead = newValue } }
    }

    /// Tests: while set, succeeded runs' results wait uncommitted (their runs not ended);
    /// clearing it commits them, in one group.
    var holdsResults: Bool {
        get { state.withLock { $0.holdsResults } }
        set {
            state.withLock { $0.holdsResults = newValue }
            if !newValue { commitPendingResults() }
        }
    }

    /// Results waiting for a grouped commit (for tests).
    var pendingResultCount: Int { state.withLock { $0.pendingResults.count } }

    /// How long a lone result waits for other runs' results before its commit (for tests).
    var resultGroupDelay: Duration {
        get { state.withLock { $0.resultGroupDelay } }
        set { state.withLock { $0.resultGroupDelay = newValue } }
    }

    /// The claim and result transactions committed so far (for tests).
    var commitCounts: (claims: Int, results: Int) { state.withLock { ($0.claimCommits, $0.resultCommits) } }

    /// The claim transactions that failed, claiming nothing, so far (for tests: claims of
    /// several workers that get in each other's way).
    var failedClaimCount: Int { state.withLock { $0.failedClaims } }

    /// Whether the queue may listen to the store's announcements (other processes' deletions
    /// and commits), and how often it polls for other processes' commits while jobs run and
    /// it does not hear announcements (for tests: set before `start()`).
    var watchesStore: Bool {
        get { state.withLock { $0.watchesStore } }
        set { state.withLock { $0.watchesStore = newValue } }
    }
    var externalPollInterval: TimeInterval {
        get { state.withLock { $0.externalCheckInterval } }
        set { state.withLock { $0.externalCheckInterval = newValue } }
    }

    /// How long an idle worker that does not hear the store's announcements waits before
    /// looking for work again (for tests).
    var idlePollInterval: Duration {
        get { state.withLock { $0.idlePollInterval } }
        set { state.withLock { $0.idlePollInterval = newValue } }
    }

    /// How often a queue that hears the store's announcements looks at it anyway (for tests:
    /// an hour, so that only an announcement can wake it).
    var listeningLookInterval: TimeInterval {
        get { state.withLock { $0.listeningLookInterval } }
        set { state.withLock { $0.listeningLookInterval = newValue } }
    }

    /// Whether the queue hears the store's announcements now: it listens, and its stream has
    /// not been interrupted (or the interruption has ended).
    var hearsAnnouncements: Bool { state.withLock { Self.hears($0) } }

    private static func hears(_ s: State) -> Bool { s.listener != nil && !s.announcementsInterrupted }

    /// The polls of the store for other processes' commits the clock made so far (for tests).
    var externalPollCount: Int { state.withLock { $0.externalPolls } }

    /// Whether the background worker sleeps until woken, and for how long at most (for tests).
    var workerSleep: (isAsleep: Bool, timeout: Duration?) {
        state.withLock { ($0.waiter != nil, $0.workerWaitTimeout) }
    }

    /// Runs between each claim's commit and the registration of its jobs as running (for
    /// tests: a deletion another process commits in that window).
    var afterClaim: (@Sendable () -> Void)? {
        get { state.withLock { $0.afterClaim } }
        set { state.withLock { $0.afterClaim = newValue } }
    }

    /// Tests: runs between a claim's commit and the read of its jobs' assets.
    var afterClaimCommit: (@Sendable () -> Void)? {
        get { state.withLock { $0.afterClaimCommit } }
        set { state.withLock { $0.afterClaimCommit = newValue } }
    }

    /// Tests: runs once ``cancel(_:)`` has cancelled the job's run in this process.
    var afterCancellingRun: (@Sendable () -> Void)? {
        get { state.withLock { $0.afterCancellingRun } }
        set { state.withLock { $0.afterCancellingRun = newValue } }
    }

    /// Runs when ``resume(for:)`` has taken an asset's interrupted runs, before it queues them
    /// again (for tests: a cancelled run ending in that window).
    var beforeResumeQueues: (@Sendable () -> Void)? {
        get { state.withLock { $0.beforeResumeQueues } }
        set { state.withLock { $0.beforeResumeQueues = newValue } }
    }

    /// Claims whose jobs are not all registered as running yet (for tests).
    var claimsUnderWay: Int { state.withLock { $0.claimsUnderWay } }

    /// How many times the background worker's loop has turned (for tests).
    var workerTurns: Int { state.withLock { $0.workerTurns } }

    /// How often a working queue polls for commits of other processes (one
    /// `PRAGMA data_version`, or one read of PostgreSQL's commit counters) while it does not
    /// hear the store's announcements: where inotify is unavailable, or while the `LISTEN`
    /// connection is lost, a deletion committed elsewhere stops this process's jobs for that
    /// asset within this, plus the cancellation. While it hears them, it looks every
    /// ``listeningLookInterval`` instead.
    static let externalCheckInterval: TimeInterval = 0.1

    /// A run of this process has not ended yet (for tests).
    var isRunningAnything: Bool { state.withLock { !$0.running.isEmpty } }

    /// How many run tasks of this process have not ended, including runs stopped or
    /// interrupted that no longer count as running (for tests: once it is zero, no run of
    /// this process writes to a job any more).
    var tasksInFlight: Int { state.withLock { $0.tasksInFlight } }

    /// How many pending deletions hold the jobs of `assetID` (for tests).
    func holds(on assetID: Int64) -> Int { state.withLock { $0.held[assetID] ?? 0 } }

    /// The turns of the background worker's loop, and how many of them ended asleep until
    /// woken (for tests: a worker that spins turns without sleeping).
    var workerTurnsAndWaits: (turns: Int, waits: Int) { state.withLock { ($0.workerTurns, $0.workerWaits) } }

    /// How often a background worker (``start()``) prunes finished jobs, besides once when it starts.
    static let pruneInterval: TimeInterval = 3_600

    /// The attempts a kind allows when it is registered without saying.
    public static let defaultMaxAttempts = 5

    /// How many jobs run at once.
    public let concurrency: Int
    /// This process, as job rows name their owner (`pid-id`, then `#run`).
    let owner: String
    private let catalogBox = Locked(WeakCatalog())
    private var catalog: Catalog? { catalogBox.withLock { $0.value } }
    private let state = Locked(State())
    /// Signalled when a result becomes pending (``waitForCompanions(upTo:)``).
    private let resultArrived = NSCondition()
    private let slots: RunSlots
    /// Where runs execute: threads of the queue's own, never the concurrency pool, which
    /// processors that block their thread would otherwise fill (``JobRunThreads``).
    let runThreads: JobRunThreads
    private let logger: Logger

    struct WeakCatalog: @unchecked Sendable {
        weak var value: Catalog?
    }

    init(owner: String, concurrency: Int, logger: Logger) {
        self.owner = owner
        self.concurrency = max(1, concurrency)
        self.slots = RunSlots(max(1, concurrency))
        self.runThreads = JobRunThreads(width: max(1, concurrency))
        self.logger = logger
    }

    func attach(_ catalog: Catalog) {
        catalogBox.withLock { $0.value = catalog }
    }

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
        state.withLock {
            $0.processors[kind] = processor
            $0.maxAttempts[kind] = max(1, maxAttempts)
        }
    }

    /// The attempts a registered kind allows, else those its row recorded.
    private func attemptLimit(_ kind: String, recorded: Int) -> Int {
        state.withLock { $0.maxAttempts[kind] } ?? recorded
    }

    /// The retention rule for finished jobs: applied after each ``runUntilIdle(progress:)``,
    /// when a background worker starts and then hourly, and by ``pruneFinishedJobs(now:)``.
    /// ``JobRetention/standard`` unless set.
    public var retention: JobRetention {
        get { state.withLock { $0.retention } }
        set { state.withLock { $0.retention = newValue } }
    }

    /// The delay before the first retry of a transient failure (for tests).
    var retryBaseDelay: TimeInterval {
        get { state.withLock { $0.retryBaseDelay } }
        set { state.withLock { $0.retryBaseDelay = newValue } }
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
        let limits = state.withLock { $0.maxAttempts }
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

    public func cancelAll(for assetID: AssetID) {
        let assetID = assetID.rawValue
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.held[assetID, default: 0] += 1
            let mine = s.running.filter { $0.value.assetID == assetID }
            for (jobID, run) in mine { s.interrupted[assetID, default: [:]][jobID] = run.token }
            return mine.values.map(\.task)
        }
        for task in tasks { task.cancel() }
    }

    public func resume(for assetID: AssetID) {
        let assetID = assetID.rawValue
        let (runs, hook) = state.withLock { s -> ([Int64: String], (@Sendable () -> Void)?) in
            guard let count = s.held[assetID] else { return ([:], nil) }
            if count > 1 {
                s.held[assetID] = count - 1  // another deletion of the asset is still pending
                return ([:], nil)
            }
            s.held[assetID] = nil
            let runs = s.interrupted.removeValue(forKey: assetID) ?? [:]
            // A cancelled run that has not ended yet is queued again below: when it ends, it
            // must not take its cancellation for its end and mark the job cancelled first.
            for (jobID, token) in runs where s.running[jobID]?.token == token { s.stopping[jobID] = token }
            return (runs, s.beforeResumeQueues)
        }
        if !runs.isEmpty {
            hook?()
            requeue(runs)
        }
        wakeWorker()
    }

    public func events() -> AsyncStream<JobRecord> {
        let (stream, continuation) = AsyncStream.makeStream(of: JobRecord.self)
        let key = UUID()
        state.withLock { $0.subscribers[key] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.subscribers[key] = nil } }
        return stream
    }

    // MARK: - Deletions

    /// Deletions of these assets committed: stop their work for good and
    /// mark their unfinished jobs cancelled.
    func assetsDeleted(_ assetIDs: RowIDSet) {
        guard !assetIDs.isEmpty else { return }
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.held = s.held.filter { !assetIDs.contains($0.key) }
            s.interrupted = s.interrupted.filter { !assetIDs.contains($0.key) }
            return s.running.filter { assetIDs.contains($0.value.assetID) }.map(\.value.task)
        }
        for task in tasks { task.cancel() }
        // A save may delete a hundred thousand assets, more than one statement can bind: a
        // long run of consecutive IDs goes by its bounds, scattered ones by lists of 500.
        let unfinished: FetchPredicate<Job> = .in(\.state, [.queued, .running])
        let cancel = { (job: Job) in
            job.state = .cancelled
            job.lastError = "its asset was deleted"
            job.owner = nil
        }
        var scattered: [Int64] = []
        for range in assetIDs.ranges {
            if range.count > 64 {
                update(\.assetID >= range.lowerBound && \.assetID < range.upperBound && unfinished, cancel)
                continue
            }
            scattered += range
            if scattered.count >= 500 {
                update(.in(\.assetID, scattered) && unfinished, cancel)
                scattered = []
            }
        }
        if !scattered.isEmpty { update(.in(\.assetID, scattered) && unfinished, cancel) }
    }

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
        let (task, hook) = state.withLock { ($0.running[jobID]?.task, $0.afterCancellingRun) }
        task?.cancel()
        hook?()
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

    /// The jobs in any of `states`, in ID order.
    public func list(_ states: [JobState]) throws -> [JobRecord] {
        try records(.in(\.state, states))
    }

    /// The jobs, in ID order: all of them, or only those of one asset, or in one state,
    /// or both. Filtered by the store (indexed), not after reading every job.
    ///
    /// ```swift
    /// let failed = try catalog.jobs.list(asset: asset.id, state: .failed)
    /// ```
    public func list(asset assetID: AssetID? = nil, state jobState: JobState? = nil) throws -> [JobRecord] {
        var predicate: FetchPredicate<Job> = .all
        if let assetID { predicate = \.assetID == assetID.rawValue }
        if let jobState { predicate = predicate && \.state == jobState }
        return try records(predicate)
    }

    /// One job, or `nil` when no job has that ID (never had, or pruned as finished).
    public func job(id: Int64) throws -> JobRecord? {
        try records(.objectIDs([jobObjectID(id)])).first
    }

    /// The jobs with these IDs (as ``AddResult/queuedJobIDs`` and
    /// ``ImportResult/queuedJobIDs`` give them) in `state`, whichever process ran them: the
    /// first `limit` in ID order, and how many there are in all. What an add reports of
    /// its jobs after ``runUntilIdle(jobs:progress:)``, whose summary counts only those this
    /// process ran.
    public func list(
        ids jobIDs: [ClosedRange<Int64>], state jobState: JobState, limit: Int
    ) throws -> (first: [JobRecord], count: Int) {
        guard let catalog else { throw Self.closed }
        return try catalog.storeErrors {
            try catalog.withContext { context in
                var found: (first: [JobRecord], count: Int) = ([], 0)
                for selection in Self.selections(jobIDs) {
                    let predicate = selection && \.state == jobState
                    found.count += try context.count(for: FetchRequest<Job>(predicate: predicate))
                    guard found.first.count < limit else { continue }
                    found.first += try context.fetch(
                        FetchRequest<Job>(
                            predicate: predicate, sortBy: [.objectID(ascending: true)],
                            limit: limit - found.first.count)
                    ).map(JobRecord.init)
                }
                return found
            }
        }
    }

    private func records(_ predicate: FetchPredicate<Job>) throws -> [JobRecord] {
        guard let catalog else { throw Self.closed }
        return try catalog.storeErrors {
            try catalog.withContext { context in
                try context.fetch(FetchRequest<Job>(predicate: predicate)).map(JobRecord.init)
            }
        }
    }

    // MARK: - Retention

    /// Deletes the finished jobs (succeeded, failed, cancelled) that ``retention`` no
    /// longer keeps: those that finished more than its age before `now`, and those past
    /// its count, oldest first. Queued and running jobs are never deleted. Each rule is
    /// one indexed, set-based delete in one transaction, skipped when a count finds
    /// nothing to delete. Returns how many rows went.
    @discardableResult
    public func pruneFinishedJobs(now: Date = Date()) throws -> Int {
        guard let catalog else { throw Self.closed }
        let rule = retention
        let finished: FetchPredicate<Job> = .in(\.state, [JobState.succeeded, .failed, .cancelled])
        state.withLock { $0.lastPrune = Date() }
        return try catalog.storeErrors {
            try catalog.withContext { context in
                var deleted = 0
                if let maxAge = rule.maxAge {
                    let old = FetchRequest<Job>(predicate: finished && \.updated < now.addingTimeInterval(-maxAge))
                    if try context.count(for: old) > 0 {
                        deleted += try context.batchDelete(old).deletedObjectIDs.count
                    }
                }
                if let maxCount = rule.maxCount,
                    try context.count(for: FetchRequest<Job>(predicate: finished)) > maxCount
                {
                    let surplus = FetchRequest<Job>(
                        predicate: finished, sortBy: [.init(\.updated, ascending: false), .objectID(ascending: false)],
                        offset: maxCount)
                    deleted += try context.batchDelete(surplus).deletedObjectIDs.count
                }
                return deleted
            }
        }
    }

    /// Prunes, logging a failure (a read-only catalog, a busy store) instead of throwing it.
    private func pruneQuietly() {
        do {
            try pruneFinishedJobs()
        } catch {
            logger.warning("could not prune finished jobs: \(error)")
        }
    }

    /// Prunes if the background worker has not for ``pruneInterval``.
    private func pruneIfDue() {
        let last = state.withLock { $0.lastPrune }
        if last.map({ Date().timeIntervalSince($0) >= Self.pruneInterval }) ?? true { pruneQuietly() }
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
        FaultPoint.reach(.beforeRunningJobs)
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

    /// How many ranges of job IDs one predicate of ``runUntilIdle(jobs:progress:)`` holds.
    static let rangesPerRun = 64

    /// The jobs with these IDs, as predicates of up to ``rangesPerRun`` ranges each (one OR
    /// term per range), however many ranges.
    private static func selections(_ jobIDs: [ClosedRange<Int64>]) -> [FetchPredicate<Job>] {
        let ranges = coalesced(jobIDs)
        return stride(from: 0, to: ranges.count, by: rangesPerRun).map { start in
            let window = ranges[start..<min(ranges.count, start + rangesPerRun)]
            return window.dropFirst().reduce(jobs(in: window.first!)) { $0 || jobs(in: $1) }
        }
    }

    /// The jobs whose IDs are in `range`.
    private static func jobs(in range: ClosedRange<Int64>) -> FetchPredicate<Job> {
        .objectIDs(after: max(range.lowerBound, .min + 1) - 1) && !.objectIDs(after: range.upperBound)
    }

    /// Ranges sorted, with those that overlap or touch merged.
    static func coalesced(_ ranges: [ClosedRange<Int64>]) -> [ClosedRange<Int64>] {
        var merged: [ClosedRange<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound &+ 1 {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    /// Works the queue — all of it, or only the jobs `selection` matches — until nothing
    /// this process can run is queued or running; with a selection, also until none of its
    /// jobs is running in another process.
    private func work(
        only selection: FetchPredicate<Job>?, progress: (@Sendable (JobRecord) -> Void)?
    ) async throws -> JobRunSummary {
        recoverAbandoned()
        markExternalBaseline()
        defer { if state.withLock({ $0.worker == nil }) { stopWatching() } }
        let summary = SummaryBox()
        var lastCheck = Date()
        do {
            while true {
                try Task.checkCancellation()
                let started = try claimAndStart(summary: summary, progress: progress, only: selection)
                if Date().timeIntervalSince(lastCheck) >= pollInterval {
                    pollExternalChanges()
                    lastCheck = Date()
                }
                let (running, lost) = state.withLock { ($0.running.count, $0.sessionLost) }
                if started == 0 && running == 0 {
                    // Its runs stopped, for another host: this run has not worked the queue.
                    if let lost { throw Self.sessionLost(lost) }
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
        pruneQuietly()
        return summary.value.withLock { $0 }
    }

    /// Whether any job `selection` matches is running (in another process: this one runs none).
    private func runningElsewhere(_ selection: FetchPredicate<Job>) throws -> Bool {
        guard let catalog else { return false }
        return try catalog.withContext { context in
            try context.count(for: FetchRequest<Job>(predicate: selection && \.state == JobState.running)) > 0
        }
    }

    /// Starts working the queue in the background until ``stop()`` (for
    /// pipelines and `jobs run --watch`).
    public func start() {
        recoverAbandoned()
        markExternalBaseline()
        state.withLock { $0.lastPrune = nil }
        let worker = Task { [weak self] in
            let summary = SummaryBox()
            var lastCheck = Date()
            defer { self?.state.withLock { $0.workerActive = false } }
            while !Task.isCancelled, let self {
                self.state.withLock { $0.workerTurns += 1 }
                self.pruneIfDue()
                let started = (try? self.claimAndStart(summary: summary, progress: nil)) ?? 0
                if Date().timeIntervalSince(lastCheck) >= self.pollInterval {
                    self.pollExternalChanges()
                    lastCheck = Date()
                }
                guard started == 0 else { continue }
                // Hearing the store's announcements, the worker sleeps until one (work queued,
                // a run stopped, on SQLite any other connection's commit) or this process's
                // own work wakes it, or the next backoff runs out — looking anyway after
                // ``listeningLookInterval``; else it polls. With every slot taken, no backoff
                // counts: the end of a run wakes it (and jobs runnable now, waiting for a
                // slot, would wake it every 10 ms).
                let (hears, look, idlePoll, full) = self.state.withLock {
                    (
                        Self.hears($0), $0.listeningLookInterval, $0.idlePollInterval,
                        $0.running.count >= self.concurrency
                    )
                }
                var wait = idlePoll
                if hears {
                    wait = .seconds(look)
                    if !full, let backoff = try? self.nextBackoff() { wait = min(wait, .seconds(backoff)) }
                }
                await self.waitForWake(upTo: wait)
            }
        }
        state.withLock {
            $0.worker?.cancel()
            $0.worker = worker
            $0.workerActive = true
        }
    }

    /// Sleeps until ``wakeWorker()`` is called or `timeout` passes.
    private func waitForWake(upTo timeout: Duration) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (woken, wait) = state.withLock { s -> (Bool, Int) in
                if s.pendingWake {
                    s.pendingWake = false
                    return (true, s.workerWaits)
                }
                s.waiter = continuation
                s.workerWaits += 1
                s.workerWaitTimeout = timeout
                return (false, s.workerWaits)
            }
            if woken {
                continuation.resume()
                return
            }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                self?.resumeWaiter(ifWait: wait)
            }
        }
    }

    /// Resumes the sleeping worker; with `wait`, only if it is still in that sleep (the
    /// `workerWaits`-th): the timer of a short sleep that was woken early must not cut a later,
    /// longer one short.
    private func resumeWaiter(ifWait wait: Int? = nil) {
        state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard wait == nil || wait == s.workerWaits else { return nil }
            defer { s.waiter = nil }
            return s.waiter
        }?.resume()
    }

    /// Stops the background worker; this process's running jobs are queued
    /// again at once (not counted as attempts), for the next worker.
    public func stop() {
        let worker = state.withLock { s -> Task<Void, Never>? in
            defer { s.worker = nil }
            return s.worker
        }
        worker?.cancel()
        stopWatching()
        stopRunning()
    }

    /// Cancels this process's running jobs and queues them again.
    private func stopRunning() {
        let runs = state.withLock { s -> [Int64: Running] in
            let all = s.running
            for (jobID, run) in all {
                s.interrupted[run.assetID]?[jobID] = nil
                s.stopping[jobID] = run.token
            }
            return all
        }
        for run in runs.values { run.task.cancel() }
        requeue(runs.mapValues(\.token))
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
        let runs = state.withLock { s -> [Running] in
            s.sessionLost = ending
            for (jobID, run) in s.running {
                s.interrupted[run.assetID]?[jobID] = nil
                s.stopping[jobID] = run.token  // its end writes nothing (isInterrupted)
            }
            return Array(s.running.values)
        }
        for run in runs { run.task.cancel() }
        // Said where it stops work; a command that ran no job reports the store's error itself.
        guard !runs.isEmpty else {
            logger.debug("\(ending.message): no job was running here")
            return
        }
        let jobs = runs.count == 1 ? "running job is" : "\(runs.count) running jobs are"
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
    func wakeWorker() {
        state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let waiter = s.waiter {
                s.waiter = nil
                return waiter
            }
            s.pendingWake = true
            return nil
        }?.resume()
    }

    /// Stops, then waits (at most `timeout`) until no job and no worker loop
    /// of this process still touches the store: called before the store closes.
    func stopAndWait(timeout: TimeInterval = 10) {
        stop()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let busy = state.withLock { !$0.running.isEmpty || $0.workerActive }
            if !busy { return }
            resumeWaiter()
            usleep(2_000)
        }
        logger.warning("closing the catalog while jobs still run (a processor ignores cancellation)")
    }

    /// Claims queued jobs, in one transaction, and starts them: as many as run at once
    /// plus about 100 ms of work ahead (the rate at which results recently committed, at
    /// most ``maxClaimAhead``), less those this process holds claimed already; none while
    /// every slot has a run and over half of those ahead still wait. Jobs
    /// claimed ahead wait, as `running` with their own run tokens, for a free slot
    /// (``concurrency``); a killed process leaves them to the next open, like its running ones.
    ///
    /// The claim is ``ManagedObjectContext/claimRows(_:limit:update:)``: rows that another
    /// worker's claim (or any other transaction) holds are passed over, not fought for. A
    /// claimed job whose asset is gone is cancelled right after the claim.
    private func claimAndStart(
        summary: SummaryBox, progress: (@Sendable (JobRecord) -> Void)?, only selection: FetchPredicate<Job>? = nil
    ) throws -> Int {
        guard let catalog else { return 0 }
        let (processors, held, running, firstRun, wanted) = state.withLock { s in
            let now = Date()
            if now.timeIntervalSince(s.rateWindowStart) >= 0.1 {
                let window = now.timeIntervalSince(s.rateWindowStart)
                s.claimAhead = min(Self.maxClaimAhead, Int((Double(s.finishedInWindow) * 0.1 / window).rounded(.up)))
                s.finishedInWindow = 0
                s.rateWindowStart = now
            }
            let ahead = max(s.claimAhead, s.minimumClaimAhead)
            var wanted = concurrency + ahead - s.running.count
            // Each claim is a transaction: topped up as jobs end, a few at a time, they would
            // cost more than short jobs do. While every slot has a run and over half of the
            // jobs claimed ahead still wait for one, none is made.
            if s.running.count >= concurrency && wanted * 2 < ahead { wanted = 0 }
            let first = s.runs + 1
            s.runs += max(0, wanted)
            return (s.processors, Array(s.held.keys), s.running.keys.map(jobObjectID), first, wanted)
        }
        guard wanted > 0 else { return 0 }
        // From before the claim's transaction until its jobs are registered: a deletion another
        // process commits meanwhile is checked again once they are (``checkExternalChanges()``).
        state.withLock { $0.claimsUnderWay += 1 }
        defer {
            let recheck = state.withLock { s -> Bool in
                s.claimsUnderWay -= 1
                return s.claimsUnderWay == 0 && s.recheckExternal
            }
            if recheck { checkExternalChanges() }
        }
        // Rows no other worker's claim holds, claimed in one transaction of their own: workers on
        // other connections (processes, hosts) claim others, and none has to try again.
        let owner = self.owner
        let rows: [ObjectSnapshot]
        do {
            rows = try catalog.withContext { context in
                let now = Date()
                var runnable: FetchPredicate<Job> =
                    \.state == JobState.queued && \.runAfter <= now && .in(\.kind, Array(processors.keys))
                    && !(.in(\.assetID, held)) && !(.objectIDs(running))
                if let selection { runnable = runnable && selection }
                // Read first: a worker with nothing to claim takes no write transaction (SQLite's one
                // write lock, a PostgreSQL connection held while another transaction of it waits).
                // A count, unordered: any runnable job will do, not the oldest of them all.
                guard try context.count(for: FetchRequest<Job>(predicate: runnable, limit: 1)) > 0 else {
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
            state.withLock { $0.failedClaims += 1 }
            // As a claim always did: a store that refuses it (read-only) leaves nothing to run.
            logger.warning("could not claim jobs: \(error)")
            return 0
        } catch {
            state.withLock { $0.failedClaims += 1 }
            return try catalog.storeErrors { () -> Int in throw error }  // as every store error is thrown
        }
        guard !rows.isEmpty else { return 0 }
        state.withLock { $0.afterClaimCommit }?()
        let jobs = rows.map(JobRecord.init(claimed:))
        let tokens = rows.map { ($0.value(for: \Job.owner) ?? nil) ?? "" }
        let assets: [Int64: AssetRecord]
        do {
            assets = try catalog.storeErrors {
                try catalog.withContext { context in
                    let ids = Set(jobs.map(\.asset.rawValue)).map {
                        ManagedObjectID(entityName: Asset.entityName, rowID: $0)
                    }
                    var assets: [Int64: AssetRecord] = [:]
                    for asset in try context.fetch(FetchRequest<Asset>(predicate: .objectIDs(ids))) {
                        assets[asset.objectID.rowID] = AssetRecord(asset)
                    }
                    return assets
                }
            }
        } catch {
            requeue(Dictionary(uniqueKeysWithValues: zip(jobs.map(\.id), tokens)))  // claimed, never started
            throw error
        }
        var claimed: [(JobRecord, AssetRecord, String)] = []
        for (job, token) in zip(jobs, tokens) {
            guard let asset = assets[job.asset.rawValue] else {
                // Its asset was deleted before the claim: cancelled, the claim's attempt given back
                // (unless the row changed meanwhile: the deletion's own cancellation came first).
                // Either way this run claimed it, and counts it as it ends.
                let final = try? changeJob(job.id) { row in
                    guard row.state == .running, row.owner == token else { return }
                    row.state = .cancelled
                    row.owner = nil
                    row.lastError = "its asset was deleted"
                    row.attempts = max(0, row.attempts - 1)
                }
                if final?.state == .cancelled { summary.value.withLock { $0.cancelled += 1 } }
                continue
            }
            claimed.append((job, asset, token))
        }
        if !claimed.isEmpty {
            let hook = state.withLock { s -> (@Sendable () -> Void)? in
                s.claimCommits += 1
                return s.afterClaim
            }
            hook?()
        }
        var started = 0
        for (job, asset, token) in claimed {
            if start(
                job, token: token, asset: asset, processor: processors[job.kind]!, catalog: catalog, summary: summary,
                progress: progress)
            {
                started += 1
            }
        }
        return started
    }

    /// Starts a claimed job; returns false when its asset's deletion began
    /// meanwhile (the job is then held with the asset's other jobs).
    private func start(
        _ job: JobRecord, token: String, asset: AssetRecord, processor: any JobProcessor, catalog: Catalog,
        summary: SummaryBox, progress: (@Sendable (JobRecord) -> Void)?
    ) -> Bool {
        let lastReport = Locked(Date.distantPast)
        let context = JobContext(
            jobID: job.id, kind: job.kind, asset: asset, catalog: catalog, runToken: token,
            progressSink: { [weak self] fraction in
                guard let self else { return }
                var record = job
                record.progress = fraction
                self.publish(record, progress: progress)
                let due = lastReport.withLock { last in
                    guard Date().timeIntervalSince(last) > 0.5 else { return false }
                    last = Date()
                    return true
                }
                if due { _ = try? self.changeJob(job.id) { row in if row.owner == token { row.progress = fraction } } }
            })
        // Registered under the lock that `finish` takes: a job that ends at
        // once cannot finish before it is known to be running. The loop that
        // claimed it may have been stopped meanwhile (stop() or Ctrl-C cancel
        // it, then take this lock to stop what runs): the job is then queued
        // again rather than started behind the stop's back.
        var stopped = false
        let started = state.withLock { s -> Bool in
            if s.held[job.asset.rawValue, default: 0] > 0 {
                s.interrupted[job.asset.rawValue, default: [:]][job.id] = token  // its asset is being deleted
                return false
            }
            if Task.isCancelled {
                stopped = true
                return false
            }
            // The session is gone: the row is another host's to queue again (this process's
            // writes are refused), and the job must not run here as well.
            if s.sessionLost != nil { return false }
            s.tasksInFlight += 1
            let slots = self.slots
            let content = catalog.content
            let run = Self.runNumber(of: token) ?? 0
            // On the queue's own threads: a processor that blocks its thread (a synchronous
            // read, as the built-in ones do) cannot starve the pool that the worker loop and
            // the listener of other processes' deletions run on.
            let task = runThreads.task { [weak self] in
                let outcome: Result<JobOutput, any Error>
                if let slot = await slots.acquire() {
                    // Marked where a process that finds this one dead looks: the run started.
                    content.markSlot(slot, run: run)
                    do {
                        outcome = .success(try await processor.run(context))
                    } catch {
                        outcome = .failure(error)
                    }
                    content.markSlot(slot, run: 0)
                    slots.release(slot)
                } else {
                    outcome = .failure(CancellationError())  // cancelled while waiting for a slot
                }
                // Ends the run's count in flight, once its outcome is written (a result, in a group).
                self?.finish(job, token: token, outcome: outcome, summary: summary, progress: progress)
            }
            s.running[job.id] = Running(assetID: job.asset.rawValue, token: token, task: task)
            return true
        }
        if stopped { requeue([job.id: token]) }
        if started { publish(job, progress: progress) }
        return started
    }

    private func finish(
        _ job: JobRecord, token: String, outcome: Result<JobOutput, any Error>, summary: SummaryBox,
        progress: (@Sendable (JobRecord) -> Void)?
    ) {
        // Stopped by another process's deletion of its asset: that process marks the row
        // after its commit, and this one may write it first (below).
        let (interrupted, assetGone) = state.withLock { s in
            (Self.isInterrupted(&s, job, token), s.assetGoneRuns.remove(token) != nil)
        }
        if !interrupted, case .success(let output) = outcome {
            // Written with other runs' results in one transaction; the run ends then.
            commitResult(PendingResult(job: job, token: token, output: output, summary: summary, progress: progress))
            return
        }
        // A run stops counting as running only once its outcome is written
        // (runUntilIdle must not return, and its process exit, before).
        defer {
            state.withLock { s in
                if s.running[job.id]?.token == token { s.running[job.id] = nil }
                s.tasksInFlight -= 1
            }
            wakeWorker()
        }
        guard !interrupted else { return }  // stopped, resumed, or cancelled with its asset's deletion
        var final: JobRecord?
        switch outcome {
        case .success:
            return  // committed in a group, above
        case .failure(let error) where error is CancellationError:
            final = try? changeJob(job.id) { row in
                guard row.state == .running, row.owner == token else { return }
                row.state = .cancelled
                row.owner = nil
                if assetGone { row.lastError = "its asset was deleted" }
            }
            if final?.state == .cancelled { summary.value.withLock { $0.cancelled += 1 } }
        case .failure(let error):
            // A run whose asset another process deleted may fail before it hears of the
            // deletion (its file unlinked, its archive gone): the deletion's process marks
            // the row cancelled after its commit, and if it has not (yet, or it died
            // first), the row is marked so here. Either way the run counts as the row ends.
            let retry = (error as? TransientJobError).flatMap {
                job.attempts < attemptLimit(job.kind, recorded: 1) ? $0 : nil
            }
            let delay = min(30, retryBaseDelay * pow(2, Double(job.attempts - 1)))
            let written = Locked<JobState?>(nil)
            final = try? changeJob(job.id) { row in
                written.withLock { $0 = nil }  // the closure runs again on a conflict
                guard row.state == .running, row.owner == token else { return }
                row.owner = nil
                if try Self.assetIsGone(of: row) {
                    row.state = .cancelled
                    row.lastError = "its asset was deleted"
                } else if let retry {
                    row.state = .queued
                    row.lastError = retry.reason
                    row.runAfter = Date().addingTimeInterval(delay)
                } else {
                    row.state = .failed
                    row.lastError = (error as? CatalogError)?.message ?? "\(error)"
                }
                written.withLock { $0 = row.state }
            }
            switch written.withLock({ $0 }) ?? (final?.state == .cancelled ? .cancelled : nil) {
            case .queued: summary.value.withLock { $0.retried += 1 }
            case .failed: summary.value.withLock { $0.failed += 1 }
            case .cancelled: summary.value.withLock { $0.cancelled += 1 }
            default: break  // the row is not this run's any more, nor cancelled
            }
        }
        if let final { publish(final, progress: progress) }
    }

    /// Whether the asset of the job `row` is no longer in the store (as `row`'s context reads it).
    private static func assetIsGone(of row: Job) throws -> Bool {
        guard let context = row.managedObjectContext else { return false }
        let asset = ManagedObjectID(entityName: Asset.entityName, rowID: row.assetID)
        return try context.count(for: FetchRequest<Asset>(predicate: .objectIDs([asset]))) == 0
    }

    /// Whether the run was stopped (``stop()``: queued again by `stopRunning`, whichever of
    /// the two ends first) or interrupted by its asset's deletion (resumed or cancelled with it).
    private static func isInterrupted(_ s: inout State, _ job: JobRecord, _ token: String) -> Bool {
        if s.stopping[job.id] == token {
            s.stopping[job.id] = nil
            return true
        }
        return s.interrupted[job.asset.rawValue]?[job.id] == token
    }

    /// Commits a succeeded run's result with those of other runs that ended meanwhile:
    /// the first run to end writes, in one transaction, every result waiting then, and
    /// again until none is left; the others return at once. A run ends, and its success
    /// is published, only once its result is committed.
    private func commitResult(_ result: PendingResult) {
        state.withLock { $0.pendingResults.append(result) }
        resultArrived.lock()
        resultArrived.signal()
        resultArrived.unlock()
        commitPendingResults()
    }

    /// Commits the results waiting, unless another run is committing them.
    private func commitPendingResults() {
        let (leads, delay) = state.withLock { s -> (Bool, Duration) in
            if s.committing || s.holdsResults || s.pendingResults.isEmpty { return (false, .zero) }
            s.committing = true
            return (true, s.resultGroupDelay)
        }
        guard leads else { return }
        waitForCompanions(upTo: delay)
        while true {
            // Runs stopped or interrupted meanwhile write nothing, as if they had ended then.
            let (group, dropped) = state.withLock { s -> ([PendingResult], [PendingResult]) in
                let taken = Array(s.pendingResults.prefix(Self.maxResultGroup))
                s.pendingResults.removeFirst(taken.count)
                if taken.isEmpty { s.committing = false }
                var group: [PendingResult] = []
                var dropped: [PendingResult] = []
                for r in taken {
                    if Self.isInterrupted(&s, r.job, r.token) { dropped.append(r) } else { group.append(r) }
                }
                return (group, dropped)
            }
            if group.isEmpty && dropped.isEmpty { return }
            let finals = writeResults(group)
            FaultPoint.reach(.beforeCountingResults)
            // Counted before the runs stop being `running`: a `runUntilIdle` that then finds
            // nothing running returns its summary at once, and must find them in it.
            for (r, final) in zip(group, finals) {
                r.summary.value.withLock {
                    switch final?.state {
                    case .succeeded: $0.succeeded += 1
                    case .failed: $0.failed += 1
                    default: $0.cancelled += 1
                    }
                }
            }
            state.withLock { s in
                for r in group + dropped where s.running[r.job.id]?.token == r.token { s.running[r.job.id] = nil }
                s.finishedInWindow += group.count
                s.resultCommits += group.isEmpty ? 0 : 1
            }
            for (r, final) in zip(group, finals) {
                if let final { publish(final, progress: r.progress) }
            }
            state.withLock { $0.tasksInFlight -= group.count + dropped.count }
            wakeWorker()
        }
    }

    /// Waits, at most `delay`, while a lone result is pending and other runs of this process
    /// are under way (running, or waiting for a slot): one of them ending joins the commit
    /// (``resultGroupDelay``). Not with one slot: the run that waits holds one of the queue's
    /// `concurrency` threads, and no other run could go on meanwhile.
    private func waitForCompanions(upTo delay: Duration) {
        guard concurrency > 1 else { return }
        let deadline = Date().addingTimeInterval(
            Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
        resultArrived.lock()
        defer { resultArrived.unlock() }
        // Checked under `resultArrived`, which a run takes to signal once its result is pending:
        // an arrival between the check and the wait is not missed.
        while state.withLock({ $0.pendingResults.count == 1 && $0.tasksInFlight > 1 }),
            resultArrived.wait(until: deadline)
        {}
    }

    /// Writes succeeded runs' outputs and marks their jobs succeeded, in one transaction
    /// that checks before its commit, each asset locked against deletion until then, that
    /// every one of their assets still exists; each row must still be its run's (else it is
    /// left as it is). An asset found deleted before the commit has its job cancelled in the
    /// same transaction. When the transaction fails (an asset deleted in the instant before
    /// the commit, a result that cannot be applied), each result is written on its own
    /// (``writeResult(_:token:_:)``).
    private func writeResults(_ group: [PendingResult]) -> [JobRecord?] {
        guard let catalog else { return group.map { _ in nil } }
        if group.count == 1 { return [writeResult(group[0].job, token: group[0].token, group[0].output)] }
        do {
            return try catalog.withRetriedContext { context in
                var rows: [Int64: Job] = [:]
                for row in try context.fetch(
                    FetchRequest<Job>(predicate: .objectIDs(group.map { jobObjectID($0.job.id) })))
                {
                    rows[row.objectID.rowID] = row
                }
                let assetIDs = Set(group.map(\.job.asset.rawValue)).map {
                    ManagedObjectID(entityName: Asset.entityName, rowID: $0)
                }
                let present = Set(
                    try context.fetchObjectIDs(FetchRequest<Asset>(predicate: .objectIDs(assetIDs))).map(\.rowID))
                // Assets are read in full only for the outputs that change them.
                let changing = group.filter {
                    !$0.output.metadata.isEmpty || !$0.output.tags.isEmpty || $0.output.apply != nil
                }
                var assets: [Int64: Asset] = [:]
                if !changing.isEmpty {
                    let ids = Set(changing.map(\.job.asset.rawValue)).map {
                        ManagedObjectID(entityName: Asset.entityName, rowID: $0)
                    }
                    for asset in try context.fetch(FetchRequest<Asset>(predicate: .objectIDs(ids))) {
                        assets[asset.objectID.rowID] = asset
                    }
                }
                for r in group {
                    guard let row = rows[r.job.id], row.state == .running, row.owner == r.token else { continue }
                    row.owner = nil
                    guard present.contains(r.job.asset.rawValue) else {
                        row.state = .cancelled  // its deletion committed first: no result lands
                        row.lastError = "its asset was deleted"
                        continue
                    }
                    row.state = .succeeded
                    row.progress = 1
                    row.lastError = nil
                    row.resultRequiresAsset = r.job.asset.rawValue
                    guard let asset = assets[r.job.asset.rawValue] else { continue }  // nothing to change
                    if !r.output.metadata.isEmpty {
                        var metadata = asset.metadata
                        for (k, v) in r.output.metadata { metadata[k] = v }
                        if metadata != asset.metadata { asset.metadata = metadata }
                    }
                    if !r.output.tags.isEmpty { asset.tags = Array(Set(asset.tags).union(r.output.tags)) }
                    try r.output.apply?(asset, context)
                }
                try context.save()
                return group.map { rows[$0.job.id].map(JobRecord.init) }
            }
        } catch {
            return group.map { writeResult($0.job, token: $0.token, $0.output) }
        }
    }

    /// Writes a job's output and marks it succeeded, in one transaction that
    /// first checks the asset still exists and the run is still this one.
    /// Another writer's change to the asset (a second job's result) makes the
    /// save conflict: the output is then applied again to the asset as it is now.
    private func writeResult(_ job: JobRecord, token: String, _ output: JobOutput) -> JobRecord? {
        guard let catalog else { return nil }
        let failure: any Error
        do {
            return try catalog.withRetriedContext { context in
                let row = try context.existingObject(with: jobObjectID(job.id), as: Job.self)
                guard row.state == .running, row.owner == token else { return JobRecord(row) }
                let assetID = ManagedObjectID(entityName: Asset.entityName, rowID: job.asset.rawValue)
                let asset = try context.existingObject(with: assetID, as: Asset.self)
                var metadata = asset.metadata
                for (k, v) in output.metadata { metadata[k] = v }
                if metadata != asset.metadata { asset.metadata = metadata }
                if !output.tags.isEmpty { asset.tags = Array(Set(asset.tags).union(output.tags)) }
                try output.apply?(asset, context)
                row.state = .succeeded
                row.progress = 1
                row.lastError = nil
                row.owner = nil
                row.resultRequiresAsset = job.asset.rawValue
                try context.save()
                return JobRecord(row)
            }
        } catch {
            failure = error
        }
        let assetGone =
            (try? catalog.withContext { context in
                try context.count(
                    for: FetchRequest<Asset>(
                        predicate: .objectIDs([ManagedObjectID(entityName: Asset.entityName, rowID: job.asset.rawValue)]
                        )))
            }) == 0
        return try? changeJob(job.id) { row in
            guard row.state == .running, row.owner == token else { return }
            row.owner = nil
            if assetGone {
                row.state = .cancelled  // its deletion committed first: no result lands
                row.lastError = "its asset was deleted"
            } else {
                row.state = .failed
                let reason = (failure as? CatalogError)?.message ?? "\(failure)"
                row.lastError = "Could not record the result: \(reason)"
            }
        }
    }

    // MARK: - Recovery and other processes

    /// The number a run token ends with (`owner#7` → 7).
    static func runNumber(of token: String) -> Int64? {
        token.lastIndex(of: "#").flatMap { Int64(token[token.index(after: $0)...]) }
    }

    /// Jobs left running by processes that are gone are queued again. The crash counts
    /// as an attempt for the runs that had started (past the limit they fail), not for
    /// those the process had only claimed ahead: its lock file says which runs held a
    /// slot (``OwnerLiveness/runsInSlots(of:)``); where that cannot be told, every run counts.
    ///
    /// With `owner`, only that process's jobs (a reaper's, ``CatalogRuntime/reapDeadSessions(_:)``),
    /// its started runs told by `runsInSlots` rather than by ``OwnerLiveness``.
    func recoverAbandoned(of owner: String? = nil, runsInSlots: (@Sendable (String) -> Set<Int64>?)? = nil) {
        guard let catalog else { return }
        let liveness = catalog.runtime.liveness
        let startedRuns = Locked([String: Set<Int64>?]())
        let alive = Locked([String: Bool]())  // one look per process, not per job
        update(\.state == JobState.running) { job in
            guard let token = job.owner else { return }
            let process = String(token.prefix { $0 != "#" })
            if let owner, process != owner { return }
            guard process != self.owner else { return }
            let isAlive = alive.withLock { known in
                if known[process] == nil { known[process] = liveness.isAlive(process) }
                return known[process]!
            }
            guard !isAlive else { return }
            let started = startedRuns.withLock { known in
                if known[process] == nil {
                    known[process] = .some(runsInSlots.map { $0(process) } ?? liveness.runsInSlots(of: process))
                }
                return known[process]!
            }
            if let started, let run = Self.runNumber(of: token), !started.contains(run) {
                job.state = .queued  // claimed ahead, never started: the attempt the claim counted is given back
                job.attempts = max(0, job.attempts - 1)
                job.lastError = "its worker process died before running it"
            } else if job.attempts >= self.attemptLimit(job.kind, recorded: job.maxAttempts) {
                job.state = .failed
                job.lastError = "its worker process died \(job.attempts) times"
            } else {
                job.state = .queued
                job.lastError = "its worker process died"
            }
            job.owner = nil
        }
    }

    /// Takes the store's change counter as it is now, before any job is
    /// claimed: a commit by another process after this point is noticed. And
    /// listens to the store's announcements, so that another process's deletion
    /// (and, on SQLite, any commit of another connection) is acted on as it
    /// commits instead of at the next poll.
    private func markExternalBaseline() {
        _ = try? catalog?.container.storeChangedExternally()
        startWatching()
    }

    /// Starts listening to the store's announcements, unless the queue listens already (or
    /// listening is off).
    private func startWatching() {
        guard let catalog, state.withLock({ $0.listener == nil && $0.watchesStore }) else { return }
        // Asked for here, before any claim: every deletion that commits after it is heard.
        let announcements = catalog.container.announcements()
        let listener = Task.detached { [weak self] in
            for await announcement in announcements {
                guard let self else { return }
                self.heard(announcement)
            }
        }
        let extra = state.withLock { s -> Task<Void, Never>? in
            if s.listener == nil {
                s.listener = listener
                return nil
            }
            return listener  // another call started one meanwhile
        }
        extra?.cancel()
    }

    /// Stops listening to the store.
    private func stopWatching() {
        state.withLock { s -> Task<Void, Never>? in
            defer {
                s.listener = nil
                s.announcementsInterrupted = false
            }
            return s.listener
        }?.cancel()
    }

    /// How long the queue goes between looks at the store for other processes' commits:
    /// ``externalPollInterval`` while it does not hear the store's announcements,
    /// ``listeningLookInterval`` while it does.
    private var pollInterval: TimeInterval {
        state.withLock { Self.hears($0) ? $0.listeningLookInterval : $0.externalCheckInterval }
    }

    /// A look at the store for other processes' commits that the clock made.
    private func pollExternalChanges() {
        state.withLock { $0.externalPolls += 1 }
        checkExternalChanges()
    }

    /// The topic of the announcement of committed deletions of assets (``deletionPayload(_:)``).
    static let deletionTopic = "assetcat.assets-deleted"

    /// What a save that deletes `ids` announces: their ranges (`7`, `9-12`, comma-separated),
    /// or `*` when they would not fit in an announcement (receivers then read the store).
    static func deletionPayload(_ ids: RowIDSet) -> String {
        let payload = ids.ranges.map { $0.count == 1 ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound - 1)" }
            .joined(separator: ",")
        return Announcement.fits(topic: deletionTopic, payload: payload) ? payload : "*"
    }

    /// The assets a ``deletionPayload(_:)`` names; `nil` for `*` or a payload that is not one.
    static func deletedAssets(in payload: String) -> RowIDSet? {
        var ids = RowIDSet()
        for part in payload.split(separator: ",", omittingEmptySubsequences: false) {
            let bounds = part.split(separator: "-", omittingEmptySubsequences: false)
            guard (1...2).contains(bounds.count), let low = Int64(bounds[0]),
                let high = Int64(bounds[bounds.count - 1]), low <= high, high < .max
            else { return nil }
            ids.insert(low..<(high + 1))
        }
        return ids
    }

    /// The topic of the announcement of a save that queued jobs, or made them due again, or
    /// stopped a run (``jobsPayload(queued:cancelled:)``): idle workers of other processes and
    /// hosts look for work at once, and one whose run was cancelled stops it.
    static let jobsTopic = "assetcat.jobs"

    /// What a save that changes jobs announces: `queued` when it queued some (submitted,
    /// retried, queued again), `cancelled` when it cancelled a running one, or both,
    /// space-separated. Receivers read the rest from the store: the payload stays a few bytes,
    /// one announcement a save however many jobs it changes.
    static func jobsPayload(queued: Bool, cancelled: Bool) -> String {
        [queued ? "queued" : nil, cancelled ? "cancelled" : nil].compactMap { $0 }.joined(separator: " ")
    }

    /// An announcement of the store: another process's (or host's) deletion of assets
    /// stops this process's runs of their jobs, without reading the store; the re-read
    /// marker (another connection's commit on SQLite, announcements missed on PostgreSQL)
    /// and a deletion too large to name make the queue read the store. Jobs queued
    /// anywhere wake the worker; a run cancelled anywhere makes the queue read its runs'
    /// rows. The interruption marker makes the queue poll the store until the re-read
    /// marker that ends it.
    func heard(_ announcement: Announcement) {
        if announcement.isInterruption {
            state.withLock { $0.announcementsInterrupted = true }
            wakeWorker()  // to sleep no longer than a poll
            return
        }
        if announcement.isReread {
            state.withLock { $0.announcementsInterrupted = false }
            storeChanged(force: true)
            return
        }
        if announcement.topic == Self.jobsTopic {
            if announcement.payload.split(separator: " ").contains("cancelled") { checkExternalChanges(force: true) }
            wakeWorker()
            return
        }
        guard announcement.topic == Self.deletionTopic else { return }
        guard let ids = Self.deletedAssets(in: announcement.payload) else {
            storeChanged(force: true)
            return
        }
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            // A claim under way has jobs not registered yet: the next check reads them.
            if s.claimsUnderWay > 0 { s.recheckExternal = true }
            let gone = s.running.values.filter { ids.contains($0.assetID) }
            for run in gone { s.assetGoneRuns.insert(run.token) }
            return gone.map(\.task)
        }
        for task in tasks { task.cancel() }
    }

    /// A commit was written to the store (by any process): another process may have
    /// deleted an asset whose job runs here, or queued work. `force`: look even if the
    /// store's change counter has not moved.
    private func storeChanged(force: Bool = false) {
        checkExternalChanges(force: force)
        wakeWorker()
    }

    /// Whether the queue listens to the store's announcements (for tests).
    var isWatchingStore: Bool { state.withLock { $0.listener != nil } }

    /// Cancels running jobs whose asset another process deleted, or whose row
    /// another process cancelled or re-queued.
    ///
    /// A commit is seen once (the store's change counter moves on): a check while a claim is
    /// under way, whose jobs are not registered yet, leaves the next check to look again.
    func checkExternalChanges(force: Bool = false) {
        guard let catalog else { return }
        let changed = (try? catalog.container.storeChangedExternally()) == true || force
        let running = state.withLock { s -> [Int64: Running]? in
            guard changed || s.recheckExternal else { return nil }
            s.recheckExternal = s.claimsUnderWay > 0
            return s.running
        }
        guard let running, !running.isEmpty else { return }
        // Two reads whatever the number of runs (jobs claimed ahead count too).
        let stale: [(job: Int64, assetGone: Bool)] =
            (try? catalog.withContext { context in
                var rows: [Int64: Job] = [:]
                for row in try context.fetch(FetchRequest<Job>(predicate: .objectIDs(running.keys.map(jobObjectID)))) {
                    rows[row.objectID.rowID] = row
                }
                let assetIDs = Set(running.values.map(\.assetID)).map {
                    ManagedObjectID(entityName: Asset.entityName, rowID: $0)
                }
                let present = Set(
                    try context.fetchObjectIDs(FetchRequest<Asset>(predicate: .objectIDs(assetIDs))).map(\.rowID))
                return running.compactMap { jobID, run -> (Int64, Bool)? in
                    let job = rows[jobID]
                    let assetGone = !present.contains(run.assetID)
                    return job?.state != .running || job?.owner != run.token || assetGone ? (jobID, assetGone) : nil
                }
            }) ?? []
        state.withLock { s in
            for (jobID, assetGone) in stale where assetGone {
                if let token = running[jobID]?.token { s.assetGoneRuns.insert(token) }
            }
        }
        for (jobID, _) in stale { running[jobID]?.task.cancel() }
    }

    // MARK: - Helpers

    func jobObjectID(_ id: Int64) -> ManagedObjectID { ManagedObjectID(entityName: Job.entityName, rowID: id) }

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

    private func nextBackoff(only selection: FetchPredicate<Job>? = nil) throws -> TimeInterval? {
        guard let catalog else { return nil }
        let (processors, held) = state.withLock { ($0.processors, Array($0.held.keys)) }
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

    /// Changes one job row as a compare-and-set: the closure checks the row's
    /// state, and a concurrent change to the row (another process, another
    /// task) makes the save conflict, and the closure run again on the fresh row.
    @discardableResult
    func changeJob(_ jobID: Int64, _ change: @escaping (Job) throws -> Void) throws -> JobRecord {
        guard let catalog else { throw Self.closed }
        return try catalog.storeErrors {
            try catalog.withRetriedContext { context in
                guard let job = try? context.existingObject(with: jobObjectID(jobID), as: Job.self) else {
                    throw CatalogError(.notFound, "No job with ID \(jobID); list jobs with `assetcat jobs`")
                }
                try change(job)
                try context.save()
                return JobRecord(job)
            }
        }
    }

    /// Changes every job matching `predicate`, each as a compare-and-set.
    private func update(_ predicate: FetchPredicate<Job>, _ change: @escaping (Job) -> Void) {
        guard let catalog else { return }
        do {
            let ids = try catalog.withContext { try $0.fetchObjectIDs(FetchRequest<Job>(predicate: predicate)) }
            for id in ids { _ = try? changeJob(id.rowID, change) }
        } catch {
            logger.warning("could not update jobs: \(error)")
        }
    }

    /// Queues runs again (their attempt not counted), if the rows are still theirs.
    private func requeue(_ runs: [Int64: String]) {
        for (jobID, token) in runs {
            _ = try? changeJob(jobID) { job in
                guard job.state == .running, job.owner == token else { return }
                job.state = .queued
                job.owner = nil
                job.attempts = max(0, job.attempts - 1)
            }
        }
    }

    private func publish(_ record: JobRecord, progress: (@Sendable (JobRecord) -> Void)?) {
        progress?(record)
        for continuation in state.withLock({ Array($0.subscribers.values) }) { continuation.yield(record) }
    }
}

/// The queue's concurrency bound: claimed jobs wait here, in claim order, for one of
/// `limit` numbered slots before their processor runs. A task cancelled while waiting
/// stops waiting at once, without a slot.
final class RunSlots: Sendable {
    private struct State {
        /// The free slots' numbers.
        var free: [Int]
        var nextID: UInt64 = 0
        var waiters: [(id: UInt64, continuation: CheckedContinuation<Int?, Never>)] = []
    }
    private let state: Locked<State>

    init(_ limit: Int) { state = Locked(State(free: Array((0..<limit).reversed()))) }

    /// Waits for a slot and returns its number (`0..<limit`); nil when the task was
    /// cancelled first (then it holds none).
    func acquire() async -> Int? {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
                let granted = state.withLock { s -> Int?? in
                    if Task.isCancelled { return .some(nil) }
                    if !s.free.isEmpty && s.waiters.isEmpty { return s.free.removeLast() }
                    s.waiters.append((id, continuation))
                    return nil
                }
                if let granted { continuation.resume(returning: granted) }
            }
        } onCancel: {
            state.withLock { s -> CheckedContinuation<Int?, Never>? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index).continuation
            }?.resume(returning: nil)
        }
    }

    /// Gives slot `slot` back: the longest waiter gets it.
    func release(_ slot: Int) {
        state.withLock { s -> CheckedContinuation<Int?, Never>? in
            if s.waiters.isEmpty {
                s.free.append(slot)
                return nil
            }
            return s.waiters.removeFirst().continuation
        }?.resume(returning: slot)
    }
}
