import Foundation
@_spi(Testing) import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// A tree: deleting a branch deletes its children; a branch leaning on another loses that
/// link when the other goes. Its `willBatchDelete` plans `userInfo["replant"]` rows.
final class Branch: ManagedObject {
    @ToOne var parent: Branch?
    @ToMany(inverse: \Branch.parent, deleteRule: .cascade) var children: [Branch]
    @ToOne var leaning: Branch?
    @ToMany(inverse: \Branch.leaning) var leaners: [Branch]

    /// Plans a branch whose parent is `userInfo["replant"]`, when set: a hook that would
    /// give a deleted branch a new child each time its children are deleted.
    override class func willBatchDelete(_ rows: [ObjectSnapshot], effects: SaveEffects) throws {
        guard let parent = effects.userInfo["replant"] as? Branch else { return }
        effects.insert(Branch.self) { $0.setPrimitiveValue(parent, for: \.parent) }
    }
}

/// A store whose schema has ``Branch`` too.
private func branchStore(_ kind: StoreKind) throws -> (PersistentContainer, ManagedObjectContext) {
    let directory = try ScratchDirectory.make("persistence-tests")
    let container = try PersistentContainer.open(
        url: try kind.newStoreURL(in: directory), schema: try Schema(allEntities + [Branch.self]))
    return (container, container.newBackgroundContext(name: "test"))
}

@Suite struct RowDeletionTests {
    /// Saves one doc per path and returns their IDs.
    func docs(_ context: ManagedObjectContext, _ paths: [String]) throws -> [Int64] {
        let docs = paths.map { path in
            let doc = Doc(context: context)
            doc.path = path
            return doc
        }
        try context.save()
        return docs.map(\.objectID.rowID)
    }

    /// The IDs of `ids` after `after`, `size` at a time.
    func pages(of ids: [Int64], size: Int) -> (Int64) -> [Int64] {
        { after in Array(ids.filter { $0 > after }.prefix(size)) }
    }

    @Test(arguments: StoreKind.allCases) func theSaveDeletesThePagesWithTheContextsOtherChangesInOneTransaction(
        _ kind: StoreKind
    ) async throws {
        let store = try TestStore(kind)
        let context = store.context()
        let prefix = UUID().uuidString
        let ids = try docs(context, (0..<5).map { "\(prefix)/\($0)" })
        let notifications = store.container.saveNotifications()
        let doomed = [ids[0], ids[1], ids[3], ids[4]]
        var asked: [Int64] = []
        let page = pages(of: doomed, size: 2)
        try context.deleteRows(Doc.self) { after in
            asked.append(after)
            return page(after)
        }
        #expect(asked.isEmpty)  // nothing runs at the call
        #expect(context.hasChanges)
        Doc(context: context).path = "\(prefix)/new"
        try context.save()

        #expect(asked == [0, ids[1], ids[4]])
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["\(prefix)/2", "\(prefix)/new"])
        // The hook of each page planned its rows in the same transaction, and its after-commit work ran.
        let planned = (try store.stored(FetchRequest<Plan>())).map(\.path)
        #expect(planned == [0, 1, 3, 4].map { "\(prefix)/\($0)" })
        #expect(
            BatchLog.shared.events.filter { $0.contains(prefix) } == [0, 1, 3, 4].map { "afterCommit \(prefix)/\($0)" })

        var iterator = notifications.makeAsyncIterator()
        let note = try #require(await iterator.next())
        #expect(note.deletedRowRanges == ["Doc": [ids[0]..<ids[1] + 1, ids[3]..<ids[4] + 1]])
        #expect(note.deletedObjectIDs.isEmpty)  // no ID per row
        #expect(note.insertedRowRanges["Plan"].map { RowIDSet($0).count } == 4)
        #expect(note.insertedObjectIDs.map(\.entityName) == ["Doc"])
        #expect(!context.hasChanges)
    }

    @Test(arguments: StoreKind.allCases) func anIDWithoutARowIsPassedOver(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try docs(context, ["a", "b"])
        try context.deleteRows(Doc.self, pages: pages(of: [ids[0], 999], size: 10))
        try context.save()
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["b"])
    }

    @Test(arguments: StoreKind.allCases) func aFailedSaveKeepsTheDeletionsForTheNextSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let prefix = UUID().uuidString
        let ids = try docs(context, ["\(prefix)/a", "\(prefix)/b"])
        var asked: [Int64] = []
        let page = pages(of: ids, size: 1)
        try context.deleteRows(Doc.self) { after in
            asked.append(after)
            return page(after)
        }
        struct Injected: Error {}
        store.container.failNextCommit(with: Injected())
        #expect(throws: PersistenceError.self) { try context.save() }
        #expect(try store.stored(FetchRequest<Doc>()).count == 2)
        #expect(try store.stored(FetchRequest<Plan>()).isEmpty)
        #expect(BatchLog.shared.events.filter { $0.contains(prefix) }.isEmpty)  // no after-commit work
        #expect(context.hasChanges)

        asked = []
        try context.save()  // asked again from the start
        #expect(asked == [0, ids[0], ids[1]])
        #expect(try store.stored(FetchRequest<Doc>()).isEmpty)
        #expect(try store.stored(FetchRequest<Plan>()).count == 2)
    }

    @Test(arguments: StoreKind.allCases) func rollbackAndResetDropTheDeletions(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try docs(context, ["a"])
        try context.deleteRows(Doc.self, pages: pages(of: ids, size: 1))
        context.rollback()
        #expect(!context.hasChanges)
        try context.save()
        try context.deleteRows(Doc.self, pages: pages(of: ids, size: 1))
        context.reset()
        #expect(!context.hasChanges)
        try context.save()
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["a"])
    }

    @Test(arguments: StoreKind.allCases) func aPageThatThrowsFailsTheSaveWithItsError(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try docs(context, ["a", "b"])
        struct Unreadable: Error {}
        try context.deleteRows(Doc.self) { after in
            if after > 0 { throw Unreadable() }
            return [ids[0]]
        }
        #expect(throws: Unreadable.self) { try context.save() }
        #expect(try store.stored(FetchRequest<Doc>()).count == 2)  // the first page's deletion too
        #expect(try store.stored(FetchRequest<Plan>()).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func pagesMustListAscendingIDsAfterTheOneAskedFor(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try docs(context, ["a", "b"])
        try context.deleteRows(Doc.self) { after in after == 0 ? [ids[1], ids[0]] : [] }
        let backwards = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(backwards?.code == .misuse)
        #expect(
            backwards?.message
                == "The pages of deleteRows(Doc) must list IDs in ascending order, each page after the ID it is asked for (0); got 2...1"
        )
        context.rollback()
        // A page that repeats itself would never end.
        try context.deleteRows(Doc.self) { _ in [ids[0]] }
        let again = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(
            again?.message
                == "The pages of deleteRows(Doc) must list IDs in ascending order, each page after the ID it is asked for (1); got 1...1"
        )
        #expect(try store.stored(FetchRequest<Doc>()).count == 2)
    }

    @Test(arguments: StoreKind.allCases) func deleteRulesApplyAPageOfMembersAtATime(_ kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "f"
        let sticker = Sticker(context: context)
        sticker.folder = folder
        let notes = try context.insertRows(
            Note.self, count: 1_200, batchSize: 1_200, streaming: { _, row in row[\.folder] = folder.objectID })
        try context.save()
        let notifications = store.container.saveNotifications()
        try context.deleteRows(Folder.self, pages: pages(of: [folder.objectID.rowID], size: 1))
        try context.save()

        #expect(try store.stored(FetchRequest<Folder>()).isEmpty)
        #expect(try store.stored(FetchRequest<Note>()).isEmpty)  // cascade, over more than one page of members
        #expect(try store.stored(FetchRequest<Sticker>()).map(\.folder) == [nil])  // nullify
        var iterator = notifications.makeAsyncIterator()
        let note = try #require(await iterator.next())
        let f = folder.objectID.rowID
        #expect(note.deletedRowRanges == ["Folder": [f..<f + 1], "Note": [notes]])
        #expect(note.updatedObjectIDs == [sticker.objectID])
        #expect(folder.managedObjectContext == nil)  // the context's own object for the row left it
    }

    @Test(arguments: StoreKind.allCases) func aDenyRuleRefusesTheSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let vault = Vault(context: context)
        Item(context: context).vault = vault
        try context.save()
        try context.deleteRows(Vault.self, pages: pages(of: [vault.objectID.rowID], size: 1))
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message == "Vault 1 cannot be deleted: its relationship 'items' is not empty (deny rule)")
        #expect(try store.stored(FetchRequest<Vault>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func aRowOrObjectThatPointsAtADeletedRowIsRefused(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "f"
        try context.save()
        let gone = pages(of: [folder.objectID.rowID], size: 1)

        try context.deleteRows(Folder.self, pages: gone)
        let rows = try context.insertRows(
            Note.self, count: 1, batchSize: 1_000, streaming: { _, row in row[\.folder] = folder.objectID })
        let fromRow = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(fromRow?.code == .validation)
        #expect(fromRow?.message == "Note \(rows.lowerBound).folder points at Folder 1, which is being deleted")
        context.rollback()

        try context.deleteRows(Folder.self, pages: gone)
        let note = Note(context: context)
        note.folder = folder
        let fromObject = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(fromObject?.message == "\(note.objectID).folder points at Folder 1, which is being deleted")
        context.rollback()
        #expect(try store.stored(FetchRequest<Folder>()).count == 1)
        #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func anObjectUpdatedToPointAtADeletedRowIsRefused(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "f"
        let note = Note(context: context)
        try context.save()
        note.folder = folder
        try context.deleteRows(Folder.self, pages: pages(of: [folder.objectID.rowID], size: 1))
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message == "\(note.objectID).folder points at Folder 1, which is being deleted")
        context.rollback()
        #expect(try store.stored(FetchRequest<Note>()).map(\.folder) == [nil])
        #expect(try store.stored(FetchRequest<Folder>()).count == 1)
    }

    /// A cascade thousands deep: the work waits in a list, not on the stack.
    @Test(arguments: StoreKind.allCases) func aDeepCascadeDeletesEveryLevel(_ kind: StoreKind) throws {
        let (container, context) = try branchStore(kind)
        let root = Branch(context: context)
        try context.save()
        // Each row's parent is the row before it; the first's, the root. The rows are made
        // by the save, once their IDs are known.
        var first: Int64 = 0
        let rootID = root.objectID.rowID
        first = try context.insertRows(
            Branch.self, count: 5_000, batchSize: 1_000,
            streaming: { i, row in
                row[\.parent] = ManagedObjectID(entityName: "Branch", rowID: i == 0 ? rootID : first + Int64(i) - 1)
            }
        ).lowerBound
        try context.save()
        try context.deleteRows(Branch.self, pages: pages(of: [root.objectID.rowID], size: 1))
        try context.save()
        #expect(try container.newBackgroundContext().count(for: FetchRequest<Branch>()) == 0)
    }

    /// A hook that plans a row pointing at a row deleted by now is refused: a cascade whose
    /// hook gave its owner new members would never end.
    @Test(arguments: StoreKind.allCases) func aPlannedRowPointingAtADeletedRowIsRefused(_ kind: StoreKind) throws {
        let (container, context) = try branchStore(kind)
        let root = Branch(context: context)
        Branch(context: context).parent = root
        try context.save()
        context.userInfo["replant"] = root
        try context.deleteRows(Branch.self, pages: pages(of: [root.objectID.rowID], size: 1))
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .validation)
        #expect(error?.message.hasSuffix(".parent points at Branch 1, which is being deleted") == true)
        context.rollback()
        #expect(try container.newBackgroundContext().count(for: FetchRequest<Branch>()) == 2)
    }

    /// A row whose link a page cleared, and a later page deleted, is deleted, not updated.
    @Test(arguments: StoreKind.allCases) func aRowClearedThenDeletedIsOnlyDeleted(_ kind: StoreKind) async throws {
        let (container, context) = try branchStore(kind)
        let first = Branch(context: context)
        let second = Branch(context: context)
        second.leaning = first
        let third = Branch(context: context)
        third.leaning = first
        try context.save()
        let notifications = container.saveNotifications()
        try context.deleteRows(Branch.self, pages: pages(of: [first, second].map(\.objectID.rowID), size: 1))
        try context.save()
        var iterator = notifications.makeAsyncIterator()
        let note = try #require(await iterator.next())
        #expect(note.updatedObjectIDs == [third.objectID])
        #expect(note.deletedRowRanges == ["Branch": [1..<3]])
    }

    @Test(arguments: StoreKind.allCases) func aHooksErrorFailsTheSaveAsItIs(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try docs(context, ["a"])
        struct Refusal: Error {}
        context.userInfo["refuseBatchDelete"] = Refusal()
        try context.deleteRows(Doc.self, pages: pages(of: ids, size: 1))
        #expect(throws: Refusal.self) { try context.save() }
        #expect(throws: Refusal.self) { try context.batchDelete(FetchRequest<Doc>()) }
        #expect(try store.stored(FetchRequest<Doc>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func anotherContextMergesTheRangesOfDeletedRows(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let writer = store.context("writer")
        let ids = try docs(writer, ["a", "b", "c"])
        let reader = store.context("reader")
        let seen = try reader.fetch(FetchRequest<Doc>())
        #expect(seen.count == 3)
        try writer.deleteRows(Doc.self, pages: pages(of: [ids[0], ids[2]], size: 10))
        try writer.save()
        let note = SaveNotification(
            inserted: [], updated: [], deleted: [],
            deletedRowRanges: ["Doc": [ids[0]..<ids[0] + 1, ids[2]..<ids[2] + 1]])
        reader.mergeChanges(from: note)
        #expect(seen.map { $0.managedObjectContext != nil } == [false, true, false])
    }

    @Test(arguments: StoreKind.allCases) func onlyARootContextOutsideASaveDeletesRows(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let child = store.child(of: store.context())
        let error = #expect(throws: PersistenceError.self) { try child.deleteRows(Doc.self) { _ in [] } }
        #expect(error?.code == .misuse)
        #expect(error?.message == "Rows are written to the store; delete them in a context without a parent")

        let context = store.context()
        _ = try docs(context, ["a"])
        let deleteDuringSave: (TransactionReader) throws -> Void = { _ in
            try context.deleteRows(Doc.self) { _ in [] }
        }
        context.userInfo["beforeCommit"] = deleteDuringSave
        try context.insertRows(Doc.self, count: 1) { _, row in row[\.path] = "b" }
        let during = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(during?.message == "deleteRows was called during a save (from a save hook); delete rows before save()")
    }
}

@Suite struct RowIDSetTests {
    @Test func itHoldsWhatASetHoldsAsFewRanges() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var set = RowIDSet()
            var reference = Set<Int64>()
            for _ in 0..<Int.random(in: 0..<60, using: &generator) {
                let id = Int64.random(in: 1...80, using: &generator)
                if Bool.random(using: &generator) {
                    set.insert(id)
                    reference.insert(id)
                } else {
                    let end = id + Int64.random(in: 0...6, using: &generator)
                    set.insert(id..<end)
                    reference.formUnion(id..<end)
                }
            }
            #expect(Array(set) == reference.sorted())
            #expect(set.count == reference.count)
            #expect((0...90).allSatisfy { set.contains($0) == reference.contains($0) })
            // Sorted, disjoint and not touching: as few ranges as the IDs allow.
            #expect(zip(set.ranges, set.ranges.dropFirst()).allSatisfy { $0.upperBound < $1.lowerBound })
            #expect(set.ranges.allSatisfy { !$0.isEmpty })
        }
    }

    @Test func consecutiveIDsAreOneRange() {
        var set = RowIDSet()
        for id in Int64(1)...100_000 { set.insert(id) }
        set.insert(7)
        #expect(set.ranges == [1..<100_001])
        #expect(set.count == 100_000)
        var union = RowIDSet([5..<9])
        union.formUnion(RowIDSet([1..<3, 9..<12]))
        #expect(union.ranges == [1..<3, 5..<12])
    }
}
