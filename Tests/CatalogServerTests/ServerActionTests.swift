import AssetCatalog
import AssetCatalogTestSupport
import BagIt
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import TestScratch
import Testing

@testable import CatalogServer

#if canImport(Glibc)
    import Glibc
#endif

@Suite("CatalogServer: tags, deletion, downloads and export")
struct ServerActionTests {
    @Test("Tags are added and removed through the page's forms, then the asset is shown again")
    func tagAddAndRemove() async throws {
        let f = try await ServerFixture.make()
        let uri = "/assets/\(f.notes.id)/tags"
        try await f.test { client in
            let added = try await client.execute(
                uri: uri, method: .post, headers: formHeaders, body: f.form([("add", " keep it ")]))
            #expect(added.status == .seeOther)
            #expect(added.header("Location") == "/assets/\(f.notes.id)")
            #expect(try f.catalog.asset(f.notes.id).tags == ["demo", "keep it"])
            let page = try await client.execute(uri: "/assets/\(f.notes.id)", method: .get)
            #expect(page.text.contains("<a href=\"/?q=tag%3A%22keep%20it%22\">keep it</a>"))
            #expect(page.text.contains("<input type=\"hidden\" name=\"remove\" value=\"keep it\">"))
            let removed = try await client.execute(
                uri: uri, method: .post, headers: formHeaders, body: f.form([("remove", "demo")]))
            #expect(removed.status == .seeOther)
            #expect(try f.catalog.asset(f.notes.id).tags == ["keep it"])
            let nothing = try await client.execute(uri: uri, method: .post, headers: formHeaders, body: f.form([]))
            #expect(nothing.status == .badRequest)
            #expect(nothing.text.contains("Bad request: no tag to add or remove."))
            let bad = try await client.execute(
                uri: "/assets/987654/tags", method: .post, headers: formHeaders, body: f.form([("add", "x")]))
            #expect(bad.status == .notFound)
        }
    }

    @Test("A deletion commits, then the file is gone, and the asset's queued job is cancelled")
    func deleteRemovesFileAfterCommit() async throws {
        let f = try await ServerFixture.make()
        // An image added without running its jobs: its metadata and thumbnail jobs wait in the queue.
        let path = try f.t.file("blue.png", Data(contentsOf: testAssets.appending(path: "demo/photos/blue.png")))
        let blue = try #require(try await f.catalog.add([path]).added.first)
        let queued = try f.catalog.jobs.list(asset: blue.id)
        #expect(queued.map(\.state) == [.queued, .queued])
        #expect(f.t.hasObject(blue.sha256))
        try await f.test { client in
            let confirm = try await client.execute(uri: "/assets/\(blue.id)/delete", method: .get)
            #expect(confirm.status == .ok)
            #expect(f.t.hasObject(blue.sha256))
            let deleted = try await client.execute(
                uri: "/assets/\(blue.id)/delete", method: .post, headers: formHeaders, body: f.form([]))
            #expect(deleted.status == .ok)
            #expect(
                deleted.text.contains(
                    "<p class=\"notice\" id=\"deleted\">Deleted blue.png; 1 file removed from the catalog's objects/.</p>"
                ))
            #expect(!f.t.hasObject(blue.sha256))
            let gone = try await client.execute(uri: "/assets/\(blue.id)", method: .get)
            #expect(gone.status == .notFound)
            // An archive goes with its members; content another asset shares stays.
            let archive = try await client.execute(
                uri: "/assets/\(f.archive.id)/delete", method: .post, headers: formHeaders, body: f.form([]))
            #expect(archive.text.contains("Deleted sample.tar and its 6 members; 1 file removed"))
        }
        #expect(try f.catalog.jobs.list(asset: blue.id).map(\.state) == [.cancelled, .cancelled])
        #expect(throws: CatalogError.self) { try f.catalog.asset(blue.id) }
        #expect(try f.catalog.assets(AssetQuery(archive: f.archive.id)).isEmpty)
    }

    @Test("An archive member downloads byte for byte, streamed out of its archive, as an attachment")
    func memberDownload() async throws {
        let f = try await ServerFixture.make()
        let member = try #require(try f.catalog.assets().first { $0.member == "sample/日本語/データ.bin" })
        var read = Data()
        try f.catalog.read(member.id) { read.append(contentsOf: $0) }
        let expected = read
        #expect(expected.count == 4096)
        try await f.test { client in
            let response = try await client.execute(uri: "/assets/\(member.id)/download", method: .get)
            #expect(response.status == .ok)
            #expect(response.data == expected)
            #expect(response.header("Content-Length") == "4096")
            #expect(
                response.header("Content-Disposition")
                    == "attachment; filename=\"___.bin\"; filename*=UTF-8''%E3%83%87%E3%83%BC%E3%82%BF.bin")
            let hello = try await client.execute(uri: "/assets/\(f.hello.id)/download", method: .get)
            #expect(hello.text == "hello, world\n")
            #expect(
                hello.header("Content-Disposition") == "attachment; filename=\"hello.txt\"; filename*=UTF-8''hello.txt")
        }
    }

    @Test("A large managed asset streams through a bounded relay, identical")
    func largeDownload() async throws {
        let f = try await ServerFixture.make()
        var made = Data(count: 5 << 20)
        for i in stride(from: 0, to: made.count, by: 4096) { made[i] = UInt8(truncatingIfNeeded: i / 4096) }
        let bytes = made
        let path = try f.t.file("big.bin", bytes)
        let big = try #require(try await f.catalog.add([path]).added.first)
        try await f.test { client in
            let response = try await client.execute(uri: "/assets/\(big.id)/download", method: .get)
            #expect(response.data == bytes)
        }
    }

    @Test("An export of a selection downloads as a valid bag, and leaves no temporary file")
    func exportIsABag() async throws {
        let scratch = try TestCatalog().directory.appending(path: "tmp")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let f = try await ServerFixture.make(temporaryDirectory: scratch.path)
        let bundle = f.t.directory.appending(path: "downloaded.tar")
        try await f.test { client in
            let response = try await client.execute(
                uri: "/export", method: .post, headers: formHeaders,
                body: f.form([("id", "\(f.notes.id)"), ("id", "\(f.hello.id)"), ("id", "\(f.notes.id)")]))
            #expect(response.status == .ok)
            #expect(response.header("Content-Type") == "application/x-tar")
            #expect(response.header("Content-Disposition") == "attachment; filename=\"assetcat-export.tar\"")
            try response.data.write(to: bundle)
            let none = try await client.execute(
                uri: "/export", method: .post, headers: formHeaders, body: f.form([]))
            #expect(none.status == .badRequest)
            #expect(none.text.contains("Nothing to export: select assets with their checkboxes first."))
            let missing = try await client.execute(
                uri: "/export", method: .post, headers: formHeaders, body: f.form([("id", "987654")]))
            #expect(missing.status == .notFound)
        }
        let bag = try BagReader.read(at: bundle.path)
        #expect(bag.isValid, "\(bag.problems)")
        #expect(bag.payload.count == 2)
        #expect(bag.payloadBytes == Int64(f.notes.size + f.hello.size))
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path) == [])
    }

    @Test("An export whose client goes away mid-stream leaves no file, open or named")
    func exportClientGoesAway() async throws {
        let scratch = try TestCatalog().directory.appending(path: "tmp")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let f = try await ServerFixture.make(temporaryDirectory: scratch.path)
        // Larger than the socket's buffers, so the stream is still running when the client leaves.
        let path = try f.t.file("big.bin", Data((0..<(16 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }))
        let big = try #require(try await f.catalog.add([path]).added.first)
        let body = "id=\(big.id)&csrf=\(f.server.csrfToken)"
        try await f.server.withLiveClient { client in
            let port = client.port
            let head = try await blockingOff {
                try Self.postAndLeave(port: port, path: "/export", body: body)
            }
            #expect(head.hasPrefix("HTTP/1.1 200 OK"))
            let closed = try await waitUntil(atMost: .seconds(30)) { !Self.holdsDeletedExport() }
            #expect(closed, "the unlinked bundle is still open after the client left")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path) == [])
    }

    /// Whether this process holds an unlinked `assetcat-export.tar` open.
    static func holdsDeletedExport() -> Bool {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.contains { fd in
            let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd)) ?? ""
            return target.contains("assetcat-export.tar") && target.hasSuffix("(deleted)")
        }
    }

    /// POSTs a form to 127.0.0.1:`port`, reads the response's head and a little of its body,
    /// then closes the connection; returns what it read.
    static func postAndLeave(port: Int, path: String, body: String) throws -> String {
        // A small receive buffer: the server's writes soon wait on this client.
        let fd = try LoopbackSocket.connect(port: port, receiveBuffer: 4096)
        defer { close(fd) }
        let request =
            "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
            + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        _ = request.withCString { send(fd, $0, strlen($0), 0) }
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while received.count < 64 * 1024 {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            received.append(contentsOf: buffer[0..<count])
        }
        return String(decoding: received.prefix(200), as: UTF8.self)
    }
}

/// Runs blocking work on a thread of its own, off the concurrency pool.
func blockingOff<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
