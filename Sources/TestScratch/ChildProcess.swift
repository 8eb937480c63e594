public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A child process for tests, started with `posix_spawn(3)` rather than Foundation's
/// `Process`.
///
/// Foundation's `Process.run()` (swift-corelibs-foundation, Swift 6.3.1) lists
/// `/proc/self/fd` to find the descriptors to close in the child, copying each entry's whole
/// 256-byte name out of a directory buffer that may end sooner — a read out of bounds that
/// ASan reports once a process holds a few thousand descriptors, and that crashed whole test
/// runs. This runner does not look at the parent's descriptors at all: every descriptor it makes is
/// close-on-exec from the start, the child gets its standard input, output and error through
/// `dup2` spawn actions, and glibc closes every other descriptor in the child before the
/// `exec` (`posix_spawn_file_actions_addclosefrom_np`, `close_range(2)`), so the child
/// inherits 0, 1 and 2 only — whatever other threads of the test process hold open.
///
/// The child starts in a process group of its own (as with `Process`), with no signal
/// blocked and every signal at its default action (as from a shell). Captured output is read
/// by a thread of the runner's own, both streams at once, so a child that writes a lot to
/// either never blocks. The child is reaped by that thread when it exits, even if nobody
/// waits for it.
///
/// ```swift
/// let child = try ChildProcess("/usr/bin/env", ["python3", "-c", "print(1)"])
/// let outcome = try await child.finish()
/// #expect(outcome.termination == .exited(0) && outcome.stdoutText == "1\n")
/// ```
public final class ChildProcess: @unchecked Sendable {
    /// Where the child's standard input comes from.
    public enum Input: Sendable {
        /// `/dev/null`: the child reads end-of-file at once.
        case null
        /// A file, opened for reading.
        case file(String)
    }

    /// Where one of the child's output streams goes.
    public enum Output: Sendable {
        /// A pipe read by the runner; the bytes are in the ``Outcome``.
        case capture
        /// `/dev/null`.
        case null
        /// This process's own standard output or error (as with `Process` by default).
        case inherit
        /// A file (or device, such as `/dev/full`), opened for writing, created if missing
        /// and truncated.
        case file(String)
    }

    /// How a child ended.
    public enum Termination: Sendable, Hashable, CustomStringConvertible {
        /// It exited (returned from `main`, called `exit`) with this status.
        case exited(Int32)
        /// A signal it did not handle ended it (`SIGKILL`, or an unhandled `SIGTERM`…).
        case signalled(Int32)

        /// "exit status 3", "signal 9 (Killed)".
        public var description: String {
            switch self {
            case .exited(let status): "exit status \(status)"
            case .signalled(let signal): "signal \(signal) (\(String(cString: strsignal(signal))))"
            }
        }
    }

    /// What a finished child wrote and how it ended.
    public struct Outcome: Sendable {
        /// How it ended.
        public var termination: Termination
        /// What it wrote to standard output, if captured (otherwise empty).
        public var stdout: Data
        /// What it wrote to standard error, if captured (otherwise empty).
        public var stderr: Data

        /// The status the child exited with (0–255), or minus the signal that ended it (as
        /// Python's `returncode`): never mistakes a child killed by `SIGINT` for one that
        /// handled it and exited with 130.
        public var status: Int32 {
            switch termination {
            case .exited(let status): status
            case .signalled(let signal): -signal
            }
        }
        /// ``stdout`` decoded as UTF-8.
        public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
        /// ``stderr`` decoded as UTF-8.
        public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    }

    /// A child that could not be started, or did not end before its deadline.
    public struct Failure: Error, CustomStringConvertible {
        /// What went wrong, naming the command.
        public let description: String
    }

    /// How long ``wait(within:)`` and ``finish(within:)`` wait unless told: far longer than
    /// any child of the tests should run, so that a hung child fails its test instead of
    /// hanging the whole run.
    public static let defaultDeadline: Double = 600

    /// The child's process ID. It names the child until the child is reaped; use
    /// ``signal(_:)`` rather than `kill(2)` to signal it safely.
    public let pid: pid_t

    /// The executable and arguments, as messages quote them.
    public let command: String

    private let condition = NSCondition()
    private var stdoutBytes = Data()
    private var stderrBytes = Data()
    private var stdoutOpen: Bool
    private var termination: Termination?
    private var abandonsOutput = false

    /// Starts `executable` (a path; use `/usr/bin/env` to search `PATH`) with `arguments`.
    ///
    /// - Parameters:
    ///   - environment: changes to this process's environment, which the child inherits: a
    ///     value sets the variable, `nil` removes it.
    ///   - workingDirectory: the child's working directory; this process's by default.
    ///   - stdin: the child's standard input, `/dev/null` by default.
    ///   - stdout: the child's standard output, captured by default.
    ///   - stderr: the child's standard error, captured by default.
    /// - Throws: ``Failure`` if the child could not be started (no such executable or
    ///   working directory, a file that cannot be opened…).
    public init(
        _ executable: String, _ arguments: [String] = [], environment: [String: String?] = [:],
        workingDirectory: String? = nil, stdin: Input = .null, stdout: Output = .capture,
        stderr: Output = .capture
    ) throws {
        let command = ([executable] + arguments).joined(separator: " ")
        self.command = command
        var env = ProcessInfo.processInfo.environment
        for (name, value) in environment { env[name] = value }

        // Every descriptor made here is close-on-exec, and closed before returning.
        var parentEnds: [Int32] = []  // ours: read ends of the pipes
        var childEnds: [(target: Int32, fd: Int32)] = []  // the child's 0, 1, 2, closed here once it has them
        func close(_ fds: [Int32]) { for fd in fds where fd >= 0 { _ = Glibc.close(fd) } }
        var failed = true
        defer {
            close(childEnds.map(\.fd))
            if failed { close(parentEnds) }
        }
        func open(_ path: String, _ flags: Int32, _ role: String) throws -> Int32 {
            let fd = Glibc.open(path, flags | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw Failure(description: "cannot start \(command): \(role) \(path): \(Self.message(errno))")
            }
            return fd
        }
        func pipe() throws -> (read: Int32, write: Int32) {
            var fds: [Int32] = [-1, -1]
            guard GNU.pipe2(&fds, O_CLOEXEC) == 0 else {
                throw Failure(description: "cannot start \(command): pipe2: \(Self.message(errno))")
            }
            return (fds[0], fds[1])
        }
        switch stdin {
        case .null: childEnds.append((0, try open("/dev/null", O_RDONLY, "standard input")))
        case .file(let path): childEnds.append((0, try open(path, O_RDONLY, "standard input")))
        }
        var captured: [Int32] = []  // -1 for a stream not captured
        for (target, output) in [(Int32(1), stdout), (2, stderr)] {
            switch output {
            case .capture:
                let (read, write) = try pipe()
                parentEnds.append(read)
                childEnds.append((target, write))
                captured.append(read)
            case .null:
                childEnds.append((target, try open("/dev/null", O_WRONLY, "output")))
                captured.append(-1)
            case .inherit:
                captured.append(-1)
            case .file(let path):
                childEnds.append((target, try open(path, O_WRONLY | O_CREAT | O_TRUNC, "output")))
                captured.append(-1)
            }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        var checks: [Int32] = [
            posix_spawnattr_setflags(
                &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)),
            posix_spawnattr_setpgroup(&attributes, 0),
            posix_spawnattr_setsigmask(&attributes, &noSignals),
            posix_spawnattr_setsigdefault(&attributes, &allSignals),
        ]
        if let workingDirectory { checks.append(GNU.addchdir(&actions, workingDirectory)) }
        for (target, fd) in childEnds {
            checks.append(posix_spawn_file_actions_adddup2(&actions, fd, target))
        }
        checks.append(GNU.addclosefrom(&actions, 3))
        if let code = checks.first(where: { $0 != 0 }) {
            throw Failure(description: "cannot start \(command): posix_spawn set-up: \(Self.message(code))")
        }

        var pid: pid_t = 0
        let code = Self.withCStrings([executable] + arguments) { argv in
            Self.withCStrings(env.map { "\($0.key)=\($0.value)" }) { envp in
                posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
            }
        }
        guard code == 0 else {
            let place = workingDirectory.map { " in \($0)" } ?? ""
            throw Failure(description: "cannot start \(command)\(place): \(Self.message(code))")
        }
        failed = false
        self.pid = pid
        stdoutOpen = captured[0] >= 0
        let streams = captured.filter { $0 >= 0 }
        let stdoutFD = captured[0]
        Thread { [self] in watch(streams, stdoutFD: stdoutFD) }.start()
    }

    /// Sends `signal` to the child (`SIGTERM`, `SIGINT`, `SIGKILL`…), unless it has already
    /// been reaped — then its process ID may name another process, and nothing is sent.
    public func signal(_ signal: Int32) {
        condition.lock()
        defer { condition.unlock() }
        if termination == nil { kill(pid, signal) }
    }

    /// Waits until the child has ended and closed its captured streams (blocking this
    /// thread), and returns what it wrote and how it ended.
    ///
    /// - Throws: ``Failure``, after killing the child and its process group with `SIGKILL`,
    ///   if it is still running after `seconds`: the message names the command, the deadline
    ///   and what the child had written so far.
    public func wait(within seconds: Double = defaultDeadline) throws -> Outcome {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        while termination == nil, condition.wait(until: deadline) {}
        if let termination {
            return Outcome(termination: termination, stdout: stdoutBytes, stderr: stderrBytes)
        }
        // The group is still there: its leader, the child, has not been reaped.
        kill(-pid, SIGKILL)
        // Everyone in the group is dead, so the pipes end — unless a descendant that left the
        // group holds them: stop reading then.
        while termination == nil, condition.wait(until: Date(timeIntervalSinceNow: 10)) {}
        abandonsOutput = true
        while termination == nil { condition.wait() }
        throw Failure(
            description: "\(command) (pid \(pid)) was still running after \(String(format: "%g", seconds)) s, "
                + "so it was killed (SIGKILL to its process group); stdout so far: \(Self.tail(stdoutBytes)), "
                + "stderr so far: \(Self.tail(stderrBytes))")
    }

    /// ``wait(within:)`` on a thread of its own, off the concurrency pool (a test blocked on a
    /// child would otherwise hold one of the pool's few threads).
    public func finish(within seconds: Double = defaultDeadline) async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try self.wait(within: seconds) }) }.start()
        }
    }

    /// Waits (blocking this thread) until what the child has written to its captured standard
    /// output so far satisfies `isComplete`, or the stream has ended, and returns it; `nil` if
    /// neither happened within `seconds`. For reacting to a running child's output.
    public func stdout(within seconds: Double, until isComplete: (Data) -> Bool) -> Data? {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        while stdoutOpen, !isComplete(stdoutBytes) {
            guard condition.wait(until: deadline) else { return nil }
        }
        return stdoutBytes
    }

    /// Starts a child and waits for it, off the concurrency pool; see ``init(_:_:environment:workingDirectory:stdin:stdout:stderr:)``
    /// and ``wait(within:)``.
    public static func run(
        _ executable: String, _ arguments: [String] = [], environment: [String: String?] = [:],
        workingDirectory: String? = nil, stdin: Input = .null, stdout: Output = .capture,
        stderr: Output = .capture, within seconds: Double = defaultDeadline
    ) async throws -> Outcome {
        try await ChildProcess(
            executable, arguments, environment: environment, workingDirectory: workingDirectory, stdin: stdin,
            stdout: stdout, stderr: stderr
        ).finish(within: seconds)
    }

    // MARK: - The watching thread

    /// Reads the captured streams to their end (or until told to stop), then reaps the
    /// child.
    private func watch(_ streams: [Int32], stdoutFD: Int32) {
        var polled = streams.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { buffer.deallocate() }
        while !polled.isEmpty {
            if condition.withLock({ abandonsOutput }) { break }
            // A timeout only to notice `abandonsOutput`, which a deadline sets.
            let ready = poll(&polled, nfds_t(polled.count), 200)
            if ready < 0, errno == EINTR { continue }
            guard ready >= 0 else { break }
            var ended: [Int32] = []
            for entry in polled where entry.revents != 0 {
                let count = read(entry.fd, buffer, 1 << 16)
                if count < 0, errno == EINTR || errno == EAGAIN { continue }
                condition.withLock {
                    if count > 0 {
                        let bytes = UnsafeRawBufferPointer(start: buffer, count: count)
                        if entry.fd == stdoutFD {
                            stdoutBytes.append(contentsOf: bytes)
                        } else {
                            stderrBytes.append(contentsOf: bytes)
                        }
                    } else {
                        if entry.fd == stdoutFD { stdoutOpen = false }
                        ended.append(entry.fd)
                    }
                    condition.broadcast()
                }
            }
            for fd in ended { _ = Glibc.close(fd) }
            polled.removeAll { ended.contains($0.fd) }
        }
        for entry in polled { _ = Glibc.close(entry.fd) }
        // Wait for the exit without reaping, then reap under the lock: `signal(_:)` never
        // sends to a process ID that was already handed back to the system.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0, errno == EINTR {}
        condition.withLock {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0, errno == EINTR {}
            termination = status & 0x7F == 0 ? .exited((status >> 8) & 0xFF) : .signalled(status & 0x7F)
            stdoutOpen = false
            condition.broadcast()
        }
    }

    // MARK: - Helpers

    private static func message(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// The last 2,000 bytes of `data`, as a Swift string literal (`"…\n"`).
    private static func tail(_ data: Data) -> String {
        (data.count > 2000 ? "…" : "") + String(reflecting: String(decoding: data.suffix(2000), as: UTF8.self))
    }

    private static func withCStrings<R>(
        _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R
    ) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// glibc functions that Swift's Glibc module does not import (they are declared only with
/// `_GNU_SOURCE`), looked up by name: `pipe2` (glibc 2.9),
/// `posix_spawn_file_actions_addchdir_np` (2.29) and `posix_spawn_file_actions_addclosefrom_np`
/// (2.34). Where one is missing, its call fails with `ENOSYS` and the child is not started:
/// there is no check-then-act fallback (a `chdir` in the parent would move every thread).
private enum GNU {
    typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
    typealias AddChdir =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    typealias AddClosefrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    private static func symbol<T>(_ name: String, as type: T.Type) -> T? {
        dlsym(dlopen(nil, RTLD_NOW), name).map { unsafeBitCast($0, to: type) }
    }
    private static let pipe2Function = symbol("pipe2", as: Pipe2.self)
    private static let addchdirFunction = symbol(
        "posix_spawn_file_actions_addchdir_np", as: AddChdir.self)
    private static let addclosefromFunction = symbol(
        "posix_spawn_file_actions_addclosefrom_np", as: AddClosefrom.self)

    static func pipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32 {
        guard let pipe2Function else {
            errno = ENOSYS
            return -1
        }
        return pipe2Function(fds, flags)
    }

    static func addchdir(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ path: String) -> Int32 {
        addchdirFunction?(actions, path) ?? ENOSYS
    }

    static func addclosefrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32 {
        addclosefromFunction?(actions, from) ?? ENOSYS
    }
}
