import Foundation
import Logging
import NIOCore
import NIOPosix
import Persistence
import PostgresNIO

/// Where a PostgreSQL store lives, read from its URL:
/// `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME]`.
///
/// The password comes from the URL, else from `PGPASSWORD`. `schema` (default `public`)
/// is the PostgreSQL schema that holds the store's tables: several stores can share one
/// database. ``redacted`` is the URL without its password, for messages.
struct PostgreSQLLocation: Sendable {
    var host: String
    var port: Int
    var user: String
    var password: String?
    var database: String
    var schema: String
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
        password = components.password ?? environment["PGPASSWORD"]
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? (environment["PGDATABASE"] ?? user) : path
        var schema = "public"
        for item in components.queryItems ?? [] {
            switch item.name {
            case "schema":
                guard let value = item.value, !value.isEmpty else {
                    throw PersistenceError(.misuse, "\(redacted.absoluteString): `schema` needs a name")
                }
                schema = value
            case "sslmode" where item.value == "disable":
                continue
            case "sslmode":
                throw PersistenceError(
                    .unsupported,
                    "\(redacted.absoluteString): the PostgreSQL store cannot use TLS yet (sslmode=\(item.value ?? "")); "
                        + "use sslmode=disable on a trusted network, or wait for TLS support")
            default:
                throw PersistenceError(
                    .misuse,
                    "\(redacted.absoluteString): unknown parameter '\(item.name)' (known: schema, sslmode)")
            }
        }
        self.schema = schema
        self.redacted = redacted
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
final class PostgreSQLConnection: @unchecked Sendable {
    private let connection: PostgresConnection
    private let lock = NSRecursiveLock()
    private let logger: Logger
    let location: PostgreSQLLocation
    private var closed = false

    private static let nextID = LockedCounter()

    init(_ location: PostgreSQLLocation, logger: Logger) throws {
        self.location = location
        self.logger = logger
        let configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        do {
            connection = try PostgresConnection.connect(
                on: MultiThreadedEventLoopGroup.singleton.next(), configuration: configuration,
                id: Self.nextID.next(), logger: logger
            ).wait()
        } catch {
            throw PersistenceError(
                .io,
                "Could not connect to PostgreSQL at \(location.host):\(location.port) "
                    + "(database \(location.database), user \(location.user)): \(Self.describe(error))",
                cause: error)
        }
        do {
            _ = try run("SET search_path TO \(quote(location.schema))", [])
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

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
        var bindings = PostgresBindings(capacity: arguments.count)
        for argument in arguments { try Self.bind(argument, into: &bindings) }
        return try run(PostgresQuery(unsafeSQL: sql, binds: bindings))
    }

    /// Runs one statement.
    func run(_ query: PostgresQuery) throws -> PostgresQueryResult {
        lock.lock()
        defer { lock.unlock() }
        precondition(MultiThreadedEventLoopGroup.currentEventLoop == nil, "a blocking store call on an event loop")
        return try connection.query(query, logger: logger).wait()
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

    /// The server's message for a server error, else the error.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            return "\(error.code)"
        }
        return "\(error)"
    }

    /// The SQLSTATE of a server error (`23505`: unique violation), if it is one.
    static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }
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
