import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog

#if canImport(Glibc)
    import Glibc
#endif

/// Files swapped between the moment they were listed and the moment they are read:
/// an import of a directory bag, and an add, read what they listed — a regular
/// file, below the directory it was found in — or refuse the file by name. Never the bytes
/// of a link's target, never a wait on a FIFO. The window is made deterministic with the
/// test-support hooks, not with a sleep.
@Suite struct SwappedFileTests {
    typealias Fixture = BundleHostileTests.Fixture

    /// Replaces `path` with a symbolic link to `target`.
    static func link(_ path: String, to target: String) {
        try! FileManager.default.removeItem(atPath: path)
        try! FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }

    /// Replaces `path` with a FIFO, and starts `unblocker` on it.
    static func fifo(_ path: String, _ unblocker: FIFOUnblocker) {
        try! FileManager.default.removeItem(atPath: path)
        precondition(mkfifo(path, 0o644) == 0)
        unblocker.start()
    }

    // MARK: Import and validate

    @Test func importRefusesAPayloadFileSwappedForALinkOutsideTheBag() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let secret = try f.t.file("secret.txt", "not in the bag\n")
        let error = try await afterBagListing({ root in Self.link(root + "/data/a.txt", to: secret) }) {
            try await f.refusal(bag)
        }
        #expect(
            error.message
                == f.invalid(
                    bag, "data/a.txt: is a symbolic link, or is reached through one; a bag holds regular files only"))
    }

    @Test func importRefusesADirectorySwappedForALinkOutsideTheBag() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let outside = f.t.sources.appending(path: "outside").path
        try f.t.file("outside/b.bin", Data((0..<300).map { UInt8($0 % 251) }))
        let error = try await afterBagListing({ root in
            try! FileManager.default.moveItem(atPath: root + "/data/sub", toPath: root + "/../sub-moved")
            try! FileManager.default.createSymbolicLink(atPath: root + "/data/sub", withDestinationPath: outside)
        }) {
            try await f.refusal(bag)
        }
        #expect(
            error.message
                == f.invalid(
                    bag, "data/sub/b.bin: is a symbolic link, or is reached through one; a bag holds regular files only"
                ))
    }

    @Test func importRefusesAPayloadFileSwappedForAFIFOAtOnce() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let unblocker = FIFOUnblocker(bag + "/data/a.txt")
        defer { unblocker.stop() }
        let error = try await afterBagListing({ root in Self.fifo(root + "/data/a.txt", unblocker) }) {
            try await f.refusal(bag)
        }
        #expect(
            error.message
                == f.invalid(bag, "data/a.txt: is a FIFO, not a regular file; a bag holds regular files only"))
    }

    @Test func validateReportsAPayloadFileSwappedForALink() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let secret = try f.t.file("secret.txt", "not in the bag\n")
        let report = try afterBagListing({ root in Self.link(root + "/data/a.txt", to: secret) }) {
            try Catalog.validateBundle(at: bag)
        }
        #expect(!report.isValid)
        #expect(
            report.problems == [
                "data/a.txt: is a symbolic link, or is reached through one; a bag holds regular files only"
            ])
    }

    @Test func validateReportsAPayloadFileSwappedForAFIFO() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let unblocker = FIFOUnblocker(bag + "/data/sub/b.bin")
        defer { unblocker.stop() }
        let report = try afterBagListing({ root in Self.fifo(root + "/data/sub/b.bin", unblocker) }) {
            try Catalog.validateBundle(at: bag)
        }
        #expect(report.problems == ["data/sub/b.bin: is a FIFO, not a regular file; a bag holds regular files only"])
    }

    // MARK: Add

    /// A catalog, and `sources/dir` holding a.txt, b.txt and sub/c.txt; `sources/outside`
    /// holds a secret.
    struct AddFixture {
        let t: TestCatalog
        let catalog: Catalog
        let dir: String
        let secret: String

        init() throws {
            t = try TestCatalog()
            catalog = try t.create()
            dir = t.sources.appending(path: "dir").path
            try t.file("dir/a.txt", "a\n")
            try t.file("dir/b.txt", "b\n")
            try t.file("dir/sub/c.txt", "c\n")
            secret = try t.file("outside/secret.txt", "secret\n")
        }

        var secretDigest: String { get throws { try ContentStore.digest(ofFileAt: secret).digest } }

        /// Adds `dir` recursively, running `swap` after the listing.
        func add(
            _ mode: AddOptions.Mode = .copy, _ paths: [String]? = nil,
            swap: @escaping @Sendable (_ dir: String) -> Void
        ) async throws -> AddResult {
            let dir = dir
            return try await afterAddListing({ _ in swap(dir) }) {
                try await catalog.add(paths ?? [dir], options: AddOptions(mode: mode, recursive: true))
            }
        }
    }

    @Test(arguments: [AddOptions.Mode.copy, .reference])
    func addRefusesAFileSwappedForALinkAfterTheListing(mode: AddOptions.Mode) async throws {
        let f = try AddFixture()
        let secret = f.secret
        let result = try await f.add(mode) { dir in Self.link(dir + "/b.txt", to: secret) }
        #expect(
            result.failures.map(\.message) == [
                "\(f.dir)/b.txt is a symbolic link, or is reached through one (links inside a directory are not followed)"
            ])
        #expect(result.added.map(\.name) == ["a.txt", "c.txt"])
        #expect(try f.catalog.assets().map(\.name) == ["a.txt", "c.txt"])
        #expect(try !f.t.hasObject(f.secretDigest))
    }

    @Test func addRefusesAFileUnderADirectorySwappedForALink() async throws {
        let f = try AddFixture()
        let outside = (f.secret as NSString).deletingLastPathComponent
        try f.t.file("outside/c.txt", "c\n")
        let result = try await f.add { dir in
            try! FileManager.default.moveItem(atPath: dir + "/sub", toPath: dir + "/../sub-moved")
            try! FileManager.default.createSymbolicLink(atPath: dir + "/sub", withDestinationPath: outside)
        }
        #expect(
            result.failures.map(\.message) == [
                "\(f.dir)/sub/c.txt is a symbolic link, or is reached through one (links inside a directory are not followed)"
            ])
        #expect(result.added.map(\.name) == ["a.txt", "b.txt"])
    }

    @Test(arguments: [AddOptions.Mode.copy, .reference])
    func addRefusesAFileSwappedForAFIFOAtOnce(mode: AddOptions.Mode) async throws {
        let f = try AddFixture()
        let unblocker = FIFOUnblocker(f.dir + "/b.txt")
        defer { unblocker.stop() }
        let result = try await f.add(mode) { dir in Self.fifo(dir + "/b.txt", unblocker) }
        #expect(result.failures.map(\.message) == ["\(f.dir)/b.txt is a FIFO, not a regular file"])
        #expect(result.added.map(\.name) == ["a.txt", "c.txt"])
    }

    @Test func addRefusesANamedFileSwappedForAFIFOAtOnce() async throws {
        let f = try AddFixture()
        let named = f.dir + "/a.txt"
        let unblocker = FIFOUnblocker(named)
        defer { unblocker.stop() }
        let result = try await f.add(.copy, [named]) { _ in Self.fifo(named, unblocker) }
        #expect(result.failures.map(\.message) == ["\(named) is a FIFO, not a regular file"])
        #expect(result.added.isEmpty)
    }

    /// A referenced file that became a FIFO: `cat` and `verify` say so at once instead of
    /// waiting for a writer.
    @Test func aReferencedFileSwappedForAFIFOIsRefusedByCatAndVerify() async throws {
        let f = try AddFixture()
        let path = f.dir + "/a.txt"
        let added = try await f.catalog.add([path], options: AddOptions(mode: .reference))
        #expect(added.added.count == 1)
        let unblocker = FIFOUnblocker(path)
        defer { unblocker.stop() }
        Self.fifo(path, unblocker)
        let error = try #require(throws: CatalogError.self) { try f.catalog.read(1) { _ in } }
        #expect(error.message == "Could not read \(path): it is a FIFO, not a regular file")
        let report = try await f.catalog.verify()
        #expect(report.issues.map(\.problem) == [.unreadable])
        #expect(report.issues.map(\.detail) == ["\(path) is a FIFO, not a regular file"])
    }

    /// As documented: a path the user names is followed through links, at any component; links
    /// found inside a directory are skipped.
    @Test func addFollowsLinksInANamedPathAndSkipsThemInsideADirectory() async throws {
        let f = try AddFixture()
        let link = f.t.sources.appending(path: "link").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: f.dir)
        try FileManager.default.createSymbolicLink(atPath: f.dir + "/to-secret.txt", withDestinationPath: f.secret)
        let named = try await f.catalog.add([link + "/sub/c.txt"])
        #expect(named.failures.isEmpty)
        #expect(named.added.map(\.name) == ["c.txt"])
        #expect(named.added.map(\.path) == [link + "/sub/c.txt"])
        let walked = try await f.catalog.add([link], options: AddOptions(recursive: true))
        #expect(walked.failures.isEmpty)
        #expect(walked.added.map(\.name) == ["a.txt", "b.txt", "c.txt"])
        #expect(try !f.t.hasObject(f.secretDigest))
    }
}
