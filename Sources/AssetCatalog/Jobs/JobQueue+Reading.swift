public import Foundation
import Locking
import Persistence

/// Reading a ``JobQueue``'s jobs, pruning the finished ones, and recovering those of
/// processes that died.
extension JobQueue {
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

    // MARK: - Selections

    /// How many ranges of job IDs one predicate of ``runUntilIdle(jobs:progress:)`` holds.
    static let rangesPerRun = 64

    /// The jobs with these IDs, as predicates of up to ``rangesPerRun`` ranges each (one OR
    /// term per range), however many ranges.
    static func selections(_ jobIDs: [ClosedRange<Int64>]) -> [FetchPredicate<Job>] {
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

    // MARK: - Retention

    /// Deletes the finished jobs (succeeded, failed, cancelled) that ``retention`` no
    /// longer keeps: those that finished more than its age before `now`, and those past
    /// its count, oldest first. Queued and running jobs are never deleted. Each rule is
    /// one indexed, set-based delete in one transaction, skipped when a count finds
    /// nothing to delete. Returns how many rows went.
    @discardableResult
    public func pruneFinishedJobs(now: Date = Date()) throws -> Int {
        try pruner.pruneFinishedJobs(now: now)
    }

    // MARK: - Recovery

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
        rows.update(\.state == JobState.running) { job in
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
            } else if job.attempts >= self.kinds.attemptLimit(job.kind, recorded: job.maxAttempts) {
                job.state = .failed
                job.lastError = "its worker process died \(job.attempts) times"
            } else {
                job.state = .queued
                job.lastError = "its worker process died"
            }
            job.owner = nil
        }
    }
}
