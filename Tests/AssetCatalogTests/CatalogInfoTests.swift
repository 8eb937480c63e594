import AssetCatalogTestSupport
import Foundation
import Persistence
import TestScratch
import Testing

@testable import AssetCatalog

/// Which catalog a store holds (``CatalogInfo``), on SQLite; and the stub `catalog.sqlite`
/// a catalog in PostgreSQL leaves for versions that know only SQLite.
@Suite struct CatalogInfoTests {
    /// The ID in `catalog.json`.
    func identity(_ root: URL) throws -> String {
        try #require(try CatalogIdentity.read(in: root)).id.uuidString
    }

    /// The catalog IDs the store records.
    func recorded(_ catalog: Catalog) throws -> [String] {
        try catalog.withContext { try $0.fetch(FetchRequest<CatalogInfo>()).map(\.catalogID) }
    }

    @Test func aCatalogOfTheLastReleaseGetsItsRowAtItsFirstWritableOpen() throws {
        let t = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: t.root.path)
        let catalog = try t.open()
        #expect(try recorded(catalog) == ["6636E12F-A495-410F-A9EE-AB2B0E80BFC0"])
        catalog.close()
        let again = try t.open()
        defer { again.close() }
        #expect(try recorded(again) == ["6636E12F-A495-410F-A9EE-AB2B0E80BFC0"])
    }

    /// A catalog of the version before the row: read-only, it opens as before (its table
    /// cannot be made); the first writable open records the row.
    @Test func aCatalogWithoutTheTableOpensReadOnlyAndGetsTheRowWhenWritable() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let python = try await ChildProcess.run(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('DROP TABLE \"CatalogInfo\"'); "
                    + "c.execute(\"DELETE FROM _persistence_sequence WHERE entity = 'CatalogInfo'\"); c.commit(); c.close()",
                t.root.appending(path: "catalog.sqlite").path,
            ])
        #expect(python.termination == .exited(0), "\(python.stderrText)")
        let readOnly = try Catalog.open(at: t.root, options: .init(access: .readOnly))
        #expect(try readOnly.assets().isEmpty)
        readOnly.close()
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try recorded(catalog) == [try identity(t.root)])
    }

    /// A catalog that lost its `catalog.json` gets it back with the ID its store records.
    @Test func aLostIdentityFileIsWrittenAgainWithTheStoresID() throws {
        let t = try TestCatalog()
        try t.create().close()
        let id = try identity(t.root)
        try FileManager.default.removeItem(at: t.root.appending(path: "catalog.json"))
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try identity(t.root) == id)
        #expect(try recorded(catalog) == [id])
    }

    @Test func aNewCatalogRecordsItsID() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        #expect(try recorded(catalog) == [try identity(t.root)])
    }

    @Test func aStoreOfAnotherCatalogIsRefusedAndNothingChanges() throws {
        let a = try TestCatalog()
        try a.create().close()
        let b = try TestCatalog()
        try b.create().close()
        let store = b.root.appending(path: "catalog.sqlite")
        try FileManager.default.removeItem(at: store)
        try FileManager.default.copyItem(at: a.root.appending(path: "catalog.sqlite"), to: store)
        let error = #expect(throws: CatalogError.self) { try b.open() }
        #expect(
            error?.message
                == "\(b.root.path) is catalog \(try identity(b.root)) but the store at \(store.path) holds catalog "
                + "\(try identity(a.root)); nothing was changed")
        // Nothing was recorded: it is refused again, and A's store still says A.
        #expect(throws: CatalogError.self) { try b.open() }
        try FileManager.default.removeItem(at: a.root.appending(path: "catalog.sqlite"))
        try FileManager.default.copyItem(at: store, to: a.root.appending(path: "catalog.sqlite"))
        let catalog = try a.open()
        defer { catalog.close() }
        #expect(try recorded(catalog) == [try identity(a.root)])
    }

    /// The stub refuses this version's SQLite open (catalog.json lost) with what to do; a
    /// version that refuses newer stores says so; a version from before that refusal
    /// (release 0.1.0, which knows no marker and migrates what it finds) cannot write it.
    /// None of them moves it aside or changes a byte of it.
    @Test func theStubIsRefusedByEverySQLiteOpenAndLeftAsItIs() throws {
        let t = try TestCatalog()
        try FileManager.default.createDirectory(at: t.root, withIntermediateDirectories: true)
        try StoreStub.write(in: t.root)
        let stub = t.root.appending(path: "catalog.sqlite")
        let before = try Data(contentsOf: stub)

        let error = #expect(throws: CatalogError.self) { try t.open() }
        #expect(
            error?.message
                == "The catalog at \(t.root.path) keeps its records in PostgreSQL, but its catalog.json, which names "
                + "the store, is missing or unreadable. Nothing was changed; restore catalog.json from a backup or "
                + "from another host that mounts this directory")
        #expect(throws: CatalogError.self) { try Catalog.recover(at: t.root) }

        // What a version without PostgreSQL does: the marker is a migration it does not know.
        let schema = try Schema(Catalog.entities, migrations: Catalog.migrations)
        let newer = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: stub, schema: schema)
        }
        #expect(newer?.code == .newerStore)
        #expect(newer?.quarantine == nil)

        // A version that does not refuse unknown migrations: it cannot write the file.
        let blind = try Schema(
            Catalog.entities, migrations: Catalog.migrations + [Migration(StoreStub.marker) { _ in }])
        let readOnly = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: stub, schema: blind)
        }
        #expect(readOnly?.quarantine == nil)
        #expect(readOnly.map { "\($0)" }?.contains("readonly") == true, "\(String(describing: readOnly))")

        #expect(try Data(contentsOf: stub) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: t.root.path) == ["catalog.sqlite"])
    }
}
