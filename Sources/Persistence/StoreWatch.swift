import Foundation
package import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A wake-up when a file changes (a store's `-wal`, which every commit of any process
/// writes), through inotify: a thread blocked in `poll(2)` until the file is modified,
/// costing nothing while nothing happens. The caller may ask to be called again after a
/// delay (to look for what the change was for, which may show only later); a new change
/// calls it at once instead. Where inotify is unavailable (another
/// platform, no inotify instances left, a file that does not exist) there is no watch,
/// and the caller polls instead. Should `poll(2)` fail later, the watch logs it, ends, and
/// calls `onFailure`: the caller polls from then on.
///
/// The SQLite store's ``PersistentContainer/announcements()`` are served by one; the
/// catalog's job queue keeps one of its own (package access).
package final class StoreWatch: Sendable {
    #if os(Linux)
        private let inotify: Int32
        /// A pipe: its write end, written to stop the thread, and its read end, polled.
        private let stopper: Int32
        private let stopperRead: Int32
    #endif
    private let stopped = Atomic<Bool>(false)
    /// Signalled when the thread has returned.
    private let ended = DispatchSemaphore(value: 0)

    /// The least time between two calls of `onChange` for a change: changes in between are
    /// coalesced into the next call (a busy store does not keep the thread checking). A
    /// delay the last call asked for is kept meanwhile.
    static let coalescing: TimeInterval = 0.003

    /// Tests: the `errno` that the watch's first `poll(2)` fails with, as if the call had
    /// failed. Read by ``init(path:logger:onChange:onFailure:)`` on the caller's task.
    @TaskLocal package static var injectedPollFailure: Int32?

    /// Tests: how a SQLite store's watch looks for the commit a change of its `-wal` belongs
    /// to, in place of its own way. Read when the store's announcements start, on the
    /// caller's task.
    @TaskLocal package static var injectedLooks: InjectedLooks?

    /// Tests: the delays between a SQLite store's looks for a commit, and what is told of each
    /// look (on the watch's thread, once it has looked).
    package struct InjectedLooks: Sendable {
        package var delays: [Double]
        package var looked: @Sendable () -> Void
        package init(delays: [Double], looked: @escaping @Sendable () -> Void) {
            self.delays = delays
            self.looked = looked
        }
    }

    /// What `onChange` is called for.
    package enum Wake: Sendable {
        /// The file was modified (since the last call, changes coalesced).
        case changed
        /// The delay the last call asked for has passed with no change.
        case again
    }

    /// Watches `path`; `onChange` runs on the watch's own thread after each
    /// modification (coalesced), with ``Wake/changed``. It returns `nil`, or a delay after
    /// which it is called again with ``Wake/again`` unless the file changes first (then it is
    /// called with ``Wake/changed``, and the delay is forgotten). `nil` when the file cannot
    /// be watched. When the watch fails later (`poll(2)` fails), it logs the failure to
    /// `logger` and ends: `onFailure` runs once, on the watch's thread, and `onChange` is not
    /// called again.
    package init?(
        path: String, logger: Logger, onChange: @escaping @Sendable (Wake) -> Double?,
        onFailure: @escaping @Sendable () -> Void
    ) {
        #if os(Linux)
            let injected = Self.injectedPollFailure
            let inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
            guard inotify >= 0 else { return nil }
            guard inotify_add_watch(inotify, path, UInt32(IN_MODIFY)) >= 0 else {
                close(inotify)
                return nil
            }
            var pipeEnds: [Int32] = [-1, -1]
            guard pipe(&pipeEnds) == 0 else {
                close(inotify)
                return nil
            }
            for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            self.inotify = inotify
            self.stopper = pipeEnds[1]
            self.stopperRead = pipeEnds[0]
            let ended = self.ended
            let stopperRead = pipeEnds[0]
            let thread = Thread {
                if let failure = Self.loop(
                    inotify: inotify, stopper: stopperRead, injectedFailure: injected, onChange: onChange)
                {
                    let message =
                        "the watch of \(path) failed (poll: \(String(cString: strerror(failure)))); "
                        + "other connections' commits are polled for instead"
                    logger.error("\(message)")
                    onFailure()
                }
                ended.signal()
            }
            thread.name = "Persistence.StoreWatch"
            thread.start()
        #else
            return nil
        #endif
    }

    #if os(Linux)
        /// Waits for changes until the stopper is written to; returns the `errno` of a
        /// `poll(2)` that failed, or `nil` when stopped. The stopper's read end is closed by
        /// ``stop()``, not here: its write to the pipe must find a reader (else `SIGPIPE`).
        private static func loop(
            inotify: Int32, stopper: Int32, injectedFailure: Int32?,
            onChange: @Sendable (Wake) -> Double?
        ) -> Int32? {
            var fds = [
                pollfd(fd: inotify, events: Int16(POLLIN), revents: 0),
                pollfd(fd: stopper, events: Int16(POLLIN), revents: 0),
            ]
            var buffer = [UInt8](repeating: 0, count: 4096)
            var injected = injectedFailure
            /// When `onChange` asked to be called again, if nothing changes first.
            var again: ContinuousClock.Instant?
            /// Until when changes are left to coalesce, unread, after one was reported.
            var deaf: ContinuousClock.Instant?
            defer { close(inotify) }
            while true {
                if let until = deaf, ContinuousClock.now >= until { deaf = nil }
                fds[0].events = deaf == nil ? Int16(POLLIN) : 0
                let timeout = [again, deaf].compactMap { $0 }.min().map { Int32(clamping: milliseconds(until: $0)) }
                let ready = injected == nil ? poll(&fds, 2, timeout ?? -1) : -1
                if ready < 0 {
                    let failure = injected ?? errno
                    injected = nil
                    if failure == EINTR { continue }
                    return failure
                }
                if ready > 0, fds[1].revents != 0 { return nil }
                let wake: Wake
                if ready > 0, fds[0].revents & Int16(POLLIN) != 0 {
                    while read(inotify, &buffer, buffer.count) > 0 {}  // drain: one call for them all
                    wake = .changed
                    deaf = ContinuousClock.now + .seconds(coalescing)
                } else if let due = again, ContinuousClock.now >= due {
                    wake = .again
                } else {
                    continue
                }
                again = onChange(wake).map { ContinuousClock.now + .seconds($0) }
            }
        }

        /// Whole milliseconds from now to `instant`, rounded up (0 once it has passed).
        private static func milliseconds(until instant: ContinuousClock.Instant) -> Int64 {
            let left = ContinuousClock.now.duration(to: instant)
            guard left > .zero else { return 0 }
            let (seconds, attoseconds) = left.components
            return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        }
    #endif

    /// Ends the watch and waits for its thread to return (for a call of `onChange` or
    /// `onFailure` under way to end): after it, neither is called again. Not to be called
    /// from either.
    package func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        #if os(Linux)
            var one: UInt8 = 1
            _ = write(stopper, &one, 1)
            ended.wait()
            close(stopper)
            close(stopperRead)
        #endif
    }
}
