import Foundation
import Locking
import Persistence

/// How a ``JobQueue`` learns of other processes' and hosts' commits: it listens to the
/// store's announcements (on PostgreSQL `LISTEN`/`NOTIFY`; on SQLite an inotify watch of the
/// store's `-wal`, which announces every other connection's commit), and while it cannot
/// hear them it polls the store's change counter.
///
/// What it hears: another process's deletion of assets stops this process's runs of their
/// jobs; a job cancelled elsewhere stops its run here; work queued elsewhere wakes the
/// worker (``JobWorkerSleep``).
final class JobStoreWatcher: Sendable {
    private struct State {
        /// What hears the store's announcements (``heard(_:)``).
        var listener: Task<Void, Never>?
        /// The listener heard the interruption marker and not yet the re-read marker that ends
        /// it: the store's announcements are not delivered, and the queue polls.
        var announcementsInterrupted = false
    }
    private let state = Locked(State())
    private let rows: JobRows
    private let runs: JobRuns
    private let sleep: JobWorkerSleep
    private let tuning: JobQueue.Tuning
    private let metrics: JobQueue.Metrics

    init(rows: JobRows, runs: JobRuns, sleep: JobWorkerSleep, tuning: JobQueue.Tuning, metrics: JobQueue.Metrics) {
        self.rows = rows
        self.runs = runs
        self.sleep = sleep
        self.tuning = tuning
        self.metrics = metrics
    }

    /// Whether the queue hears the store's announcements now: it listens, and its stream has
    /// not been interrupted (or the interruption has ended).
    var hearsAnnouncements: Bool { state.withLock { $0.listener != nil && !$0.announcementsInterrupted } }

    /// Whether the queue listens to the store's announcements (for tests).
    var isWatchingStore: Bool { state.withLock { $0.listener != nil } }

    /// Takes the store's change counter as it is now, before any job is
    /// claimed: a commit by another process after this point is noticed. And
    /// listens to the store's announcements, so that another process's deletion
    /// (and, on SQLite, any commit of another connection) is acted on as it
    /// commits instead of at the next poll.
    func markBaseline() {
        _ = try? rows.catalog?.container.storeChangedExternally()
        startWatching()
    }

    /// Starts listening to the store's announcements, unless the queue listens already (or
    /// listening is off).
    private func startWatching() {
        guard tuning.watchesStore, let catalog = rows.catalog, state.withLock({ $0.listener == nil }) else { return }
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
    func stopWatching() {
        state.withLock { s -> Task<Void, Never>? in
            defer {
                s.listener = nil
                s.announcementsInterrupted = false
            }
            return s.listener
        }?.cancel()
    }

    /// How long the queue goes between looks at the store for other processes' commits:
    /// ``JobQueue/Tuning/externalPollInterval`` while it does not hear the store's
    /// announcements, ``JobQueue/Tuning/listeningLookInterval`` while it does.
    var pollInterval: TimeInterval { hearsAnnouncements ? tuning.listeningLookInterval : tuning.externalPollInterval }

    /// A look at the store for other processes' commits that the clock made.
    func poll() {
        metrics.polled()
        checkExternalChanges()
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
            sleep.wake()  // to sleep no longer than a poll
            return
        }
        if announcement.isReread {
            state.withLock { $0.announcementsInterrupted = false }
            storeChanged(force: true)
            return
        }
        if announcement.topic == JobQueue.jobsTopic {
            if announcement.payload.split(separator: " ").contains("cancelled") { checkExternalChanges(force: true) }
            sleep.wake()
            return
        }
        guard announcement.topic == JobQueue.deletionTopic else { return }
        guard let ids = JobQueue.deletedAssets(in: announcement.payload) else {
            storeChanged(force: true)
            return
        }
        let tasks = runs.state.withLock { s -> [Task<Void, Never>] in
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
        sleep.wake()
    }

    /// Cancels running jobs whose asset another process deleted, or whose row
    /// another process cancelled or re-queued.
    ///
    /// A commit is seen once (the store's change counter moves on): a check while a claim is
    /// under way, whose jobs are not registered yet, leaves the next check to look again.
    func checkExternalChanges(force: Bool = false) {
        guard let catalog = rows.catalog else { return }
        let changed = (try? catalog.container.storeChangedExternally()) == true || force
        let running = runs.state.withLock { s -> [Int64: JobRuns.Run]? in
            guard changed || s.recheckExternal else { return nil }
            s.recheckExternal = s.claimsUnderWay > 0
            return s.running
        }
        guard let running, !running.isEmpty else { return }
        // Two reads whatever the number of runs (jobs claimed ahead count too).
        let stale: [(job: Int64, assetGone: Bool)] =
            (try? catalog.withContext { context in
                var rows: [Int64: Job] = [:]
                for row in try context.fetch(
                    FetchRequest<Job>(predicate: .objectIDs(running.keys.map(JobRows.objectID))))
                {
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
        runs.state.withLock { s in
            for (jobID, assetGone) in stale where assetGone {
                if let token = running[jobID]?.token { s.assetGoneRuns.insert(token) }
            }
        }
        for (jobID, _) in stale { running[jobID]?.task.cancel() }
    }
}

extension JobQueue {
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
}
