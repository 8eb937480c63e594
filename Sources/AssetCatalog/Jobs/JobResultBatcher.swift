import Foundation
import Locking
import Persistence

/// Commits the results of a ``JobQueue``'s succeeded runs in groups: the first run to end
/// writes, in one transaction, every result waiting then, and again until none is left; the
/// others return at once. A run ends, and its success is published, only once its result
/// is committed.
final class JobResultBatcher: Sendable {
    /// A succeeded run whose result waits for a grouped commit.
    struct PendingResult {
        var job: JobRecord
        var token: String
        var output: JobOutput
        var summary: SummaryBox
        var progress: (@Sendable (JobRecord) -> Void)?
    }

    private struct State {
        /// Succeeded runs whose results wait for the next grouped commit.
        var pending: [PendingResult] = []
        /// A run is committing them now.
        var committing = false
        /// Results are held (not committed) while set (``JobQueue/Tuning/holdsResults``).
        var holdsResults: Bool
    }
    private let state: Locked<State>
    /// Signalled when a result becomes pending (``waitForCompanions(upTo:)``).
    private let resultArrived = NSCondition()
    private let rows: JobRows
    private let kinds: JobKinds
    private let runs: JobRuns
    private let sleep: JobWorkerSleep
    private let tuning: JobQueue.Tuning
    private let metrics: JobQueue.Metrics
    /// The queue's concurrency: with one slot, no run waits for companions.
    private let concurrency: Int

    init(
        rows: JobRows, kinds: JobKinds, runs: JobRuns, sleep: JobWorkerSleep, tuning: JobQueue.Tuning,
        metrics: JobQueue.Metrics, concurrency: Int
    ) {
        self.rows = rows
        self.kinds = kinds
        self.runs = runs
        self.sleep = sleep
        self.tuning = tuning
        self.metrics = metrics
        self.concurrency = concurrency
        state = Locked(State(holdsResults: tuning.holdsResults))
    }

    /// Results waiting for a grouped commit (for tests).
    var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Commits the results held since the queue opened (``JobQueue/Tuning/holdsResults``), in
    /// one group, and holds none from now on (for tests).
    func releaseHeldResults() {
        state.withLock { $0.holdsResults = false }
        commitPending()
    }

    /// Commits a succeeded run's result with those of other runs that ended meanwhile
    /// (see ``JobResultBatcher``).
    func commit(_ result: PendingResult) {
        state.withLock { $0.pending.append(result) }
        resultArrived.lock()
        resultArrived.signal()
        resultArrived.unlock()
        commitPending()
    }

    /// Commits the results waiting, unless another run is committing them.
    private func commitPending() {
        let leads = state.withLock { s -> Bool in
            if s.committing || s.holdsResults || s.pending.isEmpty { return false }
            s.committing = true
            return true
        }
        guard leads else { return }
        waitForCompanions(upTo: tuning.resultGroupDelay)
        while true {
            let taken = state.withLock { s -> [PendingResult] in
                let taken = Array(s.pending.prefix(tuning.maxResultGroup))
                s.pending.removeFirst(taken.count)
                if taken.isEmpty { s.committing = false }
                return taken
            }
            // Runs stopped or interrupted meanwhile write nothing, as if they had ended then.
            let (group, dropped) = runs.state.withLock { s -> ([PendingResult], [PendingResult]) in
                var group: [PendingResult] = []
                var dropped: [PendingResult] = []
                for r in taken {
                    if s.isInterrupted(r.job, r.token) { dropped.append(r) } else { group.append(r) }
                }
                return (group, dropped)
            }
            if group.isEmpty && dropped.isEmpty { return }
            let finals = writeResults(group)
            rows.catalog?.content.faults.reach(.beforeCountingResults)
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
            // Reported before the runs stop being `running`, as a run that fails is: the caller
            // of a `runUntilIdle` has heard of every job it ran when it returns (a progress
            // bar drawn after the command's last line would be out of place).
            for (r, final) in zip(group, finals) {
                if let final { kinds.publish(final, progress: r.progress) }
            }
            runs.state.withLock { s in
                for r in group + dropped where s.running[r.job.id]?.token == r.token { s.running[r.job.id] = nil }
                s.resultsSincePace += group.count
            }
            if !group.isEmpty { metrics.resultsCommitted() }
            runs.state.withLock { $0.tasksInFlight -= group.count + dropped.count }
            sleep.wake()
        }
    }

    /// Waits, at most `delay`, while a lone result is pending and other runs of this process
    /// are under way (running, or waiting for a slot): one of them ending joins the commit
    /// (``JobQueue/Tuning/resultGroupDelay``). Not with one slot: the run that waits holds one
    /// of the queue's `concurrency` threads, and no other run could go on meanwhile.
    private func waitForCompanions(upTo delay: Duration) {
        guard concurrency > 1 else { return }
        let deadline = Date().addingTimeInterval(
            Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
        resultArrived.lock()
        defer { resultArrived.unlock() }
        // Checked under `resultArrived`, which a run takes to signal once its result is pending:
        // an arrival between the check and the wait is not missed.
        while state.withLock({ $0.pending.count == 1 }) && runs.tasksInFlight > 1,
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
        guard let catalog = rows.catalog else { return group.map { _ in nil } }
        if group.count == 1 { return [writeResult(group[0].job, token: group[0].token, group[0].output)] }
        do {
            return try catalog.withRetriedContext { context in
                var rows: [Int64: Job] = [:]
                for row in try context.fetch(
                    FetchRequest<Job>(predicate: .objectIDs(group.map { JobRows.objectID($0.job.id) })))
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
        guard let catalog = rows.catalog else { return nil }
        let failure: any Error
        do {
            return try catalog.withRetriedContext { context in
                let row = try context.existingObject(with: JobRows.objectID(job.id), as: Job.self)
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
        return try? rows.change(job.id) { row in
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
}
