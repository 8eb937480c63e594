import ArchiveIO
import Foundation
import TestScratch
import Testing

@testable import BagIt

/// Tag files a reader keeps in memory have limits of their own, checked as their bytes come
/// (a hostile bag of a 100 MB `bag-info.txt` is refused at its first megabyte); manifests are
/// read line by line; and a bag with many problems gives the first of them and their count.
@Suite struct TagFileLimitTests {
    let root: String

    init() throws {
        // Under the test process's scratch folder, removed when the process exits.
        root = try ScratchDirectory.make("bagit-limits").path
    }

    static let payload = Array("payload\n".utf8)
    static let declaration = "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"

    func sha256(_ bytes: [UInt8]) -> String {
        var hasher = MultiHasher([.sha256])
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()[.sha256]!
    }

    /// A directory bag of one payload file, `data/a.txt`, with `files` written over (or beside) its own.
    func bag(_ files: [String: [UInt8]]) throws -> String {
        let bag = root + "/bag-" + UUID().uuidString
        var all: [String: [UInt8]] = [
            "bagit.txt": Array(Self.declaration.utf8), "data/a.txt": Self.payload,
            "manifest-sha256.txt": Array("\(sha256(Self.payload))  data/a.txt\n".utf8),
        ]
        all.merge(files) { $1 }
        for (path, bytes) in all {
            let full = bag + "/" + path
            try FileManager.default.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(bytes).write(to: URL(fileURLWithPath: full))
        }
        return bag
    }

    func refusal(_ bag: String, sourceLocation: SourceLocation = #_sourceLocation) -> BagError? {
        let error = #expect(throws: BagError.self, sourceLocation: sourceLocation) { try BagReader.read(at: bag) }
        #expect(error?.code == .hostileEntry, sourceLocation: sourceLocation)
        return error
    }

    /// Lines of `Label: value`, `count` bytes in all (short lines, as a hostile bag has them).
    static func shortLines(_ count: Int) -> [UInt8] {
        var bytes = [UInt8]()
        bytes.reserveCapacity(count)
        while bytes.count + 5 <= count { bytes += Array("a: b\n".utf8) }
        bytes += [UInt8](repeating: 0x0A, count: count - bytes.count)  // blank lines
        return bytes
    }

    @Test func aDeclarationAtItsLimitIsRead() throws {
        // 4 KiB exactly: the two fields, then blank lines.
        var bytes = Array(Self.declaration.utf8)
        bytes += [UInt8](repeating: 0x0A, count: 4096 - bytes.count)
        let read = try BagReader.read(at: try bag(["bagit.txt": bytes]))
        #expect(read.problems.map(\.description) == [])
        #expect(read.version == "1.0")
    }

    @Test func aDeclarationOverItsLimitIsRefused() throws {
        var bytes = Array(Self.declaration.utf8)
        bytes += [UInt8](repeating: 0x0A, count: 4097 - bytes.count)
        #expect(
            refusal(try bag(["bagit.txt": bytes]))?.description
                == "bagit.txt: is larger than 4 KiB (4096 bytes), the limit for bagit.txt")
    }

    @Test func aDeclarationLineOverItsLimitIsRefused() throws {
        let bytes = Array(
            "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\(String(repeating: " ", count: 1000))\n".utf8)
        #expect(
            refusal(try bag(["bagit.txt": bytes]))?.description
                == "bagit.txt: line 2 is longer than 1 KiB (1024 bytes), the limit for a line of bagit.txt")
    }

    @Test func aBagInfoOverItsLimitIsRefused() throws {
        let error = refusal(try bag(["bag-info.txt": Self.shortLines((1 << 20) + 1)]))
        #expect(error?.description == "bag-info.txt: is larger than 1 MiB (1048576 bytes), the limit for bag-info.txt")
        // At the limit, it is read.
        let read = try BagReader.read(at: try bag(["bag-info.txt": Self.shortLines(1 << 20)]))
        #expect(read.info.count == (1 << 20) / 5)
        #expect(read.problemCount == 0)
    }

    /// Lines end with LF, CR or CR LF: the line named is the one a reader would count.
    @Test func aBagInfoLineOverItsLimitIsRefusedNamingTheLine() throws {
        let long = String(repeating: "x", count: 64 << 10)
        let ok = "Source-Organization: \(long.dropFirst(21))"  // 64 KiB exactly
        let bytes = Array("A: 1\r\nB: 2\rC: 3\n\(ok)\nD: \(long)\n".utf8)
        #expect(
            refusal(try bag(["bag-info.txt": bytes]))?.description
                == "bag-info.txt: line 5 is longer than 64 KiB (65536 bytes), the limit for a line of bag-info.txt")
    }

    @Test func aTagManifestOverItsLimitIsRefused() throws {
        let line = Array("\(sha256(Self.payload))  bagit.txt\n".utf8)
        var bytes = [UInt8]()
        while bytes.count <= 1 << 20 { bytes += line }
        #expect(
            refusal(try bag(["tagmanifest-sha256.txt": bytes]))?.description
                == "tagmanifest-sha256.txt: is larger than 1 MiB (1048576 bytes), the limit for tagmanifest-sha256.txt")
    }

    /// In an archive, the limit names the member as the archive has it.
    @Test func theLimitNamesTheMemberOfAnArchive() throws {
        let path = root + "/bag.tar"
        let writer = try ArchiveWriter(path: path, format: .tar)
        try writer.writeEntry(ArchiveEntry(path: "bag/bagit.txt", kind: .file), contents: Array(Self.declaration.utf8))
        try writer.writeEntry(ArchiveEntry(path: "bag/bag-info.txt", kind: .file), contents: Self.shortLines(2 << 20))
        try writer.finish()
        #expect(
            refusal(path)?.description
                == "bag/bag-info.txt: is larger than 1 MiB (1048576 bytes), the limit for bag-info.txt")
    }

    /// Which top-level directory is the bag is known once the read ends: until then, the tag
    /// files of each are kept — within a limit for all of them together.
    @Test func theTagFilesOfManyPossibleRootsHaveALimitTogether() throws {
        let path = root + "/roots.tar"
        let writer = try ArchiveWriter(path: path, format: .tar)
        let info = Self.shortLines(1 << 20)
        for i in 0..<17 {
            try writer.writeEntry(ArchiveEntry(path: "bag\(i)/bag-info.txt", kind: .file), contents: info)
        }
        try writer.finish()
        #expect(
            refusal(path)?.description
                == "bag16/bag-info.txt: takes the tag files kept in memory (bagit.txt, bag-info.txt and tag "
                + "manifests, of every possible root) over 16 MiB (16777216 bytes), their limit together")
    }

    /// `fetch.txt` is not kept: a large one of blank lines is no problem; a line after them
    /// that lists a file no manifest lists is.
    @Test func fetchTxtIsReadAsAStream() throws {
        let blank = [UInt8](repeating: 0x0A, count: 3 << 20)
        let quiet = try BagReader.read(at: try bag(["fetch.txt": blank]))
        #expect(quiet.problems.isEmpty && quiet.warnings.isEmpty)
        let listing = blank + Array("http://example.org/x 5 data/x.txt\n".utf8)
        #expect(
            try BagReader.read(at: try bag(["fetch.txt": listing])).problems.map(\.description) == [
                "fetch.txt: lists data/x.txt, which manifest-sha256.txt does not list"
            ])
    }

    // MARK: Many problems

    /// A manifest of files the bag lacks: the first problems by file, and how many in all.
    @Test func aBagWithManyProblemsGivesTheFirstAndACount() throws {
        var manifest = "\(sha256(Self.payload))  data/a.txt\n"
        for i in (0..<2_500).reversed() { manifest += "\(sha256([UInt8(i % 256)]))  data/missing-\(10_000 + i).txt\n" }
        let bag = try bag(["manifest-sha256.txt": Array(manifest.utf8)])
        let read = try BagReader.read(at: bag)
        #expect(read.problemCount == 2_500)
        #expect(!read.isValid)
        #expect(read.problems.count == 1_000)
        #expect(
            read.problems.first?.description
                == "data/missing-10000.txt: is listed in manifest-sha256.txt but is not in the bag")
        #expect(
            read.problems.last?.description
                == "data/missing-10999.txt: is listed in manifest-sha256.txt but is not in the bag")
        let few = try BagReader.read(at: bag, options: BagReadOptions(maxProblems: 3))
        #expect(few.problemCount == 2_500)
        #expect(
            few.problems.map(\.file) == ["data/missing-10000.txt", "data/missing-10001.txt", "data/missing-10002.txt"])
    }

    // MARK: A manifest that is not UTF-8

    /// The reason given is the true one: the manifest is in a supported algorithm, but a
    /// line of it is not UTF-8.
    @Test func aManifestPathThatIsNotUTF8IsReportedAsSuchAlone() throws {
        var manifest = Array("\(sha256(Self.payload))  data/a.txt\n".utf8)
        manifest += Array("\(sha256(Self.payload))  data/b".utf8) + [0xFF, 0xFE] + Array(".txt\n".utf8)
        let read = try BagReader.read(at: try bag(["manifest-sha256.txt": manifest]))
        #expect(read.problems.map(\.description) == ["manifest-sha256.txt: line 2 is not valid UTF-8"])
    }
}
