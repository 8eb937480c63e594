import Foundation
import TestScratch
import Testing

@testable import BagIt

#if canImport(Glibc)
    import Glibc
#endif

/// A directory bag changed between its listing and its reading: what is
/// read is what was listed, a regular file below the bag's root, or the read stops naming the
/// file. The window is made deterministic with ``BagReader/afterListing``; each case runs with
/// `openat2` and with the component-by-component way of kernels without it.
@Suite struct DirectoryBagSwapTests {
    /// A directory bag holding `data/a.txt` and `data/sub/b.txt`, and, beside it, `outside/`
    /// with files of the same names and other bytes.
    struct Fixture {
        let directory: String
        var bag: String { directory + "/bag" }
        var outside: String { directory + "/outside" }

        init() throws {
            directory = NSTemporaryDirectory() + "bagit-swap-" + UUID().uuidString
            let files: [(String, [UInt8])] = [
                ("a.txt", Array("inside a\n".utf8)), ("sub/b.txt", Array("inside b\n".utf8)),
            ]
            try FileManager.default.createDirectory(
                atPath: directory + "/outside/sub", withIntermediateDirectories: true)
            try Data("secret a\n".utf8).write(to: URL(fileURLWithPath: directory + "/outside/a.txt"))
            try Data("secret b\n".utf8).write(to: URL(fileURLWithPath: directory + "/outside/sub/b.txt"))
            let writer = try BagWriter(
                path: directory + "/bag",
                payload: files.map {
                    var hasher = MultiHasher([.sha256])
                    let bytes = $0.1
                    bytes.withUnsafeBytes { hasher.update($0) }
                    return BagPayloadItem(path: $0.0, size: Int64(bytes.count), sha256: hasher.finalize()[.sha256]!)
                })
            for (i, file) in files.enumerated() {
                try writer.writePayload(i) { write in try file.1.withUnsafeBytes(write) }
            }
            try writer.finish()
        }

        func remove() { try? FileManager.default.removeItem(atPath: directory) }

        /// Reads the bag, running `swap` between the listing and the reading.
        func read(
            avoidingOpenat2: Bool, swap: @escaping @Sendable (_ root: String) throws -> Void
        ) throws -> BagContents {
            try FileAccess.$avoidsOpenat2.withValue(avoidingOpenat2) {
                try BagReader.$afterListing.withValue({ root in try! swap(root) }) {
                    try BagReader.read(at: bag)
                }
            }
        }
    }

    func refusal(_ body: () throws -> BagContents) -> String? {
        do {
            let bag = try body()
            return "read: \(bag.problems.map(\.description))"
        } catch let error as BagError {
            #expect(error.code == .hostileEntry)
            return error.description
        } catch {
            return "\(error)"
        }
    }

    @Test(arguments: [false, true])
    func aPayloadFileSwappedForALinkOutsideIsRefused(avoidingOpenat2: Bool) throws {
        let f = try Fixture()
        defer { f.remove() }
        let outside = f.outside
        let message = refusal {
            try f.read(avoidingOpenat2: avoidingOpenat2) { root in
                try FileManager.default.removeItem(atPath: root + "/data/a.txt")
                try FileManager.default.createSymbolicLink(
                    atPath: root + "/data/a.txt", withDestinationPath: outside + "/a.txt")
            }
        }
        #expect(message == "data/a.txt: is a symbolic link, or is reached through one; a bag holds regular files only")
    }

    @Test(arguments: [false, true])
    func aPayloadFileSwappedForALinkInsideIsRefused(avoidingOpenat2: Bool) throws {
        let f = try Fixture()
        defer { f.remove() }
        let message = refusal {
            try f.read(avoidingOpenat2: avoidingOpenat2) { root in
                try FileManager.default.removeItem(atPath: root + "/data/a.txt")
                try FileManager.default.createSymbolicLink(
                    atPath: root + "/data/a.txt", withDestinationPath: "sub/b.txt")
            }
        }
        #expect(message == "data/a.txt: is a symbolic link, or is reached through one; a bag holds regular files only")
    }

    @Test(arguments: [false, true])
    func aDirectorySwappedForALinkOutsideIsRefused(avoidingOpenat2: Bool) throws {
        let f = try Fixture()
        defer { f.remove() }
        let outside = f.outside
        let message = refusal {
            try f.read(avoidingOpenat2: avoidingOpenat2) { root in
                try FileManager.default.moveItem(atPath: root + "/data/sub", toPath: root + "/../moved-sub")
                try FileManager.default.createSymbolicLink(
                    atPath: root + "/data/sub", withDestinationPath: outside + "/sub")
            }
        }
        #expect(
            message == "data/sub/b.txt: is a symbolic link, or is reached through one; a bag holds regular files only")
    }

    @Test(arguments: [false, true])
    func aPayloadFileSwappedForAFIFOIsRefusedAtOnce(avoidingOpenat2: Bool) throws {
        let f = try Fixture()
        defer { f.remove() }
        let fifo = f.bag + "/data/a.txt"
        // Before the fix, the read waited for a writer forever: this one comes, and the test
        // fails on what was read instead of hanging. (Not a timing: it only unblocks.)
        let unblocker = FIFOUnblocker(fifo)
        defer { unblocker.stop() }
        let message = refusal {
            try f.read(avoidingOpenat2: avoidingOpenat2) { root in
                try FileManager.default.removeItem(atPath: root + "/data/a.txt")
                guard mkfifo(root + "/data/a.txt", 0o644) == 0 else { throw POSIXError(.EIO) }
                unblocker.start()
            }
        }
        #expect(message == "data/a.txt: is a FIFO, not a regular file; a bag holds regular files only")
    }

    /// A folder holding one folder that holds the bag is read (an extracted archive), but not
    /// when that one entry is a link to a bag elsewhere.
    @Test(arguments: [false, true])
    func aFolderHoldingOnlyALinkToABagIsRefused(avoidingOpenat2: Bool) throws {
        let f = try Fixture()
        defer { f.remove() }
        let holder = f.directory + "/holder"
        try FileManager.default.createDirectory(atPath: holder, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: holder + "/bag", withDestinationPath: f.bag)
        let message = refusal {
            try FileAccess.$avoidsOpenat2.withValue(avoidingOpenat2) { try BagReader.read(at: holder) }
        }
        #expect(message == "bag: is a symbolic link, or is reached through one; a bag holds regular files only")
        try FileManager.default.removeItem(atPath: holder + "/bag")
        try FileManager.default.moveItem(atPath: f.bag, toPath: holder + "/bag")
        #expect(try BagReader.read(at: holder).problems.map(\.description) == [])
    }

    @Test func anUnchangedBagReadsTheSameEitherWay() throws {
        let f = try Fixture()
        defer { f.remove() }
        for avoiding in [false, true] {
            let bag = try f.read(avoidingOpenat2: avoiding) { _ in }
            #expect(bag.problems.map(\.description) == [])
            #expect(bag.payload.count == 2)
        }
    }

    @Test(arguments: [false, true])
    func opensBelowADirectoryRefuseWhatLeavesIt(avoidingOpenat2: Bool) throws {
        let f = try Fixture()
        defer { f.remove() }
        let root = try FileAccess.openDirectory(f.bag)
        defer { close(root) }
        try FileAccess.$avoidsOpenat2.withValue(avoidingOpenat2) {
            let opened = try FileAccess.openRegularFile("data/./sub//b.txt", beneath: root)
            close(opened.fd)
            #expect(opened.size == 9)
            for (path, kind) in [
                ("../outside/a.txt", FileAccess.Failure.Kind.outside), (f.outside + "/a.txt", .outside),
                ("data/sub", .notRegular("a directory")), ("data/none.txt", .system(ENOENT)),
                ("data/a.txt/x", .system(ENOTDIR)),
            ] {
                #expect(throws: FileAccess.Failure(kind: kind)) { try FileAccess.openRegularFile(path, beneath: root) }
            }
        }
    }
}
