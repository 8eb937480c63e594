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

    @Test func aReaderThatStopsAtMaxProblemsCountsAtLeastThoseItFound() throws {
        let contents = try BagReader.read(
            at: try bag(absent: 3_000), options: BagReadOptions(maxProblems: 100, stopsAtMaxProblems: true))
        #expect(!contents.countsAllProblems)
        #expect(contents.problemCount >= 100 && contents.problemCount < 3_000)
        #expect(!contents.isValid)
        #expect(contents.problems.map(\.description) == (0..<100).map(Self.missing))
        // A bag of fewer problems is counted whole.
        let few = try BagReader.read(
            at: try bag(absent: 3), options: BagReadOptions(maxProblems: 100, stopsAtMaxProblems: true))
        #expect(few.countsAllProblems)
        #expect(few.problems.map(\.description) == (0..<3).map(Self.missing))
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
