import Foundation
import TestScratch
import Testing

/// Scripts/with-postgres.sh, the private PostgreSQL cluster `make test` runs the suite beside.
@Suite struct TestServerScriptTests {
    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appending(path: "Scripts/with-postgres.sh").path

    /// A run killed with SIGKILL cannot stop its server and pgbouncers or remove its
    /// directory: the next run does it, before it starts its own, and leaves nothing behind
    /// itself.
    @Test func aClusterLeftByAKilledRunIsRemovedByTheNextRun() throws {
        let temporary = try ScratchDirectory.make("with-postgres").path
        defer { try? FileManager.default.removeItem(atPath: temporary) }
        // The command kills the script that runs it with SIGKILL, which no trap sees.
        let killed = try ChildProcess(
            Self.script, ["/bin/sh", "-c", "kill -KILL $PPID"], environment: ["TMPDIR": temporary]
        ).wait(within: 120)
        #expect(killed.termination == .signalled(SIGKILL))
        let left = try FileManager.default.contentsOfDirectory(atPath: temporary)
        #expect(left.count == 1 && left[0].hasPrefix("assetcat-postgres."))
        let postmaster = try String(
            contentsOfFile: "\(temporary)/\(left[0])/data/postmaster.pid", encoding: .utf8)
        let serverPID = try #require(pid_t(postmaster.split(separator: "\n")[0]))
        #expect(Self.isRunning(serverPID))  // the server outlived its script
        // So did its two pgbouncers (session and transaction pools).
        let bouncers = try ["session", "transaction"].map { mode in
            let text = try String(contentsOfFile: "\(temporary)/\(left[0])/pgbouncer/\(mode).pid", encoding: .utf8)
            return try #require(pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        #expect(bouncers.allSatisfy(Self.isRunning))

        let next = try ChildProcess(Self.script, ["true"], environment: ["TMPDIR": temporary]).wait(within: 120)
        #expect(next.status == 0, "\(next.stderrText)")
        #expect(next.stderrText.contains("removing a PostgreSQL cluster left by a killed run: \(temporary)/\(left[0])"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary) == [])
        #expect(!Self.isRunning(serverPID))
        #expect(!bouncers.contains(where: Self.isRunning))
    }

    /// Whether `pid` is a live process: not gone, and not a zombie (an orphaned server,
    /// stopped, may wait for a reaper that never comes).
    private static func isRunning(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return false }
        return !stat[end...].hasPrefix(") Z")
    }
}
