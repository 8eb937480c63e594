import CatalogServer
import Foundation
import HTTPTypes
import Hummingbird
import TestScratch

/// A response, as a ``LiveClient`` read it.
struct TestResponse: Sendable {
    let status: HTTPResponse.Status
    let headers: HTTPFields
    let body: ByteBuffer
}

/// An HTTP/1.1 client of a server the test runs on 127.0.0.1: each request on a connection of
/// its own (`Connection: close`), written as given (a traversal attempt reaches the server's
/// parser unchanged), and the whole response read, chunked or not.
struct LiveClient: Sendable {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let port: Int

    /// Sends `method uri` with `headers` (a `Host` among them replaces 127.0.0.1:`port`) and
    /// `body`; returns the response.
    func execute(
        uri: String, method: HTTPRequest.Method, headers: HTTPFields = [:], body: ByteBuffer? = nil
    ) async throws -> TestResponse {
        var head = ["\(method.rawValue) \(uri) HTTP/1.1"]
        if headers[values: hostField].isEmpty { head.append("Host: 127.0.0.1:\(port)") }
        head += headers.map { "\($0.name.rawName): \($0.value)" }
        head += ["Connection: close", "Content-Length: \(body?.readableBytes ?? 0)"]
        let request = Data((head.joined(separator: "\r\n") + "\r\n\r\n").utf8) + Data(body?.readableBytesView ?? [])
        let port = self.port
        let response = try await blockingOff { try LoopbackSocket.exchange(request, port: port) }
        return try Self.parse(response)
    }

    /// The status, fields and body of a whole HTTP/1.1 response.
    static func parse(_ response: Data) throws -> TestResponse {
        guard let end = response.firstRange(of: Data("\r\n\r\n".utf8)) else {
            throw Failure(description: "no end of the head in \(response.count) bytes")
        }
        let lines = String(decoding: response[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusLine = lines[0].split(separator: " ", maxSplits: 2)
        guard statusLine.count >= 2, statusLine[0] == "HTTP/1.1", let code = Int(statusLine[1]) else {
            throw Failure(description: "not a status line: \(lines[0])")
        }
        var fields = HTTPFields()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":"), let name = HTTPField.Name(String(line[..<colon])) else {
                throw Failure(description: "not a header: \(line)")
            }
            fields.append(
                HTTPField(name: name, value: line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        var body = Data(response[end.upperBound...])
        if fields[.transferEncoding] == "chunked" { body = try dechunk(body) }
        let status = HTTPResponse.Status(code: code, reasonPhrase: statusLine.count > 2 ? String(statusLine[2]) : "")
        return TestResponse(status: status, headers: fields, body: ByteBuffer(bytes: body))
    }

    /// The bytes of a chunked body: each chunk's size in hex, its bytes, up to the chunk of size 0.
    static func dechunk(_ chunked: Data) throws -> Data {
        var body = Data()
        var rest = chunked[...]
        while true {
            guard let lineEnd = rest.firstRange(of: Data("\r\n".utf8)) else {
                throw Failure(description: "a chunk without a size")
            }
            let sizeText = String(decoding: rest[..<lineEnd.lowerBound], as: UTF8.self)
            guard let size = Int(sizeText.split(separator: ";")[0], radix: 16) else {
                throw Failure(description: "not a chunk size: \(sizeText)")
            }
            if size == 0 { return body }
            let start = lineEnd.upperBound
            guard rest.distance(from: start, to: rest.endIndex) >= size + 2 else {
                throw Failure(description: "a chunk of \(size) bytes cut short")
            }
            body.append(rest[start..<(start + size)])
            rest = rest[(start + size + 2)...]
        }
    }
}

extension CatalogServer {
    /// Runs the server on a free port of its host until `body`, given a client of it, returns.
    func withLiveClient<Value: Sendable>(_ body: @Sendable (LiveClient) async throws -> Value) async throws -> Value {
        let (ports, listening) = AsyncStream.makeStream(of: Int.self)
        let application = application(onListening: { url in
            listening.yield(url.port ?? 0)
            listening.finish()
        })
        return try await withThrowingTaskGroup(of: Value?.self) { group in
            group.addTask {
                try await application.run()
                return nil
            }
            defer { group.cancelAll() }
            var waiting = ports.makeAsyncIterator()
            guard let port = await waiting.next(), port > 0 else { throw LiveClient.Failure(description: "no port") }
            return try await body(LiveClient(port: port))
        }
    }
}
