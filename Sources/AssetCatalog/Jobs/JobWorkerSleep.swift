import Foundation
import Locking

/// The background worker's sleep (``JobQueue/start()``): it sleeps until new work is queued
/// (``wake()``, from this process or an announcement of another's), a run ends, or its
/// timeout passes. A wake that comes while it is awake is kept for its next sleep.
final class JobWorkerSleep: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, Never>?
        var pendingWake = false
        /// The sleeps so far: the number of the current (or last) one.
        var sleeps = 0
        /// How long the current (or last) sleep lasts at most.
        var timeout: Duration?
    }
    private let state = Locked(State())
    private let metrics: JobQueue.Metrics

    init(metrics: JobQueue.Metrics) { self.metrics = metrics }

    /// Whether the worker sleeps until woken, and for how long at most (for tests).
    var current: (isAsleep: Bool, timeout: Duration?) { state.withLock { ($0.waiter != nil, $0.timeout) } }

    /// Sleeps until ``wake()`` is called or `timeout` passes.
    func wait(upTo timeout: Duration) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (woken, sleep) = state.withLock { s -> (Bool, Int) in
                if s.pendingWake {
                    s.pendingWake = false
                    return (true, s.sleeps)
                }
                s.waiter = continuation
                s.sleeps += 1
                s.timeout = timeout
                metrics.slept()
                return (false, s.sleeps)
            }
            if woken {
                continuation.resume()
                return
            }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                self?.resume(ifSleep: sleep)
            }
        }
    }

    /// Ends the worker's sleep; with `sleep`, only if it is still in that sleep (the
    /// `sleep`-th): the timer of a short sleep that was woken early must not cut a later,
    /// longer one short.
    func resume(ifSleep sleep: Int? = nil) {
        state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard sleep == nil || sleep == s.sleeps else { return nil }
            defer { s.waiter = nil }
            return s.waiter
        }?.resume()
    }

    /// Wakes the worker (new work was queued, a run ended): now if it sleeps, else at its
    /// next sleep.
    func wake() {
        state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let waiter = s.waiter {
                s.waiter = nil
                return waiter
            }
            s.pendingWake = true
            return nil
        }?.resume()
    }
}
