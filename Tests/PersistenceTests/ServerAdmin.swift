import Foundation
import Logging
import Persistence
import PostgresNIO
import Testing

@testable import PersistencePostgreSQL

/// A connection to the test server's database outside every store (the URL's schema dropped).
func serverAdmin(for url: URL) throws -> PostgreSQLConnection {
    var components = URLComponents(url: url, resolvingAgainstBaseURL: false)!
    components.queryItems = components.queryItems?.filter { $0.name != "schema" }
    return try PostgreSQLConnection(try PostgreSQLLocation(components.url!), logger: Logger(label: "test"))
}

/// Ends the test server's connections whose `application_name` is `name`, as
/// `pg_terminate_backend` from `admin` does, and returns how many there were once the
/// server lists none of them.
@discardableResult
func endServerConnections(named name: String, from admin: PostgreSQLConnection) throws -> Int {
    let ended = try admin.run(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", [.text(name)]
    ).rows.count
    let deadline = Date().addingTimeInterval(60)
    while try admin.run("SELECT 1 FROM pg_stat_activity WHERE application_name = $1", [.text(name)]).rows.count > 0 {
        guard Date() < deadline else { throw ValidationMessage("the server still lists the ended sessions") }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return ended
}
