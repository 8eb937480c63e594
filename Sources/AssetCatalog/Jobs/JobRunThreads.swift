import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The threads a ``JobQueue``'s runs execute on: a task executor (SE-0417) of the queue's
/// own, at most as many threads as the queue runs jobs at once.
///
/// A processor may block its thread (a synchronous read loop, a semaphore, a blocking C
/// library): on the concurrency pool, whose threads are as many as the cores, as many runs
/// as the queue's concurrency would block every thread of the process, and nothing else
/// would run — not the queue's worker loop, nor the listener that hears another process's
/// deletion and cancels the runs it concerns. Run tasks prefer these threads instead
/// (``task(_:)``): a blocking processor blocks one of them, never the pool. They are still
/// Swift tasks: cancellation, task-locals and `await` work in them as anywhere.
///
/// Threads start when run tasks have work for them (one more whenever work waits and none is
/// idle, up to the width) and all end once no run task is left: they live no longer than the
/// runs, so a queue that stops or closes (its runs cancelled and ended) leaves none behind.
///
/// The state is behind an `NSCondition` (a pthread mutex and condition, which
/// ThreadSanitizer sees): idle threads wait on it for work.
final class JobRunThreads: TaskExecutor, @unchecked Sendable {
    /// The most threads at once.
    let width: Int
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var ready: [UnownedJob] = []
    private var nextReady = 0
    private var threads = 0
    private var idle = 0
    private var tasks = 0

    /// - Parameter width: the most threads at once (at least 1).
    init(width: Int) { self.width = max(1, width) }

    /// Starts `body` as a task that runs on these threads (and wherever it hops to from them:
    /// an actor's method runs on the actor, then comes back here).
    func task(_ body: sending @escaping () async -> Void) -> Task<Void, Never> {
        condition.withLock { tasks += 1 }
        return Task(executorPreference: self) {
            await body()
            self.taskEnded()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let starts = condition.withLock { () -> Bool in
            ready.append(job)
            // Broadcast, not signal: a test may wait on the condition too (waitUntilNoThreads).
            if idle > 0 { condition.broadcast() }
            // A thread idle now takes one job; another thread starts for the jobs beyond.
            guard ready.count - nextReady > idle, threads < width else { return false }
            threads += 1
            return true
        }
        if starts { startThread() }
    }

    /// How many threads live (for tests).
    var threadCount: Int { condition.withLock { threads } }

    /// Waits until no thread lives (for tests); false if one still does after `timeout`.
    func waitUntilNoThreads(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        return condition.withLock {
            while threads > 0 {
                guard condition.wait(until: deadline) else { return threads == 0 }
            }
            return true
        }
    }

    private func taskEnded() {
        condition.withLock {
            tasks -= 1
            // Idle threads end now (and this one when the job that ends the task returns).
            if tasks == 0 { condition.broadcast() }
        }
    }

    private func startThread() {
        Thread { [self] in
            pthread_setspecific(Self.owner, Unmanaged.passUnretained(self).toOpaque())
            work()
            pthread_setspecific(Self.owner, nil)
        }.start()
    }

    /// Whether the calling thread is one of these (for tests).
    var isCurrent: Bool { pthread_getspecific(Self.owner) == Unmanaged.passUnretained(self).toOpaque() }

    /// The thread-specific key naming the executor a thread belongs to.
    private static let owner: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// A thread's life: runs ready jobs in turn, waits for more while run tasks are left.
    private func work() {
        let executor = asUnownedTaskExecutor()
        condition.lock()
        while true {
            if nextReady < ready.count {
                let job = ready[nextReady]
                nextReady += 1
                if nextReady == ready.count {
                    ready.removeAll(keepingCapacity: true)
                    nextReady = 0
                }
                condition.unlock()
                job.runSynchronously(on: executor)
                condition.lock()
                continue
            }
            if tasks == 0 { break }
            idle += 1
            condition.wait()
            idle -= 1
        }
        threads -= 1
        // For ``waitUntilNoThreads(timeout:)``.
        if threads == 0 { condition.broadcast() }
        condition.unlock()
    }
}
