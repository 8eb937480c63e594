public import Foundation
import Testing

/// The PostgreSQL server the tests run against: `ASSETCAT_TEST_POSTGRESQL_URL`, which
/// Scripts/with-postgres.sh (and so `make test`) sets.
public enum PostgreSQLTestServer {
    /// The variable that names the server.
    public static let variable = "ASSETCAT_TEST_POSTGRESQL_URL"

    /// The server's URL with a new schema of its own (`schema=t_…`) in its database. Without
    /// a server, cancels the current test and says why on standard error, one line a test (a
    /// cancelled test case is not listed with its reason).
    public static func newSchema() throws -> URLComponents {
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
