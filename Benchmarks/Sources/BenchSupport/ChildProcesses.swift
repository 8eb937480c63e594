// Running the benchmarks' child processes: wall time and peak memory of each
// (`/usr/bin/time -f %M`), shared by the suites that time the assetcat binary.
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One child's wall time and peak RSS (its ru_maxrss, as /usr/bin/time reports it).
public struct Run: Sendable {
    public var seconds: Double
    public var peakKiB: Int

    public init(seconds: Double, peakKiB: Int) {
        self.seconds = seconds
        self.peakKiB = peakKiB
    }
}

/// A monotonic clock, in seconds.
public func now() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// `n` with a comma between thousands, as the tables print counts.
public func grouped(_ n: Int) -> String {
    let digits = String(n)
    var out = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { out += "," }
        out.append(c)
    }
    return out
}

/// `text` quoted for bash.
public func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

/// Starts children with their stderr in a log under `base` (shown if one fails, after
/// `base` — which holds the corpora — is removed).
public final class ChildProcesses: Sendable {
    public let base: String
    private let timeFile: String
    private let errorFile: String

    private let lastStatus = Mutex<Int32>(0)

    /// The exit status of the last child run.
    public var lastExitStatus: Int32 { lastStatus.withLock { $0 } }

    /// The stderr of the last child run.
    public var lastStderr: String { (try? String(contentsOfFile: errorFile, encoding: .utf8)) ?? "" }

    public init(base: String) {
        self.base = base
        timeFile = base + "/time.out"
        errorFile = base + "/stderr.log"
    }

    /// Runs `program` (under `/usr/bin/time` when `timed`), stdout to `stdout`; returns its
    /// wall time and peak RSS. A failing child stops the benchmark, unless `mayFail`: then its
    /// exit status is in ``lastExitStatus`` and its stderr in ``lastStderr``.
    @discardableResult
    public func spawn(
        _ program: String, _ args: [String], stdout: String = "/dev/null", timed: Bool = true, mayFail: Bool = false
    ) -> Run {
        let argv = (timed ? ["/usr/bin/time", "-f", "%M", "-o", timeFile] : []) + [program] + args
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, errorFile, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        var pid: pid_t = 0
        let start = now()
        let status = posix_spawnp(&pid, argv[0], &actions, nil, cArgs, environ)
        guard status == 0 else { fatalError("cannot start \(argv[0]): \(String(cString: strerror(status)))") }
        var exitStatus: Int32 = 0
        while waitpid(pid, &exitStatus, 0) < 0 {
            guard errno == EINTR else { fatalError("waitpid: \(String(cString: strerror(errno)))") }
        }
        let seconds = now() - start
        // /usr/bin/time passes the child's exit status on.
        let code = (exitStatus & 0x7F) == 0 ? (exitStatus >> 8) & 0xFF : 128 + (exitStatus & 0x7F)
        lastStatus.withLock { $0 = code }
        guard exitStatus == 0 || mayFail else {
            let log = (try? String(contentsOfFile: errorFile, encoding: .utf8)) ?? ""
            // Leave no corpora behind (they are large), then stop.
            let words: [String] = ["rm", "-rf", base]
            let rm: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
            if posix_spawnp(&pid, "rm", nil, nil, rm, environ) == 0 { waitpid(pid, nil, 0) }
            fatalError("\(argv.joined(separator: " ")) failed (status \(exitStatus)):\n\(log.suffix(4000))")
        }
        var peak = 0
        if timed, let text = try? String(contentsOfFile: timeFile, encoding: .utf8) {
            peak = Int(text.split(separator: "\n").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
        }
        return Run(seconds: seconds, peakKiB: peak)
    }

    /// Starts every command of `commands` at once (each under `/usr/bin/time`, its stdout to
    /// /dev/null, its environment this process's with `environment` set over it), then waits for
    /// them all. Returns the wall time from the first spawn to the last exit, and each child's
    /// own run (spawn to exit, peak RSS). A failing child stops the benchmark, showing its stderr.
    public func spawnAll(_ commands: [(program: String, args: [String], environment: [String: String])]) -> (
        wall: Double, runs: [Run]
    ) {
        struct Started {
            var pid: pid_t
            var start: Double
            var timeFile: String
            var errorFile: String
            var argv: [String]
        }
        var started: [Started] = []
        let first = now()
        for (k, command) in commands.enumerated() {
            let timeFile = base + "/time-\(k).out"
            let errorFile = base + "/stderr-\(k).log"
            let argv = ["/usr/bin/time", "-f", "%M", "-o", timeFile, command.program] + command.args
            var merged = ProcessInfo.processInfo.environment
            for (name, value) in command.environment { merged[name] = value }
            let cEnvironment: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer { cEnvironment.forEach { free($0) } }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, errorFile, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
            defer { cArgs.forEach { free($0) } }
            var pid: pid_t = 0
            let start = now()
            let status = posix_spawnp(&pid, argv[0], &actions, nil, cArgs, cEnvironment)
            guard status == 0 else { fatalError("cannot start \(argv[0]): \(String(cString: strerror(status)))") }
            started.append(Started(pid: pid, start: start, timeFile: timeFile, errorFile: errorFile, argv: argv))
        }
        var runs = [Run](repeating: Run(seconds: 0, peakKiB: 0), count: started.count)
        var last = first
        var remaining = started.count
        while remaining > 0 {
            var exitStatus: Int32 = 0
            let pid = waitpid(-1, &exitStatus, 0)
            if pid < 0 {
                guard errno == EINTR else { fatalError("waitpid: \(String(cString: strerror(errno)))") }
                continue
            }
            let end = now()
            last = max(last, end)
            guard let k = started.firstIndex(where: { $0.pid == pid }) else { continue }
            remaining -= 1
            guard exitStatus == 0 else {
                let log = (try? String(contentsOfFile: started[k].errorFile, encoding: .utf8)) ?? ""
                fatalError(
                    "\(started[k].argv.joined(separator: " ")) failed (status \(exitStatus)):\n\(log.suffix(4000))")
            }
            let text = (try? String(contentsOfFile: started[k].timeFile, encoding: .utf8)) ?? ""
            let peak = Int(text.split(separator: "\n").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
            runs[k] = Run(seconds: end - started[k].start, peakKiB: peak)
        }
        return (last - first, runs)
    }

    /// Runs a bash script (`set -eo pipefail`).
    @discardableResult
    public func shell(_ script: String, timed: Bool = true, stdout: String = "/dev/null") -> Run {
        spawn("/bin/bash", ["-c", "set -eo pipefail; " + script], stdout: stdout, timed: timed)
    }

    /// A script's stdout, without leading or trailing white space.
    public func output(_ script: String) -> String {
        let file = base + "/output.txt"
        shell(script, timed: false, stdout: file)
        return ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").trimmingCharacters(
            in: .whitespacesAndNewlines)
    }

    /// Removes a directory tree, if it exists.
    public func removeTree(_ path: String) {
        if access(path, F_OK) == 0 { shell("rm -rf \(quoted(path))", timed: false) }
    }
}
