public import Foundation
import Testing

/// The PostgreSQL server the tests run against: `ASSETCAT_TEST_POSTGRESQL_URL`, which
/// Scripts/with-postgres.sh (and so `make test`) sets.
public enum PostgreSQLTestServer {
    /// The variable that names the server.
    public static let variable = "ASSETCAT_TEST_POSTGRESQL_URL"

    /// pgbouncer in front of the server, in `pool_mode = session`: Scripts/with-postgres.sh sets it.
    public static let sessionPoolVariable = "ASSETCAT_TEST_PGBOUNCER_SESSION_URL"
    /// pgbouncer in front of the server, in `pool_mode = transaction`.
    public static let transactionPoolVariable = "ASSETCAT_TEST_PGBOUNCER_TRANSACTION_URL"

    /// The server's URL (or the one in `variable`) with a new schema of its own (`schema=t_…`)
    /// in its database. Without a server, cancels the current test and says why on standard
    /// error, one line a test (a cancelled test case is not listed with its reason).
    public static func newSchema(variable: String = variable) throws -> URLComponents {
        guard let server = ProcessInfo.processInfo.environment[variable], !server.isEmpty else {
            let reason = "no PostgreSQL server: \(variable) is not set (make test sets it)"
            FileHandle.standardError.write(
                Data("◇ skipped on PostgreSQL: \(Test.current?.name ?? "?"): \(reason)\n".utf8))
            try Test.cancel(Comment(rawValue: reason))
        }
        guard var components = URLComponents(string: server) else { throw NotAURL(variable: variable) }
        let schema = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "schema", value: schema)]
        return components
    }

    struct NotAURL: Error, CustomStringConvertible {
        let variable: String
        var description: String { "\(variable) is not a URL" }
    }
}
