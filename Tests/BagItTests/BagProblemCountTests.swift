import Foundation
import TestScratch
import Testing

@testable import BagIt

/// A bag of many problems: the first of them, by file, and how many — in the memory of a few,
/// and, for a reader that only refuses the bag, without looking at them all.
@Suite struct BagProblemCountTests {
    static let helloSHA256 = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

    /// A directory bag holding `data/hello.txt`, whose manifest lists it and then `absent`
    /// files it lacks (`data/missing/NNNNN.bin`, each with a digest of its own), last first.
    func bag(absent: Int) throws -> String {
        let bag = try ScratchDirectory.make("bag-problem-count").path
        try FileManager.default.createDirectory(atPath: bag + "/data", withIntermediateDirectories: true)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: bag + "/data/hello.txt"))
        try Data("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8)
            .write(to: URL(fileURLWithPath: bag + "/bagit.txt"))
        var manifest = "\(Self.helloSHA256)  data/hello.txt\n"
        for i in (0..<absent).reversed() { manifest += "\(Self.digest(i))  \(Self.path(i))\n" }
        try Data(manifest.utf8).write(to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        return bag
    }

    static func path(_ i: Int) -> String { "data/missing/" + String(100_000 + i).dropFirst() + ".bin" }
    static func digest(_ i: Int) -> String { String(repeating: String(format: "%016llx", i &* 0x9E37_79B9), count: 4) }
    static func missing(_ i: Int) -> String { "\(path(i)): is listed in manifest-sha256.txt but is not in the bag" }

    @Test func everyAbsentFileIsCountedAndTheFirstAreListedInOrder() throws {
        let contents = try BagReader.read(at: try bag(absent: 3_000), options: BagReadOptions(maxProblems: 100))
        #expect(contents.problemCount == 3_000)
        #expect(contents.countsAllProblems)
        #expect(contents.problems.map(\.description) == (0..<100).map(Self.missing))
    }

    /// A malformed tag manifest is a problem of its own: it does not stand for the payload
    /// manifest the bag lacks, which is reported too.
    @Test func aMalformedTagManifestDoesNotHideAMissingPayloadManifest() throws {
        let bag = try ScratchDirectory.make("bag-no-payload-manifest").path
        try FileManager.default.createDirectory(atPath: bag + "/data", withIntermediateDirectories: true)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: bag + "/data/hello.txt"))
        try Data("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8)
            .write(to: URL(fileURLWithPath: bag + "/bagit.txt"))
        try Data("garbage line\n".utf8).write(to: URL(fileURLWithPath: bag + "/tagmanifest-sha256.txt"))
        let contents = try BagReader.read(at: bag)
        #expect(
            contents.problems.map(\.description) == [
                "manifest-sha256.txt: is missing: a bag needs a payload manifest",
                "tagmanifest-sha256.txt: line 1: 'garbage' is not a sha256 checksum",
            ])
    }

    /// A payload sink that keeps nothing.
    final class Discard: BagPayloadSink {
        func write(_ bytes: UnsafeRawBufferPointer) {}
        func finish(digests: [ChecksumAlgorithm: String]) {}
    }

    /// A reader whose sink is told each file's expected digest has every manifest line
    /// indexed as it streams: it checks them after the read, up to its first problems.
    @Test func aReaderThatStopsAtMaxProblemsCountsAtLeastThoseItFound() throws {
        let contents = try BagReader.read(
            at: try bag(absent: 3_000), options: BagReadOptions(maxProblems: 100, stopsAtMaxProblems: true),
            sink: { _, _ in Discard() })
        #expect(!contents.countsAllProblems)
        #expect(contents.problemCount >= 100 && contents.problemCount < 3_000)
        #expect(!contents.isValid)
        #expect(contents.problems.map(\.description) == (0..<100).map(Self.missing))
        // A bag of fewer problems is counted whole.
        let few = try BagReader.read(
            at: try bag(absent: 3), options: BagReadOptions(maxProblems: 100, stopsAtMaxProblems: true),
            sink: { _, _ in Discard() })
        #expect(few.countsAllProblems)
        #expect(few.problems.map(\.description) == (0..<3).map(Self.missing))
    }

    /// With such a sink, the lines after the first `linesIndexedAsTheyStream` wait until the
    /// payload is known, and the read stops at the first of them naming a file the bag lacks:
    /// a manifest of millions of lines is refused at the cost of those indexed.
    @Test func aReaderThatStopsAtMaxProblemsIndexesOnlyTheFirstLinesAsTheyStream() throws {
        var options = BagReadOptions(maxProblems: 100, stopsAtMaxProblems: true)
        options.linesIndexedAsTheyStream = 100
        let error = try #require(throws: BagError.self) {
            try BagReader.read(at: try bag(absent: 3_000), options: options, sink: { _, _ in Discard() })
        }
        // Line 1 lists hello.txt, line n the absent file 3001 - n: line 101 waited first.
        #expect(error.description == Self.missing(2_900))
        // The file listed among the first lines is told its digest; one listed after, not.
        var told: [String: String?] = [:]
        let small = try bag(absent: 0)
        try Data(("\(Self.digest(1))  \(Self.path(1))\n" + "\(Self.helloSHA256)  data/hello.txt\n").utf8)
            .write(to: URL(fileURLWithPath: small + "/manifest-sha256.txt"))
        try FileManager.default.createDirectory(atPath: small + "/data/missing", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: small + "/" + Self.path(1)))
        options.linesIndexedAsTheyStream = 1
        let contents = try BagReader.read(
            at: small, options: options,
            sink: { path, expected in
                told[path] = expected
                return Discard()
            })
        #expect(told == [Self.path(1): Self.digest(1), "data/hello.txt": nil])
        // Both lines are checked after the read, those that waited too.
        #expect(
            contents.problems.map(\.description) == [
                "\(Self.path(1)): sha256 checksum mismatch: manifest-sha256.txt says \(Self.digest(1)), the file has "
                    + "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
            ])
    }

    /// Without such a sink, the lines wait until the payload is known, and the read stops at
    /// the first line (not the first by file) naming a file the bag lacks.
    @Test func aReaderThatStopsAtMaxProblemsStopsAtTheFirstLineNamingAnAbsentFile() throws {
        for sink in [nil, { (_: String, _: String?) in Discard() }] {
            let error = try #require(throws: BagError.self) {
                try BagReader.read(
                    at: try bag(absent: 3_000),
                    options: BagReadOptions(looksUpExpectedSHA256: false, stopsAtMaxProblems: true), sink: sink)
            }
            #expect(error.description == Self.missing(2_999))
        }
    }

    /// A problem whose reason is made only when it may be kept lists and counts as one made
    /// whole, and its reason is made for the first few only when they come in file order.
    @Test func aProblemMadeOnlyIfKeptIsListedAndCountedAlike() {
        var whole = ProblemList(limit: 100)
        var lazy = ProblemList(limit: 100)
        var made = 0
        let files = (0..<10_000).map { "data/\(100_000 + $0).txt" }
        for (i, file) in (files + files.reversed()).enumerated() {
            let code: BagError.Code = i < files.count ? .missingFile : .unlistedFile
            whole.append(BagError(code, file: file, "\(code)"))
            lazy.append(
                code, file: file,
                {
                    made += 1
                    return "\(code)"
                }())
        }
        #expect(lazy.count == whole.count && lazy.codes == whole.codes)
        #expect(lazy.first.map(\.description) == whole.first.map(\.description))
        #expect(made < 10_000 + 300)  // in file order, only the first 200 of the missing are made
    }

    @Test func aProblemListKeepsTheFirstByFileWhateverTheOrderTheyCome() {
        var list = ProblemList(limit: 100)
        var generator = SystemRandomNumberGenerator()
        let files = (0..<10_000).map { "data/\(100_000 + $0).txt" }
        for file in files.shuffled(using: &generator) { list.append(BagError(.missingFile, file: file, "x")) }
        for file in files.reversed() { list.append(BagError(.unlistedFile, file: file, "y")) }
        #expect(list.count == 20_000)
        #expect(list.codes == [.missingFile: 10_000, .unlistedFile: 10_000])
        #expect(
            list.first.map(\.description)
                == files.prefix(50).flatMap { ["\($0): x", "\($0): y"] })
    }
}
