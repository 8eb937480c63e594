import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog
@testable import Persistence

/// The index on `sha256` holds managed assets only (``Asset/compositeIndexes``): adding files
/// by reference never writes it, every lookup of a content's users (managed assets) still goes
/// through it, and the one lookup of referenced assets by digest (a numbered copy on import)
/// goes by name instead.
@Suite struct DigestIndexTests {
    static let partial =
        "CREATE INDEX \"Asset_sha256_where_storage_index\" ON \"Asset\" (\"sha256\") WHERE \"storage\" IS 'managed'"

    /// The name and SQL of every index of the catalog's `Asset` table, one a line, by name.
    static func indexes(_ root: URL) throws -> String {
        let outcome = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); [print(r[0] + ': ' + str(r[1])) for r in "
                    + "c.execute(\"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'Asset' "
                    + "ORDER BY name\")]",
                root.appending(path: "catalog.sqlite").path,
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        return outcome.stdoutText
    }

    /// A new catalog has the partial index and not the one over every asset; a catalog of
    /// release 0.1.0 is migrated to the same shape (its data intact: ``UpgradeTests``).
    @Test func theDigestIndexHoldsManagedAssetsOnlyInNewAndUpgradedCatalogs() throws {
        let expected = """
            Asset_archive_index: CREATE INDEX "Asset_archive_index" ON "Asset" ("archive")
            Asset_created_index: CREATE INDEX "Asset_created_index" ON "Asset" ("created")
            Asset_kind_index: CREATE INDEX "Asset_kind_index" ON "Asset" ("kind")
            Asset_name_index: CREATE INDEX "Asset_name_index" ON "Asset" ("name")
            Asset_sha256_where_storage_index: \(Self.partial)
            Asset_thumbnail_index: CREATE INDEX "Asset_thumbnail_index" ON "Asset" ("thumbnail")

            """
        let new = try TestCatalog()
        try new.create().close()
        #expect(try Self.indexes(new.root) == expected)

        let old = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: old.root.path)
        #expect(try Self.indexes(old.root).contains("Asset_sha256_index: CREATE INDEX"))
        let catalog = try old.open()
        #expect(try catalog.assets().count == 14)
        #expect(try catalog.stats().objectFiles > 0)
        catalog.close()
        #expect(try Self.indexes(old.root) == expected)
    }

    /// The plan SQLite chooses for `request`, one step a line (python3's sqlite3, which binds
    /// the arguments as the catalog does, so that a partial index is matched against them).
    static func plan(_ request: FetchRequest<Asset>, in t: TestCatalog, catalog: Catalog) throws -> String {
        let store = try #require(catalog.container.core.store as? SQLiteStore)
        let (sql, arguments) = store.select("\"id\"", request.storeFetch)
        return try plan(sql, arguments, in: t)
    }

    /// The plan of the statement that counts `request`'s rows.
    static func countPlan(_ request: FetchRequest<Asset>, in t: TestCatalog, catalog: Catalog) throws -> String {
        let store = try #require(catalog.container.core.store as? SQLiteStore)
        let (sql, arguments) = store.countStatement(request.storeFetch)
        return try plan(sql, arguments, in: t)
    }

    /// SQLite's plan of `sql` with `arguments` bound (text and integers; anything else as NULL).
    static func plan(_ sql: String, _ arguments: [StoreValue], in t: TestCatalog) throws -> String {
        let json = arguments.map { value -> String in
            switch value {
            case .text(let s): "\"\(s)\""
            case .integer(let i): "\(i)"
            default: "null"
            }
        }
        let outcome = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys, json; c = sqlite3.connect(sys.argv[1]); "
                    + "[print(r[3]) for r in c.execute('EXPLAIN QUERY PLAN ' + sys.argv[2], json.load(open(sys.argv[3])))]",
                t.root.appending(path: "catalog.sqlite").path, sql, try argumentsFile(json, in: t),
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        return outcome.stdoutText
    }

    /// The arguments as a JSON file (a command line holds no list of 10,000 digests); its path.
    static func argumentsFile(_ json: [String], in t: TestCatalog) throws -> String {
        let path = t.directory.appending(path: "arguments-\(UUID().uuidString).json").path
        try Data(("[" + json.joined(separator: ",") + "]").utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The sweep's count of the managed users of a page of 10,000 digests searches the index
    /// for each. Ordered by ID, SQLite scanned the whole table instead (a third of a second
    /// in a million assets, on every `rm` of 10,000).
    @Test func aCountOfManyDigestsSearchesTheIndex() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let digests = (0..<10_000).map { String(format: "%064x", $0) }
        let request = FetchRequest<Asset>(predicate: .in(\.sha256, digests) && \.storage == Storage.managed)
        let plan = try Self.countPlan(request, in: t, catalog: catalog)
        #expect(plan.contains("INDEX Asset_sha256_where_storage_index (sha256=?)"), "\(plan)")
        #expect(!plan.contains("SCAN Asset"), "\(plan)")
    }

    /// Every lookup of a content's managed users — as removal, `rm --tag`, `gc` and verify make
    /// them — searches the partial index; none scans the assets.
    @Test func lookupsOfManagedAssetsByDigestUseTheIndex() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let (d1, d2) = (String(repeating: "a", count: 64), String(repeating: "b", count: 64))
        for request in [
            FetchRequest<Asset>(predicate: \.sha256 == d1 && \.storage == Storage.managed),
            FetchRequest<Asset>(predicate: .in(\.sha256, [d1, d2]) && \.storage == Storage.managed),
            FetchRequest<Asset>(
                predicate: \.storage == Storage.managed && \.sha256 > d1, sortBy: [.init(\.sha256)], limit: 500),
        ] {
            let plan = try Self.plan(request, in: t, catalog: catalog)
            #expect(plan.contains("INDEX Asset_sha256_where_storage_index (sha256"), "\(plan)")
            #expect(!plan.contains("SCAN"), "\(plan)")  // (the rows of a list of digests are sorted by ID)
        }
    }

    /// Managed and referenced assets with one content: the file belongs to the managed ones
    /// only — it stays while one of them does, and goes with the last, whatever the referenced
    /// ones; `stats` counts it once.
    @Test func aContentsUsersAreItsManagedAssets() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let source = try t.file("same.txt", "one content\n")
        let managed = try await catalog.add([source, source]).added
        let referenced = try await catalog.add([source], options: AddOptions(mode: .reference)).added
        #expect(managed.count == 2 && referenced.count == 1)
        let digest = managed[0].sha256
        #expect(referenced[0].sha256 == digest && referenced[0].storage == .referenced)
        #expect(try catalog.stats().objectFiles == 1)

        #expect(try catalog.remove([managed[0].id]).filesRemoved.isEmpty)
        #expect(t.hasObject(digest))
        #expect(try catalog.remove([managed[1].id]).filesRemoved.count == 1)
        #expect(!t.hasObject(digest))
        #expect(try catalog.stats().objectFiles == 0)
        #expect(FileManager.default.fileExists(atPath: source))
        #expect(try catalog.asset(referenced[0].id).storage == .referenced)
    }

    /// A referenced asset that a keep-both import named `a (2).txt` is found again (by name, as
    /// the digest index holds no referenced asset): importing the same bundle again adds no
    /// third copy.
    @Test func aReferencedNumberedCopyIsFoundAgainOnImport() async throws {
        let scratch = try TestCatalog()
        let file = try scratch.file("shared/a.txt", "the referenced version\n")
        let bundle = scratch.directory.appending(path: "bundle.tar").path
        do {
            let source = try scratch.create()
            defer { source.close() }
            _ = try await source.add([file], options: AddOptions(mode: .reference))
            _ = try await source.export(to: bundle)
        }
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "the catalog's version\n")])
        // Another asset whose name sorts among the numbered ones, and one with the same content.
        _ = try await catalog.add([try t.file("a (1)x.txt", "the referenced version\n")])

        let first = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .keepBoth))
        #expect(first.renamed.items == [.init(from: "a.txt", to: "a (2).txt")])
        let copy = try catalog.asset(named: "a (2).txt")
        #expect(copy.storage == .referenced)
        let count = try catalog.assets().count

        let again = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .keepBoth))
        #expect(again.importedCount == 0 && again.renamed.isEmpty)
        #expect(again.alreadyPresent.items == ["a.txt"])
        #expect(try catalog.assets().count == count)
    }
}
