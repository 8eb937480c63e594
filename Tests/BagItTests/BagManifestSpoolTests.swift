import ArchiveIO
import Foundation
import TestScratch
import Testing

@testable import BagIt

/// A payload manifest's bytes are kept, raw, in the read's spool: a tag manifest checks the
/// manifest against them once it is known which algorithms it needs, and the lines that wait
/// until the payload is known (an importer's) are split from them then — read alike, whether
/// they were split as they streamed or afterwards.
@Suite struct BagManifestSpoolTests {
    static let payload = Array("payload\n".utf8)
    static let declaration = Array("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8)

    func digest(_ algorithm: ChecksumAlgorithm, _ bytes: [UInt8]) -> String {
        var hasher = MultiHasher([algorithm])
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()[algorithm]!
    }

    /// A payload sink that keeps nothing.
    final class Discard: BagPayloadSink {
        func write(_ bytes: UnsafeRawBufferPointer) {}
        func finish(digests: [ChecksumAlgorithm: String]) {}
    }

    /// The problems of `bag` as a validator reads it, and as importers do: one without a
    /// sink (every line waits), and one whose sink is told expected digests, with the lines
    /// after the first `indexed` waiting. An importer may stop at a listed file the bag lacks
    /// instead, one the validator names too.
    func problems(_ bag: String, indexed: Int = 2, sourceLocation: SourceLocation = #_sourceLocation) throws
        -> [String]
    {
        let found = try BagReader.read(at: bag).problems.map(\.description)
        var stopping = BagReadOptions(stopsAtMaxProblems: true)
        stopping.linesIndexedAsTheyStream = indexed
        for sink in [nil, { (_: String, _: String?) in Discard() }] {
            do {
                let read = try BagReader.read(at: bag, options: stopping, sink: sink)
                #expect(read.problems.map(\.description) == found, sourceLocation: sourceLocation)
            } catch let error as BagError where error.code == .missingFile {
                #expect(found.contains(error.description), sourceLocation: sourceLocation)
            }
        }
        return found
    }

    /// A tar of `files` in this order under `bag/` (a `nil` content makes a hard link to the
    /// path given).
    func tar(_ files: [(path: String, bytes: [UInt8]?, link: String?)]) throws -> String {
        let path = try ScratchDirectory.make("bag-manifest-spool").path + "/bag.tar"
        let writer = try ArchiveWriter(path: path, format: .tar)
        for file in files {
            if let bytes = file.bytes {
                try writer.writeEntry(ArchiveEntry(path: "bag/" + file.path, kind: .file), contents: bytes)
            } else {
                try writer.writeEntry(
                    ArchiveEntry(path: "bag/" + file.path, kind: .hardlink, linkTarget: "bag/" + file.link!))
            }
        }
        try writer.finish()
        return path
    }

    /// A directory bag holding `data/a.txt`, with `manifest` as its `manifest-sha256.txt`.
    func directoryBag(manifest: [UInt8]) throws -> String {
        let bag = try ScratchDirectory.make("bag-manifest-spool").path
        try FileManager.default.createDirectory(atPath: bag + "/data", withIntermediateDirectories: true)
        try Data(Self.payload).write(to: URL(fileURLWithPath: bag + "/data/a.txt"))
        try Data(Self.declaration).write(to: URL(fileURLWithPath: bag + "/bagit.txt"))
        try Data(manifest).write(to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        return bag
    }

    /// A payload manifest longer than the spool's chunks (blank lines after its one line), listed
    /// by tag manifests before and after it — itself and a hard link to it — in three
    /// algorithms: each digest is of its bytes, whichever reader.
    @Test func tagManifestsCheckAPayloadManifestFromItsBytes() throws {
        let line = "\(digest(.sha256, Self.payload))  data/a.txt\n"
        let blank = String(repeating: " ", count: 999) + "\n"
        let manifest = Array((line + String(repeating: blank, count: 2_500)).utf8)
        #expect(manifest.count > 2 * ByteSpool.chunkBytes)
        func tagManifest(_ algorithm: ChecksumAlgorithm, wrong: Bool = false) -> [UInt8] {
            let listed = wrong ? String(repeating: "0", count: algorithm.hexLength) : digest(algorithm, manifest)
            return Array("\(listed)  manifest-sha256.txt\n\(digest(algorithm, manifest))  copy.txt\n".utf8)
        }
        for wrong in [false, true] {
            let bag = try tar([
                ("bagit.txt", Self.declaration, nil),
                ("tagmanifest-sha1.txt", tagManifest(.sha1), nil),
                ("manifest-sha256.txt", manifest, nil),
                ("copy.txt", nil, "manifest-sha256.txt"),
                ("tagmanifest-md5.txt", tagManifest(.md5), nil),
                ("tagmanifest-sha512.txt", tagManifest(.sha512, wrong: wrong), nil),
                ("data/a.txt", Self.payload, nil),
            ])
            #expect(
                try problems(bag)
                    == (wrong
                        ? [
                            "manifest-sha256.txt: sha512 checksum mismatch: tagmanifest-sha512.txt says "
                                + "\(String(repeating: "0", count: 128)), the file has \(digest(.sha512, manifest))"
                        ] : []))
        }
    }

    /// Lines that end with CR LF, the pair cut by the end of a chunk, and with CR alone: the
    /// line numbers of the lines that waited are those of the lines split as they streamed.
    @Test func theLinesThatWaitAreNumberedAsThoseThatStreamed() throws {
        var manifest = Array("\(digest(.sha256, Self.payload))  data/a.txt\r\n".utf8)
        let blank = Array((String(repeating: " ", count: 98) + "\r\n").utf8)
        var lines = 1
        while manifest.count + blank.count < ByteSpool.chunkBytes {
            manifest += blank
            lines += 1
        }
        // CR the last byte of the first chunk, LF the first of the next.
        manifest += Array(repeating: UInt8(0x20), count: ByteSpool.chunkBytes - 1 - manifest.count) + [0x0D, 0x0A]
        manifest += Array("  \r  \rnotaline\r".utf8)
        #expect(manifest[ByteSpool.chunkBytes - 1] == 0x0D)
        for indexed in [0, 2, lines, lines + 2] {
            #expect(
                try problems(try directoryBag(manifest: manifest), indexed: indexed)
                    == ["manifest-sha256.txt: line \(lines + 4) is not 'checksum path'"], "indexed: \(indexed)")
        }
    }

    /// A manifest's first problem is the first line's that has one, whichever reader: a line
    /// that lists a file again with another checksum, before an overlong one.
    @Test func everyReaderFindsTheFirstProblemOfAManifest() throws {
        let sha = digest(.sha256, Self.payload)
        let manifest = Array(
            ("\(sha)  data/a.txt\n\(String(repeating: "0", count: 64))  data/a.txt\n"
                + String(repeating: "a", count: Scan.maxManifestLineBytes + 1)).utf8)
        for indexed in [0, 1, 5] {
            #expect(
                try problems(try directoryBag(manifest: manifest), indexed: indexed)
                    == ["manifest-sha256.txt: line 2 lists data/a.txt a second time"], "indexed: \(indexed)")
        }
    }

    @Test func aSpoolGivesBackItsBytesInChunks() throws {
        let spool = try ByteSpool()
        let first = (0..<100).map { UInt8($0) }
        let large = (0..<(ByteSpool.chunkBytes + 7)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try first.withUnsafeBytes { try spool.append($0) }
        let start = spool.end
        try large.withUnsafeBytes { try spool.append($0) }
        try first.withUnsafeBytes { try spool.append($0) }
        #expect(spool.end == Int64(large.count + 2 * first.count))
        var read: [UInt8] = []
        var sizes: [Int] = []
        try spool.chunks(in: start..<spool.end) { chunk in
            read += chunk
            sizes.append(chunk.count)
            return true
        }
        #expect(read == large + first)
        #expect(sizes == [ByteSpool.chunkBytes, 107])
        var once = 0
        try spool.chunks(in: 0..<spool.end) { _ in
            once += 1
            return false
        }
        #expect(once == 1)
    }
}
