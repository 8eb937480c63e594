import Foundation
import Locking
import Persistence

extension JobScheduler {
    /// Starts the jobs a claim took (`claimed`, their rows as the claim wrote them): a job
    /// whose asset is gone is cancelled, the others start. Returns how many started.
    func start(
        _ claimed: [ObjectSnapshot], summary: SummaryBox, progress: (@Sendable (JobRecord) -> Void)?,
        processors: [String: any JobProcessor], in catalog: Catalog
    ) throws -> Int {
        let jobs = claimed.map(JobRecord.init(claimed:))
        let tokens = claimed.map { ($0.value(for: \Job.owner) ?? nil) ?? "" }
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
            rows.requeue(Dictionary(uniqueKeysWithValues: zip(jobs.map(\.id), tokens)))  // claimed, never started
            throw error
        }
        var startable: [(JobRecord, AssetRecord, String)] = []
        for (job, token) in zip(jobs, tokens) {
            guard let asset = assets[job.asset.rawValue] else {
                // Its asset was deleted before the claim: cancelled, the claim's attempt given back
                // (unless the row changed meanwhile: the deletion's own cancellation came first).
                // Either way this run claimed it, and counts it as it ends.
                let final = try? rows.change(job.id) { row in
                    guard row.state == .running, row.owner == token else { return }
                    row.state = .cancelled
                    row.owner = nil
                    row.lastError = "its asset was deleted"
                    row.attempts = max(0, row.attempts - 1)
                }
                if final?.state == .cancelled { summary.value.withLock { $0.cancelled += 1 } }
                continue
            }
            startable.append((job, asset, token))
        }
        if !startable.isEmpty {
            metrics.claimCommitted()
            hooks.afterClaim?(catalog)
        }
        var started = 0
        for (job, asset, token) in startable {
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
        // A run's progress is written to its row at most every half second, and only once it
        // has run that long: a short job's reports (a digest of a small file reports once) are
        // only published, and its result writes the final progress. Writing the first report
        // at once cost every job a write transaction of its own.
        let lastReport = Locked(Date())
        let context = JobContext(
            jobID: job.id, kind: job.kind, asset: asset, catalog: catalog, runToken: token,
            progressSink: { [weak self] fraction in
                guard let self else { return }
                var record = job
                record.progress = fraction
                self.kinds.publish(record, progress: progress)
                let due = lastReport.withLock { last in
                    guard Date().timeIntervalSince(last) > 0.5 else { return false }
                    last = Date()
                    return true
                }
                if due {
                    _ = try? self.rows.change(job.id) { row in if row.owner == token { row.progress = fraction } }
                }
            })
        // Registered under the lock that `finish` takes: a job that ends at
        // once cannot finish before it is known to be running. The loop that
        // claimed it may have been stopped meanwhile (stop() or Ctrl-C cancel
        // it, then take this lock to stop what runs): the job is then queued
        // again rather than started behind the stop's back.
        var stopped = false
        let started = runs.state.withLock { s -> Bool in
            if s.holds.isHeld(job.asset.rawValue) {
                s.holds.interrupt(job.id, of: job.asset.rawValue, token: token)  // its asset is being deleted
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
            let run = JobQueue.runNumber(of: token) ?? 0
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
            s.running[job.id] = JobRuns.Run(assetID: job.asset.rawValue, token: token, task: task)
            return true
        }
        if stopped { rows.requeue([job.id: token]) }
        if started { kinds.publish(job, progress: progress) }
        return started
    }

    private func finish(
        _ job: JobRecord, token: String, outcome: Result<JobOutput, any Error>, summary: SummaryBox,
        progress: (@Sendable (JobRecord) -> Void)?
    ) {
        // Stopped by another process's deletion of its asset: that process marks the row
        // after its commit, and this one may write it first (below).
        let (interrupted, assetGone) = runs.state.withLock { s in
            (s.isInterrupted(job, token), s.assetGoneRuns.remove(token) != nil)
        }
        if !interrupted, case .success(let output) = outcome {
            // Written with other runs' results in one transaction; the run ends then.
            batcher.commit(
                JobResultBatcher.PendingResult(
                    job: job, token: token, output: output, summary: summary, progress: progress))
            return
        }
        // A run stops counting as running only once its outcome is written
        // (runUntilIdle must not return, and its process exit, before).
        defer {
            runs.state.withLock { s in
                if s.running[job.id]?.token == token { s.running[job.id] = nil }
                s.tasksInFlight -= 1
            }
            sleep.wake()
        }
        guard !interrupted else { return }  // stopped, resumed, or cancelled with its asset's deletion
        var final: JobRecord?
        switch outcome {
        case .success:
            return  // committed in a group, above
        case .failure(let error) where error is CancellationError:
            final = try? rows.change(job.id) { row in
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
                job.attempts < kinds.attemptLimit(job.kind, recorded: 1) ? $0 : nil
            }
            let delay = min(30, tuning.retryBaseDelay * pow(2, Double(job.attempts - 1)))
            let written = Locked<JobState?>(nil)
            final = try? rows.change(job.id) { row in
                written.withLock { $0 = nil }  // the closure runs again on a conflict
                guard row.state == .running, row.owner == token else { return }
                row.owner = nil
                if try JobRows.assetIsGone(of: row) {
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
        if let final { kinds.publish(final, progress: progress) }
    }
}
