import Foundation
import Logging
import Persistence
import PostgresNIO
import TestScratch
import Testing

@testable import PersistencePostgreSQL

/// How a PostgreSQL URL becomes a connection, as libpq reads one: the password file
/// (`~/.pgpass`) and TLS (`sslmode`, `sslrootcert`).
@Suite struct PostgreSQLConnectionTests {
    /// A scratch home directory: neither the machine's `~/.pgpass` nor its root
    /// certificates reach a test.
    let home: URL

    init() throws {
        home = try ScratchDirectory.make("pg-home")
    }

    /// Writes `text` to a password file in the scratch home with `mode`; its path.
    func passwordFile(_ text: String, mode: Int = 0o600) throws -> String {
        let path = home.appending(path: "pgpass-\(UUID().uuidString)").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }

    func location(_ url: String, _ environment: [String: String] = [:]) throws -> PostgreSQLLocation {
        try PostgreSQLLocation(URL(string: url)!, environment: ["HOME": home.path].merging(environment) { $1 })
    }

    /// The test server's URL (the test is cancelled without one), with `change` applied.
    func serverURL(_ change: (inout URLComponents) -> Void = { _ in }) throws -> URL {
        var components = URLComponents(
            url: try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/")), resolvingAgainstBaseURL: false)!
        change(&components)
        return components.url!
    }

    /// The test server's certificate authority (Scripts/with-postgres.sh makes it).
    var serverCA: String {
        get throws {
            try #require(ProcessInfo.processInfo.environment["ASSETCAT_TEST_POSTGRESQL_CA"])
        }
    }

    /// Whether a connection to `location` runs over TLS, as the server sees it.
    func usesTLS(_ location: PostgreSQLLocation) throws -> Bool {
        let connection = try PostgreSQLConnection(location, logger: Logger(label: "test"))
        defer { connection.close() }
        let rows = try connection.run("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", []).rows
        return try #require(rows.first).decode(Bool.self)
    }

    // MARK: The password file

    @Test func thePasswordFileGivesThePasswordOfTheFirstLineThatMatches() throws {
        let file = try passwordFile(
            """
            # comment: db.example.org:5432:*:*:not this one
            other.example.org:5432:*:*:wrong host
            db.example.org:5433:*:*:wrong port
            db.example.org:5432:catalog:someone-else:wrong user
            db.example.org:*:catalog:ingest:se\\:cr\\\\et:with a colon\r
            *:*:*:*:too late
            """)
        let found = PasswordFile.password(
            in: file, host: "db.example.org", port: 5432, database: "catalog", user: "ingest")
        #expect(found.password == "se:cr\\et:with a colon" && found.warning == nil)
        #expect(
            PasswordFile.password(in: file, host: "elsewhere", port: 1, database: "x", user: "y").password
                == "too late")
        // Through the URL: PGPASSFILE names the file; a password in the URL or PGPASSWORD wins.
        let environment = ["PGPASSFILE": file]
        #expect(
            try location("postgresql://ingest@db.example.org/catalog", environment).password == "se:cr\\et:with a colon"
        )
        #expect(try location("postgresql://ingest:given@db.example.org/catalog", environment).password == "given")
        #expect(
            try location(
                "postgresql://ingest@db.example.org/catalog", environment.merging(["PGPASSWORD": "env"]) { $1 }
            )
            .password == "env")
    }

    @Test func thePasswordFileIsLookedForInTheHomeDirectory() throws {
        let file = home.appending(path: ".pgpass").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data("*:*:*:*:from home\n".utf8)))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        #expect(try location("postgresql://u@h/d").password == "from home")
    }

    @Test func aPasswordFileOthersMayReadIsIgnoredWithAWarning() throws {
        let file = try passwordFile("*:*:*:*:secret\n", mode: 0o644)
        let found = try location("postgresql://u@h/d", ["PGPASSFILE": file])
        #expect(found.password == nil)
        #expect(
            found.warnings == [
                "password file \"\(file)\" has group or world access; permissions should be u=rw (0600) or less; "
                    + "it is ignored"
            ])
        // A folder is not a password file; no file is no password and no warning.
        let folder = try location("postgresql://u@h/d", ["PGPASSFILE": home.path])
        #expect(
            folder.password == nil
                && folder.warnings == ["password file \"\(home.path)\" is not a plain file; it is ignored"])
        let none = try location("postgresql://u@h/d", ["PGPASSFILE": home.appending(path: "absent").path])
        #expect(none.password == nil && none.warnings.isEmpty)
    }

    @Test func theServerTakesThePasswordFromThePasswordFile() throws {
        let url = try serverURL()
        let password = try #require(url.password)
        let file = try passwordFile("127.0.0.1:\(url.port!):*:\(url.user!):\(password)\n")
        var without = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
        without.password = nil
        let connection = try PostgreSQLConnection(
            try location(without.url!.absoluteString, ["PGPASSFILE": file]), logger: Logger(label: "test"))
        defer { connection.close() }
        #expect(try connection.run("SELECT 1", []).rows.count == 1)
    }

    /// postgres-nio never answers a query on a closed connection: the connection refuses it.
    @Test func aClosedConnectionRefusesAQueryRatherThanWaitForever() throws {
        let url = try serverURL()
        let connection = try PostgreSQLConnection(try location(url.absoluteString), logger: Logger(label: "test"))
        connection.close()
        let error = try #require(throws: PersistenceError.self) { try connection.run("SELECT 1", []) }
        #expect(error.message == "the connection to PostgreSQL at 127.0.0.1:\(url.port!) is closed")
    }

    // MARK: TLS

    @Test func sslModesAreLibpqs() throws {
        #expect(try location("postgresql://u@h/d").tls == .prefer)
        #expect(try location("postgresql://u@h/d?sslmode=allow").tls == .prefer)
        #expect(try location("postgresql://u@h/d?sslmode=verify-ca").tls == .verifyCA)
        #expect(try location("postgresql://u@h/d", ["PGSSLMODE": "require"]).tls == .require)
        #expect(try location("postgresql://u@h/d?sslmode=disable", ["PGSSLMODE": "require"]).tls == .disable)
        let error = try #require(throws: PersistenceError.self) { try location("postgresql://u:pw@h/d?sslmode=on") }
        #expect(
            error.message
                == "postgresql://u@h/d?sslmode=on: sslmode 'on' is none of disable, allow, prefer, require, verify-ca, verify-full"
        )
    }

    @Test func eachSSLModeConnectsAsItSays() throws {
        _ = try serverURL()  // first: without a server, the test is cancelled here
        let ca = try serverCA
        func mode(_ mode: String, _ more: [URLQueryItem] = []) throws -> PostgreSQLLocation {
            let url = try serverURL { $0.queryItems! += [URLQueryItem(name: "sslmode", value: mode)] + more }
            return try location(url.absoluteString)
        }
        #expect(try usesTLS(mode("disable")) == false)
        #expect(try usesTLS(location(try serverURL().absoluteString)) == true)  // prefer, by default
        #expect(try usesTLS(mode("require")) == true)
        #expect(try usesTLS(mode("verify-ca", [URLQueryItem(name: "sslrootcert", value: ca)])) == true)
        #expect(try usesTLS(mode("verify-full", [URLQueryItem(name: "sslrootcert", value: ca)])) == true)
        // ~/.postgresql/root.crt, where libpq looks for it.
        try FileManager.default.createDirectory(
            at: home.appending(path: ".postgresql"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: ca, toPath: home.appending(path: ".postgresql/root.crt").path)
        #expect(try usesTLS(mode("verify-full")) == true)
    }

    @Test func aServerCertificateNoRootSignedIsRefused() throws {
        let other = home.appending(path: "other-ca.pem").path
        #expect(FileManager.default.createFile(atPath: other, contents: Data(Self.otherCA.utf8)))
        for mode in ["verify-ca", "verify-full", "require"] {
            let url = try serverURL {
                $0.queryItems! += [
                    URLQueryItem(name: "sslmode", value: mode), URLQueryItem(name: "sslrootcert", value: other),
                ]
            }
            let error = try #require(throws: PersistenceError.self, "\(mode)") {
                try usesTLS(location(url.absoluteString))
            }
            #expect(error.code == .io)
            #expect(error.message.hasPrefix("Could not connect to PostgreSQL at 127.0.0.1:\(url.port!) "), "\(error)")
        }
    }

    @Test func aRootCertificateThatIsNeededAndMissingIsNamed() throws {
        let url = try serverURL { $0.queryItems! += [URLQueryItem(name: "sslmode", value: "verify-full")] }
        let missing = home.appending(path: ".postgresql/root.crt").path
        let error = try #require(throws: PersistenceError.self) { try usesTLS(location(url.absoluteString)) }
        #expect(
            error.message
                == "root certificate file \"\(missing)\" cannot be read (No such file or directory): name one with "
                + "sslrootcert=FILE, use the system's with sslrootcert=system, or use sslmode=require, which does not "
                + "check the server's certificate")
        let notPEM = try passwordFile("not a certificate")
        let url2 = try serverURL {
            $0.queryItems! += [
                URLQueryItem(name: "sslmode", value: "verify-ca"), URLQueryItem(name: "sslrootcert", value: notPEM),
            ]
        }
        let error2 = try #require(throws: PersistenceError.self) { try usesTLS(location(url2.absoluteString)) }
        #expect(error2.message == "root certificate file \"\(notPEM)\" holds no PEM certificate")
    }

    /// A certificate authority that signed nothing the test server holds.
    static let otherCA = """
        -----BEGIN CERTIFICATE-----
        MIIBijCCATGgAwIBAgIUf5KJM83F6pPcurGVIkh8n9vpoHQwCgYIKoZIzj0EAwIw
        GjEYMBYGA1UEAwwPbm90IHRoZSB0ZXN0IENBMCAXDTI2MTEyNjEwMjM0NVoYDzIx
        MjYxMTAyMTAyMzQ1WjAaMRgwFgYDVQQDDA9ub3QgdGhlIHRlc3QgQ0EwWTATBgcq
        hkjOPQIBBggqhkjOPQMBBwNCAAQ77gTilIaHEPMoGfpA4UHQ8308UdH60xrXGKyn
        lTpM7UEq9fpSmKkgfRskhauuvfI96rcN+ULzFgAVVAFKPc5Bo1MwUTAdBgNVHQ4E
        FgQUt770bqp18kyoan7ygbnP+1O+YI0wHwYDVR0jBBgwFoAUt770bqp18kyoan7y
        gbnP+1O+YI0wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiAtYJ/K
        CJWddMSu10GgVZYfunqxkOGcLWlX2Zx3qHyO+QIgSMmGOV431cdcITiXcOIzMucb
        NvPGVKQvjrLdKI/WMbA=
        -----END CERTIFICATE-----

        """
}
