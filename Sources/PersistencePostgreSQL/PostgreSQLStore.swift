public import Foundation
import Locking
import Logging
import NIOCore
public import Persistence
import PostgresNIO

extension PersistentContainer {
    /// Opens a container on the store `url` names: a PostgreSQL database for a
    /// `postgresql://` (or `postgres://`) URL, else the SQLite file at `url`.
    ///
    /// A PostgreSQL URL is `postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME]`;
    /// the password may come from `PGPASSWORD` instead, and is never part of
    /// `storeURL` or of a message. `schema` (default `public`) is the PostgreSQL schema
    /// that holds the store's tables. Opening creates the tables, indexes and links the
    /// entities declare, unless `Options.createsStore` is `false`.
    ///
    /// Delete rules (cascade, nullify, deny, `onDestinationDelete`), batch deletes and row
    /// deletions run in the store's transaction, by the same engine as on SQLite
    /// (`DeleteRules`), with the same messages.
    ///
    /// Tallies are kept by triggers (see `PostgreSQLTallies.swift` for how they differ:
    /// saves that write tallied entities run one at a time). Migrations of an existing store
    /// run in the open's transaction (`MigrationDatabase.dialect` is `.postgresql`; one
    /// statement an `execute`); a failed one changes nothing and nothing is quarantined. A
    /// read-only open sets `default_transaction_read_only` and needs a current store.
    /// `PersistentContainer.checkIntegrity()` checks that the store is the one this
    /// version makes (migrations, tables, columns, links, IDs, tally triggers); the server
    /// keeps its own pages.
    ///
    /// Where PostgreSQL behaves differently from SQLite: transactions are `READ COMMITTED`
    /// and several hosts write at once (a `beforeCommit` check does not hold other writers
    /// off, as SQLite's one writer does: saves that must not interleave take a named lock,
    /// `SaveEffects.lockFirst(_:shared:)` or `TransactionReader.lock(_:shared:)`, an advisory
    /// lock here); text cannot hold a NUL character (a save of one fails). A connection the
    /// server closes (a restart, a failover, an administrator, the network) is made again by
    /// the next save or fetch, tried again with backoff while the server cannot be reached,
    /// for up to `reconnect_timeout` seconds (a URL parameter; default 10, 0 for one try);
    /// past that the call throws `io`, naming the server. The save the connection was lost
    /// under throws, and nothing of it was committed — but for a loss while the server was
    /// committing, which the error says may or may not have committed; neither is retried. A
    /// session's connection (`PersistentContainer.openSession(label:)`) is made again only
    /// if its lock can be taken again and its row is still there (no other process reaped
    /// it); otherwise its loss ends the session and fences the container's saves.
    ///
    /// - Throws: `PersistenceError` with code `io` when the server cannot be reached (the
    ///   message names the host and port), `notFound` when the store has no schema and may
    ///   not create one, `misuse` for a URL it cannot read (an unknown parameter, `sslmode` or
    ///   `reconnect_timeout`, a root certificate file that is needed and missing),
    ///   `newerStore`, or what the SQLite open throws.
    public static func open(url: URL, schema: Schema, options: Options = Options()) throws -> PersistentContainer {
        guard PostgreSQLLocation.names(url) else {
            return try PersistentContainer(storeURL: url, schema: schema, options: options)
        }
        let store = try PostgreSQLStore(url: url, schema: schema, options: options)
        return PersistentContainer(store: store, storeURL: store.url, schema: schema, options: options)
    }
}

/// The PostgreSQL store: the tables of a ``Schema`` in one PostgreSQL schema, read and
/// written through postgres-nio.
///
/// Two connections per store: the writer, which holds a save's transaction (`READ
/// COMMITTED`; optimistic versions make a concurrent change a conflict) and the reader,
/// for fetches and for ID reservations (each its own short transaction, so that a long save
/// never holds other hosts' reservations). Both are used synchronously: see
/// ``PostgreSQLConnection``. A store with a session has a third, the session's
/// (PostgreSQLSessions.swift).
final class PostgreSQLStore: PersistentStore {
    let url: URL
    let schema: Schema
    let location: PostgreSQLLocation
    /// Whether the store was opened read-only: both connections' transactions are read-only
    /// (`SET default_transaction_read_only`), and every save is refused before it starts.
    let isReadOnly: Bool
    let writer: PostgreSQLConnection
    let reader: PostgreSQLConnection
    /// Since when the server has not answered a reconnect, shared by the store's
    /// connections: a server down for good fails a command after one bound, not after one
    /// for each connection (``PostgreSQLLocation/reconnectTimeout``).
    let outage: ServerOutage
    let sql: EntityMap<EntitySQL>
    /// The slots of each entity whose columns a constraint checks
    /// (``constrainedSlots(of:)``): only an update of one of them may be refused for its values.
    let constrainedSlots: EntityMap<Set<Int>>
    /// This store's row in the commit counters: ``externalChangeToken()`` sums the others.
    let writerID = UUID().uuidString
    /// Whether this store has counted a commit in its row (which ``close()`` then folds).
    let hasCountedCommits = Locked(false)
    let injectedFault = FaultSlot()
    /// The columns of each unique index, by index name, as SQLite names them in its
    /// messages (`Folder.name`): a constraint error reads the same on both stores.
    let uniqueColumns: [String: String]
    let logger: Logger
    /// This store's session, if it opened one (PostgreSQLSessions.swift).
    let sessionSlot = Locked(SessionSlot())
    /// The `LISTEN` of ``startAnnouncements(_:)``, once started (PostgreSQLAnnouncements.swift).
    let listenerSlot = Locked<PostgreSQLListener?>(nil)
    /// The session's connection, made alongside the writer and the reader when the open was
    /// told a session would follow (`Options.expectsSession`); taken by ``openSession(label:)``.
    let sessionConnection: ConnectionInTheMaking?

    static let sequenceTable = "_persistence_sequence"
    static let migrationsTable = "_persistence_migrations"
    static let commitsTable = "_persistence_commits"

    /// The statement that counts a commit of this store's writer, its ID bound as `parameter`.
    static func commitCount(_ parameter: String) -> String {
        """
        INSERT INTO \(commitsTable) (writer, commits) VALUES (\(parameter), 1) \
        ON CONFLICT (writer) DO UPDATE SET commits = \(commitsTable).commits + 1
        """
    }

    /// Counts the commit of the writer's transaction.
    func countCommit() throws {
        hasCountedCommits.withLock { $0 = true }
        try writer.run(Self.commitCount("$1"), [.text(writerID)])
    }
    /// The to-one relationships with an `onDestinationDelete` rule, as in the SQLite store:
    /// an open without their entity still honours them (``ForeignLink``).
    static let linksTable = "_persistence_links"

    init(url: URL, schema: Schema, options: PersistentContainer.Options) throws {
        let location = try PostgreSQLLocation(url)
        self.location = location
        self.url = location.redacted
        self.schema = schema
        isReadOnly = options.readOnly
        sql = EntityMap(schema) { EntitySQL($0, dialect: .postgresql) }
        constrainedSlots = try EntityMap(schema) { try Self.constrainedSlots(of: $0) }
        var unique: [String: String] = [:]
        for entity in schema.entities {
            for property in entity.storedProperties where property.isUnique {
                unique[entity.indexName(of: property)] = "\(entity.name).\(property.name)"
            }
            for composite in try entity.compositeIndexColumns() where composite.isUnique {
                unique[entity.indexName(columns: composite.columns, isUnique: true, filterColumn: nil)] =
                    composite.columns.map { "\(entity.name).\($0)" }.joined(separator: ", ")
            }
        }
        uniqueColumns = unique
        logger = options.logger
        for warning in location.warnings { options.logger.warning("\(warning)") }
        let outage = ServerOutage()
        self.outage = outage
        let logger = options.logger
        sessionConnection =
            options.expectsSession && !options.readOnly
            ? ConnectionInTheMaking {
                try PostgreSQLConnection(location, logger: logger, session: true, outage: outage)
            }
            : nil
        do {
            (writer, reader) = try Self.connectPair(location, logger: options.logger, outage: outage)
        } catch {
            sessionConnection?.discard()
            throw error
        }
        do {
            try requireOwnServerSessions()
            if options.readOnly {
                for connection in [writer, reader] {
                    try connection.configure("SET default_transaction_read_only = on")
                }
                try writer.withLock { try transaction(writer) { try requireCurrent() } }
            } else {
                try writer.withLock {
                    // A store already as the schema declares it is only read, by two
                    // statements outside a transaction: no DDL, no upsert, no lock that waits
                    // for another host's saves (CREATE INDEX takes a SHARE lock on its table
                    // even when the index is there). Any other is made or extended in a
                    // transaction, under the schema's lock.
                    guard try !schemaIsCurrent() else { return }
                    try transaction(writer) { try createSchema(createsStore: options.createsStore) }
                }
            }
        } catch let error as PersistenceError {
            close()
            throw error
        } catch {
            close()
            throw mapped(error, nil)
        }
    }

    deinit { close() }

    /// The writer and the reader, connected at the same time: each connection's start-up
    /// (TCP, TLS, SCRAM's key derivation, the search path) is a few round trips and some CPU,
    /// and every command waited for the two one after the other. The writer's TCP keepalives
    /// are on: a reaper's fence waits for its transaction, and a host cut off in the middle of
    /// a save is let go by the server as soon as a session's would be. The writer's error, if
    /// both fail.
    static func connectPair(_ location: PostgreSQLLocation, logger: Logger, outage: ServerOutage) throws -> (
        PostgreSQLConnection, PostgreSQLConnection
    ) {
        let second = ConnectionInTheMaking { try PostgreSQLConnection(location, logger: logger, outage: outage) }
        let first = Result { try PostgreSQLConnection(location, logger: logger, keepalive: true, outage: outage) }
        switch (first, second.take()!) {
        case (.success(let writer), .success(let reader)):
            return (writer, reader)
        case (.success(let connection), .failure(let error)), (.failure(let error), .success(let connection)):
            connection.close()
            throw error
        case (.failure(let error), .failure):
            throw error
        }
    }

    /// Refuses a pooler that hands this store's connections to other clients between
    /// transactions (pgbouncer's `pool_mode = transaction` or `statement`): the store needs
    /// each connection to keep its server session — its `search_path`, a session's advisory
    /// lock, `LISTEN`. Two connections of one client never share a server session, and one
    /// connection keeps its own, so each reports the server process behind it
    /// (`pg_backend_pid()`): the writer, the reader, the writer again. Such a pool hands the
    /// server connection a statement freed to the next client that asks (pgbouncer's default
    /// order, last freed first out), so the reader is given the writer's; in the order first
    /// freed first out, the writer comes back to another one. Three round trips at open.
    func requireOwnServerSessions() throws {
        func backend(_ connection: PostgreSQLConnection) throws -> Int64 {
            try connection.run("SELECT pg_backend_pid()::bigint", []).rows.first!.decode(Int64.self)
        }
        let writing = try backend(writer)
        let reading = try backend(reader)
        let writingAgain = try backend(writer)
        guard reading != writing && writingAgain == writing else {
            throw PersistenceError(
                .unsupported,
                "The store \(url.absoluteString) is reached through a pooler that shares server connections between "
                    + "transactions (pgbouncer's pool_mode = transaction or statement), and a store needs each connection "
                    + "to keep its server session (its search path, session locks, LISTEN): use pool_mode = session")
        }
    }

    /// Refuses a change to a store opened read-only, before anything runs.
    func requireWritable() throws {
        guard isReadOnly else { return }
        throw PersistenceError(
            .readOnly, "The store \(url.absoluteString) was opened read-only: it cannot be changed")
    }

    /// `body` between `BEGIN` and `COMMIT` on `connection`, rolled back if it throws.
    func transaction<T>(_ connection: PostgreSQLConnection, _ body: () throws -> T) throws -> T {
        try connection.begin()
        let result: T
        do {
            result = try body()
        } catch {
            connection.rollback()
            throw error
        }
        try connection.commit()
        return result
    }

    func failNextCommit(with error: any Error & Sendable) {
        injectedFault.set { throw error }
    }

    /// The commits of every other store on these tables (other connections, processes and
    /// hosts), summed: each save counts its own in its transaction.
    func externalChangeToken() throws -> Int64 {
        try mapErrors(nil) {
            let rows = try reader.run(
                "SELECT COALESCE(SUM(commits), 0)::BIGINT FROM \(Self.commitsTable) WHERE writer <> $1",
                [.text(writerID)]
            ).rows
            return try rows.first?.decode(Int64.self) ?? 0
        }
    }

    /// The row that holds the commits of stores that have closed (see ``close()``).
    static let retiredWriter = "retired"

    /// Closes both connections. First, this store's row of commits is folded into the
    /// retired row, in one transaction: the sum every other store reads stays the same, and
    /// the table holds a row per open store rather than one for every store that ever
    /// committed. A store that cannot (the server gone) leaves its row: one more row in the
    /// sum, nothing else. Closing again (the container, then `deinit`) does nothing.
    func close() {
        stopAnnouncements()
        sessionSlot.withLock { $0.storeClosed = true }  // a session still opening is not installed
        currentSession?.end()
        // A store that never committed (a command that only read) has no row to fold: no
        // transaction at its close, three round trips fewer.
        if !isReadOnly && !writer.isClosed && hasCountedCommits.withLock({ $0 }) {
            _ = try? writer.withLock {
                try transaction(writer) {
                    try writer.run(
                        """
                        WITH mine AS (DELETE FROM \(Self.commitsTable) WHERE writer = $1 RETURNING commits) \
                        INSERT INTO \(Self.commitsTable) (writer, commits) SELECT $2, commits FROM mine \
                        ON CONFLICT (writer) DO UPDATE SET commits = \(Self.commitsTable).commits + EXCLUDED.commits
                        """, [.text(writerID), .text(Self.retiredWriter)])
                }
            }
        }
        writer.close()
        reader.close()
        sessionConnection?.discard()
    }
}

/// A connection made on another thread, taken once: by the code that needs it (waiting for
/// it to be made), or by the store's close, which closes one nobody took.
final class ConnectionInTheMaking: Sendable {
    private let made = DispatchSemaphore(value: 0)
    private let result = Locked<Result<PostgreSQLConnection, any Error>?>(nil)
    private let taken = Locked(false)

    /// Starts making a connection with `connect`, on a thread of its own: it blocks until
    /// the connection is made, and on Dispatch's global queue, whose threads the open's other
    /// connections held, it waited 7–9 ms for one.
    init(_ connect: @escaping @Sendable () throws -> PostgreSQLConnection) {
        Thread.detachNewThread { [result, made] in
            let connection = Result { try connect() }
            result.withLock { $0 = connection }
            made.signal()
        }
    }

    /// The connection, or why it could not be made, once it is done; `nil` after the first call.
    func take() -> Result<PostgreSQLConnection, any Error>? {
        let first = taken.withLock { taken in
            defer { taken = true }
            return !taken
        }
        guard first else { return nil }
        made.wait()
        return result.withLock { $0 }
    }

    /// Closes the connection if nobody took it (waiting for it to be made).
    func discard() {
        if case .success(let unused) = take() { unused.close() }
    }
}

/// The fault ``PostgreSQLStore/failNextCommit(with:)`` plants, run once before a commit.
final class FaultSlot: @unchecked Sendable {
    private let lock = NSLock()
    private var fault: (@Sendable () throws -> Void)?

    func set(_ fault: @escaping @Sendable () throws -> Void) {
        lock.lock()
        defer { lock.unlock() }
        self.fault = fault
    }

    func run() throws {
        lock.lock()
        let fault = self.fault
        self.fault = nil
        lock.unlock()
        try fault?()
    }
}
