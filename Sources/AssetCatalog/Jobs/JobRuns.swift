import Foundation
import Locking
import Persistence

/// The runs of this process, as every part of a ``JobQueue`` sees them: which job runs (its
/// task and run token), which runs were stopped or interrupted and must not write their
/// end, the deletions that hold assets' jobs (``JobDeletionHolds``), and whether this
/// process's session with the store was lost. One lock: whether a run starts, is held or
/// is stopped is decided in one step.
final class JobRuns: Sendable {
    struct Run {
        var assetID: Int64
        /// The run's token, written in the row's `owner`: this run, not another one of the same job.
        var token: String
        var task: Task<Void, Never>
    }

    struct State {
        var running: [Int64: Run] = [:]
        /// Pending deletions of assets, and the runs they interrupted.
        var holds = JobDeletionHolds()
        /// Runs that `stop`, an interrupted `runUntilIdle` or a resumed asset queues again,
        /// by job, with their tokens: their own ending must not write over that.
        var stopping: [Int64: String] = [:]
        /// Runs (by token) stopped because another process deleted their asset: their row
        /// says so, whichever of the two processes writes it first.
        var assetGoneRuns: Set<String> = []
        /// The run numbers handed out (a run's token ends with its number).
        var runNumbers = 0
        /// Run tasks started and not yet ended (their outcome written, or left to another run).
        var tasksInFlight = 0
        /// Results committed since the scheduler last judged how far ahead to claim.
        var resultsSincePace = 0
        /// Claims whose jobs are not all registered as running yet.
        var claimsUnderWay = 0
        /// A check of other processes' commits ran while a claim was under way: the jobs it
        /// claimed were not among those checked, so the next check looks again even if the
        /// store has not changed since.
        var recheckExternal = false
        /// How this process's session with the store was lost or reaped
        /// (``JobQueue/sessionEnded(_:)``): no claimed job starts any more.
        var sessionLost: StoreSession.Ending?

        /// Whether the run was stopped (``JobQueue/stop()``: queued again by `stopRunning`,
        /// whichever of the two ends first) or interrupted by its asset's deletion (resumed or
        /// cancelled with it).
        mutating func isInterrupted(_ job: JobRecord, _ token: String) -> Bool {
            if stopping[job.id] == token {
                stopping[job.id] = nil
                return true
            }
            return holds.interrupted(job.id, of: job.asset.rawValue, token: token)
        }

        /// Marks every run stopped (its end writes nothing) and returns them.
        mutating func stopAll() -> [Int64: Run] {
            for (jobID, run) in running {
                holds.forgetRun(jobID, of: run.assetID)
                stopping[jobID] = run.token
            }
            return running
        }
    }

    let state = Locked(State())

    /// A run of this process has not ended yet (for tests).
    var isRunningAnything: Bool { state.withLock { !$0.running.isEmpty } }

    /// How many run tasks of this process have not ended, including runs stopped or
    /// interrupted that no longer count as running (for tests: once it is zero, no run of
    /// this process writes to a job any more).
    var tasksInFlight: Int { state.withLock { $0.tasksInFlight } }

    /// Claims whose jobs are not all registered as running yet (for tests).
    var claimsUnderWay: Int { state.withLock { $0.claimsUnderWay } }

    /// How many pending deletions hold the jobs of `assetID` (for tests).
    func holds(on assetID: Int64) -> Int { state.withLock { $0.holds.count(on: assetID) } }
}
