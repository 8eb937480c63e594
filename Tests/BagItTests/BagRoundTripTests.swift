import ArchiveIO
import BagIt
import Foundation
import Testing

@Suite struct BagRoundTripTests {
    func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "bagit-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func sha256(_ bytes: [UInt8]) -> String {
        var hasher = MultiHasher([.sha256])
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()[.sha256]!
    }

    /// A bag written in every format reads back valid, with the same payload digests.
    @Test(arguments: ["bag.tar", "bag.tar.gz", "bag.tar.zst", "bag.zip", "bagdir"])
    func aWrittenBagReadsBackValid(name: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let files: [(String, [UInt8])] = [("a.txt", Array("hello\n".utf8)), ("日本/é 100%.bin", [1, 2, 3])]
        let writer = try BagWriter(
            path: root + "/" + name,
            payload: files.map { BagPayloadItem(path: $0.0, size: Int64($0.1.count), sha256: sha256($0.1)) })
        for (i, file) in files.enumerated() {
            try writer.writePayload(i) { write in try file.1.withUnsafeBytes(write) }
        }
        try writer.finish()
        let bag = try BagReader.read(at: root + "/" + name)
        #expect(bag.problems.map(\.description) == [])
        #expect(bag.version == "1.0")
        #expect(try bag.payload.file("data/日本/é 100%.bin")?.digests[.sha256] == sha256([1, 2, 3]))
        #expect(bag.info.first { $0.label == "Payload-Oxum" }?.value == "9.2")
    }

    /// A directory bag with one payload file and two tag files of the caller's: one from
    /// memory, one copied from a file.
    func writtenDirectoryBag(_ root: String) throws -> String {
        let extra = root + "/extra-source.json"
        try Data(#"{"large": "tag file"}"#.utf8).write(to: URL(fileURLWithPath: extra))
        let bag = root + "/bag"
        let payload: [UInt8] = Array("hello\n".utf8)
        let writer = try BagWriter(
            path: bag, payload: [BagPayloadItem(path: "a.txt", size: 6, sha256: sha256(payload))],
            tagFiles: [.bytes("notes.txt", Array("a note\n".utf8)), .file("extra.json", from: extra)])
        try writer.writePayload(0) { write in try payload.withUnsafeBytes(write) }
        try writer.finish()
        return bag
    }

    @Test func tagFilesFromMemoryAndFromAFileAreWrittenAndListed() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let bag = try writtenDirectoryBag(root)
        let extra = Array(#"{"large": "tag file"}"#.utf8)
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: bag + "/extra.json"))) == extra)
        let tagManifest = try String(contentsOfFile: bag + "/tagmanifest-sha256.txt", encoding: .utf8)
        #expect(tagManifest.contains("\(sha256(extra))  extra.json\n"))
        #expect(tagManifest.contains("\(sha256(Array("a note\n".utf8)))  notes.txt\n"))
        let read = try BagReader.read(at: bag, options: BagReadOptions(keptTagFiles: ["extra.json"]))
        #expect(read.problems.map(\.description) == [])
        #expect(read.tagFiles["extra.json"] == extra)
    }

    /// Tag files — those a reader keeps (manifests, bagit.txt, the caller's) and those it
    /// does not — are checked against every tag manifest, whatever its algorithm.
    @Test func aTagFileThatDiffersFromATagManifestIsReported() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let bag = try writtenDirectoryBag(root)
        let manifest = try String(contentsOfFile: bag + "/manifest-sha256.txt", encoding: .utf8)
        try Data((manifest + "\n").utf8).write(to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        try Data("another note\n".utf8).write(to: URL(fileURLWithPath: bag + "/notes.txt"))
        // An MD5 tag manifest too, one of whose lines is wrong.
        let wrongMD5 = String(repeating: "0", count: 32)
        try Data("\(wrongMD5)  bagit.txt\n".utf8).write(to: URL(fileURLWithPath: bag + "/tagmanifest-md5.txt"))
        var md5 = MultiHasher([.md5])
        TagFile.declaration.withUnsafeBytes { md5.update($0) }
        let realMD5 = md5.finalize()[.md5]!

        let read = try BagReader.read(at: bag, options: BagReadOptions(keptTagFiles: ["extra.json"]))
        let problems = read.problems.map(\.description)
        #expect(problems.count == 3)
        #expect(
            problems.contains(
                "bagit.txt: md5 checksum mismatch: tagmanifest-md5.txt says \(wrongMD5), the file has \(realMD5)"))
        #expect(
            problems.contains {
                $0.hasPrefix("manifest-sha256.txt: sha256 checksum mismatch: tagmanifest-sha256.txt says ")
            })
        #expect(problems.contains { $0.hasPrefix("notes.txt: sha256 checksum mismatch: tagmanifest-sha256.txt says ") })
    }

    @Test func aTagFileThatCannotBeReadStopsTheWriterWithItsName() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect {
            try BagWriter(path: root + "/bag.tar", payload: [], tagFiles: [.file("x.json", from: root + "/missing")])
        } throws: { error in
            (error as? BagError)?.description
                == "x.json: cannot be read from \(root)/missing: No such file or directory"
        }
        #expect(!FileManager.default.fileExists(atPath: root + "/bag.tar"))
    }

    @Test(arguments: ["", "/etc/passwd", "a//b.txt", "a/", "./a.txt", "a/../b", "..", "nul\u{0}.txt"])
    func anUnsafePayloadPathIsRefused(path: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect {
            try BagWriter(path: root + "/bag", payload: [BagPayloadItem(path: path, size: 0, sha256: sha256([]))])
        } throws: { error in
            (error as? BagError)?.description == "\(path): is not a safe relative path for a payload file"
        }
    }

    @Test(arguments: ["a.txt", "...", "a..b/.hidden", "日本/é 100%.bin"])
    func anUnusualButSafePayloadPathIsKept(path: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let writer = try BagWriter(
            path: root + "/bag", payload: [BagPayloadItem(path: path, size: 0, sha256: sha256([]))])
        try writer.writePayload(0) { _ in }
        try writer.finish()
        #expect(FileManager.default.fileExists(atPath: root + "/bag/data/" + path))
    }

    /// A payload name that begins with a combining mark is payload everywhere in a read
    /// (`data/` + the mark is one Character, but its bytes begin with `data/`).
    @Test(arguments: ["bag.tar", "bagdir"])
    func aPayloadNameBeginningWithACombiningMarkReadsBack(name: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let bytes: [UInt8] = [1, 2, 3]
        let writer = try BagWriter(
            path: root + "/" + name,
            payload: [BagPayloadItem(path: "\u{301}x.bin", size: 3, sha256: sha256(bytes))])
        try writer.writePayload(0) { write in try bytes.withUnsafeBytes(write) }
        try writer.finish()
        let bag = try BagReader.read(at: root + "/" + name)
        #expect(bag.problems.map(\.description) == [])
        var paths: [String] = []
        try bag.payload.forEach { paths.append($0.path) }
        #expect(paths.map { Array($0.utf8) } == [Array("data/\u{301}x.bin".utf8)])
    }

    /// A hard link to a tag file the reader keeps is checked against the tag manifest with
    /// that file's bytes.
    @Test func aHardLinkToAKeptTagFileIsCheckedByTheTagManifest() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let payload: [UInt8] = Array("hello\n".utf8)
        let info: [UInt8] = Array("Payload-Oxum: 6.1\n".utf8)
        let wrong = String(repeating: "0", count: 64)
        let tar = root + "/bag.tar"
        let writer = try ArchiveWriter(path: tar, format: .tar)
        func file(_ path: String, _ bytes: [UInt8]) throws {
            try writer.writeEntry(ArchiveEntry(path: "bag/" + path, kind: .file), contents: bytes)
        }
        try file("bagit.txt", TagFile.declaration)
        try file("bag-info.txt", info)
        try writer.writeEntry(ArchiveEntry(path: "bag/notes.txt", kind: .hardlink, linkTarget: "bag/bag-info.txt"))
        try file("manifest-sha256.txt", TagFile.formatManifest([("data/a.txt", sha256(payload))]))
        try file("tagmanifest-sha256.txt", Array("\(wrong)  notes.txt\n".utf8))
        try file("data/a.txt", payload)
        try writer.finish()
        let bag = try BagReader.read(at: tar)
        #expect(
            bag.problems.map(\.description) == [
                "notes.txt: sha256 checksum mismatch: tagmanifest-sha256.txt says \(wrong), the file has \(sha256(info))"
            ])
    }
}
