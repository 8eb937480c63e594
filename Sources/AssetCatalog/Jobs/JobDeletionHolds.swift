import Foundation
import Locking
import Persistence

/// The deletions of assets pending in this process's contexts, and the runs of their jobs
/// they interrupted: kept in ``JobRuns``'s state, under its lock.
///
/// A deletion (`prepareForDeletion`) holds its asset's jobs: its running jobs are cancelled
/// at once and its queued ones do not start. When the deletion commits, they are marked
/// cancelled (``JobQueue/assetsDeleted(_:)``); when it ends without a commit, the last hold
/// let go queues the interrupted runs again (``JobQueue/resume(for:)``).
struct JobDeletionHolds {
    /// Pending deletions per asset (two contexts may delete one asset).
    private var held: [Int64: Int] = [:]
    /// Runs stopped by a deletion, by asset then job, with their tokens.
    private var interruptedRuns: [Int64: [Int64: String]] = [:]

    /// The assets whose jobs are held.
    var heldAssets: [Int64] { Array(held.keys) }

    func isHeld(_ assetID: Int64) -> Bool { held[assetID, default: 0] > 0 }

    func count(on assetID: Int64) -> Int { held[assetID] ?? 0 }

    /// One more deletion of `assetID` is pending.
    mutating func hold(_ assetID: Int64) { held[assetID, default: 0] += 1 }

    /// One deletion of `assetID` ended without a commit: the runs it interrupted when it was
    /// the last one (empty when there were none), `nil` while another deletion of the asset
    /// is still pending or none was.
    mutating func release(_ assetID: Int64) -> [Int64: String]? {
        guard let count = held[assetID] else { return nil }
        if count > 1 {
            held[assetID] = count - 1  // another deletion of the asset is still pending
            return nil
        }
        held[assetID] = nil
        return interruptedRuns.removeValue(forKey: assetID) ?? [:]
    }

    /// The deletions of `assetIDs` committed: nothing of theirs is held any more.
    mutating func forget(_ assetIDs: RowIDSet) {
        held = held.filter { !assetIDs.contains($0.key) }
        interruptedRuns = interruptedRuns.filter { !assetIDs.contains($0.key) }
    }

    /// The run `token` of job `jobID` was stopped by a deletion of `assetID`.
    mutating func interrupt(_ jobID: Int64, of assetID: Int64, token: String) {
        interruptedRuns[assetID, default: [:]][jobID] = token
    }

    /// Whether the run `token` of job `jobID` was stopped by a deletion of `assetID`.
    func interrupted(_ jobID: Int64, of assetID: Int64, token: String) -> Bool {
        interruptedRuns[assetID]?[jobID] == token
    }

    /// The run of job `jobID` no longer waits for the deletion of `assetID` (it was stopped).
    mutating func forgetRun(_ jobID: Int64, of assetID: Int64) {
        interruptedRuns[assetID]?[jobID] = nil
    }
}

extension JobQueue {
    public func cancelAll(for assetID: AssetID) {
        let assetID = assetID.rawValue
        let tasks = runs.state.withLock { s -> [Task<Void, Never>] in
            s.holds.hold(assetID)
            let mine = s.running.filter { $0.value.assetID == assetID }
            for (jobID, run) in mine { s.holds.interrupt(jobID, of: assetID, token: run.token) }
            return mine.values.map(\.task)
        }
        for task in tasks { task.cancel() }
    }

    public func resume(for assetID: AssetID) {
        let assetID = assetID.rawValue
        let interrupted = runs.state.withLock { s -> [Int64: String] in
            guard let runs = s.holds.release(assetID) else { return [:] }
            // A cancelled run that has not ended yet is queued again below: when it ends, it
            // must not take its cancellation for its end and mark the job cancelled first.
            for (jobID, token) in runs where s.running[jobID]?.token == token { s.stopping[jobID] = token }
            return runs
        }
        if !interrupted.isEmpty {
            if let hook = hooks.beforeResumeQueues, let catalog = rows.catalog { hook(catalog) }
            rows.requeue(interrupted)
        }
        wakeWorker()
    }

    /// Deletions of these assets committed: stop their work for good and
    /// mark their unfinished jobs cancelled.
    func assetsDeleted(_ assetIDs: RowIDSet) {
        guard !assetIDs.isEmpty else { return }
        let tasks = runs.state.withLock { s -> [Task<Void, Never>] in
            s.holds.forget(assetIDs)
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
                rows.update(\.assetID >= range.lowerBound && \.assetID < range.upperBound && unfinished, cancel)
                continue
            }
            scattered += range
            if scattered.count >= 500 {
                rows.update(.in(\.assetID, scattered) && unfinished, cancel)
                scattered = []
            }
        }
        if !scattered.isEmpty { rows.update(.in(\.assetID, scattered) && unfinished, cancel) }
    }
}
