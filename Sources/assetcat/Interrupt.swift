import ArgumentParser
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The write end of the pipe that the SIGINT and SIGTERM handler writes the signal's
/// number to, or -1. An atomic load is all the handler does besides `write(2)`: both are
/// async-signal-safe.
private let interruptPipe = Atomic<Int32>(-1)

/// The first signal that interrupted work (SIGINT or SIGTERM), or 0.
private let interruptSignal = Atomic<Int32>(0)

/// Cancels work on Ctrl-C (SIGINT) and on SIGTERM (what `timeout`, systemd and container
/// runtimes send): both stop the work the same way, and the command exits with
/// ``exitCode`` (130 for SIGINT, 143 for SIGTERM).
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
        action.__sigaction_handler.sa_handler = { signal in
            let fd = interruptPipe.load(ordering: .relaxed)
            guard fd >= 0 else { return }
            var byte = UInt8(truncatingIfNeeded: signal)
            _ = write(fd, &byte, 1)
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(SIGINT, &action, nil)
        sigaction(SIGTERM, &action, nil)
        let readEnd = self.readEnd
        let thread = Thread { [weak self] in
            var byte: UInt8 = 0
            while true {
                let n = read(readEnd, &byte, 1)
                if n == 1 {
                    _ = interruptSignal.compareExchange(
                        expected: 0, desired: Int32(byte), ordering: .sequentiallyConsistent)
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

    /// The status a command interrupted by a signal exits with: 128 + the signal's number
    /// (130 for Ctrl-C, 143 for SIGTERM).
    static var exitCode: ExitCode {
        let signal = interruptSignal.load(ordering: .sequentiallyConsistent)
        return ExitCode(128 + (signal == 0 ? SIGINT : signal))
    }

    /// Runs `body` in a task that Ctrl-C or SIGTERM cancels, and returns its result.
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

    /// Puts Ctrl-C and SIGTERM back to their default (ending the process) and ends the
    /// reading thread.
    func stop() {
        let first = state.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
        interruptPipe.store(-1, ordering: .sequentiallyConsistent)
        close(writeEnd)
    }
}

protocol Cancellable { func cancel() }
extension Task: Cancellable {}
