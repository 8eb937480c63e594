import Foundation
import Logging
import Persistence
import Synchronization

final class SummaryBox: Sendable {
    let value = Mutex(JobRunSummary())
}

/// What ``JobQueue/runUntilIdle(progress:)`` did.
public struct JobRunSummary: Sendable, Hashable {
    public var succeeded = 0
    public var failed = 0
    public var cancelled = 0
    public var retried = 0
}

/// The default ``JobProvider``: runs jobs with Swift concurrency, a bounded
/// number at a time (the core count by default), keeping their state in the
/// catalog so that a restarted process resumes what was queued or running.
///
/// Cancellation semantics, as implemented:
/// - `prepareForDeletion` of an asset calls ``cancelAll(for:)``: its running
///   jobs are cancelled at once (processors see it at their next
///   `checkCancellation()`), and its queued jobs are held.
/// - A result is written in a transaction that first checks, under the
///   store's write lock, that the asset still exists and the job is still
///   this process's: no result or metadata ever lands for an asset whose
///   deletion committed, even one finishing in the instant before.
/// - When the deletion commits, the asset's unfinished jobs are marked
///   cancelled. When it is rolled back, fails, or is discarded (a child
///   context thrown away), ``resume(for:)`` queues the interrupted jobs again.
/// - A deletion committed by another process is noticed within a quarter of
///   a second (the store's change counter), and the jobs are cancelled.
/// - A process killed while running jobs leaves them `running`; the next
///   open, in any process, queues them again (each such crash counts as an
///   attempt).
public final class JobQueue: JobProvider, Sendable {
    struct Running {
        var assetID: Int64
        var task: Task<Void, Never>
    }

    struct State {
        var processors: [String: any JobProcessor] = [:]
        var running: [Int64: Running] = [:]
        /// Assets whose deletion is pending: their jobs are held.
        var held: Set<Int64> = []
        /// Jobs stopped by `cancelAll`, by asset: resumed, or cancelled with the deletion.
        var interrupted: [Int64: Set<Int64>] = [:]
        var subscribers: [UUID: AsyncStream<JobRecord>.Continuation] = [:]
        var worker: Task<Void, Never>?
        var wake: AsyncStream<Void>.Continuation?
    }

    /// How many jobs run at once.
    public let concurrency: Int
    /// This process, as job rows name their owner.
    let owner: String
    private let catalogBox = Mutex(WeakCatalog())
    private var catalog: Catalog? { catalogBox.withLock { $0.value } }
    private let state = Mutex(State())
    private let logger: Logger

    struct WeakCatalog: @unchecked Sendable {
        weak var value: Catalog?
    }

    init(owner: String, concurrency: Int, logger: Logger) {
        self.owner = owner
        self.concurrency = max(1, concurrency)
        self.logger = logger
    }

    func attach(_ catalog: Catalog) {
        catalogBox.withLock { $0.value = catalog }
    }

    // MARK: - Processors

    /// Registers the processor that runs jobs of `kind` (replacing any).
    public func register(_ processor: any JobProcessor, as kind: String) {
        state.withLock { $0.processors[kind] = processor }
    }

    // MARK: - JobProvider

    @discardableResult
    public func submit(_ kind: String, for assetID: Int64) throws -> Int64 {
        try submit([kind], for: [assetID]).first ?? 0
    }

    /// Queues work of each kind for each asset, in one transaction.
    @discardableResult
    public func submit(_ kinds: [String], for assetIDs: [Int64]) throws -> [Int64] {
        guard let catalog else { return [] }
        let ids = try catalog.storeErrors {
            try catalog.withContext { context in
                var jobs: [Job] = []
                for assetID in assetIDs {
                    for kind in kinds {
                        let job = Job(context: context)
                        job.kind = kind
                        job.assetID = assetID
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

    public func cancelAll(for assetID: Int64) {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            s.held.insert(assetID)
            let mine = s.running.filter { $0.value.assetID == assetID }
            s.interrupted[assetID, default: []].formUnion(mine.keys)
            return mine.values.map(\.task)
        }
        for task in tasks { task.cancel() }
    }

    public func resume(for assetID: Int64) {
        let jobs = state.withLock { s -> Set<Int64> in
            s.held.remove(assetID)
            return s.interrupted.removeValue(forKey: assetID) ?? []
        }
        if !jobs.isEmpty { requeue(jobs, countAttempt: false) }
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
    func assetsDeleted(_ assetIDs: Set<Int64>) {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            for id in assetIDs {
                s.held.remove(id)
                s.interrupted[id] = nil
            }
            return s.running.filter { assetIDs.contains($0.value.assetID) }.map(\.value.task)
        }
        for task in tasks { task.cancel() }
        update(FetchPredicate<Job>.in(\.assetID, Array(assetIDs)) && .in(\.state, [JobState.queued, .running])) {
            $0.state = .cancelled
            $0.lastError = "its asset was deleted"
            $0.owner = nil
        }
    }

    // MARK: - Control

    /// Cancels one job (queued or running, in this process or another).
    public func cancel(_ jobID: Int64) throws -> JobRecord {
        let task = state.withLock { $0.running[jobID]?.task }
        task?.cancel()
        return try changeJob(jobID) { job in
            guard job.state == .queued || job.state == .running else {
                throw CatalogError(
                    .invalidArgument,
                    "Job \(jobID) is \(job.state.rawValue); only queued or running jobs can be cancelled")
            }
            job.state = .cancelled
            job.lastError = "cancelled"
            job.owner = nil
        }
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

    /// The jobs, optionally only those in `states`, in ID order.
    public func list(_ states: [JobState]? = nil) throws -> [JobRecord] {
        guard let catalog else { return [] }
        return try catalog.storeErrors {
            try catalog.withContext { context in
                let predicate: FetchPredicate<Job> = states.map { .in(\.state, $0) } ?? .all
                return try context.fetch(FetchRequest<Job>(predicate: predicate)).map(JobRecord.init)
            }
        }
    }

    // MARK: - Running

    /// Works the queue until nothing is queued or running (waiting out
    /// backoffs), then returns what happened.
    public func runUntilIdle(progress: (@Sendable (JobRecord) -> Void)? = nil) async throws -> JobRunSummary {
        recoverAbandoned()
        markExternalBaseline()
        let summary = SummaryBox()
        var lastCheck = Date()
        while !Task.isCancelled {
            let started = try claimAndStart(summary: summary, progress: progress)
            if Date().timeIntervalSince(lastCheck) >= 0.25 {
                checkExternalChanges()
                lastCheck = Date()
            }
            let running = state.withLock { $0.running.count }
            if started == 0 && running == 0 {
                guard let wait = try nextBackoff() else { break }
                try await Task.sleep(for: .seconds(min(wait, 1)))
                continue
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        return summary.value.withLock { $0 }
    }

    /// Starts working the queue in the background until ``stop()`` (for
    /// pipelines and `jobs run --watch`).
    public func start() {
        recoverAbandoned()
        markExternalBaseline()
        let (wakes, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let worker = Task { [weak self] in
            let summary = SummaryBox()
            var lastCheck = Date()
            while !Task.isCancelled, let self {
                let started = (try? self.claimAndStart(summary: summary, progress: nil)) ?? 0
                if Date().timeIntervalSince(lastCheck) >= 0.25 {
                    self.checkExternalChanges()
                    lastCheck = Date()
                }
                if started == 0 {
                    // Sleep until woken (a submit, a resume) or a quarter of a second.
                    await withTaskGroup(of: Void.self) { group in
                        group.addTask { for await _ in wakes { return } }
                        group.addTask { try? await Task.sleep(for: .milliseconds(250)) }
                        await group.next()
                        group.cancelAll()
                    }
                }
            }
        }
        state.withLock {
            $0.worker?.cancel()
            $0.worker = worker
            $0.wake = continuation
        }
    }

    /// Stops the background worker and cancels running jobs (they are queued
    /// again by the next open, as if this process had died).
    public func stop() {
        let (worker, tasks) = state.withLock { s in (s.worker, s.running.values.map(\.task)) }
        worker?.cancel()
        for task in tasks { task.cancel() }
    }

    /// Wakes the background worker (new work was queued).
    func wakeWorker() {
        _ = state.withLock { $0.wake?.yield() }
    }

    /// Claims queued jobs up to the concurrency limit and starts them.
    private func claimAndStart(summary: SummaryBox, progress: (@Sendable (JobRecord) -> Void)?) throws -> Int {
        guard let catalog else { return 0 }
        var started = 0
        while state.withLock({ $0.running.count }) < concurrency {
            let (processors, held) = state.withLock { ($0.processors, $0.held) }
            let claimed: (JobRecord, AssetRecord?)? = try catalog.storeErrors {
                try catalog.withContext { context in
                    let now = Date()
                    let candidates = try context.fetch(
                        FetchRequest<Job>(predicate: \.state == JobState.queued && \.runAfter <= now, limit: 64))
                    for job in candidates where processors[job.kind] != nil && !held.contains(job.assetID) {
                        let assetID = ManagedObjectID(entityName: Asset.entityName, rowID: job.assetID)
                        let asset = try? context.existingObject(with: assetID, as: Asset.self)
                        job.state = asset == nil ? .cancelled : .running
                        job.owner = asset == nil ? nil : owner
                        if asset == nil { job.lastError = "its asset was deleted" } else { job.attempts += 1 }
                        do {
                            try context.save()  // fails if another process claimed it first
                        } catch {
                            context.rollback()
                            continue
                        }
                        if let asset { return (JobRecord(job), AssetRecord(asset)) }
                    }
                    return nil
                }
            }
            guard let (job, asset) = claimed, let asset else { break }
            start(
                job, asset: asset, processor: processors[job.kind]!, catalog: catalog, summary: summary,
                progress: progress)
            started += 1
        }
        return started
    }

    private func start(
        _ job: JobRecord, asset: AssetRecord, processor: any JobProcessor, catalog: Catalog,
        summary: SummaryBox, progress: (@Sendable (JobRecord) -> Void)?
    ) {
        publish(job, progress: progress)
        let lastReport = Mutex(Date.distantPast)
        let context = JobContext(
            jobID: job.id, kind: job.kind, asset: asset, catalog: catalog,
            progressSink: { [weak self] fraction in
                var record = job
                record.progress = fraction
                self?.publish(record, progress: progress)
                let due = lastReport.withLock { last in
                    guard Date().timeIntervalSince(last) > 0.5 else { return false }
                    last = Date()
                    return true
                }
                if due {
                    self?.update(\.state == JobState.running && .objectIDs([self!.jobObjectID(job.id)])) {
                        $0.progress = fraction
                    }
                }
            })
        // Registered under the lock that `finish` takes: a job that ends at
        // once cannot finish before it is known to be running.
        state.withLock { s in
            let task = Task { [weak self] in
                let outcome: Result<JobOutput, any Error>
                do {
                    outcome = .success(try await processor.run(context))
                } catch {
                    outcome = .failure(error)
                }
                self?.finish(job, outcome: outcome, summary: summary, progress: progress)
            }
            s.running[job.id] = Running(assetID: job.asset, task: task)
        }
    }

    private func finish(
        _ job: JobRecord, outcome: Result<JobOutput, any Error>, summary: SummaryBox,
        progress: (@Sendable (JobRecord) -> Void)?
    ) {
        let interrupted = state.withLock { $0.interrupted[job.asset]?.contains(job.id) ?? false }
        // A job stops counting as running only once its outcome is written:
        // runUntilIdle must not return (and its process exit) before.
        defer {
            state.withLock { $0.running[job.id] = nil }
            wakeWorker()
        }
        guard !interrupted else { return }  // resumed or cancelled with its asset's deletion
        var final: JobRecord?
        switch outcome {
        case .success(let output):
            final = writeResult(job, output)
            summary.value.withLock {
                switch final?.state {
                case .succeeded: $0.succeeded += 1
                case .failed: $0.failed += 1
                default: $0.cancelled += 1
                }
            }
        case .failure(let error) where error is CancellationError:
            summary.value.withLock { $0.cancelled += 1 }
            final = try? changeJob(job.id) { row in
                guard row.state == .running, row.owner == self.owner else { return }
                row.state = .cancelled
                row.owner = nil
            }
        case .failure(let error as TransientJobError) where job.attempts < (try? maxAttempts(job.id)) ?? 1:
            summary.value.withLock { $0.retried += 1 }
            let delay = min(30, 0.1 * pow(2, Double(job.attempts - 1)))
            final = try? changeJob(job.id) { row in
                guard row.state == .running, row.owner == self.owner else { return }
                row.state = .queued
                row.owner = nil
                row.lastError = error.reason
                row.runAfter = Date().addingTimeInterval(delay)
            }
        case .failure(let error):
            summary.value.withLock { $0.failed += 1 }
            final = try? changeJob(job.id) { row in
                guard row.state == .running, row.owner == self.owner else { return }
                row.state = .failed
                row.owner = nil
                row.lastError = (error as? CatalogError)?.message ?? "\(error)"
            }
        }
        if let final { publish(final, progress: progress) }
    }

    /// Writes a job's output and marks it succeeded, in one transaction that
    /// first checks the asset still exists and the job is still ours. Another
    /// writer's change to the asset (a second job's result) makes the save
    /// conflict: the output is then applied again to the asset as it is now.
    private func writeResult(_ job: JobRecord, _ output: JobOutput) -> JobRecord? {
        guard let catalog else { return nil }
        var lastError: (any Error)?
        for _ in 0..<5 {
            do {
                return try catalog.withContext { context in
                    let row = try context.existingObject(with: jobObjectID(job.id), as: Job.self)
                    guard row.state == .running, row.owner == owner else { return JobRecord(row) }
                    let assetID = ManagedObjectID(entityName: Asset.entityName, rowID: job.asset)
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
                    row.resultRequiresAsset = job.asset
                    try context.save()
                    return JobRecord(row)
                }
            } catch let error as PersistenceError where error.code == .conflict {
                lastError = error
                continue
            } catch {
                lastError = error
                break
            }
        }
        let assetGone =
            (try? catalog.withContext { context in
                try context.count(
                    for: FetchRequest<Asset>(
                        predicate: .objectIDs([ManagedObjectID(entityName: Asset.entityName, rowID: job.asset)])))
            }) == 0
        return try? changeJob(job.id) { row in
            guard row.state == .running, row.owner == self.owner else { return }
            row.owner = nil
            if assetGone {
                row.state = .cancelled  // its deletion committed first: no result lands
                row.lastError = "its asset was deleted"
            } else {
                row.state = .failed
                row.lastError =
                    "Could not record the result: \((lastError as? CatalogError)?.message ?? "\(lastError.map { "\($0)" } ?? "")")"
            }
        }
    }

    // MARK: - Recovery and other processes

    /// Jobs left running by processes that are gone are queued again (the
    /// crash counts as an attempt; past the limit they fail). Jobs of assets
    /// that no longer exist are cancelled.
    func recoverAbandoned() {
        guard let catalog else { return }
        let content = catalog.content
        update(\.state == JobState.running) { job in
            guard let owner = job.owner, owner != self.owner, !content.isOwnerAlive(owner) else { return }
            if job.attempts >= job.maxAttempts {
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
    /// claimed: a commit by another process after this point is noticed.
    private func markExternalBaseline() {
        _ = try? catalog?.container.storeChangedExternally()
    }

    /// Cancels running jobs whose asset another process deleted, or whose row
    /// another process cancelled.
    func checkExternalChanges() {
        guard let catalog, (try? catalog.container.storeChangedExternally()) == true else { return }
        let running = state.withLock { $0.running }
        guard !running.isEmpty else { return }
        let stale: [Int64] =
            (try? catalog.withContext { context in
                running.compactMap { jobID, run -> Int64? in
                    let job = try? context.existingObject(with: self.jobObjectID(jobID), as: Job.self)
                    let assetID = ManagedObjectID(entityName: Asset.entityName, rowID: run.assetID)
                    let assetGone = (try? context.existingObject(with: assetID)) == nil
                    return job?.state != .running || job?.owner != self.owner || assetGone ? jobID : nil
                }
            }) ?? []
        for jobID in stale { running[jobID]?.task.cancel() }
    }

    // MARK: - Helpers

    func jobObjectID(_ id: Int64) -> ManagedObjectID { ManagedObjectID(entityName: Job.entityName, rowID: id) }

    private func maxAttempts(_ jobID: Int64) throws -> Int {
        guard let catalog else { return 1 }
        return try catalog.withContext { try $0.existingObject(with: jobObjectID(jobID), as: Job.self).maxAttempts }
    }

    private func nextBackoff() throws -> TimeInterval? {
        guard let catalog else { return nil }
        let processors = state.withLock { $0.processors }
        return try catalog.withContext { context in
            let queued = try context.fetch(FetchRequest<Job>(predicate: \.state == JobState.queued))
                .filter { processors[$0.kind] != nil }
            guard let soonest = queued.map(\.runAfter).min() else { return nil }
            return max(0.01, soonest.timeIntervalSinceNow)
        }
    }

    /// Changes one job row; the change is written without a version check
    /// (job rows are small state machines; the closure re-checks the state).
    @discardableResult
    private func changeJob(_ jobID: Int64, _ change: @escaping (Job) throws -> Void) throws -> JobRecord {
        guard let catalog else { throw CatalogError(.store, "The catalog is closed") }
        return try catalog.storeErrors {
            try catalog.withContext { context in
                context.mergePolicy = .mergeByPropertyObjectTrump
                guard let job = try? context.existingObject(with: jobObjectID(jobID), as: Job.self) else {
                    throw CatalogError(.notFound, "No job with ID \(jobID); list jobs with `assetcat jobs`")
                }
                try change(job)
                try context.save()
                return JobRecord(job)
            }
        }
    }

    private func update(_ predicate: FetchPredicate<Job>, _ change: @escaping (Job) -> Void) {
        guard let catalog else { return }
        do {
            try catalog.withContext { context in
                context.mergePolicy = .mergeByPropertyObjectTrump
                for job in try context.fetch(FetchRequest<Job>(predicate: predicate)) { change(job) }
                try context.save()
            }
        } catch {
            logger.warning("could not update jobs: \(error)")
        }
    }

    private func requeue(_ jobIDs: Set<Int64>, countAttempt: Bool) {
        update(.objectIDs(jobIDs.map(jobObjectID))) { job in
            guard job.state == .running, job.owner == self.owner else { return }
            job.state = .queued
            job.owner = nil
            if !countAttempt { job.attempts = max(0, job.attempts - 1) }
        }
    }

    private func publish(_ record: JobRecord, progress: (@Sendable (JobRecord) -> Void)?) {
        progress?(record)
        for continuation in state.withLock({ Array($0.subscribers.values) }) { continuation.yield(record) }
    }
}
