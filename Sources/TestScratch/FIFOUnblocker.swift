import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Opens a FIFO's writing end whenever a reader waits on it, and closes it at once, until
/// stopped: every reader blocked in `open` then reads an empty file instead of waiting
/// forever. For tests of code that must never wait on a FIFO: without the fix they fail on
/// what was read instead of hanging. It only unblocks; nothing is timed.
public final class FIFOUnblocker: @unchecked Sendable {
    private let path: String
    private let lock = NSLock()
    private var isStopped = false

    public init(_ path: String) { self.path = path }

    /// Starts waiting for readers, on a thread of its own.
    public func start() {
        Thread { [self] in
            while !stopping() {
                let fd = open(path, O_WRONLY | O_NONBLOCK)  // ENXIO while no reader waits
                if fd >= 0 { close(fd) }
                usleep(20_000)
            }
        }.start()
    }

    private func stopping() -> Bool { lock.withLock { isStopped } }

    /// Stops waiting.
    public func stop() { lock.withLock { isStopped = true } }
}
