public import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL server of one test's own, which the test may stop and start again — as a
/// crash and a restart do — without disturbing the tests that share the run's server
/// (``PostgreSQLTestServer``). Made as Scripts/with-postgres.sh makes that one: `initdb`
/// into a scratch directory, listening on 127.0.0.1 only, on a free port, no unix socket,
/// without fsync (a crash of the server, not of the machine, loses nothing committed) but
/// with `synchronous_commit` on (else a crash loses what it said was committed), run as
/// `nobody` when the tests run as root; `trust` authentication (no password), user
/// `assetcat`, database `postgres`.
///
/// ```swift
/// let server = try PrivatePostgreSQLServer()
/// defer { server.remove() }
/// try server.stop()     // pg_ctl stop -m immediate: a crash, as far as clients can tell
/// try server.start()    // the same port, after the server's crash recovery
/// ```
public final class PrivatePostgreSQLServer: @unchecked Sendable {
    /// The port it listens on, the same after every ``start()``.
    public let port: Int
    /// `postgresql://assetcat@127.0.0.1:PORT/postgres`.
    public var url: URL { URL(string: "postgresql://assetcat@127.0.0.1:\(port)/postgres")! }

    private let directory: URL
    private let binaries: String
    private let lock = NSLock()
    private var isRunning = false

    /// Makes and starts a server. Without the run's server (``PostgreSQLTestServer/variable``
    /// unset: the tests did not run through Scripts/with-postgres.sh), or without
    /// PostgreSQL's programs, cancels the current test and says why, as
    /// ``PostgreSQLTestServer/newSchema()`` does.
    public init() throws {
        _ = try PostgreSQLTestServer.newSchema()  // cancels the test without a server
        binaries = try Self.binaries()
        directory = try ScratchDirectory.make("postgres")
        // The server's user must be able to reach and own its directory.
        _ = chmod(directory.path, 0o755)
        if getuid() == 0 {
            let nobody = getpwnam("nobody")
            _ = chown(directory.path, nobody?.pointee.pw_uid ?? 65534, nobody?.pointee.pw_gid ?? 65534)
        }
        let data = directory.appending(path: "data").path
        try Self.check(
            try Self.run(
                binaries + "/initdb",
                ["-D", data, "-U", "assetcat", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                in: directory), "initdb")
        var port = 0
        for _ in 0..<5 {
            port = Self.freePort()
            if (try? Self.start(binaries, directory, on: port)) != nil { break }
            port = 0
        }
        guard port != 0 else {
            let log = (try? String(contentsOf: directory.appending(path: "server.log"), encoding: .utf8)) ?? ""
            throw Failure(description: "could not start PostgreSQL: \(log)")
        }
        self.port = port
        isRunning = true
    }

    deinit { remove() }

    /// The folder of the newest PostgreSQL installed; cancels the test without one.
    private static func binaries() throws -> String {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        guard let version = versions.sorted(by: { $0.compare($1, options: .numeric) == .orderedAscending }).last
        else {
            let reason = "no PostgreSQL programs in /usr/lib/postgresql (Scripts/install-deps.sh installs them)"
            try Test.cancel(Comment(rawValue: reason))
        }
        return "/usr/lib/postgresql/\(version)/bin"
    }

    /// Stops the server as `pg_ctl stop -m immediate` does — every server process ends at
    /// once, without a checkpoint — and returns once it has.
    public func stop() throws {
        try Self.check(
            try Self.run(
                binaries + "/pg_ctl", ["-D", data, "-m", "immediate", "-w", "-t", "60", "stop"], in: directory),
            "pg_ctl stop")
        lock.withLock { isRunning = false }
    }

    /// Starts the server again on its port, and returns once it takes connections.
    public func start() throws {
        try Self.start(binaries, directory, on: port)
        lock.withLock { isRunning = true }
    }

    /// Stops the server, if it runs, and removes its directory.
    public func remove() {
        if lock.withLock({ isRunning }) { try? stop() }
        try? FileManager.default.removeItem(at: directory)
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    private var data: String { directory.appending(path: "data").path }

    /// Starts the server of `directory` on `port` (its log: `server.log` there).
    private static func start(_ binaries: String, _ directory: URL, on port: Int) throws {
        let log = directory.appending(path: "server.log").path
        let options =
            "-c listen_addresses=127.0.0.1 -p \(port) -c unix_socket_directories='' -c fsync=off "
            + "-c max_connections=100"
        let data = directory.appending(path: "data").path
        let outcome = try run(
            binaries + "/pg_ctl", ["-D", data, "-l", log, "-w", "-t", "60", "-o", options, "start"], in: directory)
        try check(outcome, "pg_ctl start (log: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""))")
    }

    /// Runs one of PostgreSQL's programs, as `nobody` when this process is root.
    private static func run(_ program: String, _ arguments: [String], in directory: URL) throws
        -> ChildProcess.Outcome
    {
        guard getuid() == 0 else {
            return try ChildProcess(program, arguments, workingDirectory: directory.path).wait(within: 120)
        }
        let asNobody = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", program]
        return try ChildProcess("/usr/bin/setpriv", asNobody + arguments, workingDirectory: directory.path).wait(
            within: 120)
    }

    private static func check(_ outcome: ChildProcess.Outcome, _ what: String) throws {
        guard outcome.status != 0 else { return }
        throw Failure(
            description: "\(what) failed (\(outcome.termination)): \(outcome.stdoutText)\(outcome.stderrText)")
    }

    /// A port the kernel says is free now (another process may take it before the server does).
    private static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : 20_000 + Int.random(in: 0..<20_000)
    }
}
