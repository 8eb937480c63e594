import ArchiveIO
import Foundation
import TestScratch
import Testing

@testable import BagIt

/// A read's index keeps a manifest line's checksum as bytes and its path only where the key
/// does not give it; what a bag says reads the same: paths outside `data/` are found by their
/// keys, whatever the root's and the path's Unicode normalisation.
@Suite struct BagManifestIndexTests {
    func sha256(_ text: String) -> String {
        var hasher = MultiHasher([.sha256])
        Array(text.utf8).withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()[.sha256]!
    }

    /// A tar of `files` (path → text) under the top-level directory `top`.
    func tar(top: String, _ files: [(String, String)]) throws -> String {
        let path = try ScratchDirectory.make("bagit-index").path + "/bag.tar"
        let writer = try ArchiveWriter(path: path, format: .tar)
        for (name, text) in files {
            try writer.writeEntry(ArchiveEntry(path: top + "/" + name, kind: .file), contents: Array(text.utf8))
        }
        try writer.finish()
        return path
    }

    @Test(arguments: ["bag", "Caf\u{E9}", "Cafe\u{301}"])
    func linesOutsideDataAreFoundWhateverTheRootAndTheNormalisation(top: String) throws {
        let (a, accented, other) = ("a\n", "accented\n", "other\n")
        let outside = ["aaa.txt", "dat/x.txt", "data0/x.txt", "dat\u{E1}/x.txt", "zzz.txt"]
        let lines =
            ["\(sha256(a))  data/a.txt", "\(sha256(accented))  data/e\u{301}.txt"]
            + outside.map { "\(sha256(other))  \($0)" }
        let bag = try tar(
            top: top,
            [
                ("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
                ("manifest-sha256.txt", lines.joined(separator: "\n") + "\n"),
                ("data/a.txt", a), ("data/e\u{301}.txt", accented),
            ])
        let read = try BagReader.read(at: bag)
        #expect(
            read.problems.map(\.description)
                == outside.map { "manifest-sha256.txt: lists \($0), which is not under data/" }.sorted())
        #expect(read.payload.count == 2)
        #expect(try read.payload.file("data/a.txt")?.listed[.sha256] == sha256(a))
        // Named in either normalisation, listed as the manifest spells it.
        #expect(try read.payload.file("data/\u{E9}.txt")?.listed[.sha256] == sha256(accented))
        var listed: [String: String] = [:]
        try read.payload.forEach { listed[$0.path] = $0.listed[.sha256] }
        #expect(listed == ["data/a.txt": sha256(a), "data/e\u{301}.txt": sha256(accented)])
    }

    @Test func aChecksumIsTheBytesItsHexSpells() throws {
        let hex = "00ff10aB" + String(repeating: "9", count: 56)
        let checksum = try #require(ManifestChecksum(hex: hex.utf8))
        #expect(checksum.count == 32)
        #expect(checksum.hex == hex.lowercased())
        #expect(ManifestChecksum(validHex: hex.lowercased()) == checksum)
        #expect(Array(checksum.hex.utf8).withUnsafeBytes { checksum.matches(hex: $0) })
        // A file's digest is lowercase: another case, length or digit does not match.
        #expect(!Array(hex.utf8).withUnsafeBytes { checksum.matches(hex: $0) })
        #expect(!Array(hex.lowercased().dropLast(2).utf8).withUnsafeBytes { checksum.matches(hex: $0) })
        #expect(!Array(("1" + hex.lowercased().dropFirst()).utf8).withUnsafeBytes { checksum.matches(hex: $0) })
        let bytes = checksum.withUnsafeBytes { Array($0) }
        #expect(bytes.prefix(4) == [0x00, 0xFF, 0x10, 0xAB])
        #expect(bytes.withUnsafeBytes { ManifestChecksum(bytes: $0) } == checksum)
        #expect(ManifestChecksum(hex: String(repeating: "a", count: 128).utf8)?.count == 64)
        for bad in ["abc", "zz", String(repeating: "a", count: 130), "0g"] {
            #expect(ManifestChecksum(hex: bad.utf8) == nil, "\(bad)")
        }
    }
}
