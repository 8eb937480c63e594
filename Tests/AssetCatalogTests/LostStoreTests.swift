import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog

/// A catalog whose store was emptied, lost its tables or went missing is
/// refused, never taken for a new catalog: nothing is created or migrated and
/// nothing in `objects/` is touched.
@Suite struct LostStoreTests {
    /// A catalog of `count` managed assets, closed.
    func catalog(of count: Int) async throws -> (TestCatalog, [AssetRecord]) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let paths = try (1...count).map { try t.file("s\($0).bin", "content \($0)") }
        let added = try await catalog.add(paths).added
        catalog.close()
        return (t, added)
    }

    func objectFiles(_ t: TestCatalog) -> [String] {
        let objects = t.root.appending(path: "objects").path
        return (FileManager.default.subpaths(atPath: objects) ?? []).filter { $0.utf8.count > 3 }.sorted()
    }

    var store: (TestCatalog) -> URL { { $0.root.appending(path: "catalog.sqlite") } }

    func quarantineFolder(_ t: TestCatalog) throws -> URL {
        let quarantine = t.root.appending(path: "quarantine")
        let entries = try FileManager.default.contentsOfDirectory(atPath: quarantine.path)
        #expect(entries.count == 1)
        return quarantine.appending(path: try #require(entries.first))
    }

    func empty(_ url: URL) throws {
        try Data().write(to: url)
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: url.path + suffix) }
    }

    @Test func anEmptiedStoreIsRefusedAndObjectsAreUntouched() async throws {
        let (t, added) = try await catalog(of: 30)
        let before = objectFiles(t)
        #expect(before.count == 30)
        try empty(store(t))
        let error = #expect(throws: CatalogError.self) { try t.open() }
        let folder = try quarantineFolder(t)
        #expect(error?.code == .store)
        #expect(
            error?.message
                == "The catalog at \(t.root.path) cannot be opened: its store catalog.sqlite is unusable (it holds "
                + "no schema (the file is empty, or its tables are gone)); it was moved to \(folder.path). Nothing "
                + "in objects/ was touched. Restore catalog.sqlite from a backup into \(t.root.path), or run `assetcat "
                + "recover` to start a new store that lists the content of objects/")
        #expect(!FileManager.default.fileExists(atPath: store(t).path))
        // Every later command says where the store went; none makes a new one.
        for _ in 0..<2 {
            let again = #expect(throws: CatalogError.self) { try t.open() }
            #expect(
                again?.message
                    == "The catalog at \(t.root.path) cannot be opened: its store catalog.sqlite was found unusable "
                    + "and moved to \(folder.path). Nothing in objects/ was touched. Restore catalog.sqlite from a "
                    + "backup into \(t.root.path), or run `assetcat recover` to start a new store that lists the content of "
                    + "objects/")
        }
        #expect(throws: CatalogError.self) { try t.create() }
        // The user's path of the report: add a file, remove an asset. Both refused; nothing lost.
        let add = try await t.run(["add", try t.file("new.bin", "new")])
        #expect(add.status == 1)
        #expect(add.stderr.contains("was found unusable and moved to \(folder.path)"))
        let rm = try await t.run(["rm", "\(added[0].id)"])
        #expect(rm.status == 1)
        let verify = try await t.run(["verify"])
        #expect(verify.status == 1)
        #expect(objectFiles(t) == before)
        #expect(!FileManager.default.fileExists(atPath: store(t).path))
    }

    @Test func aStoreWhoseAssetTableWasDroppedIsRefused() async throws {
        let (t, _) = try await catalog(of: 3)
        let before = objectFiles(t)
        let drop = try await ChildProcess.run(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('DROP TABLE Asset'); c.commit()",
                store(t).path,
            ], stdout: .inherit, stderr: .inherit)
        #expect(drop.status == 0)
        let error = #expect(throws: CatalogError.self) { try t.open() }
        #expect(error?.message.contains("is unusable (its table \"Asset\" is gone)") == true)
        #expect(objectFiles(t) == before)
    }

    @Test func aMissingStoreIsRefusedWhereTheCatalogWasInitialised() async throws {
        let (t, _) = try await catalog(of: 2)
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store(t).path + suffix) }
        let error = #expect(throws: CatalogError.self) { try t.open() }
        #expect(
            error?.message
                == "The catalog at \(t.root.path) has lost its store: catalog.sqlite is missing. Nothing was changed; "
                + "restore catalog.sqlite from a backup, or run `assetcat recover` to start a new store that lists "
                + "the content of objects/")
        #expect(!FileManager.default.fileExists(atPath: store(t).path))
        #expect(throws: CatalogError.self) { try t.create() }
    }

    /// A catalog made before `catalog.json` existed: its first open writes one, and an
    /// emptied store in it is refused all the same (its file is there: only `init` makes one).
    @Test func aCatalogWithoutItsIdentityFileGetsOneAndIsProtectedToo() async throws {
        let (t, _) = try await catalog(of: 2)
        let identity = t.root.appending(path: "catalog.json")
        try FileManager.default.removeItem(at: identity)
        try t.open().close()
        #expect(FileManager.default.fileExists(atPath: identity.path))
        try FileManager.default.removeItem(at: identity)
        try empty(store(t))
        #expect(throws: CatalogError.self) { try t.open() }
        // Neither store nor identity left, but content in objects/: still not a new catalog.
        try FileManager.default.removeItem(at: t.root.appending(path: "quarantine"))
        let error = #expect(throws: CatalogError.self) { try t.create() }
        #expect(
            error?.message
                == "The catalog at \(t.root.path) has lost its store: catalog.sqlite is missing but objects/ holds "
                + "content. Nothing was changed; restore catalog.sqlite from a backup, or run `assetcat recover` to start a "
                + "new store that lists the content of objects/")
        #expect(!FileManager.default.fileExists(atPath: store(t).path))
    }

    @Test func createWritesTheIdentityAndAnOpenOfANewDirectoryStillCreates() throws {
        let t = try TestCatalog()
        let catalog = try Catalog.open(at: t.root, options: .init(createIfMissing: true))
        catalog.close()
        let data = try Data(contentsOf: t.root.appending(path: "catalog.json"))
        let identity = try JSONDecoder.iso8601.decode(CatalogIdentity.self, from: data)
        try Catalog.open(at: t.root).close()
        #expect(
            try JSONDecoder.iso8601.decode(
                CatalogIdentity.self, from: Data(contentsOf: t.root.appending(path: "catalog.json"))
            ).id == identity.id)
    }

    @Test func recoverStartsANewStoreListingTheContentOfObjects() async throws {
        let (t, added) = try await catalog(of: 4)
        try empty(store(t))
        #expect(throws: CatalogError.self) { try t.open() }
        let run = try await t.run(["recover"])
        #expect(run.status == 0)
        #expect(
            run.stdout
                == "started a new store in \(t.root.path)\nrecorded 4 files of objects/ as assets tagged 'recovered'\n")
        let catalog = try t.open()
        let recovered = try catalog.assets()
        #expect(Set(recovered.map(\.sha256)) == Set(added.map(\.sha256)))
        #expect(recovered.allSatisfy { $0.tags == ["recovered"] && $0.name == "recovered-\($0.sha256)" })
        #expect(try catalog.assets(AssetQuery(tag: "recovered")).count == 4)  // the tag's rows too
        #expect(try AssetTagTests.tagRows(catalog).count == 4)
        #expect(try await catalog.verify().isHealthy)
        catalog.close()
        // The quarantined store is kept; a catalog whose store opens has nothing to recover.
        _ = try quarantineFolder(t)
        let again = try await t.run(["recover"])
        #expect(again.status == 1)
        #expect(
            again.stderr
                == "assetcat: The catalog at \(t.root.path) opens: it has nothing to recover (`assetcat gc --adopt` "
                + "records content no asset uses)\n")
    }

    @Test func verifyCountsContentThatNoAssetUses() async throws {
        let (t, added) = try await catalog(of: 3)
        // Content no record uses, as a lost record would leave it.
        let orphan = String(repeating: "ab", count: 32)
        let path = t.objectPath(orphan)
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data("orphan".utf8).write(to: URL(fileURLWithPath: path))
        let catalog = try t.open()
        let report = try await catalog.verify()
        #expect(report.issues.isEmpty)
        #expect(report.unreferencedObjects == 1)
        #expect(!report.isHealthy)
        // Only some assets verified: objects/ is not walked.
        #expect(try await catalog.verify([added[0].id]).unreferencedObjects == 0)
        catalog.close()
        let run = try await t.run(["verify"])
        #expect(run.status == 1)
        #expect(
            run.stdout
                == "checked 3 assets: 0 missing, 0 damaged\n"
                + "1 file in objects/ that no asset uses (`assetcat gc` lists them; nothing was removed)\n")
        #expect(FileManager.default.fileExists(atPath: path))
    }
}

extension JSONDecoder {
    static var iso8601: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
