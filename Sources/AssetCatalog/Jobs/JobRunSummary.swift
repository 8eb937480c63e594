import Locking

final class SummaryBox: Sendable {
    let value = Locked(JobRunSummary())
}

/// What ``JobQueue/runUntilIdle(progress:)`` did.
public struct JobRunSummary: Sendable, Hashable {
    public var succeeded = 0
    public var failed = 0
    public var cancelled = 0
    public var retried = 0
    /// Whether the run was stopped (its task cancelled) before the queue was idle.
    public var wasInterrupted = false
}
