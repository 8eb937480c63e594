import Foundation
import Logging
import Persistence
import PostgresNIO
import Testing

@testable import PersistencePostgreSQL

/// A connection the server closes (a restart, an administrator, a network that dropped it):
/// what was in flight fails and commits nothing, and the store goes on with a new connection.
@Suite struct PostgreSQLReconnectTests {
    /// The test server's URL for a schema of the test's own (cancelled without a server).
    func serverURL() throws -> URL {
        try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
    }

    /// Ends every server session of the store at `url` from another connection, as
    /// `pg_terminate_backend` does, and returns how many there were once the server lists
    /// none of them.
    @discardableResult
    func endSessions(of url: URL) throws -> Int {
        let admin = try serverAdmin(for: url)
        defer { admin.close() }
        return try endServerConnections(named: "persistence \(try PostgreSQLLocation(url).schema)", from: admin)
    }

    func notes(at url: URL) throws -> [String] {
        let container = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { container.close() }
        return try container.newBackgroundContext().fetch(FetchRequest<Note>()).map(\.title).sorted()
    }

    @Test func theNextSaveAndFetchAfterTheServerClosedTheConnectionsWork() throws {
        let url = try serverURL()
        let container = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { container.close() }
        let context = container.newBackgroundContext()
        Note(context: context).title = "before"
        try context.save()
        #expect(try endSessions(of: url) == 2)  // the writer and the reader
        Note(context: context).title = "after"
        try context.save()
        #expect(
            try container.newBackgroundContext().fetch(FetchRequest<Note>()).map(\.title).sorted() == [
                "after", "before",
            ])
        #expect(try notes(at: url) == ["after", "before"])
    }

    @Test func aConnectionLostDuringASaveFailsTheSaveAndCommitsNothingOfIt() throws {
        let url = try serverURL()
        let container = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { container.close() }
        let context = container.newBackgroundContext()
        Note(context: context).title = "kept"
        try context.save()
        context.userInfo["beforeCommit"] = { (_: TransactionReader) in _ = try self.endSessions(of: url) }
        let lost = Note(context: context)
        lost.title = "lost"
        Checked(context: context).label = "check"
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .io)
        let port = try #require(url.port)
        #expect(
            error.message.hasPrefix(
                "The connection to PostgreSQL at 127.0.0.1:\(port) was lost during a transaction, which was not "
                    + "committed"), "\(error.message)")
        #expect(lost.isInserted)
        #expect(try notes(at: url) == ["kept"])
        // The same context saves what it still holds, on a connection made again.
        context.userInfo["beforeCommit"] = nil
        try context.save()
        #expect(try notes(at: url) == ["kept", "lost"])
    }

    /// A transaction whose connection is gone before `COMMIT` is sent was not committed; the
    /// next transaction runs on a new connection with the settings of the first.
    @Test func aTransactionWhoseConnectionWasLostIsNotCommittedAndTheNextOneWorks() throws {
        let url = try serverURL()
        let connection = try PostgreSQLConnection(try PostgreSQLLocation(url), logger: Logger(label: "test"))
        defer { connection.close() }
        try connection.run("CREATE SCHEMA IF NOT EXISTS \(quote(try PostgreSQLLocation(url).schema))", [])
        try connection.run("CREATE TABLE kept (n INTEGER)", [])  // in the schema: search_path is set
        try connection.begin()
        try connection.run("INSERT INTO kept VALUES (1)", [])
        #expect(try endSessions(of: url) == 1)
        let error = try #require(throws: PersistenceError.self) { try connection.commit() }
        #expect(error.code == .io)
        // The loss is seen before COMMIT is sent, or as the server's answer to it (its
        // "terminating connection due to administrator command" then follows the message).
        // On a loaded machine COMMIT may be on its way when the connection closes: the client
        // cannot tell then, and says so; the table below shows it was not committed.
        let port = try #require(url.port)
        let lost = "The connection to PostgreSQL at 127.0.0.1:\(port) was lost"
        #expect(
            error.message.hasPrefix("\(lost) during a transaction, which was not committed")
                || error.message.hasPrefix(
                    "\(lost) while committing: the transaction may or may not have been committed"),
            "\(error.message)")
        try connection.begin()
        try connection.run("INSERT INTO kept VALUES (2)", [])
        try connection.commit()
        #expect(try connection.run("SELECT n FROM kept", []).rows.map { try $0.decode(Int.self) } == [2])
    }
}
