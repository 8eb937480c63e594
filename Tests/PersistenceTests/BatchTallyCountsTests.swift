import Foundation
import PersistencePostgreSQL
import TestScratch
import Testing

@testable import Persistence

/// Rows counted by tallies of every key a tally can have: a text, an integer, a boolean, a
/// date (a real: the aggregate's), a to-one relationship, and none.
final class TallyVariety: ManagedObject {
    @Attribute var label = ""
    @Attribute var count = 0
    @Attribute var flag = false
    @Attribute var when = Date(timeIntervalSince1970: 0)
    @Attribute var size: Int64 = 0
    @ToOne var box: TallyBox?

    override class var tallies: [Persistence.Tally] {
        [
            Persistence.Tally("label", by: \TallyVariety.label, summing: \TallyVariety.size),
            Persistence.Tally("count", by: \TallyVariety.count),
            Persistence.Tally("flag", by: \TallyVariety.flag, summing: \TallyVariety.size),
            Persistence.Tally("when", by: \TallyVariety.when),
            Persistence.Tally("box", by: \TallyVariety.box, summing: \TallyVariety.size),
            Persistence.Tally("all", summing: \TallyVariety.size),
        ]
    }
}

/// A batch of inserted rows is added to a tally by key from the values written
/// (``BatchTallyCounts``), not read back by an aggregate: the counts must be the ones the
/// store's own SQL counts.
@Suite struct BatchTallyCountsTests {
    /// `é` as one scalar and as `e` and a combining accent: one string to Swift, two keys to
    /// SQLite and PostgreSQL, which compare bytes.
    static let composed = "caf\u{E9}"
    static let decomposed = "cafe\u{301}"

    /// Every kind of key, in one batch, on both stores: what the store keeps is what a
    /// recount of its rows finds, key by key.
    @Test(arguments: StoreKind.allCases) func everyKindOfKeyIsCountedAsTheStoreCountsIt(_ kind: StoreKind) throws {
        let directory = ScratchDirectory.path("batch-tally")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let schema = try Schema([TallyBox.self, TallyItem.self, TallyVariety.self])
        let container = try PersistentContainer.open(url: try kind.newStoreURL(in: directory), schema: schema)
        let context = container.newBackgroundContext()
        let box = TallyBox(context: context)
        try context.save()
        _ = try context.insertRows(
            TallyVariety.self, count: 300, batchSize: 300,
            streaming: { i, row in
                row[\.label] = [Self.composed, Self.decomposed, "plain"][i % 3]
                row[\.count] = i % 4 - 1
                row[\.flag] = i % 2 == 0
                row[\.when] = Date(timeIntervalSince1970: Double(i % 2) + 0.5)
                row[\.size] = Int64(i)
                row[\.box] = i % 5 == 0 ? box.objectID : nil
            })
        try context.save()
        #expect(try container.recountTallies(fix: false) == [])

        let labels = try container.tally("label", of: TallyVariety.self)
        func label(_ text: String) -> TallyCount? { labels.first { $0.key.utf8.elementsEqual(text.utf8) } }
        #expect(labels.count == 3)
        // Rows 0, 3, …, 297 are composed (sizes 0 + 3 + … + 297), rows 1, 4, … decomposed.
        #expect(label(Self.composed) == TallyCount(key: Self.composed, count: 100, total: 14_850))
        #expect(label(Self.decomposed) == TallyCount(key: Self.decomposed, count: 100, total: 14_950))
        #expect(label("plain") == TallyCount(key: "plain", count: 100, total: 15_050))
        #expect(
            try container.tally("count", of: TallyVariety.self).map(\.key).sorted() == ["-1", "0", "1", "2"])
        #expect(
            try container.tally("flag", of: TallyVariety.self)
                == [TallyCount(key: "0", count: 150, total: 22_500), TallyCount(key: "1", count: 150, total: 22_350)])
        #expect(try container.tally("when", of: TallyVariety.self).map(\.count) == [150, 150])
        #expect(
            try container.tally("box", of: TallyVariety.self)
                == [
                    TallyCount(key: "", count: 240, total: 36_000),
                    TallyCount(key: String(box.objectID.rowID), count: 60, total: 8_850),
                ])
        #expect(try container.tally("all", of: TallyVariety.self) == [TallyCount(key: "", count: 300, total: 44_850)])
    }

    /// Rows of one tally, each with `values` set at the given key paths.
    static func rows(_ values: [[PartialKeyPath<TallyVariety>: StoreValue]]) -> [StoreChanges.Insert] {
        let entity = EntityRegistry.description(for: TallyVariety.self)
        return values.enumerated().map { i, set in
            var row = entity.storedProperties.map(\.defaultValue)
            for (keyPath, value) in set { row[entity.slotOrDie(for: keyPath)] = value }
            return StoreChanges.Insert(entity: entity, id: Int64(i + 1), values: row)
        }
    }

    static func tally(_ name: String) throws -> ResolvedTally {
        try EntityRegistry.description(for: TallyVariety.self).resolvedTallies().first { $0.name == name }!
    }

    /// The `CREATE TABLE` text of `type`'s table as the store makes it.
    static func table(_ type: ManagedObject.Type) -> String {
        let entity = EntityRegistry.description(for: type)
        return "CREATE TABLE \"\(entity.name)\" (\(StoreDialect.sqlite.tableColumns(entity).joined(separator: ", ")))"
    }

    static func counts(_ name: String, _ rows: [StoreChanges.Insert], table: String = table(TallyVariety.self)) throws
        -> BatchTallyCounts?
    {
        BatchTallyCounts(
            try tally(name), of: EntityRegistry.description(for: TallyVariety.self), table: table, rows: rows)
    }

    /// Keys come in the order of their first rows, grouped by bytes, a run of one key or not.
    @Test func keysAreGroupedByTheirBytesInTheOrderTheyCome() throws {
        let rows = Self.rows(
            [Self.composed, "plain", Self.decomposed, Self.decomposed, "plain", Self.composed].enumerated().map {
                [\TallyVariety.label: .text($1), \TallyVariety.size: .integer(Int64($0 + 1))]
            })
        let counts = try #require(try Self.counts("label", rows))
        #expect(counts.keys.map(\.text.utf8.count) == [5, 5, 6])
        #expect(counts.keys.map(\.count) == [2, 2, 2])
        #expect(counts.keys.map(\.total) == [7, 7, 7])  // sizes 1 + 6, 2 + 5, 3 + 4
    }

    /// What SQLite would read otherwise than the value says — a real, a blob, a text where
    /// an integer goes — and a total that overflows are left to the aggregate.
    @Test func valuesSQLiteWouldReadOtherwiseAreLeftToTheAggregate() throws {
        #expect(try Self.counts("when", Self.rows([[\TallyVariety.when: .real(1.5)]])) == nil)
        #expect(try Self.counts("label", Self.rows([[\TallyVariety.label: .blob(Data([1]))]])) == nil)
        #expect(try Self.counts("label", Self.rows([[\TallyVariety.label: .integer(1)]])) == nil)
        #expect(try Self.counts("count", Self.rows([[\TallyVariety.count: .text("01")]])) == nil)
        #expect(try Self.counts("all", Self.rows([[\TallyVariety.size: .text("1")]])) == nil)
        let huge = Self.rows([[\TallyVariety.size: .integer(.max)], [\TallyVariety.size: .integer(1)]])
        #expect(try Self.counts("all", huge) == nil)
        // NULL is the empty key, and adds nothing to the total.
        let nulls = try #require(
            try Self.counts("box", Self.rows([[\TallyVariety.box: .null], [\TallyVariety.box: .integer(7)]])))
        #expect(nulls.keys.map(\.text) == ["", "7"])
        #expect(try Self.counts("all", Self.rows([[\TallyVariety.size: .null]]))?.keys.map(\.total) == [0])
        // A NUL would be lost where the key is bound as a C string.
        #expect(try Self.counts("label", Self.rows([[\TallyVariety.label: .text("a\u{0}b")]])) == nil)
    }

    /// A column the table declares otherwise than the store does (a migration changed its
    /// type or its collation) is SQLite's to read.
    @Test func aColumnDeclaredOtherwiseIsLeftToTheAggregate() throws {
        let rows = Self.rows([[\TallyVariety.label: .text("x")]])
        #expect(try Self.counts("label", rows) != nil)
        let retyped = Self.table(TallyVariety.self).replacingOccurrences(
            of: "\"label\" TEXT NOT NULL", with: "\"label\" INTEGER NOT NULL")
        #expect(try Self.counts("label", rows, table: retyped) == nil)
        let collated = Self.table(TallyVariety.self).replacingOccurrences(
            of: "\"label\" TEXT NOT NULL DEFAULT ''", with: "\"label\" TEXT NOT NULL DEFAULT '' COLLATE NOCASE")
        #expect(try Self.counts("label", rows, table: collated) == nil)
    }
}

/// A distinct tally's aggregate is skipped for a batch none of whose rows its filter passes
/// (``BatchTallyCounts/filterPassesNone(_:of:rows:)``): it would add nothing.
@Suite struct BatchFilterTests {
    static func rows(stocked: [StoreValue]) -> [StoreChanges.Insert] {
        let entity = EntityRegistry.description(for: TallyItem.self)
        return stocked.enumerated().map { i, value in
            var row = entity.storedProperties.map(\.defaultValue)
            row[entity.slotOrDie(for: \TallyItem.stocked)] = value
            return StoreChanges.Insert(entity: entity, id: Int64(i + 1), values: row)
        }
    }

    static func passesNone(_ stocked: [StoreValue], tally name: String = "codes") throws -> Bool {
        let entity = EntityRegistry.description(for: TallyItem.self)
        let tally = try #require(try entity.resolvedTallies().first { $0.name == name })
        return BatchTallyCounts.filterPassesNone(
            tally, of: entity, table: BatchTallyCountsTests.table(TallyItem.self), rows: rows(stocked: stocked))
    }

    @Test func onlyABatchTheFilterSurelyRefusesIsSkipped() throws {
        // `stocked IS 1`: refused by 0 and NULL, passed by 1.
        #expect(try Self.passesNone([.integer(0), .null, .integer(0)]))
        #expect(try !Self.passesNone([.integer(0), .integer(1)]))
        // A value SQLite would convert (text in an INTEGER column) is the aggregate's to judge.
        #expect(try !Self.passesNone([.integer(0), .text("0")]))
        // A real is SQLite's to read (not a number, it is stored as NULL).
        #expect(try !Self.passesNone([.integer(0), .real(.nan)]))
        // A tally by key has no filter: never skipped.
        #expect(try !Self.passesNone([.integer(0)], tally: "kind"))
    }

    /// On both stores: a batch of unstocked items leaves the distinct count as it was, and a
    /// recount agrees.
    @Test(arguments: StoreKind.allCases) func aBatchTheFilterRefusesAddsNothing(_ kind: StoreKind) throws {
        let store = try TallyTests.Store(kind)
        let context = store.container.newBackgroundContext()
        let item = TallyItem(context: context)
        item.code = "kept"
        item.size = 3
        try context.save()
        _ = try context.insertRows(
            TallyItem.self, count: 100, batchSize: 100,
            streaming: { i, row in
                row[\.code] = i % 2 == 0 ? "kept" : "other\(i)"
                row[\.size] = 3
                row[\.stocked] = false
            })
        try context.save()
        try store.expectExact()
        #expect(try store.kept().codes == TallyCount(key: "", count: 1, total: 3))
    }
}

/// Rows whose hook plans rows of two entities, interleaved: `items` items and a box after each.
final class TallyMixer: ManagedObject {
    @Attribute var items = 0

    override class func willInsertRows(
        _ rows: [ObjectSnapshot], in context: ManagedObjectContext, effects: SaveEffects
    ) throws {
        for (r, row) in rows.enumerated() {
            for i in 0..<(row.value(for: \TallyMixer.items) ?? 0) {
                effects.insertRow(TallyItem.self) {
                    $0[\.kind] = "mixed"
                    $0[\.size] = 1
                    $0[\.code] = "m\(r)-\(i)"
                }
                effects.insertRow(TallyBox.self) { $0[\.label] = "m\(r)-\(i)" }
            }
        }
    }
}

@Suite struct InterleavedEffectRowsTests {
    /// Each entity's planned rows get consecutive IDs in the order they were planned, are all
    /// written, and are counted once, on both stores.
    @Test(arguments: StoreKind.allCases) func rowsOfTwoEntitiesPlannedInTurnAreWrittenInOrder(_ kind: StoreKind)
        throws
    {
        let directory = ScratchDirectory.path("interleaved")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let schema = try Schema([TallyBox.self, TallyItem.self, TallyMixer.self])
        let container = try PersistentContainer.open(url: try kind.newStoreURL(in: directory), schema: schema)
        let context = container.newBackgroundContext()
        try context.insertRows(TallyMixer.self, count: 4) { _, row in row[\.items] = 20 }
        try context.save()
        let planned = (0..<4).flatMap { r in (0..<20).map { "m\(r)-\($0)" } }
        let reader = container.newBackgroundContext()
        let items = try reader.fetch(FetchRequest<TallyItem>()).sorted { $0.objectID.rowID < $1.objectID.rowID }
        let boxes = try reader.fetch(FetchRequest<TallyBox>()).sorted { $0.objectID.rowID < $1.objectID.rowID }
        #expect(items.map(\.code) == planned)
        #expect(boxes.map(\.label) == planned)
        #expect(try container.tally("kind", of: TallyItem.self) == [TallyCount(key: "mixed", count: 80, total: 80)])
        #expect(try container.recountTallies(fix: false) == [])
    }
}

/// Rows whose distinct tally counts the codes of unscored rows (`score IS NULL`).
final class TallyScore: ManagedObject {
    @Attribute(.indexed) var code = ""
    @Attribute var score: Double? = 0
    override class var tallies: [Persistence.Tally] {
        [.distinct("unscored", of: \TallyScore.code, where: \TallyScore.score, is: nil as Double?)]
    }
}

/// The same table, first with an integer `label`, then with a text one: the column keeps the
/// type it was made with (a changed type makes no new column).
final class TallyRetypedBefore: ManagedObject {
    override class var entityName: String { "TallyRetyped" }
    @Attribute var label = 0
    override class var tallies: [Persistence.Tally] { [Persistence.Tally("label", by: \TallyRetypedBefore.label)] }
}

final class TallyRetypedAfter: ManagedObject {
    override class var entityName: String { "TallyRetyped" }
    @Attribute var label = ""
    override class var tallies: [Persistence.Tally] { [Persistence.Tally("label", by: \TallyRetypedAfter.label)] }
}

/// Values SQLite stores otherwise than they are written, in a batch: the counts are still the
/// ones a recount finds.
@Suite struct BatchTallyStoredValuesTests {
    static func url(_ name: String) -> URL {
        let directory = ScratchDirectory.path(name)
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appending(path: "store.sqlite")
    }

    /// Keys that differ after a NUL stay apart.
    @Test func textKeysWithANulAreCountedApart() throws {
        let schema = try Schema([TallyBox.self, TallyItem.self, TallyVariety.self])
        let container = try PersistentContainer.open(url: Self.url("batch-tally-nul"), schema: schema)
        let context = container.newBackgroundContext()
        _ = try context.insertRows(
            TallyVariety.self, count: 300, batchSize: 300,
            streaming: { i, row in
                row[\.label] = ["a\u{0}b", "a\u{0}c", "a"][i % 3]
                row[\.size] = 1
            })
        try context.save()
        #expect(try container.recountTallies(fix: false) == [])
    }

    /// A real that is not a number is stored as NULL, which `score IS NULL` passes.
    @Test func aNotANumberPassesAFilterOfNull() throws {
        let container = try PersistentContainer.open(
            url: Self.url("batch-tally-nan"), schema: try Schema([TallyScore.self]))
        let context = container.newBackgroundContext()
        _ = try context.insertRows(
            TallyScore.self, count: 100, batchSize: 100,
            streaming: { i, row in
                row[\.code] = "c\(i)"
                row[\.score] = .nan
            })
        try context.save()
        #expect(try container.recountTallies(fix: false) == [])
        #expect(try container.tally("unscored", of: TallyScore.self).map(\.count) == [100])
    }

    /// A column made `INTEGER` and now declared text: SQLite stores `"0123"` as 123.
    @Test func aColumnOfAnotherTypeIsCountedAsSQLiteStoresIt() throws {
        let url = Self.url("batch-tally-retyped")
        try PersistentContainer.open(url: url, schema: try Schema([TallyRetypedBefore.self])).close()
        let container = try PersistentContainer.open(url: url, schema: try Schema([TallyRetypedAfter.self]))
        let context = container.newBackgroundContext()
        _ = try context.insertRows(
            TallyRetypedAfter.self, count: 100, batchSize: 100, streaming: { _, row in row[\.label] = "0123" })
        try context.save()
        #expect(try container.recountTallies(fix: false) == [])
        let counts = try container.tally("label", of: TallyRetypedAfter.self)
        #expect(counts == [TallyCount(key: "123", count: 100, total: 0)])
    }
}
