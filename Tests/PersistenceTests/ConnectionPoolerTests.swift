import Foundation
import Persistence
import PostgresNIO
import TestScratch
import Testing

@testable import PersistencePostgreSQL

/// A store behind pgbouncer (Scripts/with-postgres.sh starts one a pool mode in front of the
/// test server). In `pool_mode = session` each of the store's connections keeps a server
/// session of its own and the store works as on the server itself (the multi-host suites run
/// through it too: Scripts/test-behind-pgbouncer.sh). In `pool_mode = transaction` a server
/// session goes to another client between transactions, taking the store's search path,
/// session locks and `LISTEN` with it: the open refuses it, before anything is written.
@Suite struct ConnectionPoolerTests {
    static func refusal(_ url: URL) -> String {
        "The store \(try! PostgreSQLLocation(url).redacted.absoluteString) is reached through a pooler that shares "
            + "server connections between transactions (pgbouncer's pool_mode = transaction or statement), and a "
            + "store needs each connection to keep its server session (its search path, session locks, LISTEN): "
            + "use pool_mode = session"
    }

    @Test(arguments: [false, true]) func aTransactionPoolIsRefusedAtOpenWithOneLine(readOnly: Bool) throws {
        let url = try PostgreSQLTestServer.newSchema(variable: PostgreSQLTestServer.transactionPoolVariable).url!
        let error = try #require(throws: PersistenceError.self) {
            var options = PersistentContainer.Options()
            options.readOnly = readOnly
            return try PersistentContainer.open(url: url, schema: try Schema(allEntities), options: options)
        }
        #expect(error.code == .unsupported)
        #expect(error.message == Self.refusal(url))
        // Nothing was made: the schema is not on the server.
        let direct = try PostgreSQLTestServer.newSchema().url!
        let admin = try serverAdmin(for: direct)
        defer { admin.close() }
        let schema = try PostgreSQLLocation(url).schema
        let found = try admin.run("SELECT count(*) FROM pg_namespace WHERE nspname = $1", [.text(schema)])
        #expect(try found.rows.first!.decode(Int64.self) == 0)
    }

    /// Many stores opened at once through a session pool: none is taken for one behind a
    /// transaction pool (a client's two connections never share a server session there).
    @Test func aSessionPoolIsNeverRefused() async throws {
        let url = try PostgreSQLTestServer.newSchema(variable: PostgreSQLTestServer.sessionPoolVariable).url!
        let first = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        defer { first.close() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<12 {
                group.addTask {
                    let container = try PersistentContainer.open(url: url, schema: try Schema(allEntities))
                    let context = container.newBackgroundContext()
                    let folder = Folder(context: context)
                    folder.name = "through pgbouncer \(i)"
                    try context.save()
                    container.close()
                }
            }
            try await group.waitForAll()
        }
        #expect(try first.newBackgroundContext().fetch(FetchRequest<Folder>()).count == 12)
    }
}
