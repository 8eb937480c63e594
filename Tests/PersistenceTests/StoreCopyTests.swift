import Foundation
import PostgresNIO
import TestScratch
import Testing

@_spi(Testing) @testable import Persistence
@testable import PersistencePostgreSQL

/// A table of a program's own entity, which a copy with a schema that lacks it would leave behind.
final class CopyExtra: ManagedObject {
    @Attribute var label = ""
}

/// `PersistentContainer.copyAll(to:progress:beforeCommit:afterCommit:)`: every row, with its ID and version,
/// into an empty store of the other engine, in one transaction, a page at a time.
@Suite struct StoreCopyTests {
    static let types: [ManagedObject.Type] = [TallyBox.self, TallyItem.self]
    struct Refused: Error, Equatable {}

    static func open(_ kind: StoreKind, _ types: [ManagedObject.Type] = types) throws -> PersistentContainer {
        let directory = ScratchDirectory.path("store-copy")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return try PersistentContainer.open(url: try kind.newStoreURL(in: directory), schema: try Schema(types))
    }

    /// More rows than a page, IDs with holes, versions above 1, links, and tallies.
    static func fill(_ container: PersistentContainer) throws {
        let context = container.newBackgroundContext()
        let boxes = (0..<3).map { i in
            let box = TallyBox(context: context)
            box.label = "box \(i)"
            return box
        }
        try context.save()
        try context.insertRows(TallyItem.self, count: 12_345) { i, row in
            row[\.kind] = ["image", "text", "plain"][i % 3]
            row[\.size] = Int64(i % 97)
            row[\.code] = "c\(i % 500)"
            row[\.stocked] = i % 7 != 0
            row[\.note] = i % 11 == 0 ? "ünïcode \(i)" : ""
            row[\.box] = boxes[i % 3].objectID
        }
        try context.save()
        _ = try context.batchDelete(FetchRequest<TallyItem>(predicate: \.size == 5))
        let some = try context.fetch(FetchRequest<TallyItem>(predicate: \.size == 7))
        for item in some { item.note = "changed once" }
        try context.save()
        for item in some.prefix(10) { item.note = "changed twice" }
        boxes[1].label = "renamed"
        try context.save()
    }

    /// Every row of every entity (ID, version, values) and each entity's next ID.
    static func contents(_ container: PersistentContainer) throws -> [String: ([StoreRow], Int64)] {
        try container.core.store.holdingStill { source in
            var all: [String: ([StoreRow], Int64)] = [:]
            for entity in container.schema.entities {
                all[entity.name] = (
                    try source.page(entity, after: .min, limit: 1_000_000), try source.nextID(entity)
                )
            }
            return all
        }
    }

    static func requireEqual(_ a: PersistentContainer, _ b: PersistentContainer) throws {
        let left = try contents(a)
        let right = try contents(b)
        #expect(left.keys.sorted() == right.keys.sorted())
        for (name, (rows, next)) in left {
            let (other, otherNext) = right[name]!
            #expect(rows.count == other.count, "\(name)")
            #expect(rows.map(\.id) == other.map(\.id), "\(name) IDs")
            #expect(rows.map(\.version) == other.map(\.version), "\(name) versions")
            #expect(rows.map { "\($0.values)" } == other.map { "\($0.values)" }, "\(name) values")
            #expect(next <= otherNext, "\(name) next ID")
        }
        #expect(try a.tally("kind", of: TallyItem.self) == b.tally("kind", of: TallyItem.self))
        #expect(try a.tally("codes", of: TallyItem.self) == b.tally("codes", of: TallyItem.self))
    }

    static func rowCount(_ container: PersistentContainer) throws -> Int {
        let context = container.newBackgroundContext()
        return try context.count(for: FetchRequest<TallyItem>()) + context.count(for: FetchRequest<TallyBox>())
    }

    static let directions: [(StoreKind, StoreKind)] = [
        (.sqlite, .postgresql), (.postgresql, .sqlite), (.sqlite, .sqlite),
    ]

    /// A copy into PostgreSQL leaves the planner's statistics of every table it filled: a
    /// store just migrated does not wait for autovacuum's nap, during which the planner takes
    /// every equality for a common one (it walked the primary key of 10,000,000 assets to find
    /// that one asset had no archive members: 1.3 s for the `rm` of one asset).
    @Test func aCopyIntoPostgreSQLLeavesTheStatisticsOfItsTables() throws {
        let source = try Self.open(.sqlite)
        let target = try Self.open(.postgresql)
        defer {
            source.close()
            target.close()
        }
        try Self.fill(source)
        try source.copyAll(to: target)
        let store = try #require(target.core.store as? PostgreSQLStore)
        let analyzed = try store.reader.run(
            "SELECT DISTINCT tablename::TEXT FROM pg_stats WHERE schemaname = $1 ORDER BY 1",
            [.text(store.location.schema)]
        ).rows.map { try $0.decode(String.self) }
        #expect(analyzed == ["TallyBox", "TallyItem"])
    }

    /// A copy into PostgreSQL leaves no entry of a search index in its GIN index's pending
    /// list, which every search would read whole until autovacuum came (a search right after
    /// `migrate-store` of a million assets: 1–3 ms a word instead of a tenth of that).
    @Test func aCopyIntoPostgreSQLLeavesNoSearchEntryPending() throws {
        let source = try Self.open(.sqlite, [IndexedCard.self])
        let target = try Self.open(.postgresql, [IndexedCard.self])
        defer {
            source.close()
            target.close()
        }
        let context = source.newBackgroundContext()
        try context.insertRows(IndexedCard.self, count: 3_000) { i, row in
            row[\.title] = "gull \(i) of the harbour"
            row[\.code] = "c\(i)"
        }
        try context.save()
        try source.copyAll(to: target)
        let store = try #require(target.core.store as? PostgreSQLStore)
        let pending = try store.reader.run(
            "SELECT gin_clean_pending_list('\"_persistence_search_IndexedCard_doc\"'::regclass)", []
        ).rows.map { try $0.decode(Int64.self) }
        #expect(pending == [0])
        let found = try target.newBackgroundContext().count(
            for: FetchRequest<IndexedCard>(predicate: .matches(TextSearch([.init("1234")]))))
        #expect(found == 1)
    }

    @Test(arguments: directions)
    func copiesRowsIDsVersionsLinksTalliesAndNextIDs(from: StoreKind, to: StoreKind) throws {
        let source = try Self.open(from)
        let target = try Self.open(to)
        defer {
            source.close()
            target.close()
        }
        try Self.fill(source)
        var reports: [StoreCopyProgress] = []
        let fingerprint = try source.copyAll(to: target) { reports.append($0) }
        try Self.requireEqual(source, target)
        #expect(try source.fingerprint() == fingerprint)
        #expect(try target.fingerprint() == fingerprint)
        #expect(try target.recountTallies(fix: false) == [])
        // Pages, not whole tables: 3 boxes, then 11,xxx items in two pages of at most 10,000.
        let total = try Self.rowCount(source)
        #expect(reports.first == StoreCopyProgress(copied: 0, total: total))
        #expect(reports.last == StoreCopyProgress(copied: total, total: total))
        let steps = zip(reports.dropFirst(), reports).map { $0.copied - $1.copied }
        #expect(steps.allSatisfy { $0 > 0 && $0 <= PersistentContainer.copyPageSize })
        #expect(steps.count == 3)
        // The copy's next IDs are used: a new object gets an ID above every copied one.
        let context = target.newBackgroundContext()
        let item = TallyItem(context: context)
        item.code = "after"
        try context.save()
        let highest = try Self.contents(source)["TallyItem"]!.0.last!.id
        #expect(item.objectID.rowID > highest)
        // Links survive: each box still has its items.
        let boxes = try context.fetch(FetchRequest<TallyBox>())
        #expect(boxes.map(\.items.count).reduce(0, +) == total - 3)
        // Any save changes the fingerprint: an update (its version), an insert, a deletion.
        #expect(try target.fingerprint() != fingerprint)
        let sourceContext = source.newBackgroundContext()
        let box = try sourceContext.fetch(FetchRequest<TallyBox>()).first!
        box.label = "changed after the copy"
        try sourceContext.save()
        #expect(try source.fingerprint() != fingerprint)
    }

    @Test(arguments: directions)
    func aFailedCommitLeavesTheTargetWithoutAnyRow(from: StoreKind, to: StoreKind) throws {
        let source = try Self.open(from)
        let target = try Self.open(to)
        defer {
            source.close()
            target.close()
        }
        try Self.fill(source)
        let before = try Self.contents(target)
        target.failNextCommit(with: Refused())
        #expect(throws: Refused.self) { try source.copyAll(to: target) }
        #expect(try Self.rowCount(target) == 0)
        #expect(try Self.contents(target).mapValues(\.1) == before.mapValues(\.1))
        #expect(try target.tally("kind", of: TallyItem.self) == [])
        // A check before the commit refuses the same way, and a rerun then copies everything.
        #expect(throws: Refused.self) { try source.copyAll(to: target, beforeCommit: { throw Refused() }) }
        #expect(try Self.rowCount(target) == 0)
        try source.copyAll(to: target)
        try Self.requireEqual(source, target)
    }

    @Test(arguments: directions)
    func refusesATargetThatHoldsRows(from: StoreKind, to: StoreKind) throws {
        let source = try Self.open(from)
        let target = try Self.open(to)
        defer {
            source.close()
            target.close()
        }
        try Self.fill(source)
        let context = target.newBackgroundContext()
        TallyBox(context: context).label = "mine"
        try context.save()
        let name = target.storeURL.isFileURL ? target.storeURL.path : target.storeURL.absoluteString
        let error = #expect(throws: PersistenceError.self) { try source.copyAll(to: target) }
        #expect(error?.code == .misuse)
        #expect(
            error?.message
                == "\(name) already holds rows of TallyBox: a copy goes into an empty store; nothing was copied")
        #expect(try Self.rowCount(target) == 1)
    }

    @Test(arguments: [StoreKind.sqlite, .postgresql])
    func refusesAStoreWithTablesTheSchemaDoesNotDeclare(kind: StoreKind) throws {
        let directory = ScratchDirectory.path("store-copy")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let url = try kind.newStoreURL(in: directory)
        try PersistentContainer.open(url: url, schema: try Schema(Self.types + [CopyExtra.self])).close()
        let source = try PersistentContainer.open(url: url, schema: try Schema(Self.types))
        let target = try Self.open(kind == .sqlite ? .postgresql : .sqlite)
        defer {
            source.close()
            target.close()
        }
        #expect(try source.tablesOutsideSchema() == ["CopyExtra"])
        let error = #expect(throws: PersistenceError.self) { try source.copyAll(to: target) }
        #expect(error?.code == .unsupported)
        #expect(
            error?.message
                == "\(source.storeName) holds tables of entities the schema does not declare (CopyExtra): "
                + "copy it with a schema that declares them; nothing was copied")
    }
}
