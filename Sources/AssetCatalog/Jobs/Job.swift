public import Foundation
public import Persistence

/// Where a job stands.
public enum JobState: String, AttributeValue, Sendable, Codable, CaseIterable {
    /// Waiting for a worker (possibly until ``Job/runAfter``, after a transient failure).
    case queued
    /// A worker process is running it.
    case running
    case succeeded
    /// Its processor failed (after its attempts, for transient failures).
    case failed
    /// Cancelled by hand, or because its asset was deleted.
    case cancelled
}

/// A durable record of work for one asset: its kind, state, attempts and
/// progress. Rows outlive their asset as history (cancelled).
public final class Job: ManagedObject {
    /// The processor's kind name (`digest`, `index-archive`, `metadata`, or one registered by a pipeline).
    @Attribute(.indexed) public var kind = ""
    /// The asset the work is for.
    @Attribute(.indexed) public var assetID: Int64 = 0
    @Attribute(.indexed) public var state = JobState.queued
    @Attribute public var attempts = 0
    /// The attempts allowed, as the kind was registered when the job was submitted
    /// (``JobQueue/register(_:as:maxAttempts:)``); the registration of the process that
    /// runs the job decides.
    @Attribute public var maxAttempts = JobQueue.defaultMaxAttempts
    @Attribute public var lastError: String?
    /// From 0 to 1, as the processor reports it.
    @Attribute public var progress = 0.0
    /// Not before this date (backoff after a transient failure).
    @Attribute(.indexed) public var runAfter = Date(timeIntervalSince1970: 0)
    /// The process running it (`pid-id`), while it runs.
    @Attribute public var owner: String?
    @Attribute public var created = Date(timeIntervalSince1970: 0)
    /// When the row last changed: for a finished job, when it finished (the retention rule
    /// prunes by it, hence the index).
    @Attribute(.indexed) public var updated = Date(timeIntervalSince1970: 0)

    /// The queued jobs' row IDs, in order: a claim takes the oldest queued jobs by walking
    /// these alone, not every job in ID order past the finished ones a catalog keeps (which
    /// PostgreSQL's planner chooses while its statistics say most jobs are queued).
    override public class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(rowIDsWhere: \Job.state, is: .queued)]
    }

    /// Not persistent: set when this save writes the job's result; the save
    /// then commits only if that asset still exists (checked with the asset locked against
    /// deletion until the commit: see `lowestMissingAsset`).
    var resultRequiresAsset: Int64?
    /// Not persistent: set on the jobs that `JobQueue.submit` queues; the
    /// save then commits only if their assets all exist (checked with the assets locked
    /// against deletion until the commit).
    var submitRequiresAsset = false

    override public func awakeFromInsert() {
        let now = Date()
        setPrimitiveValue(now, for: \.created)
        setPrimitiveValue(now, for: \.updated)
    }

    override public func willSave() {
        if !isDeleted { setPrimitiveValue(Date(), for: \.updated) }
        if let assetID = resultRequiresAsset, let effects = saveEffects {
            // One check for every result of the save (a grouped commit writes hundreds).
            let results = effects.shared(ResultAssets.self) {
                let results = ResultAssets()
                effects.beforeCommit { try results.check($0) }
                return results
            }
            results.ids.insert(assetID)
        }
        if !isDeleted, let effects = saveEffects {
            // Work queued or due again (a submit, a retry, a run queued again) and a run
            // cancelled: other processes' and hosts' workers hear of it as it commits.
            let changesState = hasChangedValue(for: \.state)
            let queued = state == .queued && (changesState || hasChangedValue(for: \.runAfter))
            let cancelled = state == .cancelled && changesState && committedValue(for: \.state) == .running
            if queued || cancelled {
                let changes = effects.shared(AnnouncedJobChanges.self) { AnnouncedJobChanges(effects) }
                if queued { changes.queued = true }
                if cancelled { changes.cancelled = true }
            }
        }
        if submitRequiresAsset, !isDeleted, let effects = saveEffects {
            let submitted = effects.shared(SubmittedAssets.self) {
                let submitted = SubmittedAssets()
                effects.beforeCommit { try submitted.check($0) }
                return submitted
            }
            submitted.ids.insert(assetID)
        }
    }
}

/// What one save does to jobs that workers elsewhere must hear of, announced once for the
/// whole save (``JobQueue/jobsTopic``) as it commits — not once per job: on PostgreSQL, every
/// notifying transaction of the database commits one at a time. A save that claims jobs or
/// writes results announces nothing.
final class AnnouncedJobChanges {
    var queued = false
    var cancelled = false

    init(_ effects: SaveEffects) {
        // Announced from the transaction, so heard only if it commits.
        effects.beforeCommit { [weak effects, self] _ in
            try effects?.announce(
                JobQueue.jobsTopic, payload: JobQueue.jobsPayload(queued: self.queued, cancelled: self.cancelled))
        }
    }
}

/// The assets of the jobs one save submits, checked once for the whole save.
final class SubmittedAssets {
    var ids: Set<Int64> = []

    /// Throws ``JobQueue/noSuchAsset(_:)`` for the lowest ID that no asset has.
    func check(_ reader: TransactionReader) throws {
        if let missing = try lowestMissingAsset(among: ids, reader) { throw JobQueue.noSuchAsset(missing) }
    }
}

/// The lowest of `ids` that no asset has, counted 500 at a time (one ID at a time only in a
/// chunk that misses one); `nil` when every asset is there.
///
/// Each asset counted is locked against deletion until the transaction ends
/// (``RowLock/keyShare``): on PostgreSQL, where another host's deletion can be under way as
/// the check runs, the count waits for that deletion's transaction and misses the asset if it
/// committed; and a deletion that comes after the count waits for this transaction. Either
/// way the save and the deletion commit one after the other — the result (or the submitted
/// job) before the deletion, whose commit then cancels what is unfinished, or not at all. On
/// SQLite the store's one write lock gives that already.
private func lowestMissingAsset(among ids: Set<Int64>, _ reader: TransactionReader) throws -> Int64? {
    let sorted = ids.sorted()
    for start in stride(from: 0, to: sorted.count, by: 500) {
        let chunk = sorted[start..<min(start + 500, sorted.count)]
        let objectIDs = chunk.map { ManagedObjectID(entityName: Asset.entityName, rowID: $0) }
        let present = try reader.count(
            for: FetchRequest<Asset>(predicate: .objectIDs(objectIDs)), lockingRows: .keyShare)
        guard present < chunk.count else { continue }
        for id in objectIDs
        where try reader.count(for: FetchRequest<Asset>(predicate: .objectIDs([id])), lockingRows: .keyShare) == 0 {
            return id.rowID
        }
    }
    return nil
}

/// The assets of the results one save writes, checked once for the whole save, each asset
/// locked against deletion until the commit: when one is gone, the save fails and no result
/// of it lands.
final class ResultAssets {
    var ids: Set<Int64> = []

    /// Throws for the lowest ID that no asset has.
    func check(_ reader: TransactionReader) throws {
        if let missing = try lowestMissingAsset(among: ids, reader) {
            throw CatalogError(.notFound, "Asset \(missing) was deleted; the job's result is dropped")
        }
    }
}

/// A snapshot of a job, safe to pass between tasks and to print.
public struct JobRecord: Sendable, Codable, Hashable {
    public var id: Int64
    public var kind: String
    /// The asset the work is for (encoded as a bare number).
    public var asset: AssetID
    public var state: JobState
    public var attempts: Int
    public var progress: Double
    public var error: String?
    public var created: Date
    public var updated: Date

    enum CodingKeys: String, CodingKey {
        case id, kind, asset, state, attempts, progress, error, created, updated
    }

    /// Every field, `null` when absent: `jobs --json` has a stable shape.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(kind, forKey: .kind)
        try c.encode(asset, forKey: .asset)
        try c.encode(state, forKey: .state)
        try c.encode(attempts, forKey: .attempts)
        try c.encode(progress, forKey: .progress)
        try c.encode(error, forKey: .error)
        try c.encode(created, forKey: .created)
        try c.encode(updated, forKey: .updated)
    }

    /// The job as a claim wrote its row (``ManagedObjectContext/claimRows(_:limit:update:)``).
    init(claimed row: ObjectSnapshot) {
        id = row.objectID.rowID
        kind = row.value(for: \Job.kind) ?? ""
        asset = AssetID(row.value(for: \Job.assetID) ?? 0)
        state = row.value(for: \Job.state) ?? .running
        attempts = row.value(for: \Job.attempts) ?? 0
        progress = row.value(for: \Job.progress) ?? 0
        error = row.value(for: \Job.lastError) ?? nil
        created = row.value(for: \Job.created) ?? Date(timeIntervalSince1970: 0)
        updated = row.value(for: \Job.updated) ?? Date(timeIntervalSince1970: 0)
    }

    init(_ job: Job) {
        id = job.objectID.rowID
        kind = job.kind
        asset = AssetID(job.assetID)
        state = job.state
        attempts = job.attempts
        progress = job.progress
        error = job.lastError
        created = job.created
        updated = job.updated
    }
}

/// What a processor produced for its asset. Applied in one transaction that
/// also marks the job succeeded — and only if the asset still exists then.
public struct JobOutput: Sendable {
    /// Merged into the asset's metadata.
    public var metadata: [String: String]
    /// Added to the asset's tags.
    public var tags: [String]
    /// Built-in processors' changes to the asset (a digest, archive members).
    var apply: (@Sendable (Asset, ManagedObjectContext) throws -> Void)?

    public init(metadata: [String: String] = [:], tags: [String] = []) {
        self.metadata = metadata
        self.tags = tags
        apply = nil
    }
}

/// Thrown by a processor for a failure worth retrying (with backoff).
public struct TransientJobError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// What a processor sees of its job.
public struct JobContext: Sendable {
    public let jobID: Int64
    public let kind: String
    public let asset: AssetRecord
    public let catalog: Catalog
    /// This run's token, as the job row's `owner` holds it while the run is current.
    let runToken: String
    let progressSink: @Sendable (Double) -> Void

    /// Reports progress, from 0 to 1: passed at once to the run's progress callback
    /// (`runUntilIdle(progress:)`), and written to the job's row (what `jobs ls` and other
    /// processes read) at most every half second, once the run has lasted that long — a short
    /// job's reports cost no write; its result sets its progress to 1.
    public func reportProgress(_ fraction: Double) { progressSink(min(1, max(0, fraction))) }

    /// Throws `CancellationError` once the job is cancelled: call it between steps.
    public func checkCancellation() throws { try Task.checkCancellation() }

    /// Streams the asset's bytes, checking for cancellation between chunks.
    public func readAsset(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        try catalog.read(asset) { chunk in
            try Task.checkCancellation()
            catalog.content.faults.reach(.slowJobs)
            try body(chunk)
        }
    }
}

/// Work for one asset, registered under a kind name.
///
/// ```swift
/// struct WordCount: JobProcessor {
///     func run(_ job: JobContext) async throws -> JobOutput {
///         var words = 0
///         try job.readAsset { words += $0.split(separator: UInt8(ascii: " ")).count }
///         return JobOutput(metadata: ["words": String(words)])
///     }
/// }
/// catalog.jobs.register(WordCount(), as: "word-count")
/// ```
public protocol JobProcessor: Sendable {
    /// Does the work. Check ``JobContext/checkCancellation()`` between steps:
    /// a deleted asset's jobs are cancelled and must stop promptly.
    func run(_ job: JobContext) async throws -> JobOutput
}

/// Runs jobs for assets, outside saves: the seeds' network provider, whose
/// work `prepareForDeletion` cancels.
///
/// The rule of holds: a deletion holds an asset's jobs once for each context
/// in which it is pending, and each hold is released once.
/// - `prepareForDeletion` takes a hold (``cancelAll(for:)``) in the context
///   that deletes the asset, directly or by cascade.
/// - A child context's save hands its deletion to the parent: the parent's
///   instance takes its own hold as the save deletes it there (or already
///   held one, having deleted it itself), and the child's releases its hold
///   (``resume(for:)``, from `didSave`).
/// - A deletion that ends without a commit releases its context's hold: a
///   rollback (`undoDeletion`), a reset, the context thrown away. A failed
///   save releases nothing: the context still holds the deletion.
/// - When the last hold goes, the interrupted jobs are queued again, once;
///   when a deletion commits, every hold on the asset goes with it and its
///   unfinished jobs are cancelled.
///
/// So however many contexts a deletion passes through, in whatever order
/// they save, roll back or are discarded, a deletion that never commits
/// leaves the asset's jobs queued or running again exactly once.
public protocol JobProvider: Sendable {
    /// Queues work of `kind` for an asset; returns the job's ID.
    @discardableResult
    func submit(_ kind: String, for assetID: AssetID) throws -> Int64
    /// Takes a hold on the asset's jobs: stops the running ones and holds the queued
    /// ones (a deletion of the asset is pending in one more context).
    func cancelAll(for assetID: AssetID)
    /// Releases one hold that ``cancelAll(for:)`` took: a deletion ended without a
    /// commit, or moved to a parent context. When none is left, the interrupted jobs
    /// run again.
    func resume(for assetID: AssetID)
    /// Job state changes and progress, as they happen.
    func events() -> AsyncStream<JobRecord>
}
