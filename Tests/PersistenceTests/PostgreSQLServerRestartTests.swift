import Foundation
import Logging
import Persistence
import PostgresNIO
import TestScratch
import Testing

@testable import PersistencePostgreSQL

/// A server that crashes and comes back (`pg_ctl stop -m immediate`, started again a second
/// later, as a restart or a failover looks to a client): a store rides through it — the
/// next save waits for the server, within the URL's `reconnect_timeout`, and its session is
/// taken up again — and a server down for longer fails a save with one message naming the
/// server. Each test has a server of its own (``PrivatePostgreSQLServer``): the run's server
/// is shared by every other test.
@Suite struct PostgreSQLServerRestartTests {
    /// The server's URL for a new schema, with `query`.
    static func url(_ server: PrivatePostgreSQLServer, _ query: String = "") -> URL {
        URL(string: server.url.absoluteString + "?schema=t_restart" + query)!
    }

    static func notes(_ container: PersistentContainer) throws -> [String] {
        try container.newBackgroundContext().fetch(FetchRequest<Note>()).map(\.title).sorted()
    }

    static func save(_ title: String, in container: PersistentContainer) throws {
        let context = container.newBackgroundContext()
        Note(context: context).title = title
        try context.save()
    }

    /// Restarts `server` on a thread of its own: stopped now, started `after` seconds later.
    static func restart(_ server: PrivatePostgreSQLServer, after seconds: Double) throws -> Thread {
        try server.stop()
        let thread = Thread {
            Thread.sleep(forTimeInterval: seconds)
            try? server.start()
        }
        thread.start()
        return thread
    }

    @Test func aSaveAfterTheServerRestartedWaitsForItAndCommits() throws {
        let server = try PrivatePostgreSQLServer()
        defer { server.remove() }
        let container = try PersistentContainer.open(url: Self.url(server), schema: try Schema(allEntities))
        defer { container.close() }
        try Self.save("before", in: container)
        _ = try Self.restart(server, after: 1)
        let started = ContinuousClock.now
        try Self.save("after", in: container)  // the server is down when it starts
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(try Self.notes(container) == ["after", "before"])
    }

    @Test func aSessionIsTakenUpAgainAfterTheServerRestarted() async throws {
        let server = try PrivatePostgreSQLServer()
        defer { server.remove() }
        let url = Self.url(server)
        let container = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { container.close() }
        let session = try #require(try container.openSession(label: "host-a 1"))
        let other = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { other.close() }
        _ = try Self.restart(server, after: 1)
        try Self.save("after the restart", in: container)
        #expect(session.isAlive)
        // Its lock is held again: the others list it alive.
        #expect(try await eventually { try other.sessions().map(\.isAlive) == [true] })
        #expect(try other.sessions().map(\.id) == [session.id])
        #expect(session.isAlive)
        try Self.save("later", in: container)
        #expect(try Self.notes(other) == ["after the restart", "later"])
    }

    @Test func aServerDownLongerThanTheReconnectTimeoutFailsTheSaveNamingTheServer() throws {
        let server = try PrivatePostgreSQLServer()
        defer { server.remove() }
        let container = try PersistentContainer.open(
            url: Self.url(server, "&reconnect_timeout=1"), schema: try Schema(allEntities))
        defer { container.close() }
        try Self.save("before", in: container)
        try server.stop()
        // The save's first statement is its IDs' reservation.
        let message =
            "Could not reserve an ID for a new Note: The connection to PostgreSQL at 127.0.0.1:\(server.port) "
            + "(database postgres, user assetcat) was lost and could not be made again within 1 s (the store URL's "
            + "reconnect_timeout): connection refused"
        let started = ContinuousClock.now
        let error = try #require(throws: PersistenceError.self) { try Self.save("lost", in: container) }
        let waited = ContinuousClock.now - started
        #expect(error.code == .io)
        #expect(error.message == message)
        #expect(waited >= .milliseconds(900) && waited < .seconds(8), "\(waited)")
        // The outage has lasted its bound: the next save tries once, and fails at once.
        let again = ContinuousClock.now
        let second = try #require(throws: PersistenceError.self) { try Self.save("lost too", in: container) }
        #expect(second.message == message)
        #expect(ContinuousClock.now - again < .milliseconds(900))
        // Back: the next save reconnects.
        try server.start()
        try Self.save("after", in: container)
        #expect(try Self.notes(container) == ["after", "before"])
    }

    @Test func aSessionWhoseServerStaysDownEndsNamingTheServer() async throws {
        let server = try PrivatePostgreSQLServer()
        defer { server.remove() }
        let container = try PersistentContainer.open(
            url: Self.url(server, "&reconnect_timeout=1"), schema: try Schema(allEntities))
        defer { container.close() }
        let session = try #require(try container.openSession(label: "host-a 1"))
        try server.stop()
        var endings = session.endings().makeAsyncIterator()
        let ending = try #require(await endings.next())
        #expect(ending.reason == .connectionLost)
        let lost =
            "session \(session.id) lost its connection to PostgreSQL at 127.0.0.1:\(server.port), which could not be "
            + "made again within 1 s (the store URL's reconnect_timeout): connection refused"
        #expect(ending.message == lost)
        // Refused before it starts, even with the server back: the session is over.
        try server.start()
        let error = try #require(throws: PersistenceError.self) { try Self.save("after", in: container) }
        #expect(error.code == .sessionEnded)
        #expect(error.message == "This process's \(lost); nothing was saved. Open the store again.")
    }
}

/// A session's connection that the server ends (an administrator, a restart) while the
/// server stays reachable is made again, the session's lock taken again — unless another
/// process reaped the session meanwhile.
@Suite struct SessionTakeUpTests {
    @Test func aSessionWhoseConnectionTheServerEndedIsTakenUpAgain() async throws {
        let store = try TestStore(.postgresql)
        defer { store.container.close() }
        let session = try #require(try store.container.openSession(label: "host-a 1"))
        let other = try store.reopen()
        defer { other.close() }
        let admin = try serverAdmin(for: store.storeURL)
        defer { admin.close() }
        let schema = try PostgreSQLLocation(store.storeURL).schema
        #expect(try endServerConnections(named: "persistence session \(schema)", from: admin) == 1)
        // A new session connection holds the lock: the server lists it again, the others see it alive.
        #expect(
            try await eventually {
                try admin.run(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = $1",
                    [.text("persistence session \(schema)")]
                ).rows.count == 1
            })
        #expect(try await eventually { try other.sessions().map(\.isAlive) == [true] })
        #expect(session.isAlive)
        let context = store.container.newBackgroundContext()
        Note(context: context).title = "after"
        try context.save()
        #expect(try other.newBackgroundContext().fetch(FetchRequest<Note>()).map(\.title) == ["after"])
    }
}
