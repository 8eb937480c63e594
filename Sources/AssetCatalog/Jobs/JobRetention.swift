public import Foundation
import Locking
import Logging
import Persistence

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

/// Deletes the finished jobs that a ``JobRetention`` no longer keeps: after each
/// ``JobQueue/runUntilIdle(progress:)``, when a background worker starts and then every
/// ``JobQueue/Tuning/pruneInterval``, and on request (``JobQueue/pruneFinishedJobs(now:)``).
final class JobPruner: Sendable {
    private struct State {
        var retention = JobRetention()
        /// When this process last pruned finished jobs.
        var lastPrune: Date?
    }
    private let state = Locked(State())
    private let rows: JobRows

    init(rows: JobRows) { self.rows = rows }

    var retention: JobRetention {
        get { state.withLock { $0.retention } }
        set { state.withLock { $0.retention = newValue } }
    }

    /// ``JobQueue/pruneFinishedJobs(now:)``.
    @discardableResult
    func pruneFinishedJobs(now: Date) throws -> Int {
        guard let catalog = rows.catalog else { throw JobQueue.closed }
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
    func pruneQuietly() {
        do {
            try pruneFinishedJobs(now: Date())
        } catch {
            rows.logger.warning("could not prune finished jobs: \(error)")
        }
    }

    /// Prunes if this process has not for `interval` (a background worker, by the clock).
    func pruneIfDue(every interval: TimeInterval) {
        let last = state.withLock { $0.lastPrune }
        if last.map({ Date().timeIntervalSince($0) >= interval }) ?? true { pruneQuietly() }
    }

    /// Makes the next ``pruneIfDue(every:)`` prune (a background worker that starts).
    func pruneAtNextLook() { state.withLock { $0.lastPrune = nil } }
}
