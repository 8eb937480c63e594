import Foundation
import Logging
import PostgresNIO
import TestScratch
import Testing

@testable import Persistence
@testable import PersistencePostgreSQL

/// Store sessions (``PersistentContainer/openSession(label:)``): liveness seen from another
/// container on the same store (another host, as far as the server can tell), reaping,
/// and the fencing of a reaped or lost session's saves. "Waits" is shown by what the server
/// shows (a lock not granted), never by time.
@Suite struct SessionTests {
    /// Two containers on one new PostgreSQL store, `a` opened with a session (cancelled
    /// without a server). `a` plays a host cut off from the server: a session connection
    /// the server ends is not taken up again (`reconnect_timeout=0`; SessionTakeUpTests
    /// shows what a host that can still reach the server does).
    struct Hosts {
        let store: TestStore
        let other: PersistentContainer
        let session: StoreSession

        init() throws {
            store = try TestStore(
                .postgresql, options: .patient, query: [URLQueryItem(name: "reconnect_timeout", value: "0")])
            other = try store.reopen(options: .patient)
            session = try #require(try store.container.openSession(label: "host-a 101"))
        }

        var a: PersistentContainer { store.container }
        var schema: String { get throws { try PostgreSQLLocation(store.storeURL).schema } }

        func close() {
            other.close()
            store.container.close()
        }
    }

    /// A connection of the test's own to the server, outside every store.
    struct Admin {
        let connection: PostgreSQLConnection

        init(_ url: URL) throws {
            connection = try serverAdmin(for: url)
        }

        /// Ends the session connections of the stores on `schema` (as the server does to a
        /// connection whose host stopped answering), and returns how many there were, once
        /// the server lists none of them.
        @discardableResult
        func endSessionConnections(of schema: String) throws -> Int {
            try endServerConnections(named: "persistence session \(schema)", from: connection)
        }

        /// How many locks the session connections of the stores on `schema` are waiting for.
        func sessionWaits(of schema: String) throws -> Int64 {
            try connection.run(
                """
                SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                WHERE NOT l.granted AND a.application_name = $1
                """, [.text("persistence session \(schema)")]
            ).rows.first?.decode(Int64.self) ?? -1
        }

        func close() { connection.close() }
    }

    /// The message of a save refused by the fence of `session`.
    static func endedMessage(_ session: StoreSession, _ store: TestStore) -> String {
        "This process's session \(session.id) with the store at \(store.storeName) ended (another process took "
            + "over its work); nothing was saved. Open the store again."
    }

    /// The message of a save refused because the connection of `session` was lost (and,
    /// with `reconnect_timeout=0`, not made again), whether or not it was reaped since.
    static func lostMessage(_ session: StoreSession, _ store: TestStore) -> String {
        "This process's session \(session.id) lost its connection to PostgreSQL at 127.0.0.1:"
            + "\(store.storeURL.port ?? 0); nothing was saved. Open the store again."
    }

    /// The titles of the notes `container` reads from the store.
    static func notes(_ container: PersistentContainer) throws -> [String] {
        try container.newBackgroundContext().fetch(FetchRequest<Note>()).map(\.title).sorted()
    }

    // MARK: - Liveness

    /// A session is listed alive by another container for as long as it is open (checked
    /// many times over: a live session is never taken for dead); once ended, its row is
    /// gone and the container saves unfenced again.
    @Test func anOpenSessionIsAliveToAnotherContainerUntilItEnds() throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let session = hosts.session
        #expect(session.isAlive)
        #expect(session.label == "host-a 101")
        #expect(hosts.a.session === session)
        for _ in 0..<200 {
            #expect(
                try hosts.other.sessions() == [
                    SessionInfo(id: session.id, label: "host-a 101", started: session.started, isAlive: true)
                ])
        }
        // The other container's own reaper, too, finds it alive and leaves it alone.
        let reaper = try #require(try hosts.other.openSession(label: "host-b 202"))
        var cleanups = 0
        #expect(try hosts.other.reap(session: session.id) { cleanups += 1 } == .alive)
        #expect(cleanups == 0)
        #expect(try hosts.other.sessions().map(\.id) == [session.id, reaper.id])
        #expect(reaper.id > session.id)

        session.end()
        #expect(
            session.state == .ended(.init(reason: .ended, message: "session \(session.id) was ended by its program")))
        #expect(hosts.a.session == nil)
        #expect(try hosts.other.sessions().map(\.id) == [reaper.id])
        let context = hosts.a.newBackgroundContext()
        Note(context: context).title = "after the end"
        try context.save()
        #expect(try Self.notes(hosts.other) == ["after the end"])
        // A new session gets a new ID: IDs are never reused.
        let next = try #require(try hosts.a.openSession(label: "host-a 101"))
        #expect(next.id > reaper.id)
    }

    /// A session whose connection the server ended (as it ends one whose host stopped
    /// answering) is dead to the others at once; its row stays for a reaper.
    @Test func aSessionWhoseConnectionEndedIsDeadToTheOthers() async throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        #expect(try admin.endSessionConnections(of: try hosts.schema) == 1)
        #expect(try await eventually { try hosts.other.sessions().first?.isAlive == false })
        #expect(try hosts.other.sessions().map(\.id) == [hosts.session.id])
    }

    /// A process killed with its session open (SIGKILL: nothing of it runs after) is seen
    /// dead by another, and its session can be reaped.
    @Test func aKilledProcessesSessionIsDead() async throws {
        let store = try TestStore(.postgresql)
        defer { store.container.close() }
        let executable = fixtureExecutable()
        try #require(FileManager.default.isExecutableFile(atPath: executable.path), "missing \(executable.path)")
        let child = try ChildProcess(executable.path, ["session", store.storeURL.absoluteString, "host-k 7"])
        let printed = await onAThread {
            child.stdout(within: 300) { String(decoding: $0, as: UTF8.self).hasSuffix("\n") }
        }
        let line = String(decoding: try #require(printed, "the fixture printed nothing"), as: UTF8.self)
        let id = try #require(Int64(line.dropFirst("session ".count).dropLast()), "\(line)")
        #expect(try store.container.sessions().map { "\($0.id) \($0.label) \($0.isAlive)" } == ["\(id) host-k 7 true"])
        child.signal(SIGKILL)
        #expect(try await child.finish().termination == .signalled(SIGKILL))
        #expect(try await eventually { try store.container.sessions().first?.isAlive == false })
        _ = try #require(try store.container.openSession(label: "host-r"))
        var cleanups = 0
        #expect(try store.container.reap(session: id) { cleanups += 1 } == .reaped)
        #expect(cleanups == 1)
    }

    /// Closing the container ends its session: the row is gone, nothing is left to reap.
    @Test func closingTheContainerEndsItsSession() throws {
        let hosts = try Hosts()
        defer { hosts.other.close() }
        hosts.a.close()
        #expect(hosts.session.ending?.reason == .ended)
        #expect(try hosts.other.sessions().isEmpty)
    }

    // MARK: - A lost connection

    /// A lost session connection (of a host cut off: `reconnect_timeout=0`) ends the
    /// session — the state says so, `onEnd` and `endings()` tell — and is not made again;
    /// every later save of the container fails with the message and commits nothing,
    /// although its own connections are fine.
    @Test func aLostSessionConnectionEndsTheSessionAndFailsLaterSaves() async throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        let told = HookLog()
        hosts.session.onEnd { told.record("\($0.reason)") }
        let endings = hosts.session.endings()
        try admin.endSessionConnections(of: try hosts.schema)

        var iterator = endings.makeAsyncIterator()
        let ending = try #require(await iterator.next())
        #expect(ending.reason == .connectionLost)
        #expect(ending.message.hasPrefix("session \(hosts.session.id) lost its connection to PostgreSQL at 127.0.0.1:"))
        #expect(await iterator.next() == nil)
        #expect(hosts.session.state == .ended(ending))
        #expect(try await eventually { told.events == ["connectionLost"] })
        #expect(hosts.a.session === hosts.session)

        let context = hosts.a.newBackgroundContext()
        let note = Note(context: context)
        note.title = "after the loss"
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .sessionEnded)
        #expect(error.message == Self.lostMessage(hosts.session, hosts.store))
        #expect(note.isInserted && context.hasChanges)  // as any failed save leaves it
        #expect(try Self.notes(hosts.other).isEmpty)
        // Not made again: the server lists no session connection, the session stays ended.
        #expect(try admin.endSessionConnections(of: try hosts.schema) == 0)
        #expect(!hosts.session.isAlive)
        let again = try #require(throws: PersistenceError.self) { try hosts.a.openSession(label: "again") }
        #expect(again.code == .misuse)
        let reaping = try #require(throws: PersistenceError.self) { try hosts.a.reap(session: 1) {} }
        #expect(reaping.code == .misuse)
        #expect(try admin.endSessionConnections(of: try hosts.schema) == 0)
    }

    // MARK: - Reaping

    /// Reaping a dead session deletes its row and runs the cleanup once, holding its lock
    /// (the server shows it held, so others list it alive meanwhile); a second reap finds
    /// the row gone and runs the (idempotent) cleanup again; an ID never handed out is said
    /// so, with nothing run.
    @Test func reapingADeadSessionFencesItAndRunsTheCleanup() async throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        let dead = hosts.session.id
        try admin.endSessionConnections(of: try hosts.schema)
        #expect(try await eventually { try hosts.other.sessions().first?.isAlive == false })

        _ = try #require(try hosts.other.openSession(label: "host-b 202"))
        let seen = HookLog()
        let outcome = try hosts.other.reap(session: dead) {
            seen.record("cleanup, the row listed: \(try hosts.other.sessions().contains { $0.id == dead })")
        }
        #expect(outcome == .reaped)
        #expect(seen.events == ["cleanup, the row listed: false"])  // fenced before the cleanup
        #expect(try hosts.other.sessions().map(\.label) == ["host-b 202"])
        var again = 0
        #expect(try hosts.other.reap(session: dead) { again += 1 } == .alreadyFenced)
        #expect(again == 1)
        var never = 0
        #expect(try hosts.other.reap(session: 1_000_000) { never += 1 } == .neverOpened)
        #expect(never == 0)
    }

    /// Reaping a dead session folds its writer's count of commits into the retired row, as a
    /// store's close does: the sum other stores poll stays the same, and the table does not
    /// keep a row for every process that was ever killed (one more row in every poll's sum).
    @Test func reapingADeadSessionFoldsItsCountOfCommits() async throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        let context = hosts.a.newBackgroundContext()
        Note(context: context).title = "saved before the end"
        try context.save()
        let writer = try #require(hosts.a.core.store as? PostgreSQLStore).writerID
        let schema = try hosts.schema
        func commits() throws -> [String: Int64] {
            Dictionary(
                uniqueKeysWithValues: try admin.connection.run(
                    "SELECT writer, commits FROM \"\(schema)\"._persistence_commits", []
                ).rows.map { try $0.decode((String, Int64).self) })
        }
        let before = try commits()
        #expect((before[writer] ?? 0) > 0)
        try admin.endSessionConnections(of: schema)
        #expect(try await eventually { try hosts.other.sessions().first?.isAlive == false })
        _ = try #require(try hosts.other.openSession(label: "host-b 202"))
        #expect(try hosts.other.reap(session: hosts.session.id) {} == .reaped)
        let after = try commits()
        #expect(after[writer] == nil)
        #expect(after.values.reduce(0, +) == before.values.reduce(0, +))
        #expect(after["retired"] == (before["retired"] ?? 0) + before[writer]!)
    }

    /// Reaping needs a session of one's own, which holds the dead one's lock.
    @Test func reapingWithoutASessionIsRefused() throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let error = try #require(throws: PersistenceError.self) {
            try hosts.other.reap(session: hosts.session.id) {}
        }
        #expect(error.code == .misuse)
    }

    /// Two reapers of one dead session at once: the second finds its lock held by the
    /// first, still cleaning up, and does nothing; only the first runs its cleanup.
    @Test func ofTwoConcurrentReapersOnlyOneRunsTheCleanup() async throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let third = try hosts.store.reopen(options: .patient)
        defer { third.close() }
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        let dead = hosts.session.id
        try admin.endSessionConnections(of: try hosts.schema)
        _ = try #require(try hosts.other.openSession(label: "host-b"))
        _ = try #require(try third.openSession(label: "host-c"))

        let gate = Gate()
        defer { gate.open() }
        let cleanups = HookLog()
        let first = Reaping(hosts.other, dead) {
            cleanups.record("b")
            try gate.park()
        }
        #expect(try await eventually { gate.isParked })
        #expect(try third.reap(session: dead) { cleanups.record("c") } == .alive)
        // The other reaper in the same process, on the same session connection, too.
        #expect(try hosts.other.reap(session: dead) { cleanups.record("b again") } == .alive)
        gate.open()
        #expect(try await first.result() == .reaped)
        #expect(cleanups.events == ["b"])
    }

    // MARK: - Fencing

    /// A process whose session was reaped while it still ran (cut off, and taken for
    /// dead) can commit nothing more: each kind of write — a context's save, rows
    /// inserted and deleted without objects, a batch delete, a recount that fixes tallies —
    /// finds its row gone, fails with the message and commits nothing; the context keeps
    /// its changes, as after any failed save.
    @Test func aReapedProcessCommitsNothing() throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let context = hosts.a.newBackgroundContext()
        Note(context: context).title = "before"
        try context.save()
        // What a reaper's fence does, while this process's connection has not noticed.
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        try admin.connection.run(
            "DELETE FROM \(quote(try hosts.schema))._persistence_sessions WHERE id = $1",
            [.integer(hosts.session.id)])
        let message = Self.endedMessage(hosts.session, hosts.store)

        let note = Note(context: context)
        note.title = "after"
        var error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .sessionEnded)
        #expect(error.message == message)
        #expect(note.isInserted && context.hasChanges)
        #expect(hosts.session.ending?.reason == .reaped)
        context.rollback()

        try context.insertRows(Note.self, count: 2) { i, row in row[\.title] = "row \(i)" }
        error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.message == message)
        context.rollback()
        try context.deleteRows(Note.self) { after in after == 0 ? [1] : [] }
        error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.message == message)
        context.rollback()
        error = try #require(throws: PersistenceError.self) { try context.batchDelete(FetchRequest<Note>()) }
        #expect(error.message == message)
        error = try #require(throws: PersistenceError.self) { try hosts.a.recountTallies(fix: true) }
        #expect(error.message == message)

        #expect(try Self.notes(hosts.other) == ["before"])
    }

    /// A reaper's fence waits for the save its session's process has in progress (the
    /// server shows the reaper's session connection waiting for a lock); that save
    /// commits, then the reaper deletes the row and cleans up, and the process's next save
    /// fails.
    @Test func aReapersFenceWaitsForASaveInProgress() async throws {
        let hosts = try Hosts()
        defer { hosts.close() }
        let admin = try Admin(hosts.store.storeURL)
        defer { admin.close() }
        let gate = Gate()
        defer { gate.open() }
        let context = hosts.a.newBackgroundContext()
        Note(context: context).title = "in flight"
        Checked(context: context).label = "parked"
        context.userInfo["beforeCommit"] = { (_: TransactionReader) in try gate.park() }
        let saving = Saving(context)
        #expect(try await eventually { gate.isParked })
        // The process is taken for dead: its session connection is gone.
        try admin.endSessionConnections(of: try hosts.schema)
        #expect(try await eventually { !hosts.session.isAlive })

        _ = try #require(try hosts.other.openSession(label: "host-b"))
        let cleanups = HookLog()
        let reaping = Reaping(hosts.other, hosts.session.id) {
            cleanups.record("cleanup sees \(try Self.notes(hosts.other))")
        }
        #expect(try await eventually { try admin.sessionWaits(of: try hosts.schema) == 1 })
        #expect(!reaping.isDone)
        #expect(!saving.isDone)
        gate.open()
        try await saving.result()
        #expect(try await reaping.result() == .reaped)
        #expect(cleanups.events == ["cleanup sees [\"in flight\"]"])

        context.userInfo["beforeCommit"] = nil
        Note(context: context).title = "too late"
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.message == Self.lostMessage(hosts.session, hosts.store))
        #expect(try Self.notes(hosts.other) == ["in flight"])
    }

    /// A session's connection, once the server has ended it, is never made again: every
    /// statement fails (the store's other connections would reconnect), and the server
    /// lists no new connection of it.
    @Test func aSessionConnectionIsNeverMadeAgain() throws {
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        let location = try PostgreSQLLocation(url)
        let connection = try PostgreSQLConnection(location, logger: Logger(label: "test"), session: true)
        defer { connection.close() }
        let admin = try Admin(url)
        defer { admin.close() }
        #expect(try admin.endSessionConnections(of: location.schema) == 1)
        for _ in 0..<2 {
            let error = try #require(throws: PersistenceError.self) { try connection.run("SELECT 1", []) }
            #expect(error.code == .io)
            #expect(error.message.hasPrefix("The connection to PostgreSQL at 127.0.0.1:"))
        }
        #expect(try admin.endSessionConnections(of: location.schema) == 0)
    }

    /// A session's connection is a socket of our own (for its keepalives) that postgres-nio
    /// speaks on: TLS works on it as on the store's, certificate and host checked; and the
    /// server's side of its keepalives is set by its first statement.
    @Test func aSessionConnectionSpeaksTLSAndKeepsAlive() throws {
        var components = URLComponents(
            url: try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/")), resolvingAgainstBaseURL: false)!
        let authority = try #require(ProcessInfo.processInfo.environment["ASSETCAT_TEST_POSTGRESQL_CA"])
        components.queryItems! += [
            URLQueryItem(name: "sslmode", value: "verify-full"), URLQueryItem(name: "sslrootcert", value: authority),
        ]
        let connection = try PostgreSQLConnection(
            try PostgreSQLLocation(components.url!), logger: Logger(label: "test"), session: true)
        defer { connection.close() }
        let ssl = try connection.run("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", []).rows
        #expect(try #require(ssl.first).decode(Bool.self))
        let settings = try connection.run(
            """
            SELECT current_setting('tcp_keepalives_idle') || ' ' || current_setting('tcp_keepalives_interval') \
            || ' ' || current_setting('tcp_keepalives_count')
            """, []
        ).rows
        #expect(try #require(settings.first).decode(String.self) == "5 1 3")
    }

    /// A new PostgreSQL store opened with `expectsSession`, and the server's list of its
    /// session connections.
    struct StoreExpectingSession {
        let store: TestStore
        let schema: String
        let admin: Admin

        init() throws {
            var options = PersistentContainer.Options()
            options.expectsSession = true
            store = try TestStore(.postgresql, options: options)
            schema = try PostgreSQLLocation(store.storeURL).schema
            admin = try Admin(store.storeURL)
        }

        /// The server processes of the session connections of the stores on this schema.
        func sessionConnections() throws -> [Int32] {
            try admin.connection.run(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                [.text("persistence session \(schema)")]
            ).rows.map { try $0.decode(Int32.self) }
        }

        func close() {
            admin.close()
            store.container.close()
        }
    }

    /// An open told a session will follow (`expectsSession`) makes the session's connection
    /// alongside the store's: the server lists it before the session is opened, the session
    /// is opened on that very connection (its lock is that server process's, and no other
    /// session connection is made), and a store closed without a session closes it.
    @Test func aSessionExpectedAtOpenHasItsConnectionMadeWithTheStores() async throws {
        let opened = try StoreExpectingSession()
        defer { opened.close() }
        let store = opened.store
        #expect(try await eventually { try opened.sessionConnections().count == 1 })
        let made = try opened.sessionConnections()
        let session = try #require(try store.container.openSession(label: "host-a 101"))
        #expect(try opened.sessionConnections() == made)
        let holder = try opened.admin.connection.run(
            """
            SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 \
            AND classid = (hashtext($1)::bigint & 4294967295)::oid AND objid = $2::oid
            """, [.text("persistence-session:" + opened.schema), .integer(session.id)]
        ).rows.map { try $0.decode(Int32.self) }
        #expect(holder == made)
        // The writer's keepalives, set by its first statement: a reaper's fence waits for its
        // transactions, so the server must notice a host gone in the middle of one.
        let writer = try #require(store.container.core.store as? PostgreSQLStore).writer
        let keepalives = try writer.run(
            """
            SELECT current_setting('tcp_keepalives_idle') || ' ' || current_setting('tcp_keepalives_interval') \
            || ' ' || current_setting('tcp_keepalives_count')
            """, []
        ).rows
        #expect(try #require(keepalives.first).decode(String.self) == "5 1 3")

        var options = PersistentContainer.Options()
        options.expectsSession = true
        let unused = try store.reopen(options: options)
        #expect(try await eventually { try opened.sessionConnections().count == 2 })
        unused.close()
        #expect(try await eventually { try opened.sessionConnections() == made })
    }

    /// A closed container opens no session: it is refused in words, and nothing of one is
    /// left on the server (a session installed on a closed store would hold its lock and row
    /// until the process ends). Likewise for a session still opening when its store closes.
    @Test func aClosedContainerOpensNoSession() throws {
        let store = try TestStore(.postgresql)
        let schema = try PostgreSQLLocation(store.storeURL).schema
        store.container.close()
        let error = try #require(throws: PersistenceError.self) { try store.container.openSession(label: "late") }
        #expect(error.code == .misuse)
        #expect(error.message == "The container of the store at \(store.storeName) is closed: it opens no session")
        let other = try store.reopen()
        defer { other.close() }
        #expect(try other.sessions().isEmpty)
        let admin = try Admin(store.storeURL)
        defer { admin.close() }
        #expect(try admin.endSessionConnections(of: schema) == 0)
    }

    /// The connection made at the open for a session, ended by the server before the session
    /// is opened (a restart, an administrator), is replaced: the session opens on a new one.
    @Test func aSessionConnectionMadeAtTheOpenAndLostIsReplaced() async throws {
        let opened = try StoreExpectingSession()
        defer { opened.close() }
        #expect(try await eventually { try opened.sessionConnections().count == 1 })
        #expect(try opened.admin.endSessionConnections(of: opened.schema) == 1)
        let session = try #require(try opened.store.container.openSession(label: "host-a 101"))
        #expect(session.isAlive)
        let other = try opened.store.reopen()
        defer { other.close() }
        #expect(try other.sessions().map(\.id) == [session.id])
        #expect(try other.sessions().first?.isAlive == true)
    }

    /// The sessions' table and sequence are the store's own: an open makes them in a store
    /// that lacks them (one made before sessions were), and the integrity check reports
    /// them missing.
    @Test func aStoreWithoutTheSessionsTablesGetsThemAtOpen() throws {
        let store = try TestStore(.postgresql)
        defer { store.container.close() }
        let admin = try Admin(store.storeURL)
        defer { admin.close() }
        let schema = quote(try PostgreSQLLocation(store.storeURL).schema)
        try admin.connection.run("DROP TABLE \(schema)._persistence_sessions", [])
        try admin.connection.run("DROP SEQUENCE \(schema)._persistence_session_ids", [])
        #expect(
            try store.container.checkIntegrity() == [
                "the table \"_persistence_sessions\" is missing",
                "the sequence \"_persistence_session_ids\" is missing",
            ])
        let reopened = try store.reopen()
        defer { reopened.close() }
        #expect(try reopened.checkIntegrity() == [])
        let session = try #require(try reopened.openSession(label: "after"))
        #expect(try reopened.sessions().map(\.id) == [session.id])
    }

    /// A store whose sessions' table is an earlier version's (no column for the session's
    /// writer) gets the column at its next open, and sessions open in it.
    @Test func aStoreOfAnEarlierSessionsTableGetsTheWriterColumnAtOpen() throws {
        let store = try TestStore(.postgresql)
        defer { store.container.close() }
        let admin = try Admin(store.storeURL)
        defer { admin.close() }
        let schema = quote(try PostgreSQLLocation(store.storeURL).schema)
        try admin.connection.run("ALTER TABLE \(schema)._persistence_sessions DROP COLUMN writer", [])
        let reopened = try store.reopen()
        defer { reopened.close() }
        let session = try #require(try reopened.openSession(label: "after"))
        #expect(try reopened.sessions().map(\.id) == [session.id])
    }

    // MARK: - Both stores

    /// On SQLite there are no sessions: none opens, none is listed, reaping is refused as
    /// unsupported, and saves go on as ever. On PostgreSQL saves under a live session
    /// commit.
    @Test(arguments: StoreKind.allCases) func savesUnderASessionOrWithoutOne(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let session = try store.container.openSession(label: "one host")
        #expect((session == nil) == (kind == .sqlite))
        #expect(try store.container.sessions().map(\.id) == (session.map { [$0.id] } ?? []))
        if kind == .sqlite {
            #expect(store.container.session == nil)
            let error = try #require(throws: PersistenceError.self) { try store.container.reap(session: 1) {} }
            #expect(error.code == .unsupported)
        }
        let context = store.context()
        Note(context: context).title = "saved"
        try context.save()
        try context.insertRows(Note.self, count: 1) { _, row in row[\.title] = "row" }
        try context.save()
        #expect(try store.stored(FetchRequest<Note>()).map(\.title).sorted() == ["row", "saved"])
        store.container.close()
    }
}

/// A reap run on a thread of its own, since its fence may wait for a save; awaited without
/// blocking the concurrency pool.
private final class Reaping: @unchecked Sendable {
    private let lock = NSLock()
    private var outcome: Result<ReapOutcome, any Error>?

    init(_ container: PersistentContainer, _ id: Int64, cleanup: @escaping @Sendable () throws -> Void) {
        Thread { [self] in
            let result = Result { try container.reap(session: id, cleanup: cleanup) }
            lock.withLock { outcome = result }
        }.start()
    }

    var isDone: Bool { lock.withLock { outcome != nil } }

    func result() async throws -> ReapOutcome {
        guard try await eventually({ isDone }) else { throw ValidationMessage("the reap never ended") }
        return try lock.withLock { outcome! }.get()
    }
}

/// `body`, which blocks, on a thread of its own, off the concurrency pool.
private func onAThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}
