import Foundation
@_spi(Testing) import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// A box of items: deleting it deletes them (a cascade).
final class TallyBox: ManagedObject {
    @Attribute var label = ""
    @ToMany(inverse: \TallyItem.box, deleteRule: .cascade) var items: [TallyItem]
}

/// Items counted by kind (with their sizes) and by distinct code among the stocked ones.
final class TallyItem: ManagedObject {
    @Attribute var kind = "plain"
    @Attribute var size: Int64 = 0
    @Attribute(.indexed) var code = ""
    @Attribute var stocked = true
    @Attribute var note = ""
    @ToOne var box: TallyBox?

    override class var tallies: [Persistence.Tally] {
        [
            Persistence.Tally("kind", by: \TallyItem.kind, summing: \TallyItem.size),
            .distinct("codes", of: \TallyItem.code, summing: \TallyItem.size, where: \TallyItem.stocked, is: true),
        ]
    }
}

/// Rows whose `willInsertRows` adds `items` tallied items each, as rows of the same save
/// (``SaveEffects/insertRow(_:_:)``): what an add does with the tags of its assets.
final class TallyPacker: ManagedObject {
    @Attribute var items = 0

    override class func willInsertRows(
        _ rows: [ObjectSnapshot], in context: ManagedObjectContext, effects: SaveEffects
    ) throws {
        for (r, row) in rows.enumerated() {
            for i in 0..<(row.value(for: \TallyPacker.items) ?? 0) {
                effects.insertRow(TallyItem.self) {
                    $0[\.kind] = ["packed", "text"][i % 2]
                    $0[\.size] = 2
                    $0[\.code] = "p\((r + i) % 30)"  // repeated within the batch and across rows
                    $0[\.stocked] = i % 5 != 0
                }
            }
        }
    }
}

/// The same table without tallies: a store made before they were declared.
final class UntalliedItem: ManagedObject {
    override class var entityName: String { "TallyItem" }
    @Attribute var kind = "plain"
    @Attribute var size: Int64 = 0
    @Attribute(.indexed) var code = ""
    @Attribute var stocked = true
    @Attribute var note = ""
}

/// A tallied entity without relationships, and the same table before its tally.
final class CountedThing: ManagedObject {
    @Attribute var kind = ""
    override class var tallies: [Persistence.Tally] { [Persistence.Tally("kind", by: \CountedThing.kind)] }
}

final class UncountedThing: ManagedObject {
    override class var entityName: String { "CountedThing" }
    @Attribute var kind = ""
}

@Suite struct TallyTests {
    struct Store {
        let url: URL
        let container: PersistentContainer

        init(_ kind: StoreKind = .sqlite, url: URL? = nil) throws {
            let url = try url ?? Self.newURL(kind)
            self.url = url
            container = try PersistentContainer.open(
                url: url, schema: try Schema([TallyBox.self, TallyItem.self, TallyPacker.self]))
        }

        static func newURL(_ kind: StoreKind = .sqlite) throws -> URL {
            let directory = ScratchDirectory.path("tally")
            try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            return try kind.newStoreURL(in: directory)
        }

        /// The tallies as the store keeps them.
        func kept() throws -> (kinds: [String: TallyCount], codes: TallyCount?) {
            let kinds = try container.tally("kind", of: TallyItem.self)
            return (
                Dictionary(uniqueKeysWithValues: kinds.map { ($0.key, $0) }),
                try container.tally("codes", of: TallyItem.self).first
            )
        }

        /// The tallies counted from the committed rows, as a reader sees them.
        func counted() throws -> (kinds: [String: TallyCount], codes: TallyCount?) {
            let items = try container.newBackgroundContext().fetch(FetchRequest<TallyItem>())
            var kinds: [String: TallyCount] = [:]
            for item in items {
                kinds[item.kind, default: TallyCount(key: item.kind, count: 0, total: 0)].count += 1
                kinds[item.kind]!.total += item.size
            }
            var sizes: [String: Int64] = [:]
            for item in items where item.stocked { sizes[item.code] = item.size }
            let codes = sizes.isEmpty ? nil : TallyCount(key: "", count: sizes.count, total: sizes.values.reduce(0, +))
            return (kinds, codes)
        }

        /// Checks that what the store keeps is what its rows count, and that a recount agrees.
        func expectExact(_ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let (kept, counted) = (try kept(), try counted())
            #expect(kept.kinds == counted.kinds, comment, sourceLocation: sourceLocation)
            #expect(kept.codes == counted.codes, comment, sourceLocation: sourceLocation)
            #expect(try container.recountTallies(fix: false) == [], comment, sourceLocation: sourceLocation)
        }
    }

    @discardableResult
    func item(_ context: ManagedObjectContext, _ kind: String, _ size: Int64, code: String = "", box: TallyBox? = nil)
        -> TallyItem
    {
        let item = TallyItem(context: context)
        item.kind = kind
        item.size = size
        item.code = code.isEmpty ? UUID().uuidString : code
        item.box = box
        return item
    }

    @Test(arguments: StoreKind.allCases) func insertsChangesAndDeletionsOfObjectsKeepThemExact(_ kind: StoreKind) throws
    {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        #expect(try store.kept().kinds.isEmpty)
        let a = item(context, "image", 10, code: "x")
        let b = item(context, "image", 10, code: "x")  // the same code (and size): one distinct value
        let c = item(context, "text", 7)
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["image"] == TallyCount(key: "image", count: 2, total: 20))
        #expect(try store.kept().codes == TallyCount(key: "", count: 2, total: 17))

        a.kind = "text"  // a key changes
        c.size = 70  // a summed value changes
        b.note = "not counted"  // a change that no tally sees
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["text"] == TallyCount(key: "text", count: 2, total: 80))
        #expect(try store.kept().codes == TallyCount(key: "", count: 2, total: 80))

        b.stocked = false  // out of the distinct count's filter
        a.stocked = false
        try context.save()
        try store.expectExact()
        #expect(try store.kept().codes == TallyCount(key: "", count: 1, total: 70))

        context.delete(a)
        context.delete(b)
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["image"] == nil)  // no row of the key: no count
        context.delete(c)
        try context.save()
        #expect(try store.kept().kinds.isEmpty)
        #expect(try store.kept().codes == nil)
    }

    @Test(arguments: StoreKind.allCases) func aRollbackAFailedSaveAndAChildsSaveChangeNothing(_ kind: StoreKind) throws
    {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        let kept = item(context, "image", 10)
        try context.save()
        let before = try store.kept()

        item(context, "text", 3)
        kept.size = 99
        context.rollback()
        #expect(try store.kept().kinds == before.kinds)

        struct DiskFull: Error {}
        item(context, "text", 3)
        context.delete(kept)
        store.container.failNextCommit(with: DiskFull())
        #expect(throws: (any Error).self) { try context.save() }
        #expect(try store.kept().kinds == before.kinds)
        #expect(try store.kept().codes == before.codes)
        context.rollback()

        let child = context.newChildContext()
        item(child, "video", 1_000)
        try child.save()  // into the parent only
        #expect(try store.kept().kinds == before.kinds)
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["video"] == TallyCount(key: "video", count: 1, total: 1_000))
    }

    @Test(arguments: StoreKind.allCases) func rowsInsertedAndDeletedWithoutObjectsAndCascadesKeepThemExact(
        _ kind: StoreKind
    ) throws {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        let box = TallyBox(context: context)
        for i in 0..<5 { item(context, i % 2 == 0 ? "image" : "text", Int64(i % 3), code: "c\(i % 3)", box: box) }
        try context.save()
        try context.insertRows(TallyItem.self, count: 100) { i, row in
            row[\.kind] = "row"
            row[\.size] = Int64(i % 10)
            row[\.code] = "r\(i % 10)"
            row[\.stocked] = true
        }
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["row"] == TallyCount(key: "row", count: 100, total: 450))

        try context.batchDelete(FetchRequest<TallyItem>(predicate: \.kind == "row" && \.size >= 5))
        try store.expectExact()
        #expect(try store.kept().kinds["row"]?.count == 50)

        context.delete(box)  // its items go by the cascade
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds.keys.sorted() == ["row"])
    }

    @Test(arguments: StoreKind.allCases) func aStoreWithRowsGetsItsTalliesCountedWhenTheyAreDeclared(
        _ kind: StoreKind
    ) throws {
        let url = try Store.newURL(kind)
        do {
            let old = try PersistentContainer.open(url: url, schema: try Schema([UntalliedItem.self]))
            let context = old.newBackgroundContext()
            try context.insertRows(UntalliedItem.self, count: 1_000) { i, row in
                row[\.kind] = i % 4 == 0 ? "image" : "text"
                row[\.size] = 2
                row[\.code] = "c\(i % 7)"
                row[\.stocked] = true
            }
            try context.save()
            old.close()
        }
        let store = try Store(kind, url: url)
        try store.expectExact()
        #expect(try store.kept().kinds["image"] == TallyCount(key: "image", count: 250, total: 500))
        #expect(try store.kept().codes == TallyCount(key: "", count: 7, total: 14))
    }

    @Test func aReadOnlyOpenOfAStoreWhoseTalliesWereNeverMadeIsRefused() throws {
        let url = try Store.newURL()
        do {
            let old = try PersistentContainer(storeURL: url, schema: try Schema([UncountedThing.self]))
            old.close()
        }
        var options = PersistentContainer.Options()
        options.readOnly = true
        let error = #expect(throws: (any Error).self) {
            try PersistentContainer(storeURL: url, schema: try Schema([CountedThing.self]), options: options)
        }
        #expect(
            "\(String(describing: error))".contains(
                "the store's counts need making for this version, which a read-only open cannot do"))
        // Opened once for writing, it is read-only-openable, with its counts.
        try PersistentContainer(storeURL: url, schema: try Schema([CountedThing.self])).close()
        let reader = try PersistentContainer(storeURL: url, schema: try Schema([CountedThing.self]), options: options)
        #expect(try reader.tally("kind", of: CountedThing.self) == [])
        reader.close()
    }

    @Test func aRecountSaysWhichCountsWereWrongAndFixesThem() async throws {
        let store = try Store()
        let context = store.container.newBackgroundContext()
        item(context, "image", 10, code: "x")
        item(context, "text", 3, code: "y")
        try context.save()
        store.container.close()
        // Counts made wrong behind the store's back (a bug, a hand edit).
        try await TallyTests.tamper(
            store.url,
            """
            UPDATE _persistence_tallies SET n = 5, total = 50 WHERE tally = 'kind' AND key = 'image';
            DELETE FROM _persistence_tallies WHERE tally = 'kind' AND key = 'text';
            INSERT INTO _persistence_tallies VALUES ('TallyItem', 'kind', 'ghost', 1, 1);
            UPDATE _persistence_tallies SET n = 9 WHERE tally = 'codes';
            """)
        let reopened = try Store(url: store.url)
        #expect(try reopened.kept().kinds["image"] == TallyCount(key: "image", count: 5, total: 50))  // read as kept
        let wrong = try reopened.container.recountTallies(fix: false)
        #expect(
            wrong.map(\.description) == [
                "TallyItem codes: recorded 9 (total 13), counted 2 (total 13)",
                "TallyItem kind 'ghost': recorded 1 (total 1), counted nothing",
                "TallyItem kind 'image': recorded 5 (total 50), counted 1 (total 10)",
                "TallyItem kind 'text': recorded nothing, counted 1 (total 3)",
            ])
        #expect(try reopened.container.recountTallies(fix: false).count == 4)  // not fixed without asking
        #expect(try reopened.container.recountTallies().count == 4)
        try reopened.expectExact()
        #expect(try reopened.container.recountTallies() == [])
    }

    /// Rows inserted in batches of more than a few rows are counted for the batch, by
    /// aggregates over its IDs, not by the triggers a row: the counts must come out as the
    /// triggers make them — values already counted by rows outside the batch, repeated
    /// inside it, filtered out — and go with the rows when the save fails.
    @Test(arguments: StoreKind.allCases) func largeBatchesOfRowsAreCountedAsTheTriggersCountThem(_ kind: StoreKind)
        throws
    {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        item(context, "image", 4, code: "shared")  // counted before the batch
        try context.save()
        _ = try context.insertRows(
            TallyItem.self, count: 1_000, batchSize: 300,
            streaming: { i, row in
                row[\.kind] = ["image", "text", "row"][i % 3]
                row[\.size] = 4
                row[\.code] = i % 100 == 0 ? "shared" : "r\(i % 250)"  // repeated across batches too
                row[\.stocked] = i % 7 != 0
            })
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["image"] == TallyCount(key: "image", count: 335, total: 1_340))
        // "shared" and r0…r249: 251 codes of 4 bytes.
        #expect(try store.kept().codes == TallyCount(key: "", count: 251, total: 1_004))

        // A save that fails keeps nothing of its batches' counts…
        struct DiskFull: Error {}
        let before = try store.kept()
        try context.insertRows(TallyItem.self, count: 500) { i, row in
            row[\.kind] = "lost"
            row[\.code] = "lost\(i)"
        }
        store.container.failNextCommit(with: DiskFull())
        #expect(throws: (any Error).self) { try context.save() }
        #expect(try store.kept().kinds == before.kinds)
        #expect(try store.kept().codes == before.codes)
        context.rollback()

        // …and leaves the triggers on: a row written one at a time is still counted.
        item(context, "video", 9, code: "single")
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["video"] == TallyCount(key: "video", count: 1, total: 9))
        #expect(try store.kept().codes == TallyCount(key: "", count: 252, total: 1_013))
    }

    /// The rows a hook adds to a save are counted as a batch an entity, once for the batch
    /// (a tag on each of an add's files was a tally trigger a row): the counts come out as
    /// the triggers make them, and go with the rows when the save fails.
    @Test(arguments: StoreKind.allCases) func rowsAHookAddsAreCountedAsTheTriggersCountThem(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        item(context, "packed", 2, code: "p3")  // counted before the batch
        try context.save()
        try context.insertRows(TallyPacker.self, count: 3) { _, row in row[\.items] = 40 }
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["packed"] == TallyCount(key: "packed", count: 61, total: 122))
        #expect(try store.kept().codes == TallyCount(key: "", count: 30, total: 60))

        struct DiskFull: Error {}
        let before = try store.kept()
        try context.insertRows(TallyPacker.self, count: 2) { _, row in row[\.items] = 50 }
        store.container.failNextCommit(with: DiskFull())
        #expect(throws: (any Error).self) { try context.save() }
        #expect(try store.kept().kinds == before.kinds)
        #expect(try store.kept().codes == before.codes)
        context.rollback()

        // A hook's few rows are counted by the triggers, still on.
        try context.insertRows(TallyPacker.self, count: 1) { _, row in row[\.items] = 3 }
        try context.save()
        try store.expectExact()
        #expect(try store.kept().kinds["packed"] == TallyCount(key: "packed", count: 63, total: 126))
    }

    /// Pages of deleted rows are taken from the tallies once a page, with the triggers off:
    /// a distinct value counts off only when no row is left with it — whether its other rows
    /// are in the same page, another page of the same deletion, or stay — and the rows its
    /// filter leaves out count nothing; a deletion that fails keeps every count.
    @Test(arguments: StoreKind.allCases) func largeDeletionsAreCountedAsTheTriggersCountThem(_ kind: StoreKind)
        throws
    {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        let box = TallyBox(context: context)
        for i in 0..<40 { item(context, "boxed", 2, code: "b\(i % 3)", box: box) }  // a cascade of 40
        try context.save()
        try context.insertRows(TallyItem.self, count: 3_000) { i, row in
            row[\.kind] = ["image", "text", "row"][i % 3]
            // c0…c299 repeat every 300 rows; every 600th row shares "b0" with the box's items.
            // (A code's rows have one size, as content's do.)
            row[\.code] = i % 600 == 0 ? "b0" : "c\(i % 300)"
            row[\.size] = i % 600 == 0 ? 2 : Int64(i % 300 % 5)
            row[\.stocked] = i % 7 != 0
        }
        try context.save()
        try store.expectExact()

        // Pages of 500: codes whose every row goes, codes some rows of which stay.
        try context.batchDelete(FetchRequest<TallyItem>(predicate: \.kind == "image" || \.size == 1))
        try store.expectExact("a batch deletion")
        try context.deleteRows(TallyItem.self) { after in
            try context.fetchObjectIDs(
                FetchRequest<TallyItem>(
                    predicate: .objectIDs(after: after) && \.kind == "text", sortBy: [.objectID(ascending: true)],
                    limit: 700)
            ).map(\.rowID)
        }
        try context.save()
        try store.expectExact("a row deletion")

        // A failed deletion keeps every count.
        struct DiskFull: Error {}
        let before = try store.kept()
        context.delete(box)
        store.container.failNextCommit(with: DiskFull())
        #expect(throws: (any Error).self) { try context.save() }
        #expect(try store.kept().kinds == before.kinds)
        #expect(try store.kept().codes == before.codes)
        context.rollback()

        context.delete(box)  // its 40 items by the cascade, in one page
        try context.batchDelete(FetchRequest<TallyItem>())
        try store.expectExact("everything deleted")
        #expect(try store.kept().kinds == [:])
        #expect(try store.kept().codes == nil)
    }

    /// A table given a trigger of its own (by another program) keeps it firing for every row
    /// of a large batch, inserted or deleted: the batch is not written with the triggers off
    /// then.
    @Test func aTableWithAForeignTriggerKeepsItForLargeBatchesAndDeletions() async throws {
        let store = try Store()
        store.container.close()
        try await TallyTests.tamper(
            store.url,
            """
            CREATE TABLE audit (n INTEGER NOT NULL);
            CREATE TRIGGER audit_insert AFTER INSERT ON TallyItem BEGIN INSERT INTO audit VALUES (NEW.id); END;
            CREATE TRIGGER audit_delete AFTER DELETE ON TallyItem BEGIN INSERT INTO audit VALUES (-OLD.id); END;
            """)
        let reopened = try Store(url: store.url)
        let context = reopened.container.newBackgroundContext()
        try context.insertRows(TallyItem.self, count: 200) { i, row in row[\.code] = "a\(i)" }
        try context.save()
        try reopened.expectExact()
        try context.batchDelete(FetchRequest<TallyItem>(predicate: .objectIDs(after: 50)))
        try reopened.expectExact()
        reopened.container.close()
        let run = try await ChildProcess.run(
            "/usr/bin/sqlite3",
            [store.url.path, "SELECT count(*) FILTER (WHERE n > 0), count(*) FILTER (WHERE n < 0) FROM audit"])
        #expect(run.stdoutText == "200|150\n")
    }

    static func tamper(_ url: URL, _ sql: String) async throws {
        let run = try await ChildProcess.run("/usr/bin/sqlite3", [url.path, sql])
        #expect(run.status == 0, "\(run.stderrText)")
    }
}
