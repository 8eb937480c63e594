import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog
@testable import Persistence

/// Tags as rows (``AssetTag``): every way an asset's tags change writes its rows in the same
/// transaction, and every way an asset goes takes them with it.
@Suite struct AssetTagTests {
    /// The tag rows of the store, as (asset ID, tag), sorted.
    static func tagRows(_ catalog: Catalog) throws -> [TagRow] {
        try catalog.withContext { context in
            try context.fetch(FetchRequest<AssetTag>()).map { TagRow($0.asset?.objectID.rowID ?? -1, $0.tag) }
        }.sorted()
    }

    struct TagRow: Comparable, CustomStringConvertible {
        let asset: Int64
        let tag: String
        init(_ asset: Int64, _ tag: String) {
            self.asset = asset
            self.tag = tag
        }
        static func < (a: Self, b: Self) -> Bool { (a.asset, a.tag) < (b.asset, b.tag) }
        var description: String { "\(asset):\(tag)" }
    }

    /// A referenced asset named `name`, inserted in `context` (not saved).
    static func referenced(_ name: String, tags: [String] = [], in context: ManagedObjectContext) -> Asset {
        let asset = Asset(context: context)
        asset.name = name
        asset.storage = .referenced
        asset.path = "/nowhere/\(name)"
        asset.tags = tags
        return asset
    }

    @Test func settingTagsWritesOneRowPerTagSortedWithoutDuplicates() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let context = catalog.newContext()
        let id = try context.performAndWait {
            let asset = Self.referenced("a.txt", tags: ["b", "a", "b"], in: context)
            try context.save()
            #expect(asset.tags == ["a", "b"])
            return asset.objectID.rowID
        }
        #expect(try Self.tagRows(catalog) == [TagRow(id, "a"), TagRow(id, "b")])

        // Changed: the removed tag's row goes, the added one's comes, the kept one stays.
        try context.performAndWait {
            let asset = try context.existingObject(with: ManagedObjectID(entityName: "Asset", rowID: id)) as! Asset
            asset.tags = ["c", "b", "c"]
            try context.save()
        }
        #expect(try Self.tagRows(catalog) == [TagRow(id, "b"), TagRow(id, "c")])
        _ = try catalog.tag([AssetID(id)], adding: ["d"], removing: ["b"])
        #expect(try Self.tagRows(catalog) == [TagRow(id, "c"), TagRow(id, "d")])
        #expect(try catalog.asset(AssetID(id)).tags == ["c", "d"])
        _ = try catalog.tag([AssetID(id)], removing: ["c", "d"])
        #expect(try Self.tagRows(catalog) == [])
        #expect(try catalog.assets(AssetQuery(tag: "c")).isEmpty)
    }

    @Test func aRollbackDiscardsTheTagsAndWritesNoRow() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let context = catalog.newContext()
        let id = try context.performAndWait {
            let asset = Self.referenced("a.txt", tags: ["kept"], in: context)
            try context.save()
            asset.tags = ["dropped"]
            context.rollback()
            #expect(asset.tags == ["kept"])
            asset.name = "renamed.txt"  // a later save of something else
            try context.save()
            return asset.objectID.rowID
        }
        #expect(try Self.tagRows(catalog) == [TagRow(id, "kept")])
        #expect(try catalog.assets(AssetQuery(tag: "dropped")).isEmpty)
    }

    @Test func aChildsSaveWritesRowsOnlyWhenTheParentSaves() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let parent = catalog.newContext(name: "parent")
        let child = parent.newChildContext(name: "child")
        let id = try child.performAndWait {
            let asset = Self.referenced("a.txt", tags: ["draft"], in: child)
            try child.save()
            return asset.objectID
        }
        #expect(try Self.tagRows(catalog) == [])
        try parent.performAndWait { try parent.save() }
        #expect(try Self.tagRows(catalog) == [TagRow(id.rowID, "draft")])

        // An edit in a child thrown away changes nothing; one saved through the parent does.
        try child.performAndWait {
            (try child.existingObject(with: id) as! Asset).tags = ["final"]
            try child.save()
        }
        parent.performAndWait { parent.rollback() }
        #expect(try Self.tagRows(catalog) == [TagRow(id.rowID, "draft")])
        let second = parent.newChildContext(name: "second")
        try second.performAndWait {
            (try second.existingObject(with: id) as! Asset).tags = ["final"]
            try second.save()
        }
        try parent.performAndWait { try parent.save() }
        #expect(try Self.tagRows(catalog) == [TagRow(id.rowID, "final")])
        #expect(try catalog.assets(AssetQuery(tag: "final")).map(\.id.rawValue) == [id.rowID])
    }

    @Test func deletingAnAssetDeletesItsRowsWhicheverWayItGoes() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let context = catalog.newContext()
        let (object, batch, archive, member, kept) = try context.performAndWait {
            let object = Self.referenced("object.txt", tags: ["x"], in: context)
            let batch = Self.referenced("batch.txt", tags: ["gone", "x"], in: context)
            let archive = Self.referenced("a.zip", tags: ["x"], in: context)
            let member = Asset(context: context)
            member.name = "m.txt"
            member.storage = .member
            member.member = "m.txt"
            member.archive = archive
            member.tags = ["x", "inner"]
            let kept = Self.referenced("kept.txt", tags: ["x"], in: context)
            try context.save()
            return (object.objectID, batch.objectID, archive.objectID, member.objectID, kept.objectID)
        }
        #expect(try Self.tagRows(catalog).count == 7)
        // An object deleted.
        try context.performAndWait {
            context.delete(try context.existingObject(with: object))
            try context.save()
        }
        #expect(try Self.tagRows(catalog).map(\.asset).contains(object.rowID) == false)
        // A batch delete (rm --tag).
        #expect(try catalog.removeAll(AssetQuery(tag: "gone")) == 1)
        #expect(try Self.tagRows(catalog).map(\.asset).contains(batch.rowID) == false)
        // An archive deleted takes its members, and their rows.
        _ = try catalog.remove([AssetID(archive.rowID)])
        #expect(try Self.tagRows(catalog) == [TagRow(kept.rowID, "x")])
        #expect(try catalog.assets(AssetQuery(tag: "inner")).isEmpty)
        _ = member
    }

    @Test func addedAndImportedRowsGetTheirTagRows() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let a = try t.file("a.txt", "a\n")
        let b = try t.file("b.txt", "b\n")
        var options = AddOptions()
        options.tags = ["z", "y", "z"]
        let added = try await catalog.add([a, b], options: options).added
        #expect(added.map(\.tags) == [["y", "z"], ["y", "z"]])
        let ids = added.map(\.id.rawValue)
        #expect(try Self.tagRows(catalog) == ids.flatMap { [TagRow($0, "y"), TagRow($0, "z")] })
        _ = try catalog.tag([added[0].id], adding: ["only-a"])

        // Exported and imported into another catalog: the same tags, and the rows behind them.
        let bundle = t.directory.appending(path: "b.tar").path
        _ = try await catalog.export(to: bundle)
        let other = try TestCatalog()
        let into = try other.create()
        defer { into.close() }
        _ = try await into.importBundle(from: bundle)
        let imported = try into.assets().sorted { $0.name < $1.name }
        #expect(imported.map(\.tags) == [["only-a", "y", "z"], ["y", "z"]])
        #expect(try into.assets(AssetQuery(tag: "only-a")).map(\.name) == ["a.txt"])
        #expect(try Self.tagRows(into).count == 5)
    }

    @Test func queriesCombineTagsAndExclusionsInTheStoreAndInMemory() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let context = catalog.newContext()
        try context.performAndWait {
            _ = Self.referenced("ab.txt", tags: ["a", "b"], in: context)
            _ = Self.referenced("a.txt", tags: ["a"], in: context)
            _ = Self.referenced("abc.txt", tags: ["a", "b", "c"], in: context)
            _ = Self.referenced("none.txt", in: context)
            try context.save()
        }
        func names(_ query: AssetQuery) throws -> [String] { try catalog.assets(query).map(\.name) }
        #expect(try names(AssetQuery(tag: "a")) == ["ab.txt", "a.txt", "abc.txt"])
        #expect(try names(AssetQuery(tags: ["a", "b"])) == ["ab.txt", "abc.txt"])
        #expect(try names(AssetQuery(tags: ["a", "b"], excludingTags: ["c"])) == ["ab.txt"])
        #expect(try names(AssetQuery(tags: [], excludingTags: ["a"])) == ["none.txt"])
        #expect(try names(AssetQuery(tags: [], excludingTags: ["b", "c"])) == ["a.txt", "none.txt"])
        #expect(try names(AssetQuery(tags: ["a"], excludingTags: ["a"])) == [])
        #expect(try names(AssetQuery(tags: ["no-such-tag"])) == [])
        // A page at a time (the index-driven pages: IDs after the last page's, a limit).
        for query in [AssetQuery(tag: "a"), AssetQuery(tags: ["a"], excludingTags: ["c"]), AssetQuery(tag: "b")] {
            for pageSize in [1, 2, 5] {
                var paged: [String] = []
                try catalog.forEachAsset(query, pageSize: pageSize) { paged.append($0.name) }
                #expect(paged == (try names(query)), "\(query) in pages of \(pageSize)")
            }
        }

        // Unsaved changes count in a context's fetch: judged by the asset's own tags.
        try context.performAndWait {
            let fresh = Self.referenced("fresh.txt", tags: ["a", "b"], in: context)
            let a = try #require(
                try context.fetch(FetchRequest<Asset>(predicate: \.name == "a.txt")).first)
            a.tags = ["a", "b", "c"]
            let request = FetchRequest<Asset>(predicate: AssetQuery(tags: ["a", "b"], excludingTags: ["c"]).predicate)
            #expect(try context.fetch(request).map(\.name) == ["ab.txt", "fresh.txt"])
            #expect(try context.count(for: request) == 2)
            _ = fresh
            context.rollback()
        }
    }

    /// `ls --tag no-such-tag` costs O(matches + log n): a page of a listing
    /// (``Catalog/assetPage(_:after:limit:)``: the query, IDs after the last page's, by ID) finds
    /// a tag's assets through the unique index on (tag, asset), and each match by the asset's
    /// primary key — never a scan of the assets, whatever other conditions come with it.
    @Test(arguments: [
        AssetQuery(tag: "a"), AssetQuery(tags: ["a", "b"]), AssetQuery(tags: ["a"], excludingTags: ["c"]),
        AssetQuery(tags: ["a", "b"], excludingTags: ["c"], kind: "text", storage: .referenced),
    ])
    func aPageOfATagQueryUsesTheIndexNotAScan(_ query: AssetQuery) throws {
        for analyzed in [false, true] { try checkPlan(query, analyzed: analyzed) }
    }

    /// Checks the plan of a page of `query`, with the planner's statistics (`ANALYZE`) or
    /// without (as a catalog is: nothing runs `ANALYZE`): the first tag's rows drive the page,
    /// through the unique index on (tag, asset) from the last page's ID on, each joined to its
    /// asset by primary key, in order (no sort), so the page's limit ends the walk.
    func checkPlan(_ query: AssetQuery, analyzed: Bool) throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let context = catalog.newContext()
        try context.performAndWait {
            for i in 0..<50 { _ = Self.referenced("\(i).txt", tags: i % 2 == 0 ? ["a", "b"] : ["c"], in: context) }
            try context.save()
        }
        let (sql, arguments) = try Self.pageSQL(query, in: catalog)
        let outcome = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys, json; c = sqlite3.connect(sys.argv[1]); "
                    + (analyzed ? "c.execute('ANALYZE'); " : "")
                    + "[print(r[3]) for r in c.execute('EXPLAIN QUERY PLAN ' + sys.argv[2], json.loads(sys.argv[3]))]",
                t.root.appending(path: "catalog.sqlite").path, sql, arguments,
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        let plan = outcome.stdoutText
        #expect(
            plan.hasPrefix("SEARCH _related USING COVERING INDEX AssetTag_tag_asset_unique (tag=? AND asset>?)\n"),
            "\(plan)")
        // Each match by its ID: the primary key, or an index whose lookup ends with the ID (with
        // the digest index partial, the planner may take `kind`'s for a query by kind).
        #expect(
            plan.contains("SEARCH Asset USING INTEGER PRIMARY KEY (rowid=?)")
                || plan.contains(/SEARCH Asset USING INDEX Asset_\w+_index \(\w+=\? AND rowid=\?\)/), "\(plan)")
        #expect(!plan.contains("SCAN") && !plan.contains("TEMP B-TREE"), "\(plan)")
    }

    /// The statement a page of a listing (``Catalog/assetPage(_:after:limit:)``) runs for
    /// `query`, and its arguments as JSON.
    static func pageSQL(_ query: AssetQuery, in catalog: Catalog) throws -> (String, String) {
        let store = try #require(catalog.container.core.store as? SQLiteStore)
        let request = FetchRequest<Asset>(
            predicate: query.predicate && .objectIDs(after: 10), sortBy: [.objectID()], limit: 1_000)
        let (sql, arguments) = store.select("\"id\"", request.storeFetch)
        let json = arguments.map { value -> String in
            switch value {
            case .text(let s): "\"\(s)\""
            case .integer(let i): "\(i)"
            default: "null"
            }
        }
        return (sql, "[" + json.joined(separator: ",") + "]")
    }

    /// A catalog of release 0.1.0, opened, has lost its index on `tagText` (no query uses it);
    /// a new catalog never has it.
    @Test func theIndexOnTagTextIsDropped() throws {
        func indexes(_ root: URL) throws -> String {
            let outcome = try ChildProcess(
                "/usr/bin/env",
                [
                    "python3", "-c",
                    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); [print(r[0]) for r in c.execute("
                        + "\"SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'Asset' ORDER BY name\")]",
                    root.appending(path: "catalog.sqlite").path,
                ]
            ).wait()
            #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
            return outcome.stdoutText
        }
        let expected =
            "Asset_archive_index\nAsset_created_index\nAsset_kind_index\nAsset_name_index\n"
            + "Asset_sha256_where_storage_index\nAsset_thumbnail_index\n"
        let old = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: old.root.path)
        #expect(try indexes(old.root).contains("Asset_tagText_index"))
        try old.open().close()
        #expect(try indexes(old.root) == expected)
        let new = try TestCatalog()
        try new.create().close()
        #expect(try indexes(new.root) == expected)
    }

    /// The migration from release 0.1.0's `tagText`, a few assets at a time (several pages):
    /// every tag of every asset becomes one row.
    @Test func theMigrationFillsTheRowsFromTagTextPageByPage() throws {
        let t = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: t.root.path)
        let url = t.root.appending(path: "catalog.sqlite")
        let schema = try Schema(Catalog.entities, migrations: [AssetTag.fromTagText(pageSize: 4)])
        let container = try PersistentContainer(storeURL: url, schema: schema)
        defer { container.close() }
        let context = container.newBackgroundContext()
        let assets = try context.fetch(FetchRequest<Asset>())
        #expect(assets.count > 8)  // more than two pages
        let expected = assets.flatMap { a in a.tags.map { TagRow(a.objectID.rowID, $0) } }.sorted()
        let rows = try context.fetch(FetchRequest<AssetTag>()).map { TagRow($0.asset?.objectID.rowID ?? -1, $0.tag) }
        #expect(rows.sorted() == expected)
        #expect(expected.count >= 5)
        #expect(expected.contains { $0.tag == "unicode-\u{e9}" })
        // Assets written after it get rows after the migrated ones' IDs.
        let max = rows.map(\.asset).max() ?? 0
        #expect(max > 4)
    }
}
