import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog
@testable import Persistence

/// `forEachAsset(orderedBy:)` (what `ls --sort` lists): every asset once, in the order's key
/// and then by ID, a page at a time from where the last page ended, each page read through
/// the key's index.
@Suite struct AssetOrderTests {
    /// Assets whose names, sizes and dates tie across pages of 2.
    func catalogWithTies() async throws -> (TestCatalog, Catalog) {
        let t = try TestCatalog()
        let catalog = try t.create()
        var paths: [String] = []
        for i in 0..<9 {
            // Three names, three sizes, in an order that is neither's.
            paths.append(
                try t.file("d\(i)/\(["c", "a", "b"][i % 3]).txt", String(repeating: "x", count: (i * 7) % 3 + 1)))
        }
        _ = try await catalog.add(Array(paths[0..<5]))  // one date for these five
        _ = try await catalog.add(Array(paths[5...]))
        return (t, catalog)
    }

    @Test func everyOrderListsEveryAssetOnceByItsKeyThenByID() async throws {
        let (_, catalog) = try await catalogWithTies()
        defer { catalog.close() }
        let all = try catalog.assets()
        #expect(all.count == 9)
        func key(_ order: AssetOrder, _ r: AssetRecord) -> String {
            switch order {
            case .id: ""
            case .name: r.name
            case .size: String(format: "%020d", r.size)
            case .added: String(format: "%030.9f", r.created.timeIntervalSince1970)
            }
        }
        for order in AssetOrder.allCases {
            let expected = all.sorted { (key(order, $0), $0.id) < (key(order, $1), $1.id) }.map(\.id)
            for pageSize in [1, 2, 4, 1_000] {
                var listed: [AssetID] = []
                try catalog.forEachAsset(orderedBy: order, pageSize: pageSize) { listed.append($0.id) }
                #expect(listed == expected, "\(order), pages of \(pageSize)")
                var located: [AssetID] = []
                try catalog.forEachListedAsset(orderedBy: order, pageSize: pageSize) { located.append($0.record.id) }
                #expect(located == expected, "\(order), pages of \(pageSize)")
            }
        }
        // A query narrows each order the same way.
        let tagged = Set(all.filter { $0.name == "a.txt" }.map(\.id))
        _ = try catalog.tag(Array(tagged), adding: ["pick"], removing: [])
        var listed: [AssetID] = []
        try catalog.forEachAsset(AssetQuery(tag: "pick"), orderedBy: .size, pageSize: 1) { listed.append($0.id) }
        #expect(
            listed == all.filter { tagged.contains($0.id) }.sorted { ($0.size, $0.id) < ($1.size, $1.id) }.map(\.id))
    }

    /// A query in an order other than ID is listed the same whichever way it is read: the
    /// matches a page at a time (few matches), or the whole order with the matches kept (many).
    @Test func aQueryListsTheSameByItsMatchesOrByTheWholeOrder() async throws {
        let (_, catalog) = try await catalogWithTies()
        defer { catalog.close() }
        let all = try catalog.assets()
        _ = try catalog.tag(all.filter { $0.size != 2 }.map(\.id), adding: ["pick"], removing: [])
        _ = try catalog.tag(all.filter { $0.name == "b.txt" }.map(\.id), adding: ["not"], removing: [])
        let query = AssetQuery(tags: ["pick"], excludingTags: ["not"], kind: "text")
        let picked = try catalog.assets(query)
        #expect(picked.count == 3)
        for order in [AssetOrder.name, .size, .added] {
            let expected = try {
                var listed: [AssetID] = []
                try catalog.forEachAsset(orderedBy: order) { if query.matches($0) { listed.append($0.id) } }
                return listed
            }()
            #expect(Set(expected) == Set(picked.map(\.id)))
            for scanning in [false, true] {
                for pageSize in [1, 2, 3, 1_000] {
                    var listed: [AssetID] = []
                    try catalog.forEachAssetPage(query, orderedBy: order, pageSize: pageSize, scanningOrder: scanning) {
                        listed += $0.map(\.id)
                    }
                    #expect(listed == expected, "\(order), scanning \(scanning), pages of \(pageSize)")
                }
            }
        }
        // The whole order is read when the matches are many: a tag on most of a million assets,
        // not a tag on a few thousand of ten million.
        #expect(Catalog.scansOrder(matches: 900_000, total: 1_000_000, pageSize: 1_000))
        #expect(Catalog.scansOrder(matches: 40_000, total: 1_000_000, pageSize: 1_000))
        #expect(!Catalog.scansOrder(matches: 20_000, total: 1_000_000, pageSize: 1_000))
        #expect(!Catalog.scansOrder(matches: 5_000, total: 10_000_000, pageSize: 1_000))
        #expect(!Catalog.scansOrder(matches: 9, total: 9, pageSize: 1_000))
    }

    /// Each page after the first starts where the last ended, through the order's index: no
    /// scan of the assets, no sort of them (SQLite's "USE TEMP B-TREE"). Size has no index
    /// (it would slow every add): its pages are scans, and large.
    @Test func eachPageIsARangeOfTheOrdersIndex() async throws {
        let (t, catalog) = try await catalogWithTies()
        defer { catalog.close() }
        let last = try catalog.assets()[4]
        let byName = FetchRequest<Asset>(
            predicate: .all && AssetOrder.name.after(last), sortBy: [AssetOrder.name.sort], limit: 1_000)
        let namePlan = try DigestIndexTests.plan(byName, in: t, catalog: catalog)
        #expect(namePlan.contains("INDEX Asset_name_index (name>?)"), "\(namePlan)")
        #expect(!namePlan.contains("TEMP B-TREE") && !namePlan.contains("SCAN"), "\(namePlan)")
        // After the first page, a name's run goes on by ID, then the greater names: two
        // ranges of the index, however long the run (many files have one name).
        let ranges = try #require(AssetOrder.name.indexedRanges(after: last))
        let sameName = FetchRequest<Asset>(predicate: .all && ranges.sameKey, sortBy: [.objectID()], limit: 1_000)
        let samePlan = try DigestIndexTests.plan(sameName, in: t, catalog: catalog)
        #expect(samePlan.contains("INDEX Asset_name_index (name=? AND rowid>?)"), "\(samePlan)")
        #expect(!samePlan.contains("TEMP B-TREE"), "\(samePlan)")
        let greaterName = FetchRequest<Asset>(
            predicate: .all && ranges.greaterKey, sortBy: [AssetOrder.name.sort], limit: 1_000)
        let greaterPlan = try DigestIndexTests.plan(greaterName, in: t, catalog: catalog)
        #expect(greaterPlan.contains("INDEX Asset_name_index (name>?)"), "\(greaterPlan)")
        #expect(!greaterPlan.contains("TEMP B-TREE"), "\(greaterPlan)")
        #expect(AssetOrder.size.indexedRanges(after: last) == nil && AssetOrder.id.indexedRanges(after: last) == nil)
        let bySize = FetchRequest<Asset>(
            predicate: .all && AssetOrder.size.after(last), sortBy: [AssetOrder.size.sort], limit: 1_000)
        let sizePlan = try DigestIndexTests.plan(bySize, in: t, catalog: catalog)
        #expect(sizePlan.contains("SCAN") && !sizePlan.contains("Asset_size"), "\(sizePlan)")
        #expect(AssetOrder.unindexedPageSize == 50_000)
        // (The helper binds a date as NULL: the plan of the first page.)
        let first = FetchRequest<Asset>(predicate: .all, sortBy: [AssetOrder.added.sort], limit: 1_000)
        let plan = try DigestIndexTests.plan(first, in: t, catalog: catalog)
        #expect(plan.contains("INDEX Asset_created_index"), "\(plan)")
        #expect(!plan.contains("TEMP B-TREE"), "\(plan)")
    }

    /// A catalog of an earlier release gets the index of `created` when first opened to
    /// write (and none of `size`), its assets intact, and lists in their order.
    @Test func anUpgradedCatalogGetsTheIndexesOfTheOrders() throws {
        let old = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: old.root.path)
        let before = try DigestIndexTests.indexes(old.root)
        #expect(!before.contains("Asset_size_index") && !before.contains("Asset_created_index"))
        let catalog = try old.open()
        defer { catalog.close() }
        let after = try DigestIndexTests.indexes(old.root)
        #expect(!after.contains("Asset_size_index"))
        #expect(after.contains(#"Asset_created_index: CREATE INDEX "Asset_created_index" ON "Asset" ("created")"#))
        let all = try catalog.assets()
        #expect(all.count == 14)
        var listed: [AssetRecord] = []
        try catalog.forEachAsset(orderedBy: .size, pageSize: 3) { listed.append($0) }
        #expect(listed.map(\.id) == all.sorted { ($0.size, $0.id) < ($1.size, $1.id) }.map(\.id))
    }
}
