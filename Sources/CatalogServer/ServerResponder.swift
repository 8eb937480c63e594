import AssetCatalog
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Answers every request: checks the token and the Host, routes by the raw path (numeric IDs
/// only: no URL names a file), turns errors into short pages, and puts the security headers on
/// every response, errors and static files included.
struct ServerResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    let server: CatalogServer

    /// The headers every response carries.
    static let securityHeaders: [(HTTPField.Name, String)] = [
        (
            .contentSecurityPolicy,
            "default-src 'none'; img-src 'self'; style-src 'self'; script-src 'self'; form-action 'self'; "
                + "frame-ancestors 'none'; base-uri 'none'"
        ),
        (HTTPField.Name("X-Content-Type-Options")!, "nosniff"),
        (HTTPField.Name("Referrer-Policy")!, "no-referrer"),
        (.cacheControl, "no-store"),
    ]

    /// `Host`, which HTTPTypes turns into the request's authority (a test may still send it).
    static let hostField = HTTPField.Name("Host")!

    /// The name of the cookie that carries the token.
    static let tokenCookie = "assetcat_token"

    func respond(to request: Request, context: Context) async throws -> Response {
        var response: Response
        do {
            response = try await guarded(request)
        } catch let error as PageError {
            response = Pages(server: server).error(error)
        } catch let error as CatalogError {
            response = Pages(server: server).error(Self.pageError(error))
        } catch {
            server.logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            response = Pages(server: server).error(PageError(.internalServerError, "The server failed: \(error)"))
        }
        for (name, value) in Self.securityHeaders { response.headers[name] = value }
        return response
    }

    /// A catalog's error as a page: not found is a 404, a bad argument a 400, anything else a 500.
    static func pageError(_ error: CatalogError) -> PageError {
        switch error.code {
        case .notFound: PageError(.notFound, error.message)
        case .invalidArgument: PageError(.badRequest, error.message)
        default: PageError(.internalServerError, error.message)
        }
    }

    /// The Host and token checks, then the page.
    private func guarded(_ request: Request) async throws -> Response {
        let rawQuery = request.uri.query.map { Substring($0) }
        // The token may come in the query of any page; it is taken out before the page reads it.
        var query = rawQuery
        var tokenInQuery: String?
        if let raw = rawQuery {
            var kept: [Substring] = []
            for item in raw.split(separator: "&") {
                if item.hasPrefix("token=") {
                    tokenInQuery = try URLText.decodeFormField(item.dropFirst("token=".count))
                } else {
                    kept.append(item)
                }
            }
            query = kept.isEmpty ? nil : Substring(kept.joined(separator: "&"))
        }
        if let token = server.configuration.token {
            let offered = [tokenInQuery, Self.cookieToken(request), Self.bearerToken(request)]
            guard offered.contains(where: { $0.map { Self.constantTimeEqual($0, token) } ?? false }) else {
                throw PageError(
                    .unauthorized,
                    "This server needs its token: open the URL `assetcat serve` printed (it ends in ?token=…).")
            }
            if tokenInQuery != nil, request.method == .get || request.method == .head {
                // Once: the token goes into a cookie, and out of the address bar and history.
                var location = request.uri.path
                if let query { location += "?" + query }
                var response = Response(status: .seeOther, headers: [.location: location])
                response.headers[.setCookie] =
                    "\(Self.tokenCookie)=\(token); Path=/; HttpOnly; SameSite=Strict"
                return response
            }
        } else if ([request.head.authority].compactMap { $0 } + request.headers[values: Self.hostField])
            .contains(where: { !Self.isLoopbackAuthority($0) })
        {
            // A loopback server without a token answers only to loopback names: a page that
            // rebinds its own name to 127.0.0.1 cannot read it.
            throw PageError(.forbidden, "Forbidden: this server answers to 127.0.0.1 or localhost only.")
        }
        return try await route(request, query: query)
    }

    private func route(_ request: Request, query: Substring?) async throws -> Response {
        var request = request
        let path = request.uri.path
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        let pages = Pages(server: server)
        let method = request.method
        let isRead = method == .get || method == .head

        func fields(_ allowed: Set<String>) throws(PageError) -> FormFields {
            try FormFields(parsing: query, allowed: allowed)
        }
        /// The form of a POST, after its CSRF token is checked.
        func form(_ allowed: Set<String>) async throws -> FormFields {
            guard method == .post else {
                throw PageError(
                    .methodNotAllowed, "Method not allowed: this address takes a POST from its page's form.")
            }
            _ = try fields([])
            let body = try await request.collectBody(upTo: 1 << 20)
            let form = try FormFields(parsing: Substring(String(buffer: body)), allowed: allowed.union(["csrf"]))
            guard let offered = form["csrf"], Self.constantTimeEqual(offered, server.csrfToken) else {
                throw PageError(.forbidden, "Forbidden: the form's CSRF token is missing or wrong; reload the page.")
            }
            return form
        }
        func readOnly() throws(PageError) {
            guard isRead else {
                throw PageError(.methodNotAllowed, "Method not allowed: this page is read with GET.")
            }
        }

        switch parts.count {
        case 1 where parts[parts.startIndex] == "":
            try readOnly()
            return try await pages.list(fields(["q", "after", "offset"]))
        case 1 where parts[parts.startIndex] == "jobs":
            try readOnly()
            return try await pages.jobs(fields([]))
        case 1 where parts[parts.startIndex] == "export":
            return try await pages.export(form(["id"]))
        case 2 where parts[parts.startIndex] == "static":
            try readOnly()
            _ = try fields(["v"])
            guard let file = StaticFiles.named[String(parts[parts.startIndex + 1])] else { throw PageError.notFound }
            return Response(
                status: .ok, headers: [.contentType: file.type],
                body: ResponseBody(byteBuffer: ByteBuffer(string: file.text)))
        case 2...3 where parts[parts.startIndex] == "assets":
            guard let number = FormFields.number(parts[parts.startIndex + 1]), number > 0 else {
                throw PageError.notFound
            }
            let id = AssetID(number)
            switch parts.count == 2 ? "" : parts[parts.startIndex + 2] {
            case "":
                try readOnly()
                return try await pages.asset(id, fields(["after"]))
            case "content":
                try readOnly()
                _ = try fields([])
                return try await pages.preview(id)
            case "thumbnail":
                try readOnly()
                _ = try fields([])
                return try await pages.thumbnail(id)
            case "download":
                try readOnly()
                _ = try fields([])
                return try await pages.download(id)
            case "delete":
                if isRead { return try await pages.confirmDeletion(id, fields([])) }
                return try await pages.delete(id, form([]))
            case "tags":
                return try await pages.tag(id, form(["add", "remove"]))
            default: throw PageError.notFound
            }
        default: throw PageError.notFound
        }
    }

    /// The token of the `assetcat_token` cookie, if any.
    static func cookieToken(_ request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for cookie in header.split(separator: ";") {
                let pair = cookie.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
                if pair.count == 2, pair[0] == tokenCookie { return String(pair[1]) }
            }
        }
        return nil
    }

    /// The token of an `Authorization: Bearer` header, if any.
    static func bearerToken(_ request: Request) -> String? {
        guard let value = request.headers[.authorization], value.lowercased().hasPrefix("bearer ") else { return nil }
        return String(value.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
    }

    /// Whether `authority` (`host:port`) names loopback.
    static func isLoopbackAuthority(_ authority: String) -> Bool {
        var host = Substring(authority)
        if host.hasPrefix("["), let end = host.firstIndex(of: "]") {
            host = host[host.index(after: host.startIndex)..<end]
        } else if let colon = host.lastIndex(of: ":") {
            host = host[..<colon]
        }
        return CatalogServer.isLoopback(String(host).lowercased())
    }

    /// Compares two tokens in time that depends on their lengths only.
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
