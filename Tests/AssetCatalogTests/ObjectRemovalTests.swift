import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// A large page of object files is unlinked by two threads, each over half of it: every file
/// unlinked is reported, in the page's order, one already gone is skipped, and a failure stops
/// only its own half.
@Suite struct ObjectRemovalTests {
    @Test func aLargePageIsUnlinkedInTwoHalvesAndEveryRemovalIsReported() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let store = catalog.content
        let count = 2 * ContentStore.parallelUnlinkMinimum + 88  // halves of 300
        let digests = (0..<count).map { i in
            String(format: "%02x", i % 256) + String(repeating: "0", count: 58) + String(format: "%04x", i)
        }
        for (i, digest) in digests.enumerated() {
            let path = store.objectPath(digest)
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            if i == 100 {
                // A folder where the file should be: its unlink fails (EISDIR): the first half stops there, the second goes on.
                try FileManager.default.createDirectory(atPath: path + "/x", withIntermediateDirectories: true)
            } else if i != 10 {  // 10 is already gone
                #expect(FileManager.default.createFile(atPath: path, contents: Data("\(i)".utf8)))
            }
        }
        var reported: [String] = []
        #expect(throws: CatalogError.self) { try store.removeObjects(digests, removed: { reported.append($0) }) }
        let expected = Array(digests[0..<10] + digests[11..<100] + digests[300...])
        #expect(reported == expected)
        #expect(expected.allSatisfy { access(store.objectPath($0), F_OK) != 0 })
        #expect(digests[101..<300].allSatisfy { access(store.objectPath($0), F_OK) == 0 })

        // What is left goes on the next try, the folder aside.
        try FileManager.default.removeItem(atPath: store.objectPath(digests[100]))
        reported = []
        try store.removeObjects(digests, removed: { reported.append($0) })
        #expect(reported == Array(digests[101..<300]))
        #expect(digests.allSatisfy { access(store.objectPath($0), F_OK) != 0 })
    }
}
