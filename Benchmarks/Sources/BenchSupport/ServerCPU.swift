// The CPU time of a PostgreSQL server of this machine, from /proc: what a benchmark's work cost
// the server.
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Clock ticks a second, as /proc counts CPU time.
private let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))

/// Fields 4 (ppid) and 14–17 (utime, stime, cutime, cstime) of /proc/PID/stat.
private func procStat(_ pid: String) -> (parent: String, own: Double, children: Double)? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return nil }
    // After the command's name (which may hold spaces): state is field 3.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 15 else { return nil }
    let number = { (field: Int) in Double(fields[field - 3]) ?? 0 }
    return (String(fields[1]), (number(14) + number(15)) / ticks, (number(16) + number(17)) / ticks)
}

/// The CPU time so far of the PostgreSQL server listening on `serverPort`, in seconds: its
/// postmaster's own and that of the children it reaped (the backends of closed connections),
/// and that of its live children. Nil when the server is not a process of this machine with
/// `-p PORT` on its command line (as Scripts/with-postgres.sh starts it).
public func serverCPU(port serverPort: UInt16) -> Double? {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
    let pids = entries.filter { $0.allSatisfy(\.isNumber) }
    let postmaster = pids.first { pid in
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        let args = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard let first = args.first, first.hasSuffix("postgres") else { return false }
        return zip(args, args.dropFirst()).contains { $0 == "-p" && $1 == "\(serverPort)" }
    }
    guard let postmaster else { return nil }
    // A closed connection's backend exits a moment after its client: its time counts once the
    // postmaster has reaped it. Waits (up to 5 s) until no client's backend is left.
    let deadline = now() + 5
    while now() < deadline {
        let backends = pids.filter { pid in
            guard procStat(pid)?.parent == postmaster,
                let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline")
            else { return false }
            return String(decoding: data, as: UTF8.self).contains("127.0.0.1(")
        }
        if backends.isEmpty { break }
        usleep(10_000)
    }
    guard let own = procStat(postmaster) else { return nil }
    var total = own.own + own.children
    for pid in pids where pid != postmaster {
        if let child = procStat(pid), child.parent == postmaster { total += child.own }
    }
    return total
}
