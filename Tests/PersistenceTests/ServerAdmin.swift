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
/// server lists none of them, nor any lock they held (a backend leaves the list of
/// activity and releases its session's advisory locks at different moments of its exit: a
/// test that then takes such a lock must not find it still held).
@discardableResult
func endServerConnections(named name: String, from admin: PostgreSQLConnection) throws -> Int {
    let pids = try admin.run("SELECT pid FROM pg_stat_activity WHERE application_name = $1", [.text(name)]).rows
        .map { try $0.decode(Int32.self) }
    for pid in pids { _ = try admin.run("SELECT pg_terminate_backend($1::INTEGER)", [.integer(Int64(pid))]) }
    let deadline = Date().addingTimeInterval(60)
    let list = pids.map(String.init).joined(separator: ", ")
    // Those processes, not the name: a session taken up again lists a new one under it at once.
    func listed() throws -> Bool {
        guard !pids.isEmpty else { return false }
        return try admin.run("SELECT 1 FROM pg_stat_activity WHERE pid IN (\(list))", []).rows.count > 0
            || admin.run("SELECT 1 FROM pg_locks WHERE pid IN (\(list))", []).rows.count > 0
    }
    while try listed() {
        guard Date() < deadline else { throw ValidationMessage("the server still lists the ended sessions") }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return pids.count
}
