import BagIt
import Foundation
import Testing

/// A ``BagWriter`` whose payload is declared by a manifest file: nothing per file in memory,
/// and what was written is checked against what was listed.
@Suite struct BagManifestWriterTests {
    let files: [(path: String, bytes: [UInt8])] = [
        ("a.txt", Array("hello\n".utf8)), ("b/c.bin", [1, 2, 3]), ("日本/é 100%.bin", [4]),
    ]

    func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "bagit-manifest-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func item(_ file: (path: String, bytes: [UInt8])) -> BagPayloadItem {
        var hasher = MultiHasher([.sha256])
        file.bytes.withUnsafeBytes { hasher.update($0) }
        return BagPayloadItem(path: file.path, size: Int64(file.bytes.count), sha256: hasher.finalize()[.sha256]!)
    }

    /// Writes `lines` (or the sorted manifest of `files`) to a file and declares it.
    func manifest(in root: String, _ lines: String? = nil, files count: Int? = nil) throws -> BagPayloadManifest {
        let text =
            lines
            ?? String(
                decoding: TagFile.formatManifest(files.map { ("data/" + $0.path, item($0).sha256) }), as: UTF8.self)
        let path = root + "/manifest.txt"
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        return BagPayloadManifest(
            file: path, files: count ?? files.count, bytes: Int64(files.reduce(0) { $0 + $1.bytes.count }))
    }

    func write(_ file: (path: String, bytes: [UInt8]), to writer: BagWriter) throws {
        try writer.writePayload(item(file)) { write in try file.bytes.withUnsafeBytes(write) }
    }

    @Test(arguments: ["bag.tar.zst", "bag.zip", "bagdir"])
    func aBagDeclaredByAManifestFileIsWrittenInAnyOrderAndReadsBackValid(name: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let writer = try BagWriter(path: root + "/" + name, payload: manifest(in: root))
        for file in files.reversed() { try write(file, to: writer) }
        try writer.finish()
        let bag = try BagReader.read(at: root + "/" + name)
        #expect(bag.problems.map(\.description) == [])
        #expect(bag.payload.count == 3)
        #expect(bag.info.first { $0.label == "Payload-Oxum" }?.value == "10.3")
    }

    @Test func aFileTheManifestDoesNotListStopsTheBagAtFinish() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let writer = try BagWriter(path: root + "/bag.tar", payload: manifest(in: root))
        try write(files[0], to: writer)
        try write(files[1], to: writer)
        try write(("other.bin", [4]), to: writer)  // instead of files[2]: same count, same bytes
        #expect {
            try writer.finish()
        } throws: { error in
            (error as? BagError)?.description
                == "manifest-sha256.txt: lists 3 payload files of 10 bytes; the 3 written (10 bytes) are not those"
        }
        #expect(!FileManager.default.fileExists(atPath: root + "/bag.tar"))
    }

    @Test func aFileNeverWrittenStopsTheBagAtFinish() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let writer = try BagWriter(path: root + "/bag", payload: manifest(in: root))
        try write(files[0], to: writer)
        #expect {
            try writer.finish()
        } throws: { error in
            (error as? BagError)?.description == "manifest-sha256.txt: lists 3 payload files; 1 were written"
        }
    }

    @Test func aFileWrittenTwiceStopsTheBagAtFinish() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let writer = try BagWriter(path: root + "/bag.tar", payload: manifest(in: root))
        for file in [files[0], files[1], files[1]] { try write(file, to: writer) }
        #expect {
            try writer.finish()
        } throws: { error in
            (error as? BagError)?.description
                == "manifest-sha256.txt: lists 3 payload files of 10 bytes; the 3 written (12 bytes) are not those"
        }
    }

    @Test(arguments: [
        (
            "bbbb  data/b\n", "line 1 is not 'sha256  data/path'"
        ),
        (
            String(repeating: "a", count: 64) + "  data/b\n" + String(repeating: "a", count: 64) + "  data/a\n",
            "line 2 lists data/a out of order or a second time (paths must be sorted by their bytes)"
        ),
        (
            String(repeating: "a", count: 64) + "  data/a\n" + String(repeating: "a", count: 64) + "  data/a\n",
            "line 2 lists data/a out of order or a second time (paths must be sorted by their bytes)"
        ),
        (
            String(repeating: "a", count: 64) + "  data/../x\n", "line 1 names data/../x, not a safe path under data/"
        ),
        (
            String(repeating: "a", count: 64) + "  tag.txt\n", "line 1 names tag.txt, not a safe path under data/"
        ),
        (
            String(repeating: "a", count: 64) + "  data/a", "line 1 does not end with a newline"
        ),
        (
            String(repeating: "a", count: 64) + "  data/50%\n",
            "line 1: 'data/50%' is not encoded as BagIt 1.0 encodes paths (only %25, %0A and %0D)"
        ),
        (
            String(repeating: "a", count: 64) + "  data/a%0a\n",
            "line 1: 'data/a%0a' is not encoded as BagIt 1.0 encodes paths (only %25, %0A and %0D)"
        ),
    ])
    func aBadManifestFileIsRefusedBeforeAnythingIsWritten(lines: String, reason: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let declared = try manifest(in: root, lines, files: lines.split(separator: "\n").count)
        #expect {
            try BagWriter(path: root + "/bag.tar", payload: declared)
        } throws: { error in
            (error as? BagError)?.description == "\(root)/manifest.txt: \(reason)"
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root) == ["manifest.txt"])
    }

    @Test func aWriterMadeWithAListTakesItsItemsByIndexOnly() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let writer = try BagWriter(path: root + "/bag", payload: [item(files[0])])
        #expect {
            try write(files[0], to: writer)
        } throws: { error in
            (error as? BagError)?.description
                == "data/a.txt: this writer was given a list of payload items: write them by their index"
        }
    }

    @Test func aCountThatDiffersFromTheManifestIsRefused() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect {
            try BagWriter(path: root + "/bag.tar", payload: manifest(in: root, files: 4))
        } throws: { error in
            (error as? BagError)?.description == "\(root)/manifest.txt: lists 3 payload files, not the 4 declared"
        }
    }
}
