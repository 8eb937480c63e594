public import AssetCatalog
public import Foundation
public import Hummingbird
public import Logging
import NIOCore

/// `assetcat serve`: web pages to browse, search and act on a catalog — the asset list, a
/// search box with tag and kind facets, an asset's page (preview, download, tags, deletion),
/// export of a selection as a bundle, and the jobs that run — for a browser on this machine.
///
/// Every page reads the catalog afresh through `Catalog`'s public API, and
/// every change goes through the calls the CLI makes (`tag`, `remove`, `export`): a deletion
/// from the page commits, and its file goes, exactly as with `assetcat rm`. Lists are read a
/// page at a time by ID (`?after=ID`), so a page costs the same in a catalog of ten million.
///
/// ```swift
/// let server = try CatalogServer(catalog: catalog, configuration: .init(port: 0))
/// try await server.run { url in print(url) }   // until SIGINT or SIGTERM
/// ```
///
/// Security: the server listens on loopback unless told otherwise, and on any other address
/// only with a token (``Configuration/token``, generated when none is given), which every
/// request must carry (`?token=` once, then a cookie; or `Authorization: Bearer`). Changes
/// are POSTs carrying a per-server CSRF token; no URL names a file; every response carries a
/// strict Content-Security-Policy.
public struct CatalogServer: Sendable {
    /// Where the server listens and what guards it.
    public struct Configuration: Sendable, Hashable {
        /// The address to listen on: `127.0.0.1` (loopback) unless told.
        public var host: String
        /// The port; 0 picks a free one (``run(onListening:)`` reports it).
        public var port: Int
        /// The token every request must carry; `nil` for none, which only a loopback
        /// ``host`` allows (``CatalogServer/init(catalog:configuration:logger:)`` generates
        /// one for any other address).
        public var token: String?
        /// Where an export is written before it is sent (and removed as it is sent): `nil`
        /// for the system's temporary directory (`$TMPDIR`, else `/tmp`).
        public var temporaryDirectory: String?

        /// A configuration: by default loopback, port 8080, no token.
        public init(host: String = "127.0.0.1", port: Int = 8080, token: String? = nil) {
            self.host = host
            self.port = port
            self.token = token
        }
    }

    /// The catalog the pages show and change. The server does not close it.
    public let catalog: Catalog
    /// The configuration the server runs with: the token is set when one was generated.
    public let configuration: Configuration
    /// Whether ``Configuration/token`` was generated here (none was given for an address
    /// that is not loopback): the caller shows it once, in the URL.
    public let generatedToken: Bool
    /// The logger of the server's requests.
    public let logger: Logger
    /// The token of this server's forms (a hidden field every POST must carry).
    let csrfToken: String

    /// A server for `catalog`. A `host` that is not loopback without a token gets a random
    /// one (``generatedToken``).
    ///
    /// - Throws: `CatalogError.Code.invalidArgument` for an empty token, a
    ///   token with characters other than letters, digits, `-`, `.`, `_` and `~`, or a port
    ///   outside 0…65535.
    public init(catalog: Catalog, configuration: Configuration, logger: Logger = Logger(label: "assetcat.serve"))
        throws
    {
        var configuration = configuration
        guard (0...65_535).contains(configuration.port) else {
            throw CatalogError(
                .invalidArgument, "Invalid port \(configuration.port): use 0 to 65535 (0: any free port)")
        }
        if let token = configuration.token {
            guard !token.isEmpty, token.utf8.count <= 256, URLText.encode(token) == token else {
                throw CatalogError(
                    .invalidArgument,
                    "Invalid token: use 1 to 256 letters, digits, '-', '.', '_' or '~' (it goes in a URL)")
            }
        }
        generatedToken = configuration.token == nil && !Self.isLoopback(configuration.host)
        if generatedToken { configuration.token = Self.randomToken() }
        self.catalog = catalog
        self.configuration = configuration
        self.logger = logger
        self.csrfToken = Self.randomToken()
    }

    /// Whether `host` is a loopback address or name: `localhost`, `127.x.y.z`, `::1`.
    public static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare == "localhost" || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// 32 random bytes in hex.
    static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }
            .joined()
    }

    /// The URL a browser opens for a server listening on `port`: with `?token=` when there is
    /// a token.
    public func url(port: Int) -> URL {
        let host =
            configuration.host.contains(":") && !configuration.host.hasPrefix("[")
            ? "[\(configuration.host)]" : configuration.host
        let query = configuration.token.map { "?token=\($0)" } ?? ""
        return URL(string: "http://\(host):\(port)/\(query)")!
    }

    /// The server as a Hummingbird application (for tests, or to run beside other services):
    /// it calls `onListening` with its URL once it listens.
    public func application(onListening: @escaping @Sendable (URL) async -> Void = { _ in })
        -> some ApplicationProtocol
    {
        Application(
            responder: ServerResponder(server: self),
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port), serverName: nil),
            onServerRunning: { channel in await onListening(url(port: channel.localAddress?.port ?? 0)) },
            logger: logger)
    }

    /// Listens until SIGINT or SIGTERM, then stops taking connections, lets the requests in
    /// progress finish (a deletion or a tag change commits or not, as a whole) and returns.
    /// `onListening` is called with the URL once the server listens (with `--port 0`, the port
    /// it got).
    ///
    /// - Throws: `CatalogError.Code.io` when the address cannot be listened on
    ///   (in use, not this machine's).
    public func run(onListening: @escaping @Sendable (URL) async -> Void = { _ in }) async throws {
        do {
            try await application(onListening: onListening).runService()  // SIGTERM and SIGINT shut it down
        } catch {
            throw CatalogError(
                .io, "Cannot serve on \(configuration.host) port \(configuration.port): \(error)", cause: error)
        }
    }
}
