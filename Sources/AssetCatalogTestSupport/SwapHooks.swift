import AssetCatalog
import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `body` with `hook` called each time a directory bag read by it has been listed and
/// not yet read, with the bag's root: a test swaps a file there, deterministically.
public func afterBagListing<T>(
    _ hook: @escaping @Sendable (_ root: String) -> Void, _ body: () async throws -> T
) async rethrows -> T {
    try await BagReader.$afterListing.withValue(hook) { try await body() }
}

/// ``afterBagListing(_:_:)`` for work that does not run in a task of its own (validation).
public func afterBagListing<T>(_ hook: @escaping @Sendable (_ root: String) -> Void, _ body: () throws -> T) rethrows
    -> T
{
    try BagReader.$afterListing.withValue(hook) { try body() }
}

/// Runs `body` with `hook` called each time an add run by it has found its files and opened
/// none yet, with their paths: a test swaps a file there, deterministically.
public func afterAddListing<T>(
    _ hook: @escaping @Sendable (_ paths: [String]) -> Void, _ body: () async throws -> T
) async rethrows -> T {
    try await Catalog.$afterExpanding.withValue(hook) { try await body() }
}

/// Opens a FIFO's writing end once a reader waits on it, and closes it at once: a reader
/// blocked in `open` then reads an empty file instead of waiting forever. For tests of code
/// that must never wait on a FIFO: without the fix they fail on what was read instead of
/// hanging. (It only unblocks; nothing is timed.)
public final class FIFOUnblocker: @unchecked Sendable {
    private let path: String
    private let lock = NSLock()
    private var isStopped = false

    public init(_ path: String) { self.path = path }

    /// Starts waiting for a reader, on a thread of its own.
    public func start() {
        Thread { [self] in
            while !stopping() {
                let fd = open(path, O_WRONLY | O_NONBLOCK)  // ENXIO while no reader waits
                if fd >= 0 {
                    close(fd)
                    return
                }
                usleep(20_000)
            }
        }.start()
    }

    private func stopping() -> Bool { lock.withLock { isStopped } }

    /// Stops waiting.
    public func stop() { lock.withLock { isStopped = true } }
}
