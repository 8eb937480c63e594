import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The write end of the pipe that the SIGINT handler writes a byte to, or -1.
/// An atomic load is all the handler does besides `write(2)`: both are
/// async-signal-safe.
private let interruptPipe = Atomic<Int32>(-1)

/// Cancels work on Ctrl-C (SIGINT).
///
/// The handler is a plain `sigaction` handler, in place once `init` returns:
/// a Ctrl-C that comes at any later instant is seen. (A `DispatchSource`
/// signal source is registered asynchronously on Linux, and a Ctrl-C that
/// came before it was armed was lost — seen under load in CI.) The handler
/// writes a byte to a pipe; a thread of ours reads it and cancels the work.
/// The work is attached after `init` (a Ctrl-C that came first cancels it at once).
final class Interrupt: @unchecked Sendable {
    private let state = NSLock()
    private var work: (any Cancellable)?
    private var interrupted = false
    private var stopped = false
    private let readEnd: Int32
    private let writeEnd: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { fatalError("assetcat: could not make a pipe for Ctrl-C: errno \(errno)") }
        (readEnd, writeEnd) = (fds[0], fds[1])
        interruptPipe.store(writeEnd, ordering: .sequentiallyConsistent)
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in
            let fd = interruptPipe.load(ordering: .relaxed)
            guard fd >= 0 else { return }
            var byte: UInt8 = 1
            _ = write(fd, &byte, 1)
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(SIGINT, &action, nil)
        let readEnd = self.readEnd
        let thread = Thread { [weak self] in
            var byte: UInt8 = 0
            while true {
                let n = read(readEnd, &byte, 1)
                if n == 1 {
                    self?.interrupt()
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    break  // stop() closed the write end
                }
            }
            close(readEnd)
        }
        thread.start()
    }

    /// Runs `body` in a task that Ctrl-C cancels, and returns its result.
    func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let task = Task(operation: body)
        let alreadyInterrupted = state.withLock {
            work = task
            return interrupted
        }
        if alreadyInterrupted { task.cancel() }
        defer { stop() }
        return try await task.value
    }

    private func interrupt() {
        state.withLock {
            interrupted = true
            return work
        }?.cancel()
    }

    /// Puts Ctrl-C back to its default (ending the process) and ends the reading thread.
    func stop() {
        let first = state.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        signal(SIGINT, SIG_DFL)
        interruptPipe.store(-1, ordering: .sequentiallyConsistent)
        close(writeEnd)
    }
}

protocol Cancellable { func cancel() }
extension Task: Cancellable {}
