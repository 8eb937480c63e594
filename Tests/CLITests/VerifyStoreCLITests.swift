import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `assetcat verify --store-only`, and a command that meets damage in the store.
@Suite struct VerifyStoreCLITests {
    @Test func verifyStoreOnlyOfASoundCatalog() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        #expect(try await t.run(["add", try t.file("a.txt", "hello\n")]).status == 0)
        let verify = try await t.run(["verify", "--store-only"])
        #expect(verify.status == 0)
        #expect(verify.stdout == "store: no damage found\n")
        let json = try await t.run(["verify", "--store-only", "--json"])
        #expect(json.status == 0)
        #expect(
            json.stdout.filter { !$0.isWhitespace }
                == #"{"searchIndexFixed":[],"statisticsFixed":[],"storeProblems":[]}"#)
    }

    /// A store larger than what an open checks in full, with a page of its asset table
    /// overwritten: the open succeeds, `ls` fails naming the file and saying what to do,
    /// `verify --store-only` reports the damage and exits 1.
    @Test func damageInTheStoreIsReportedNotACrash() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let folder = ["a", "b", "c", "d", "e"].map { String(repeating: $0, count: 200) }.joined(separator: "/")
        var files: [String] = []
        for i in 0..<1_500 { files.append(try t.file("\(folder)/file-\(i).txt", "\(i)")) }
        _ = try await catalog.add(files, options: .init(mode: .reference))
        catalog.close()
        let store = t.root.appending(path: "catalog.sqlite")
        var bytes = try Data(contentsOf: store)
        let pageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        let page = try #require(bytes.firstRange(of: Data(files[750].utf8))).lowerBound / pageSize
        bytes.replaceSubrange(page * pageSize..<(page + 1) * pageSize, with: Data(repeating: 0xFF, count: pageSize))
        try bytes.write(to: store)

        let ls = try await t.run(["ls"])
        #expect(ls.status == 1)
        #expect(
            ls.stderr
                == "assetcat: The store \(store.path) is damaged (database disk image is malformed); nothing was "
                + "changed. Run `assetcat verify --store-only` to see the damage, and restore the catalog from a backup\n"
        )
        let verify = try await t.run(["verify", "--store-only"])
        #expect(verify.status == 1)
        #expect(verify.stdout.hasPrefix("store  the full check stopped at damage it cannot read past ("))
        #expect(verify.stdout.contains("store  table \"Asset\" cannot be read whole ("))
        #expect(verify.stdout.hasSuffix(" problems\n"))
        let all = try await t.run(["verify"])
        #expect(all.status == 1)
        #expect(all.stdout.contains("store  table \"Asset\" cannot be read whole ("))
        #expect(FileManager.default.fileExists(atPath: store.path))
        #expect(!FileManager.default.fileExists(atPath: t.root.appending(path: "quarantine").path))
    }
}
