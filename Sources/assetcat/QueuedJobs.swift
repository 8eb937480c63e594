import AssetCatalog
import Foundation
import Synchronization

/// The jobs a command queued (`add`, `import`), worked before it returns: only those, not
/// other jobs waiting in the catalog (`assetcat jobs run` works those).
struct QueuedJobs {
    /// The most failed jobs named one a line; the rest are counted.
    static let namedFailures = 100

    let ids: [ClosedRange<Int64>]
    let count: Int

    /// What running them did: the queue's summary, and the jobs that failed, whichever
    /// process ran them (the first ``namedFailures`` of them, and how many in all).
    struct Outcome {
        /// The queue's summary; nil when there was nothing to run.
        var summary: JobRunSummary?
        var failed: [JobRecord] = []
        var failedCount = 0

        var wasInterrupted: Bool { summary?.wasInterrupted ?? false }
        var moreFailed: Int { failedCount - failed.count }
    }

    /// Runs the jobs (call it inside ``Interrupt/run(_:)``: Ctrl-C stops them, and the ones
    /// that were running are queued again), drawing a bar over them on a terminal.
    func run(in catalog: Catalog) async throws -> Outcome {
        guard count > 0 else { return Outcome() }
        let total = count
        let finished = Mutex(0)
        let summary = try await catalog.jobs.runUntilIdle(jobs: ids) { job in
            guard job.state == .succeeded || job.state == .failed || job.state == .cancelled else { return }
            let done = finished.withLock {
                $0 += 1
                return $0
            }
            Terminal.progress("jobs", done: min(done, total), total: total)
        }
        Terminal.endProgress()  // jobs another process ran, or an interruption, leave it short
        var outcome = Outcome(summary: summary)
        guard !summary.wasInterrupted else { return outcome }
        // Those another process ran (a `jobs run --watch` worker) are this command's too.
        (outcome.failed, outcome.failedCount) = try catalog.jobs.list(
            ids: ids, state: .failed, limit: Self.namedFailures)
        return outcome
    }

    /// Names each failed job on stderr, one a line, by job ID: its asset (ID and name), its
    /// kind, and the error; then how many more failed, if more did than it names.
    static func report(_ outcome: Outcome, in catalog: Catalog) {
        for job in outcome.failed.sorted(by: { $0.id < $1.id }) {
            let name = (try? catalog.asset(job.asset)).map { " " + DisplayText.quoted($0.name) } ?? ""
            Terminal.error(
                "asset \(job.asset)\(name): \(job.kind) job \(job.id) failed: \(job.error ?? "no error recorded") "
                    + "(`assetcat jobs retry \(job.id)` runs it again)")
        }
        if outcome.moreFailed > 0 {
            Terminal.error(
                "and \(plural(outcome.moreFailed, "more failed job")); `assetcat jobs ls --state failed` lists them")
        }
    }
}
