import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("assetcat serve")
struct ServeCLITests {
    /// `GET path` from 127.0.0.1:`port` over a plain socket, with `headers`: the whole response.
    static func get(port: Int, _ path: String, headers: [String] = []) throws -> String {
        let request =
            (["GET \(path) HTTP/1.1", "Host: 127.0.0.1:\(port)", "Connection: close"] + headers)
            .joined(separator: "\r\n") + "\r\n\r\n"
        return String(decoding: try LoopbackSocket.exchange(Data(request.utf8), port: port), as: UTF8.self)
    }

    /// Starts `assetcat serve ARGUMENTS` on the test's catalog; returns it and the first line
    /// it printed.
    static func start(_ t: TestCatalog, _ arguments: [String]) throws -> (ChildProcess, String) {
        let child = try ChildProcess(
            TestCatalog.executable().path, ["serve", "--catalog", t.root.path] + arguments,
            environment: ["ASSETCAT_CATALOG": nil])
        let out = child.stdout(within: 120) { $0.contains(UInt8(ascii: "\n")) } ?? Data()
        let line = String(decoding: out, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        return (child, line)
    }

    @Test("serve --port 0 prints its URL first, answers, and exits 0 on SIGTERM")
    func servesAndStops() async throws {
        let t = try TestCatalog()
        try #require(try await t.run(["init", t.root.path]).status == 0)
        let path = try t.file("notes.txt", "hello\n")
        try #require(try await t.run(["add", path]).status == 0)
        let (child, line) = try Self.start(t, ["--port", "0"])
        let url = try #require(URL(string: line), "first line: \(line)")
        #expect(line.hasPrefix("http://127.0.0.1:"))
        #expect(line.hasSuffix("/"))
        let port = try #require(url.port)
        #expect(port > 0)
        let page = try await offThePool { try Self.get(port: port, "/") }
        #expect(page.hasPrefix("HTTP/1.1 200 OK"))
        #expect(page.contains(">notes.txt</a>"))
        child.signal(SIGTERM)
        let outcome = try await child.finish(within: 60)
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        #expect(outcome.stdoutText == line + "\n")
    }

    @Test("serve --host 0.0.0.0 without --token generates one, prints it once, and requires it")
    func generatesToken() async throws {
        let t = try TestCatalog()
        try #require(try await t.run(["init", t.root.path]).status == 0)
        let (child, line) = try Self.start(t, ["--host", "0.0.0.0", "--port", "0"])
        let components = try #require(URLComponents(string: line), "first line: \(line)")
        #expect(components.host == "0.0.0.0")
        let token = try #require(components.queryItems?.first { $0.name == "token" }?.value)
        #expect(token.count == 64)
        let port = try #require(components.port)
        let refused = try await offThePool { try Self.get(port: port, "/") }
        #expect(refused.hasPrefix("HTTP/1.1 401 Unauthorized"))
        let accepted = try await offThePool {
            try Self.get(port: port, "/", headers: ["Authorization: Bearer \(token)"])
        }
        #expect(accepted.hasPrefix("HTTP/1.1 200 OK"))
        child.signal(SIGINT)
        let outcome = try await child.finish(within: 60)
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        #expect(outcome.stdoutText.components(separatedBy: token).count - 1 == 1)
        #expect(!outcome.stderrText.contains(token))
        #expect(
            outcome.stderrText.contains(
                "note: 0.0.0.0 is not loopback: requests need the token generated in the URL above"))
    }

    @Test(
        "SIGTERM while a deletion from the page is between its commit and its file's removal: the request finishes, the file goes, serve exits 0"
    )
    func sigtermDuringADeletion() async throws {
        let t = try TestCatalog()
        try #require(try await t.run(["init", t.root.path]).status == 0)
        let path = try t.file("notes.txt", "hello\n")
        try #require(try await t.run(["add", path]).status == 0)
        let objects = t.root.path + "/objects"
        #expect(Self.files(under: objects, holding: "hello\n").count == 1)
        let barrier = t.directory.appending(path: "pause-\(UUID().uuidString)").path
        let child = try ChildProcess(
            TestCatalog.executable().path, ["serve", "--catalog", t.root.path, "--port", "0"],
            environment: [
                "ASSETCAT_CATALOG": nil, "ASSETCAT_FAULT_PAUSE": "after-commit", "ASSETCAT_FAULT_PAUSE_FILE": barrier,
            ])
        let out = child.stdout(within: 120) { $0.contains(UInt8(ascii: "\n")) } ?? Data()
        let line = String(decoding: out, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        let port = try #require(URL(string: line)?.port, "first line: \(line)")
        let confirm = try await offThePool { try Self.get(port: port, "/assets/1/delete") }
        let csrf = try #require(confirm.firstMatch(of: /name="csrf" value="([0-9a-f]+)"/)?.1)
        // The POST waits for its response on a thread of its own; the server stops after the commit.
        async let posted = offThePool { try Self.post(port: port, "/assets/1/delete", body: "csrf=\(csrf)") }
        let reached = try await waitUntil { FileManager.default.fileExists(atPath: barrier + ".reached") }
        #expect(reached, "the deletion never reached its commit")
        child.signal(SIGTERM)
        // The shutdown has begun once the listener is closed: a new connection is refused.
        let stoppedListening = try await waitUntil(atMost: .seconds(60)) {
            guard let fd = try? LoopbackSocket.connect(port: port) else { return true }
            close(fd)
            return false
        }
        #expect(stoppedListening, "serve still takes connections after SIGTERM")
        #expect(Self.isRunning(child.pid), "serve exited with a request in progress")
        _ = FileManager.default.createFile(atPath: barrier, contents: nil)  // lets the deletion go on
        let response = try await posted
        #expect(response.hasPrefix("HTTP/1.1 200 OK"), "\(response.prefix(300))")
        #expect(response.contains("1 file removed from the catalog's objects/"))
        let outcome = try await child.finish(within: 60)
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        #expect(Self.files(under: objects, holding: "hello\n") == [])
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.stats().assets == 0)
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    /// Whether process `pid` runs (neither gone nor a zombie not reaped yet).
    static func isRunning(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        return stat.split(separator: ")").last?.hasPrefix(" Z") == false
    }

    /// The files under `folder` whose content is `text`, by path relative to it.
    static func files(under folder: String, holding text: String) -> [String] {
        let walk = FileManager.default.enumerator(atPath: folder)
        var found: [String] = []
        while let path = walk?.nextObject() as? String {
            if let data = FileManager.default.contents(atPath: folder + "/" + path), data == Data(text.utf8) {
                found.append(path)
            }
        }
        return found
    }

    /// `POST path` of a form `body` to 127.0.0.1:`port` over a plain socket: the whole response.
    static func post(port: Int, _ path: String, body: String) throws -> String {
        let request =
            "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
            + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        return String(decoding: try LoopbackSocket.exchange(Data(request.utf8), port: port), as: UTF8.self)
    }

    @Test("serve refuses a bad token or port in one line")
    func refusesBadOptions() async throws {
        let t = try TestCatalog()
        try #require(try await t.run(["init", t.root.path]).status == 0)
        let token = try await t.run(["serve", "--token", "a b"])
        #expect(token.status == 1)
        #expect(
            token.stderr
                == "assetcat: Invalid token: use 1 to 256 letters, digits, '-', '.', '_' or '~' (it goes in a URL)\n")
        let port = try await t.run(["serve", "--port", "70000"])
        #expect(port.status == 1)
        #expect(port.stderr == "assetcat: Invalid port 70000: use 0 to 65535 (0: any free port)\n")
    }
}
