import Foundation
import NIOCore
import Persistence
import PostgresNIO
import Testing

@testable import PersistencePostgreSQL

/// What a store's messages say of postgres-nio's errors: words, never the name of an error
/// code (`connectionError`), which tells a user nothing.
@Suite struct PostgreSQLErrorWordsTests {
    /// Every code postgres-nio has.
    static let codes: [PSQLError.Code] = [
        .sslUnsupported, .failedToAddSSLHandler, .receivedUnencryptedDataAfterSSLRequest, .server,
        .messageDecodingFailure, .unexpectedBackendMessage, .unsupportedAuthMechanism, .authMechanismRequiresPassword,
        .saslError, .invalidCommandTag, .queryCancelled, .tooManyParameters, .clientClosedConnection,
        .serverClosedConnection, .connectionError, .uncleanShutdown, .listenFailed, .unlistenFailed, .poolClosed,
    ]

    @Test func noCodeIsDescribedByItsName() {
        var seen = Set<String>()
        for code in Self.codes {
            let name = "\(code)"
            let words = PostgreSQLConnection.describe(code: code, serverMessage: nil, underlying: nil)
            #expect(words != name, "\(name)")
            #expect(!words.contains(name) || !name.contains(where: \.isUppercase), "\(name): \(words)")
            #expect(words.contains(" "), "\(name): \(words)")
            #expect(seen.insert(words).inserted, "\(name): \(words) says what another code says")
        }
    }

    @Test func aServerErrorIsTheServersMessage() {
        #expect(
            PostgreSQLConnection.describe(
                code: .server, serverMessage: "the database system is starting up", underlying: nil)
                == "the database system is starting up")
    }

    @Test func aConnectionErrorSaysWhatTheNetworkSaid() {
        func words(_ underlying: (any Error)?) -> String {
            PostgreSQLConnection.describe(code: .connectionError, serverMessage: nil, underlying: underlying)
        }
        #expect(words(IOError(errnoCode: ECONNREFUSED, reason: "connect")) == "connection refused")
        #expect(words(IOError(errnoCode: ECONNRESET, reason: "read")) == "connection reset by peer")
        #expect(words(ChannelError.connectTimeout(.seconds(10))) == "no answer within 10 s")
        #expect(words(ChannelError.eof) == "the connection was closed")
        #expect(words(ChannelError.ioOnClosedChannel) == "the connection was closed")
        #expect(words(nil) == "the connection failed")
    }

    /// A server that is down, as a user meets it: one line naming the server, in words.
    @Test func aRefusedConnectionSaysSo() throws {
        let url = URL(string: "postgresql://someone:secret@127.0.0.1:1/catalog")!  // nothing listens on port 1
        let error = try #require(throws: PersistenceError.self) {
            try PersistentContainer.open(url: url, schema: try Schema(allEntities))
        }
        #expect(
            error.message == "Could not connect to PostgreSQL at 127.0.0.1:1 (database catalog, user someone): "
                + "connection refused")
    }

    @Test func theReconnectTimeoutIsAURLParameter() throws {
        #expect(try PostgreSQLLocation(URL(string: "postgresql://u@h/d")!, environment: [:]).reconnectTimeout == 10)
        #expect(
            try PostgreSQLLocation(URL(string: "postgresql://u@h/d?reconnect_timeout=2.5")!, environment: [:])
                .reconnectTimeout == 2.5)
        #expect(
            try PostgreSQLLocation(URL(string: "postgresql://u@h/d?reconnect_timeout=0")!, environment: [:])
                .reconnectTimeout == 0)
        for bad in ["-1", "soon", "", "1e9"] {
            let error = try #require(throws: PersistenceError.self, "\(bad)") {
                try PostgreSQLLocation(URL(string: "postgresql://u@h/d?reconnect_timeout=\(bad)")!, environment: [:])
            }
            #expect(
                error.message
                    == "postgresql://u@h/d?reconnect_timeout=\(bad): `reconnect_timeout` needs a number of seconds "
                    + "from 0 to 86400")
        }
    }
}
