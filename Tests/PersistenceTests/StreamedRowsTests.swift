import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// The rows of the streamed inserts: its `willInsertRows` calls `userInfo["willInsertRows"]`.
final class Reading: ManagedObject {
    @Attribute var n = 0
    @Attribute var label = ""
    @ToOne var folder: Folder?

    typealias Hook = ([ObjectSnapshot], SaveEffects) throws -> Void

    override class func willInsertRows(
        _ rows: [ObjectSnapshot], in context: ManagedObjectContext, effects: SaveEffects
    ) throws {
        try (context.userInfo["willInsertRows"] as? Hook)?(rows, effects)
    }
}

/// What the hook of ``Reading`` saw: one entry per call.
final class Batches {
    var ids: [[Int64]] = []
    var values: [[Int]] = []
    /// How many rows `configure` had made when the hook was called.
    var configuredBefore: [Int] = []
}

@Suite struct StreamedRowsTests {
    /// A store whose schema has ``Reading`` too.
    struct Store {
        let container: PersistentContainer

        init(_ kind: StoreKind = .sqlite) throws {
            let directory = try ScratchDirectory.make("persistence-tests")
            container = try PersistentContainer.open(
                url: try kind.newStoreURL(in: directory), schema: try Schema(allEntities + [Reading.self]))
        }

        func context(_ name: String = "test") -> ManagedObjectContext { container.newBackgroundContext(name: name) }

        func stored<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
            try container.newBackgroundContext().fetch(request)
        }

        func readings() throws -> [Reading] { try stored(FetchRequest<Reading>(sortBy: [.init(\.n)])) }
    }

    /// Records every call of the hook of ``Reading`` in `context` into `batches`.
    func record(_ context: ManagedObjectContext, into batches: Batches, configured: @escaping () -> Int) {
        let hook: Reading.Hook = { rows, _ in
            batches.ids.append(rows.map(\.objectID.rowID))
            batches.values.append(rows.map { $0.value(for: \Reading.n) ?? -1 })
            batches.configuredBefore.append(configured())
        }
        context.userInfo["willInsertRows"] = hook
    }

    @Test(arguments: StoreKind.allCases) func theSaveWritesTheRowsWithTheContextsChangesInOneTransaction(
        _ kind: StoreKind
    ) throws {
        let store = try Store(kind)
        let context = store.context()
        let folder = Folder(context: context)  // inserted by the same save
        folder.name = "imports"
        var configured: [Int] = []
        let ids = try context.insertRows(Reading.self, count: 5, batchSize: 2) { i, row in
            configured.append(i)
            row[\.n] = i * 10
            row[\.label] = "r\(i)"
            row[\.folder] = i.isMultiple(of: 2) ? folder.objectID : nil
        }
        #expect(ids.count == 5)
        #expect(configured.isEmpty)  // nothing is made at the call
        #expect(context.hasChanges)
        #expect(try store.readings().isEmpty)

        try context.save()
        #expect(configured == Array(0..<5))
        #expect(!context.hasChanges)
        let reader = store.context("reader")  // kept: it loads the folders
        let stored = try reader.fetch(FetchRequest<Reading>(sortBy: [.init(\.n)]))
        #expect(stored.map(\.objectID.rowID) == Array(ids))
        #expect(stored.map(\.n) == [0, 10, 20, 30, 40])
        #expect(stored.map(\.label) == ["r0", "r1", "r2", "r3", "r4"])
        #expect(stored.map { $0.folder?.name } == ["imports", nil, "imports", nil, "imports"])
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["imports"])

        try context.save()  // the stream was written once
        #expect(configured.count == 5)
        #expect(try store.readings().count == 5)
    }

    @Test(arguments: StoreKind.allCases) func theHookIsCalledOncePerBatchAsTheBatchesAreMade(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.context()
        let batches = Batches()
        var configured = 0
        record(context, into: batches) { configured }
        let ids = try context.insertRows(Reading.self, count: 2_500, batchSize: 1_000) { i, row in
            configured += 1
            row[\.n] = i
        }
        #expect(batches.ids.isEmpty)
        try context.save()

        #expect(batches.ids.map(\.count) == [1_000, 1_000, 500])
        #expect(batches.ids == [0, 1_000, 2_000].map { Array(ids.dropFirst($0).prefix(1_000)) })
        #expect(batches.values == [Array(0..<1_000), Array(1_000..<2_000), Array(2_000..<2_500)])
        // Each batch is handed over before the next one is made.
        #expect(batches.configuredBefore == [1_000, 2_000, 2_500])
        #expect(try store.readings().map(\.objectID.rowID) == Array(ids))
    }

    @Test(arguments: StoreKind.allCases) func aThrowingConfigureFailsTheSaveAndTheNextSaveMakesTheRowsAgain(
        _ kind: StoreKind
    ) throws {
        let store = try Store(kind)
        let context = store.context()
        Folder(context: context).name = "with the rows"
        var failures = 0
        let hook: Reading.Hook = { _, effects in effects.onFailure { failures += 1 } }
        context.userInfo["willInsertRows"] = hook
        var fails = true
        var configured: [Int] = []
        let ids = try context.insertRows(Reading.self, count: 2_500, batchSize: 1_000) { i, row in
            if fails && i == 1_500 { throw ValidationMessage("record 1500 is unreadable") }
            configured.append(i)
            row[\.n] = i
        }

        let error = #expect(throws: ValidationMessage.self) { try context.save() }
        #expect(error?.description == "record 1500 is unreadable")  // as configure threw it
        #expect(try store.readings().isEmpty)  // not even the first batch
        #expect(try store.stored(FetchRequest<Folder>()).isEmpty)
        #expect(failures == 1)  // the failure work the first batch's hook planned
        #expect(context.hasChanges)

        fails = false
        configured = []
        try context.save()
        #expect(configured == Array(0..<2_500))  // from index 0 again
        #expect(try store.readings().map(\.objectID.rowID) == Array(ids))
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["with the rows"])
        #expect(failures == 1)
    }

    @Test(arguments: StoreKind.allCases) func aThrowingHookFailsTheSaveAndTheNextSaveMakesTheRowsAgain(
        _ kind: StoreKind
    ) throws {
        let store = try Store(kind)
        let context = store.context()
        Folder(context: context).name = "with the rows"
        var refuses = true
        var firsts: [Int64] = []
        let hook: Reading.Hook = { rows, _ in
            firsts.append(rows[0].objectID.rowID)
            if refuses && firsts.count == 2 { throw ValidationMessage("the second batch is refused") }
        }
        context.userInfo["willInsertRows"] = hook
        let ids = try context.insertRows(Reading.self, count: 2_500, batchSize: 1_000) { i, row in row[\.n] = i }

        let error = #expect(throws: ValidationMessage.self) { try context.save() }
        #expect(error?.description == "the second batch is refused")
        #expect(try store.readings().isEmpty)
        #expect(try store.stored(FetchRequest<Folder>()).isEmpty)
        #expect(context.hasChanges)

        refuses = false
        firsts = []
        try context.save()
        #expect(firsts == [ids.lowerBound, ids.lowerBound + 1_000, ids.lowerBound + 2_000])
        #expect(try store.readings().map(\.objectID.rowID) == Array(ids))
        #expect(try store.stored(FetchRequest<Folder>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func theHooksEffectsComeAfterEveryRowOfEveryStream(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.context()
        var seen: [Int] = []
        var afterCommit: [Int] = []
        let hook: Reading.Hook = { rows, effects in
            let first = rows[0].value(for: \Reading.n) ?? -1
            effects.insert(Plan.self) { $0.path = "batch from \(first)" }
            effects.beforeCommit { reader in seen.append(try reader.count(for: FetchRequest<Reading>())) }
            effects.afterCommit { afterCommit.append((try? store.readings().count) ?? -1) }
        }
        context.userInfo["willInsertRows"] = hook
        try context.insertRows(Reading.self, count: 1_500, batchSize: 1_000) { i, row in row[\.n] = i }
        try context.insertRows(Reading.self, count: 500, batchSize: 1_000) { i, row in row[\.n] = 1_500 + i }
        try context.save()

        #expect(seen == [2_000, 2_000, 2_000])  // each check saw every row
        #expect(afterCommit == [2_000, 2_000, 2_000])
        #expect(
            try store.stored(FetchRequest<Plan>(sortBy: [.init(\.path)])).map(\.path) == [
                "batch from 0", "batch from 1000", "batch from 1500",
            ])
    }

    @Test(arguments: StoreKind.allCases) func streamsAreWrittenInTheOrderTheyWereAdded(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.context()
        let batches = Batches()
        record(context, into: batches) { 0 }
        let first = try context.insertRows(Reading.self, count: 3, batchSize: 2) { i, row in row[\.n] = i }
        let second = try context.insertRows(
            Reading.self, count: 2, batchSize: 1_000, streaming: { i, row in row[\.n] = 100 + i })
        try context.save()
        #expect(batches.values == [[0, 1], [2], [100, 101]])
        #expect(batches.ids == [Array(first.prefix(2)), [first.last!], Array(second)])
    }

    /// Rows of both forms are one kind of change: written, and handed to the hook, in the
    /// order they were added, inside the transaction.
    @Test(arguments: StoreKind.allCases) func rowsOfBothFormsAreWrittenInTheOrderTheyWereAdded(_ kind: StoreKind) throws
    {
        let store = try Store(kind)
        let context = store.context()
        var inTransaction: [Int] = []
        let hook: Reading.Hook = { rows, effects in
            let first = rows.first?.value(for: \Reading.n) ?? -1
            effects.beforeCommit { reader in
                // Planned in the transaction: the rows written so far are visible to it.
                inTransaction.append(try reader.count(for: FetchRequest<Reading>()))
            }
            inTransaction.append(first)
        }
        context.userInfo["willInsertRows"] = hook
        let streamed = try context.insertRows(
            Reading.self, count: 2, batchSize: 1_000, streaming: { i, row in row[\.n] = 100 + i })
        let made = try context.insertRows(Reading.self, count: 2) { i, row in row[\.n] = 200 + i }
        let again = try context.insertRows(Reading.self, count: 1, batchSize: 5) { i, row in row[\.n] = 300 + i }
        try context.save()
        // The hook saw the streamed rows, then the rows made at the call, then the last stream;
        // the three beforeCommit checks ran after all five rows were written.
        #expect(inTransaction == [100, 200, 300, 5, 5, 5])
        #expect(try store.readings().map(\.objectID.rowID) == Array(streamed) + made.map(\.rowID) + Array(again))
    }

    @Test(arguments: StoreKind.allCases) func rollbackAndResetDropTheStream(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.context()
        var configured = 0
        try context.insertRows(Reading.self, count: 10, batchSize: 1_000, streaming: { _, _ in configured += 1 })
        #expect(context.hasChanges)
        context.rollback()
        #expect(!context.hasChanges)
        try context.save()

        try context.insertRows(Reading.self, count: 10, batchSize: 1_000, streaming: { _, _ in configured += 1 })
        context.reset()
        #expect(!context.hasChanges)
        try context.save()
        #expect(configured == 0)
        #expect(try store.readings().isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func aRowMustNotPointAtAnObjectTheSaveDeletes(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "going"
        try context.save()
        let ids = try context.insertRows(Reading.self, count: 3, batchSize: 2) { i, row in
            row[\.folder] = i == 2 ? folder.objectID : nil
        }
        context.delete(folder)
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        let row = ManagedObjectID(entityName: "Reading", rowID: ids.lowerBound + 2)
        #expect(error?.code == .validation)
        #expect(error?.message == "\(row).folder points at \(folder.objectID), which is being deleted")
        #expect(error?.objectIDs == [row])
        #expect(try store.stored(FetchRequest<Folder>()).count == 1)
        #expect(try store.readings().isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func misuseAndEmptyStreams(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let context = store.context()
        var configured = 0
        let child = context.newChildContext()
        let error = #expect(throws: PersistenceError.self) {
            try child.insertRows(Reading.self, count: 1, batchSize: 1_000, streaming: { _, _ in configured += 1 })
        }
        #expect(error?.code == .misuse)
        #expect(error?.message == "Rows are written to the store; insert them in a context without a parent")
        #expect(!child.hasChanges)

        let none: Range<Int64> = try context.insertRows(
            Reading.self, count: 0, batchSize: 1_000, streaming: { _, _ in configured += 1 })
        #expect(none.isEmpty)
        #expect(!context.hasChanges)

        let zero = #expect(throws: PersistenceError.self) {
            try context.insertRows(Reading.self, count: 1, batchSize: 0) { _, _ in configured += 1 }
        }
        #expect(zero?.code == .misuse)
        #expect(!context.hasChanges)

        let late: Reading.Hook = { _, _ in
            try context.insertRows(Reading.self, count: 1, batchSize: 1_000, streaming: { _, _ in configured += 1 })
        }
        context.userInfo["willInsertRows"] = late
        try context.insertRows(Reading.self, count: 1, batchSize: 1_000, streaming: { _, _ in })
        let during = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(during?.message == "insertRows was called during a save (from a save hook); add rows before save()")
        #expect(configured == 0)
        #expect(try store.readings().isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func theNotificationNamesTheRowsByRange(_ kind: StoreKind) async throws {
        let store = try Store(kind)
        let context = store.context("importer")
        let notifications = store.container.saveNotifications()
        let folder = Folder(context: context)
        folder.name = "imports"
        let first = try context.insertRows(
            Reading.self, count: 1_500, batchSize: 1_000, streaming: { i, row in row[\.n] = i })
        let second = try context.insertRows(
            Reading.self, count: 2, batchSize: 1_000, streaming: { i, row in row[\.n] = i })
        let notes = try context.insertRows(Note.self, count: 3, batchSize: 1_000, streaming: { _, _ in })
        try context.save()

        var iterator = notifications.makeAsyncIterator()
        let note = try #require(await iterator.next())
        #expect(note.insertedObjectIDs == [folder.objectID])  // no ID per row
        #expect(note.insertedRowRanges == ["Reading": [first, second], "Note": [notes]])
        #expect(note.contextName == "importer")
        var without = note
        without.insertedRowRanges = [:]
        #expect(without != note)
        #expect(SaveNotification(inserted: [], updated: [], deleted: []).insertedRowRanges.isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func aSaveThatRestartsWritesTheRowsOnce(_ kind: StoreKind) throws {
        let store = try Store(kind)
        let seed = store.context("seed")
        let folder = Folder(context: seed)
        folder.name = "v1"
        try seed.save()
        let other = store.context("other")
        try other.existingObject(with: folder.objectID, as: Folder.self).name = "from other"
        let context = store.context()
        context.mergePolicy = .mergeByPropertyObjectTrump
        let mine = try context.existingObject(with: folder.objectID, as: Folder.self)
        try other.save()

        mine.name = "mine"
        let batches = Batches()
        record(context, into: batches) { 0 }
        let ids = try context.insertRows(Reading.self, count: 3, batchSize: 2) { i, row in row[\.n] = i }
        try context.save()  // a conflict, resolved by the policy: the save runs again
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["mine"])
        #expect(try store.readings().map(\.objectID.rowID) == Array(ids))
        #expect(batches.values.last == [2])
    }
}
