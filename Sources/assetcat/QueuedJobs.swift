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

    /// What running them did: the queue's summary, and the jobs that failed (the first
    /// ``namedFailures`` of them, and how many more).
    struct Outcome {
        /// The queue's summary; nil when there was nothing to run.
        var summary: JobRunSummary?
        var failed: [JobRecord] = []
        var moreFailed = 0

        var wasInterrupted: Bool { summary?.wasInterrupted ?? false }
        var failedCount: Int { summary?.failed ?? 0 }
    }

    /// Runs the jobs (call it inside ``Interrupt/run(_:)``: Ctrl-C stops them, and the ones
    /// that were running are queued again), drawing a bar over them on a terminal.
    func run(in catalog: Catalog) async throws -> Outcome {
        guard count > 0 else { return Outcome() }
        let total = count
        let tally = Tally()
        let summary = try await catalog.jobs.runUntilIdle(jobs: ids) { job in
            guard job.state == .succeeded || job.state == .failed || job.state == .cancelled else { return }
            let finished = tally.state.withLock { t -> Int in
                t.finished += 1
                if job.state == .failed {
                    if t.outcome.failed.count < Self.namedFailures {
                        t.outcome.failed.append(job)
                    } else {
                        t.outcome.moreFailed += 1
                    }
                }
                return t.finished
            }
            Terminal.progress("jobs", done: min(finished, total), total: total)
        }
        Terminal.endProgress()  // jobs another process ran, or an interruption, leave it short
        var outcome = tally.state.withLock { $0.outcome }
        outcome.summary = summary
        return outcome
    }

    /// The jobs finished so far, and the outcome being gathered, as the queue reports them.
    final class Tally: Sendable {
        let state = Mutex((finished: 0, outcome: Outcome()))
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
