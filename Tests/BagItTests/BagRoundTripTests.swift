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
        #expect(bag.payload["data/日本/é 100%.bin"]?.digests[.sha256] == sha256([1, 2, 3]))
        #expect(bag.info.first { $0.label == "Payload-Oxum" }?.value == "9.2")
    }
}
