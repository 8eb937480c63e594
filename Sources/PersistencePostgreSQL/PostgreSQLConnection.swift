import Foundation
import Locking
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Persistence
import PostgresNIO

/// Where a PostgreSQL store lives, read from its URL:
/// `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME&sslmode=MODE&sslrootcert=FILE&reconnect_timeout=SECONDS]`.
///
/// As libpq does: a part the URL leaves out comes from `PGHOST`, `PGPORT`, `PGUSER`,
/// `PGDATABASE`, `PGSSLMODE` or `PGSSLROOTCERT`; the password from the URL, else
/// `PGPASSWORD`, else the password file (`PGPASSFILE`, default `~/.pgpass`), which is
/// ignored, with a warning, unless only its owner may read it. `schema` (default `public`)
/// is the PostgreSQL schema that holds the store's tables: several stores can share one
/// database. `reconnect_timeout` (default 10; 0: never) is how long a lost connection is
/// tried again (``reconnectTimeout``). ``redacted`` is the URL without its password, for
/// messages.
struct PostgreSQLLocation: Sendable {
    /// libpq's `sslmode`: whether the connection uses TLS, and what it checks of the
    /// server's certificate.
    enum TLSMode: String, Sendable, CaseIterable {
        /// Never TLS.
        case disable
        /// TLS if the server offers it (`allow` is taken as `prefer`); the certificate unchecked.
        case prefer
        /// TLS or no connection; the certificate checked only when a root certificate is named.
        case require
        /// TLS, the certificate signed by the root certificate.
        case verifyCA = "verify-ca"
        /// TLS, the certificate signed by the root certificate and naming the host.
        case verifyFull = "verify-full"
    }

    var host: String
    var port: Int
    var user: String
    var password: String?
    var database: String
    var schema: String
    var tls: TLSMode
    /// The file of root certificates (PEM) to check the server's against: `sslrootcert`,
    /// else `~/.postgresql/root.crt` as libpq looks for it; `system` for the system's.
    var rootCertificates: String
    /// Whether ``rootCertificates`` was named (`sslrootcert`, `PGSSLROOTCERT`).
    var namesRootCertificates: Bool
    /// How long, in seconds, a connection the server closed is tried again — a restart, a
    /// failover — before the call that needs it fails (`reconnect_timeout`, default
    /// ``defaultReconnectTimeout``; 0: tried once). See ``PostgreSQLConnection``.
    var reconnectTimeout: Double
    /// The `reconnect_timeout` of a URL that names none.
    static let defaultReconnectTimeout = 10.0
    /// What the open should warn of (a password file others may read).
    var warnings: [String] = []
    /// The URL without its password.
    var redacted: URL

    /// Whether `url` names a PostgreSQL store.
    static func names(_ url: URL) -> Bool {
        ["postgresql", "postgres"].contains(url.scheme?.lowercased() ?? "")
    }

    init(_ url: URL, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        guard Self.names(url), let components = URLComponents(url: url, resolvingAgainstBaseURL: false) else {
            throw PersistenceError(.misuse, "\(url.absoluteString) is not a postgresql:// URL")
        }
        var safe = components
        safe.password = nil
        let redacted = safe.url ?? URL(string: "postgresql://")!
        host = components.host ?? environment["PGHOST"] ?? "127.0.0.1"
        port = components.port ?? environment["PGPORT"].flatMap(Int.init) ?? 5432
        user = components.user ?? environment["PGUSER"] ?? "postgres"
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? (environment["PGDATABASE"] ?? user) : path
        var schema = "public"
        var reconnectTimeout = Self.defaultReconnectTimeout
        var sslmode = environment["PGSSLMODE"]
        var rootCertificates = environment["PGSSLROOTCERT"]
        for item in components.queryItems ?? [] {
            switch item.name {
            case "schema":
                guard let value = item.value, !value.isEmpty else {
                    throw PersistenceError(.misuse, "\(redacted.absoluteString): `schema` needs a name")
                }
                schema = value
            case "sslmode": sslmode = item.value ?? ""
            case "sslrootcert": rootCertificates = item.value ?? ""
            case "reconnect_timeout":
                guard let value = item.value.flatMap(Double.init), value.isFinite, value >= 0, value <= 86_400 else {
                    throw PersistenceError(
                        .misuse,
                        "\(redacted.absoluteString): `reconnect_timeout` needs a number of seconds from 0 to 86400")
                }
                reconnectTimeout = value
            default:
                throw PersistenceError(
                    .misuse,
                    "\(redacted.absoluteString): unknown parameter '\(item.name)' (known: schema, sslmode, sslrootcert, "
                        + "reconnect_timeout)"
                )
            }
        }
        self.reconnectTimeout = reconnectTimeout
        switch sslmode {
        case nil: tls = .prefer
        case "allow": tls = .prefer
        case let mode?:
            guard let known = TLSMode(rawValue: mode) else {
                throw PersistenceError(
                    .misuse,
                    "\(redacted.absoluteString): sslmode '\(mode)' is none of disable, allow, prefer, require, "
                        + "verify-ca, verify-full")
            }
            tls = known
        }
        let home = environment["HOME"] ?? NSHomeDirectory()
        namesRootCertificates = !(rootCertificates ?? "").isEmpty
        self.rootCertificates = namesRootCertificates ? rootCertificates! : home + "/.postgresql/root.crt"
        self.schema = schema
        self.redacted = redacted
        if let password = components.password ?? environment["PGPASSWORD"] {
            self.password = password
        } else {
            let file = environment["PGPASSFILE"] ?? home + "/.pgpass"
            let found = PasswordFile.password(
                in: file, host: host, port: port, database: database, user: user)
            password = found.password
            warnings += found.warning.map { [$0] } ?? []
        }
    }
}

/// libpq's password file: lines of `host:port:database:user:password`, `*` matching
/// anything in the first four fields, `\:` and `\\` for a colon and a backslash, `#`
/// beginning a comment; the first line that matches gives the password.
enum PasswordFile {
    /// The most of a password file read (libpq reads lines of up to 320 bytes; a file of
    /// a megabyte holds thousands).
    static let maxBytes = 1 << 20

    /// The password `file` gives for the connection, or `nil` (no file, no line matches);
    /// and why the file was ignored, if it was (not a regular file, readable by others,
    /// too large). The file is opened once, then checked (`fstat`) for what it is.
    static func password(
        in file: String, host: String, port: Int, database: String, user: String
    ) -> (password: String?, warning: String?) {
        let contents: SmallFile
        do throws(SmallFile.Failure) {
            contents = try SmallFile(file, maxBytes: maxBytes)
        } catch {
            switch error {
            case .cannotOpen: return (nil, nil)  // no password file: the server may not ask for one
            case .notPlain: return (nil, "password file \"\(file)\" is not a plain file; it is ignored")
            case .tooLarge: return (nil, "password file \"\(file)\" is larger than \(maxBytes) bytes; it is ignored")
            }
        }
        guard contents.mode & 0o077 == 0 else {
            return (
                nil,
                "password file \"\(file)\" has group or world access; permissions should be u=rw (0600) or less; "
                    + "it is ignored"
            )
        }
        let wanted = [host, String(port), database, user]
        for line in contents.bytes.split(separator: 0x0A) {
            guard line.first != 0x23, let fields = fields(of: line), fields.count == 5 else { continue }
            if zip(fields.prefix(4), wanted).allSatisfy({ $0 == "*" || $0 == $1 }) { return (fields[4], nil) }
        }
        return (nil, nil)
    }

    /// The five fields of a line, unescaped (the fifth is the rest of the line), or `nil`
    /// for a line of fewer, or not UTF-8.
    static func fields(of line: some BidirectionalCollection<UInt8>) -> [String]? {
        var fields: [[UInt8]] = [[]]
        var escaped = false
        for byte in line.last == 0x0D ? Array(line.dropLast()) : Array(line) {
            if escaped {
                fields[fields.count - 1].append(byte)
                escaped = false
            } else if byte == 0x5C {
                escaped = true
            } else if byte == 0x3A && fields.count < 5 {
                fields.append([])
            } else {
                fields[fields.count - 1].append(byte)
            }
        }
        guard fields.count == 5 else { return nil }
        var texts: [String] = []
        for field in fields {
            guard let text = String(validating: field, as: UTF8.self) else { return nil }
            texts.append(text)
        }
        return texts
    }
}

/// A small file read whole: opened once, then checked (`fstat`) for a plain file of at
/// most `maxBytes` — never checked by its path and then opened.
struct SmallFile {
    enum Failure: Error {
        /// It could not be opened (`strerror`'s reason).
        case cannotOpen(String)
        case notPlain
        case tooLarge
    }

    /// Its permission bits and type (`st_mode`).
    let mode: mode_t
    let bytes: [UInt8]

    init(_ path: String, maxBytes: Int) throws(Failure) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else { throw .cannotOpen(String(cString: strerror(errno))) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { throw .notPlain }
        guard info.st_size <= maxBytes else { throw .tooLarge }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var count = 0
        while count < bytes.count {
            let n = bytes[count...].withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            count += n
        }
        mode = info.st_mode
        self.bytes = Array(bytes[..<count])
    }
}

/// One PostgreSQL connection used synchronously: the bridge between the store's blocking
/// protocol and postgres-nio.
///
/// Every call blocks the calling thread until the server answers (`EventLoopFuture.wait()`),
/// as the SQLite store blocks on its file: callers are context queues (Dispatch threads) and
/// test threads, never an event loop — waiting on an event loop thread would deadlock it,
/// and `wait()` traps there. The connection's I/O runs on NIO's shared event loop group,
/// never on the Swift concurrency pool. One caller at a time: a lock is held for each call
/// (``withLock(_:)`` holds it across a whole transaction).
///
/// A connection the server closed (a restart, `pg_terminate_backend`, a network that
/// dropped it) is made again by the next statement outside a transaction, or the next
/// ``begin()``, with the settings of ``configure(_:_:)`` — before anything of that statement
/// or transaction is sent, the one moment a retry is safe. While the server cannot be
/// reached (refused, starting up, shutting down), that is tried again with backoff (50 ms,
/// doubling to 1 s) for ``PostgreSQLLocation/reconnectTimeout`` from the first failed
/// attempt of the outage (``ServerOutage``, shared by a store's connections); past it the
/// call fails with one message naming the server, and later calls try once each until a
/// connection is made. A refusal that waiting does not cure (a password, a database, TLS)
/// fails at once. A transaction whose connection is lost fails, and nothing of it was
/// committed — unless the loss came during ``commit()``, whose error says that the outcome
/// is unknown: neither is retried. State of the server session other than the settings
/// (session locks, `LISTEN`) does not survive the loss.
final class PostgreSQLConnection: @unchecked Sendable {
    private var connection: PostgresConnection
    private let configuration: PostgresConnection.Configuration
    private let lock = NSRecursiveLock()
    private let logger: Logger
    let location: PostgreSQLLocation
    private var closed = false
    /// Statements every server session of this connection runs first (``configure(_:_:)``).
    private var settings: [(sql: String, arguments: [StoreValue])] = []
    /// Whether a transaction is open: its statements are never sent on a new connection.
    private var inTransaction = false
    /// Whether a connection the server closed is made again (see ``init(_:logger:session:outage:)``).
    private let reconnects: Bool
    /// Since when the server has not answered a reconnect, shared with the store's other connections.
    private let outage: ServerOutage

    private static let nextID = LockedCounter()

    /// A connection to `location`. A `session` connection (a store session's, see
    /// `PostgreSQLSessions.swift`) is never made again once lost — its session lock and
    /// identity would not survive; the store replaces it, under checks, with a new one —
    /// and its socket has TCP keepalives (``keepalive``), so
    /// that the client too notices a server it can no longer reach. `pg_stat_activity`
    /// shows it as `persistence session SCHEMA`, the others as `persistence SCHEMA`. With
    /// `keepalive` (always for a session's), the server's side of the keepalives is set too
    /// (``keepaliveSettings``), in the same first statement as the search path. `outage`
    /// is shared by a store's connections: a reconnect of one while the server is down
    /// waits out what is left of the time another's already waited.
    init(
        _ location: PostgreSQLLocation, logger: Logger, session: Bool = false, keepalive: Bool = false,
        outage: ServerOutage = ServerOutage()
    ) throws {
        self.location = location
        self.logger = logger
        self.outage = outage
        reconnects = !session
        let configuration = try Self.configuration(
            location, application: "persistence \(session ? "session " : "")\(location.schema)")
        self.configuration = configuration
        if session {
            connection = try Self.connectKeepingAlive(configuration, location, logger: logger)
        } else {
            connection = try Self.connect(configuration, location, logger: logger)
        }
        do {
            try configure(
                session || keepalive ? Self.sessionSettings + ", " + Self.keepaliveSettings : Self.sessionSettings,
                [.text(quote(location.schema))])
        } catch {
            close()
            throw error
        }
    }

    /// How to connect to `location`, shown in `pg_stat_activity` as `application` (at most
    /// 63 bytes are kept).
    static func configuration(_ location: PostgreSQLLocation, application: String) throws
        -> PostgresConnection.Configuration
    {
        var configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: try Self.tls(location))
        configuration.options.additionalStartupParameters = [("application_name", application)]
        return configuration
    }

    /// A new postgres-nio connection, made with `configuration` (blocks until it is made).
    static func connect(
        _ configuration: PostgresConnection.Configuration, _ location: PostgreSQLLocation, logger: Logger
    ) throws -> PostgresConnection {
        do {
            return try PostgresConnection.connect(
                on: MultiThreadedEventLoopGroup.singleton.next(), configuration: configuration,
                id: Self.nextID.next(), logger: logger
            ).wait()
        } catch {
            throw connectFailure(error, location)
        }
    }

    /// Why a connection to `location` could not be made: one line naming the server.
    private static func connectFailure(_ error: any Error, _ location: PostgreSQLLocation) -> PersistenceError {
        PersistenceError(
            .io,
            "Could not connect to PostgreSQL at \(location.host):\(location.port) "
                + "(database \(location.database), user \(location.user)): \(describe(error))",
            cause: error)
    }

    /// What every connection sets first: the store's schema as its `search_path` (`$1`), and
    /// the planner's cost of a page read out of order, unless the server set its own. Its
    /// stock 4 models a spinning disk; 1.1 (what PostgreSQL's documentation suggests for solid
    /// state or cached storage) is what a catalog's small keyed reads cost. At 4, a save's
    /// update of 30 rows by their IDs among 10,000 read the whole table (1.6 ms against
    /// 0.2 ms), and 4 hosts working a queue spent 12 % more of the server's CPU a job.
    static let sessionSettings = """
        SELECT set_config('search_path', $1, false), set_config('random_page_cost', \
        CASE current_setting('random_page_cost') WHEN '4' THEN '1.1' ELSE current_setting('random_page_cost') END, false)
        """

    /// The client side of a session connection's TCP keepalives: a first probe after 5
    /// seconds of silence, then one a second, the connection dropped after 3 unanswered —
    /// as the server's side is set (`tcp_keepalives_idle` and its kin).
    static let keepalive = (idle: 5, interval: 1, count: 3)

    /// The server's side of the keepalives (``keepalive``), and no idle timeout that would
    /// end a quiet session's connection: `set_config` calls that follow ``sessionSettings``'s
    /// in a connection's first statement.
    static let keepaliveSettings = """
        set_config('tcp_keepalives_idle', '\(keepalive.idle)', false), \
        set_config('tcp_keepalives_interval', '\(keepalive.interval)', false), \
        set_config('tcp_keepalives_count', '\(keepalive.count)', false), \
        set_config('idle_session_timeout', '0', false)
        """

    /// Connects as ``connect(_:_:logger:)`` does, over a TCP socket of our own with
    /// keepalives (``keepalive``), which postgres-nio then speaks on (TLS included).
    private static func connectKeepingAlive(
        _ configuration: PostgresConnection.Configuration, _ location: PostgreSQLLocation, logger: Logger
    ) throws -> PostgresConnection {
        let tcp = NIOBSDSocket.OptionLevel.tcp
        let channel: any Channel
        do {
            channel = try ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton.next())
                .connectTimeout(configuration.options.connectTimeout)
                .channelOption(ChannelOptions.socketOption(.so_keepalive), value: 1)
                .channelOption(
                    ChannelOptions.Types.SocketOption(level: tcp, name: .init(rawValue: TCP_KEEPIDLE)),
                    value: keepalive.idle
                )
                .channelOption(
                    ChannelOptions.Types.SocketOption(level: tcp, name: .init(rawValue: TCP_KEEPINTVL)),
                    value: keepalive.interval
                )
                .channelOption(
                    ChannelOptions.Types.SocketOption(level: tcp, name: .init(rawValue: TCP_KEEPCNT)),
                    value: keepalive.count
                )
                .connect(host: location.host, port: location.port).wait()
        } catch {
            throw connectFailure(error, location)
        }
        var established = PostgresConnection.Configuration(
            establishedChannel: channel, tls: configuration.tls, username: configuration.username,
            password: configuration.password, database: configuration.database)
        established.options = configuration.options
        // The name TLS is checked against, as postgres-nio gives it for a host it connects to.
        if (try? SocketAddress(ipAddress: location.host, port: 0)) == nil {
            established.options.tlsServerName = location.host
        }
        do {
            return try PostgresConnection.connect(
                on: channel.eventLoop, configuration: established, id: Self.nextID.next(), logger: logger
            ).wait()
        } catch {
            channel.close(promise: nil)
            throw connectFailure(error, location)
        }
    }

    /// Calls `handler` once the connection is closed — by ``close()``, by the server, or by
    /// the network — on an event loop: it must not block. For a connection that is never
    /// made again (a session's).
    func onClose(_ handler: @escaping @Sendable () -> Void) {
        let connection = withLock { self.connection }
        connection.closeFuture.whenComplete { _ in handler() }
    }

    /// Runs `sql` (a `SET`, or `set_config` calls) now, and first thing on every connection
    /// made again after a loss.
    func configure(_ sql: String, _ arguments: [StoreValue] = []) throws {
        try withLock {
            try run(sql, arguments)
            settings.append((sql, arguments))
        }
    }

    /// The first wait before a reconnect is tried again, and the longest.
    static let retryDelays = (first: 0.05, longest: 1.0)

    /// Makes the connection again if the server closed it; outside a transaction only.
    /// While the server cannot be reached, tried again with backoff until the outage has
    /// lasted ``PostgreSQLLocation/reconnectTimeout``.
    ///
    /// - Throws: `PersistenceError` with code `io` naming the server and saying for how long
    ///   it was tried; the connect's own error for a refusal that waiting does not cure.
    private func reconnectIfLost() throws {
        guard connection.isClosed, !inTransaction, reconnects else { return }
        logger.info("reconnecting to PostgreSQL at \(location.host):\(location.port): the connection was closed")
        let bound = Duration.seconds(location.reconnectTimeout)
        var delay = Self.retryDelays.first
        while true {
            do {
                connection = try makeAgain()
                outage.end()
                return
            } catch  where Self.isUnavailable(error) {
                let waited = ContinuousClock.now - outage.begin()
                guard waited < bound else { throw unreachable(error) }
                let wait = min(Duration.seconds(delay), bound - waited)
                logger.info(
                    "PostgreSQL at \(location.host):\(location.port) cannot be reached (\(Self.reason(error))); trying again in \(wait)"
                )
                Thread.sleep(forTimeInterval: wait / .seconds(1))
                delay = min(delay * 2, Self.retryDelays.longest)
            }
        }
    }

    /// A new connection with the settings of ``configure(_:_:)``.
    private func makeAgain() throws -> PostgresConnection {
        let fresh = try Self.connect(configuration, location, logger: logger)
        do {
            for setting in settings {
                _ = try fresh.query(Self.query(setting.sql, setting.arguments), logger: logger).wait()
            }
        } catch {
            try? fresh.close().wait()
            throw error
        }
        return fresh
    }

    /// The error of a reconnect that the server did not answer for ``PostgreSQLLocation/reconnectTimeout``.
    private func unreachable(_ error: any Error) -> PersistenceError {
        let timeout = location.reconnectTimeout
        let tried =
            timeout > 0
            ? " within \(timeout.formatted(.number.grouping(.never))) s (the store URL's reconnect_timeout)" : ""
        return PersistenceError(
            .io,
            "The connection to PostgreSQL at \(location.host):\(location.port) (database \(location.database), user "
                + "\(location.user)) was lost and could not be made again\(tried): \(Self.reason(error))",
            cause: (error as? PersistenceError)?.cause ?? error)
    }

    /// What a connect's failure says, in words (``describe(_:)`` of its cause).
    static func reason(_ error: any Error) -> String {
        describe((error as? PersistenceError)?.cause ?? error)
    }

    /// Whether `error`, a connect's failure, says that the server cannot be reached now —
    /// refused, reset, timed out, closed, starting up or shutting down (SQLSTATE classes 57P
    /// and 08) — which waiting may cure; not a refusal of this client (a password, a
    /// database, TLS).
    static func isUnavailable(_ error: any Error) -> Bool {
        if let error = error as? PersistenceError { return error.cause.map(isUnavailable) ?? false }
        guard let error = error as? PSQLError else { return isNetworkFailure(error) }
        if let state = error.serverInfo?[.sqlState] { return state.hasPrefix("57P") || state.hasPrefix("08") }
        switch error.code {
        case .connectionError: return error.underlying.map(isNetworkFailure) ?? true
        case .serverClosedConnection, .uncleanShutdown: return true
        default: return false
        }
    }

    /// Whether `error` is the network's or the socket's (not TLS's).
    private static func isNetworkFailure(_ error: any Error) -> Bool {
        error is IOError || error is NIOConnectionError || error is ChannelError
    }

    /// Starts a transaction (`BEGIN`), on a connection made again if the server closed it.
    func begin() throws {
        try withLock {
            do {
                try run("BEGIN", [])
            } catch  where connection.isClosed {
                try run("BEGIN", [])  // the loss was seen only now: made again by this second try
            }
            inTransaction = true
        }
    }

    /// Commits the open transaction.
    ///
    /// - Throws: `PersistenceError` with code `io` saying the outcome is unknown when the
    ///   connection is lost before the server's answer: the transaction may have committed.
    func commit() throws {
        try withLock {
            defer { inTransaction = false }
            if connection.isClosed { throw lost(nil) }  // COMMIT was never sent
            do {
                try run("COMMIT", [])
            } catch let error as PersistenceError where error.code == .io && connection.isClosed {
                throw PersistenceError(
                    .io,
                    "The connection to PostgreSQL at \(location.host):\(location.port) was lost while committing: "
                        + "the transaction may or may not have been committed",
                    cause: error)
            }
        }
    }

    /// Rolls the open transaction back; a lost connection has rolled it back already.
    func rollback() {
        withLock {
            defer { inTransaction = false }
            guard !connection.isClosed else { return }
            _ = try? run("ROLLBACK", [])
        }
    }

    deinit { close() }

    /// The TLS that `location`'s `sslmode` asks for, as libpq gives it: `prefer` and
    /// `require` check no certificate unless a root certificate is there to check it with
    /// (`require` then behaves as `verify-ca`); `verify-ca` and `verify-full` need one.
    static func tls(_ location: PostgreSQLLocation) throws -> PostgresConnection.Configuration.TLS {
        if location.tls == .disable { return .disable }
        var configuration = TLSConfiguration.makeClientConfiguration()
        let verifies = location.tls == .verifyCA || location.tls == .verifyFull
        if location.rootCertificates == "system" {
            configuration.trustRoots = .default
        } else if let pem = try rootCertificates(location, needed: verifies) {
            do {
                configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(pem))
            } catch {
                throw PersistenceError(
                    .misuse, "root certificate file \"\(location.rootCertificates)\" holds no PEM certificate",
                    cause: error)
            }
        } else {
            configuration.certificateVerification = .none
        }
        if configuration.certificateVerification != .none {
            configuration.certificateVerification =
                location.tls == .verifyFull ? .fullVerification : .noHostnameVerification
        }
        do {
            let context = try NIOSSLContext(configuration: configuration)
            return location.tls == .prefer ? .prefer(context) : .require(context)
        } catch {
            throw PersistenceError(.io, "Could not set up TLS for PostgreSQL: \(error)", cause: error)
        }
    }

    /// The bytes of `location`'s root certificate file, opened once and then checked for a
    /// plain file; `nil` when there is none and none is `needed` (nor named).
    private static func rootCertificates(_ location: PostgreSQLLocation, needed: Bool) throws -> [UInt8]? {
        let path = location.rootCertificates
        do {
            return try SmallFile(path, maxBytes: 1 << 24).bytes
        } catch .cannotOpen(let reason) {
            guard needed || location.namesRootCertificates else { return nil }
            throw PersistenceError(
                .misuse,
                "root certificate file \"\(path)\" cannot be read (\(reason)): name one with sslrootcert=FILE, "
                    + "use the system's with sslrootcert=system, or use sslmode=require, which does not check the "
                    + "server's certificate")
        } catch {
            throw PersistenceError(.misuse, "root certificate file \"\(path)\" is not a plain file of at most 16 MB")
        }
    }

    /// Runs `body` with the connection to itself: a transaction's statements.
    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Runs one statement with its arguments (`$1`, `$2`, … in `sql`); returns its rows and
    /// the number of rows it changed.
    @discardableResult
    func run(_ sql: String, _ arguments: [StoreValue]) throws -> PostgresQueryResult {
        try run(Self.query(sql, arguments))
    }

    /// `sql` with `arguments` bound to its `$1`, `$2`, ….
    static func query(_ sql: String, _ arguments: [StoreValue]) throws -> PostgresQuery {
        var bindings = PostgresBindings(capacity: arguments.count)
        for argument in arguments { try bind(argument, into: &bindings) }
        return PostgresQuery(unsafeSQL: sql, binds: bindings)
    }

    /// Whether ``close()`` was called.
    var isClosed: Bool { withLock { closed } }

    /// Runs one statement.
    ///
    /// - Throws: `PersistenceError` with code `misuse` once the connection is closed
    ///   (postgres-nio would never answer).
    func run(_ query: PostgresQuery) throws -> PostgresQueryResult {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else {
            throw PersistenceError(
                .misuse, "the connection to PostgreSQL at \(location.host):\(location.port) is closed")
        }
        precondition(MultiThreadedEventLoopGroup.currentEventLoop == nil, "a blocking store call on an event loop")
        try reconnectIfLost()
        // postgres-nio never answers a query sent on a closed connection.
        guard !connection.isClosed else { throw lost(nil) }
        do {
            return try connection.query(query, logger: logger).wait()
        } catch  where connection.isClosed || Self.endsTheConnection(error) {
            throw lost(error)
        }
    }

    /// Whether `error` is the server ending the connection (class 57P: shut down or
    /// terminated by an administrator, `pg_terminate_backend`; a timeout of an idle
    /// session). It can reach the statement before the connection reads as closed.
    static func endsTheConnection(_ error: any Error) -> Bool {
        ["57P01", "57P02", "57P03", "57P05"].contains(sqlState(error) ?? "")
    }

    /// The error of a statement whose connection the server closed (`error`: what the
    /// statement got, if it was sent).
    private func lost(_ error: (any Error)?) -> PersistenceError {
        PersistenceError(
            .io,
            "The connection to PostgreSQL at \(location.host):\(location.port) was lost"
                + (inTransaction ? " during a transaction, which was not committed" : "")
                + (error.map { ": \(Self.describe($0))" } ?? ""),
            cause: error)
    }

    static func bind(_ value: StoreValue, into bindings: inout PostgresBindings) throws {
        switch value {
        case .null: bindings.appendNull()
        case .integer(let v): bindings.append(v)
        case .real(let v): bindings.append(v)
        case .text(let v): bindings.append(v)
        case .blob(let v): try bindings.append(v)
        }
    }

    func close() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        closed = true
        try? connection.close().wait()
    }

    /// What `error` says, in words: the server's message for a server error, else what
    /// went wrong — never a bare name of a postgres-nio error code (`connectionError`).
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            return describe(code: error.code, serverMessage: error.serverInfo?[.message], underlying: error.underlying)
        }
        return describeNetwork(error)
    }

    /// What a postgres-nio error of `code` says, in words: the server's message if there is
    /// one, else what went wrong (for `connectionError`, what the network said).
    static func describe(code: PSQLError.Code, serverMessage: String?, underlying: (any Error)?) -> String {
        if let serverMessage { return serverMessage }
        switch code {
        case .connectionError: return underlying.map(describeNetwork) ?? "the connection failed"
        case .serverClosedConnection: return "the server closed the connection"
        case .clientClosedConnection: return "the connection was closed by this process"
        case .uncleanShutdown: return "the connection ended without a clean TLS shutdown"
        case .sslUnsupported: return "the server does not accept TLS (sslmode=disable connects without it)"
        case .failedToAddSSLHandler: return "TLS could not be set up"
        case .receivedUnencryptedDataAfterSSLRequest: return "the server answered the TLS request with unencrypted data"
        case .server: return "the server reported an error"
        case .messageDecodingFailure: return "the server sent a message that could not be read"
        case .unexpectedBackendMessage: return "the server sent a message out of turn"
        case .unsupportedAuthMechanism:
            return "the server asks for an authentication method this client does not support"
        case .authMechanismRequiresPassword:
            return "the server asks for a password and none was given (the URL, PGPASSWORD or ~/.pgpass)"
        case .saslError: return "password authentication (SCRAM) failed"
        case .invalidCommandTag: return "the server sent a command tag that could not be read"
        case .queryCancelled: return "the statement was cancelled"
        case .tooManyParameters: return "the statement has more parameters than PostgreSQL takes (65,535)"
        case .listenFailed: return "LISTEN failed"
        case .unlistenFailed: return "UNLISTEN failed"
        case .poolClosed: return "the connection pool is closed"
        default: return "the PostgreSQL client failed (error code \(code))"
        }
    }

    /// What a network error says, in words: `connection refused` for a connect's
    /// `ECONNREFUSED`, `the connection was closed`, `no answer within 10 s`.
    static func describeNetwork(_ error: any Error) -> String {
        switch error {
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return describeNetwork(first.error) }
            return error.dnsAError != nil || error.dnsAAAAError != nil
                ? "the host name \(error.host) could not be resolved" : "the connection could not be made"
        case let error as IOError:
            return String(cString: strerror(error.errnoCode)).lowercased()
        case let error as ChannelError:
            switch error {
            case .connectTimeout(let time):
                return "no answer within \((Double(time.nanoseconds) / 1e9).formatted(.number.grouping(.never))) s"
            case .alreadyClosed, .ioOnClosedChannel, .eof, .inputClosed, .outputClosed:
                return "the connection was closed"
            default:
                return "the network connection failed (\(error))"
            }
        case let error as PSQLError:
            return describe(error)
        case let error where String(reflecting: type(of: error)).hasPrefix("NIOSSL."):
            return "TLS failed (\(error))"
        default:
            return "\(error)"
        }
    }

    /// The SQLSTATE of a server error (`23505`: unique violation), if it is one.
    static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }
}

/// Since when a store's server has not answered a reconnect, shared by the store's
/// connections: the bound of their retries (``PostgreSQLLocation/reconnectTimeout``) counts
/// from the first failed attempt of an outage, not from each call's — a command that meets a
/// server down for good fails after that bound once, not once for each statement it tries.
final class ServerOutage: Sendable {
    private let started = Locked<ContinuousClock.Instant?>(nil)

    init() {}

    /// When the outage began: now, if the server answered until now.
    func begin() -> ContinuousClock.Instant {
        started.withLock { started in
            let instant = started ?? .now
            started = instant
            return instant
        }
    }

    /// The server answered: the next failure begins a new outage.
    func end() { started.withLock { $0 = nil } }
}

/// Connection IDs for postgres-nio's logs.
private final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func next() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
}
