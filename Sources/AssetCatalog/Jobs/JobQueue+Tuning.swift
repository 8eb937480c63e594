public import Foundation
import Synchronization

extension JobQueue {
    /// How a queue paces its claims, result commits and looks at the store. The defaults are
    /// the product's; tests give others when they open a catalog
    /// (``CatalogTesting/jobs``).
    @_spi(Testing) public struct Tuning: Sendable {
        /// The most jobs one claim takes (and one process holds claimed) beyond its concurrency.
        public var maxClaimAhead = 1024
        /// Claims take at least this many jobs beyond the free slots (tests: large batches
        /// from the first claim on).
        public var minimumClaimAhead = 0
        /// The most results one transaction commits.
        public var maxResultGroup = 512
        /// How long a result that would be committed alone waits for the results of other
        /// runs of this process, when some are running (as PostgreSQL's `commit_delay`): runs
        /// that end microseconds apart (short jobs, the first of a claim's jobs to end) then
        /// share a transaction and its sync. Each commit, on PostgreSQL, costs about ten
        /// statements.
        public var resultGroupDelay: Duration = .milliseconds(1)
        /// Succeeded runs' results wait uncommitted (their runs not ended) until
        /// ``JobResultBatcher/releaseHeldResults()`` (tests: results that wait together).
        public var holdsResults = false
        /// Whether the queue may listen to the store's announcements (tests turn it off to
        /// see the polling alone).
        public var watchesStore = true
        /// How often a queue that hears the store's announcements looks at the store anyway:
        /// an idle worker for work, a working one for changes of its running jobs. Every commit
        /// that queues work or stops a run announces it (``JobQueue/jobsTopic``), and a worker
        /// waits out the backoffs it has read: this look is for what nothing announced — a
        /// process of an older version, or a commit that SQLite's `-wal` watch saw too early (a
        /// sync of over half a second) — so it can be slow.
        public var listeningLookInterval: TimeInterval = 5
        /// How often a working queue polls for commits of other processes (one
        /// `PRAGMA data_version`, or one read of PostgreSQL's commit counters) while it does
        /// not hear the store's announcements: where inotify is unavailable, or while the
        /// `LISTEN` connection is lost, a deletion committed elsewhere stops this process's
        /// jobs for that asset within this, plus the cancellation. While it hears them, it
        /// looks every ``listeningLookInterval`` instead.
        public var externalPollInterval: TimeInterval = 0.1
        /// How long an idle worker that does not hear the store's announcements (its `LISTEN`
        /// connection is lost, or the store's `-wal` cannot be watched) waits before looking
        /// for work again.
        public var idlePollInterval: Duration = .milliseconds(250)
        /// How often a background worker (``JobQueue/start()``) prunes finished jobs, besides
        /// once when it starts.
        public var pruneInterval: TimeInterval = 3_600
        /// The delay before the first retry of a transient failure; it doubles with each attempt.
        public var retryBaseDelay: TimeInterval = 0.1

        /// The product's pacing.
        public init() {}
    }

    /// Calls a test makes at chosen instants of a queue's work, with the queue's catalog, to
    /// act in a window that is otherwise too short to hit (``CatalogTesting/jobHooks``). None
    /// by default.
    @_spi(Testing) public struct Hooks: Sendable {
        /// Between a claim's commit and the read of its jobs' assets.
        public var afterClaimCommit: (@Sendable () -> Void)?
        /// Between each claim's commit and the registration of its jobs as running (a
        /// deletion another process commits in that window).
        public var afterClaim: (@Sendable (Catalog) -> Void)?
        /// Once ``JobQueue/cancel(_:)`` has cancelled the job's run in this process.
        public var afterCancellingRun: (@Sendable (Catalog) -> Void)?
        /// When ``JobQueue/resume(for:)`` has taken an asset's interrupted runs, before it
        /// queues them again (a cancelled run ending in that window).
        public var beforeResumeQueues: (@Sendable (Catalog) -> Void)?

        /// No hook.
        public init() {}
    }

    /// What a queue counts of its work, for tests to read (``JobQueue/metrics``).
    @_spi(Testing) public final class Metrics: Sendable {
        private let claims = Atomic(0)
        private let failed = Atomic(0)
        private let results = Atomic(0)
        private let polls = Atomic(0)
        private let turns = Atomic(0)
        private let waits = Atomic(0)

        public init() {}

        /// Claim transactions committed.
        public var claimCommits: Int { claims.load(ordering: .relaxed) }
        /// Claim transactions that failed and claimed nothing (claims of several workers
        /// that get in each other's way).
        public var failedClaims: Int { failed.load(ordering: .relaxed) }
        /// Result transactions committed.
        public var resultCommits: Int { results.load(ordering: .relaxed) }
        /// Polls of the store for other processes' commits that the clock made (not an
        /// announcement).
        public var externalPolls: Int { polls.load(ordering: .relaxed) }
        /// Turns of the background worker's loop (an idle worker makes about four a second).
        public var workerTurns: Int { turns.load(ordering: .relaxed) }
        /// Times the background worker went to sleep until woken (an idle worker ends every
        /// turn so).
        public var workerWaits: Int { waits.load(ordering: .relaxed) }

        func claimCommitted() { claims.add(1, ordering: .relaxed) }
        func claimFailed() { failed.add(1, ordering: .relaxed) }
        func resultsCommitted() { results.add(1, ordering: .relaxed) }
        func polled() { polls.add(1, ordering: .relaxed) }
        func turned() { turns.add(1, ordering: .relaxed) }
        func slept() { waits.add(1, ordering: .relaxed) }
    }
}
