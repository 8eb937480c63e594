import Foundation
@_spi(Testing) import Persistence
import Testing

@Suite struct BatchTests {
    @Test(arguments: StoreKind.allCases) func insertedRowsGetTheirIDsAndSkipAwakeFromInsert(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try context.insertRows(Note.self, count: 100) { i, row in
            row[\.title] = "n\(i)"
            row[\.priority] = i % 3
        }
        try context.save()
        #expect(ids.count == 100)
        #expect(Set(ids).count == 100)
        #expect(store.log.events.isEmpty)
        #expect(try context.count(for: FetchRequest<Note>(predicate: \.priority == 2)) == 33)
        let inserted = try context.existingObject(with: ids[5], as: Note.self)
        #expect(inserted.title == "n5")
        // IDs continue after the batch.
        let next = Note(context: context)
        #expect(next.objectID.rowID > ids.last!.rowID)
    }

    // MARK: - Rows in a save

    @Test(arguments: StoreKind.allCases) func insertedRowsCommitWithTheContextsOwnChangesInOneTransaction(
        _ kind: StoreKind
    ) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "inbox"
        let old = Note(context: context)
        try context.save()
        store.log.clear()

        let ids = try context.insertRows(Note.self, count: 3) { i, row in
            row[\.title] = "row \(i)"
            row[\.folder] = i == 1 ? folder.objectID : nil
        }
        #expect(ids.map(\.rowID) == [old.objectID.rowID + 1, old.objectID.rowID + 2, old.objectID.rowID + 3])
        #expect(context.hasChanges)
        #expect(try store.stored(FetchRequest<Note>()).count == 1)  // nothing before the save
        context.delete(old)
        let later = Note(context: context)  // its ID comes after the rows'
        later.title = "object"
        #expect(later.objectID.rowID > ids[2].rowID)
        try context.save()
        let events = store.log.events

        let reader = store.context("reader")
        let stored = try reader.fetch(FetchRequest<Note>(sortBy: [.init(\.title)]))
        #expect(stored.map(\.title) == ["object", "row 0", "row 1", "row 2"])
        #expect(stored.map(\.objectID) == [later.objectID] + ids)
        #expect(stored[2].folder?.name == "inbox")
        #expect(stored[1].folder == nil)
        // No object stood for the rows: no hook of theirs ran.
        #expect(events.contains("willSave \(later.objectID) @test"))
        #expect(!events.contains { event in ids.contains { event.contains("\($0) ") } })
        #expect(!context.hasChanges)
        try context.save()  // nothing left to write
        #expect(try store.stored(FetchRequest<Note>()).count == 4)
    }

    @Test(arguments: StoreKind.allCases) func theEntityHookSeesEveryRowAndCanRefuseTheSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let kept = Doc(context: context)
        kept.path = "kept"
        try context.save()
        try context.insertRows(Doc.self, count: 3) { i, row in row[\.path] = ["a", "", "c"][i] }
        context.delete(kept)

        #expect(throws: ValidationMessage.self) { try context.save() }
        #expect(store.log.events.contains("willInsertRows a,,c"))
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["kept"])  // neither rows nor deletion
        #expect(try store.stored(FetchRequest<Plan>()).isEmpty)

        context.rollback()  // drops the rows, undoes the deletion
        #expect(!context.hasChanges)
        try context.save()
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["kept"])
    }

    @Test(arguments: StoreKind.allCases) func rowsOfAFailedCommitAreWrittenByTheNextSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        var refuses = true
        let check: (TransactionReader) throws -> Void = { reader in
            #expect(try reader.count(for: FetchRequest<Doc>()) == 2)  // the rows are in the transaction
            if refuses { throw ValidationMessage("not yet") }
        }
        context.userInfo["beforeCommit"] = check
        let ids = try context.insertRows(Doc.self, count: 2) { i, row in row[\.path] = "doc \(i)" }
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message.hasSuffix(": not yet") == true, "\(String(describing: error))")
        #expect(try store.stored(FetchRequest<Doc>()).isEmpty)
        #expect(context.hasChanges)

        refuses = false
        try context.save()
        #expect(try store.stored(FetchRequest<Doc>(sortBy: [.init(\.path)])).map(\.objectID) == ids)
    }

    @Test(arguments: StoreKind.allCases) func rowsAndObjectChangesAreRefusedTogetherBeforeTheCommit(_ kind: StoreKind)
        throws
    {
        let store = try TestStore(kind)
        let context = store.context()
        let refusal: (TransactionReader) throws -> Void = { _ in throw ValidationMessage("refused") }
        context.userInfo["beforeCommit"] = refusal
        Checked(context: context).label = "object"
        try context.insertRows(Doc.self, count: 2) { i, row in row[\.path] = "row \(i)" }
        #expect(throws: PersistenceError.self) { try context.save() }
        #expect(try store.stored(FetchRequest<Checked>()).isEmpty)
        #expect(try store.stored(FetchRequest<Doc>()).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func savedRowsAreAnnouncedAndResetDropsUnsavedOnes(_ kind: StoreKind)
        async throws
    {
        let store = try TestStore(kind)
        let context = store.context()
        let notifications = store.container.saveNotifications()
        let ids = try context.insertRows(Note.self, count: 2) { i, row in row[\.title] = "n\(i)" }
        try context.save()
        var iterator = notifications.makeAsyncIterator()
        let note = try #require(await iterator.next())
        #expect(note.insertedObjectIDs == Set(ids))

        try context.insertRows(Note.self, count: 3) { _, row in row[\.title] = "dropped" }
        context.reset()
        #expect(!context.hasChanges)
        try context.save()
        #expect(try store.stored(FetchRequest<Note>()).count == 2)
    }

    @Test(arguments: StoreKind.allCases) func aRowMustNotPointAtAnObjectTheSaveDeletes(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "going"
        try context.save()
        let ids = try context.insertRows(Note.self, count: 1) { _, row in row[\.folder] = folder.objectID }
        context.delete(folder)
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .validation)
        #expect(error?.message == "\(ids[0]).folder points at \(folder.objectID), which is being deleted")
        #expect(try store.stored(FetchRequest<Folder>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func rowsCannotBeAddedFromASaveHook(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let addRow: (TransactionReader) throws -> Void = { _ in
            try context.insertRows(Note.self, count: 1) { _, row in row[\.title] = "late" }
        }
        context.userInfo["beforeCommit"] = addRow
        Checked(context: context).label = "x"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .misuse)
        #expect(error?.message == "insertRows was called during a save (from a save hook); add rows before save()")
        context.userInfo["beforeCommit"] = nil
    }

    @Test(arguments: StoreKind.allCases) func onlyAContextWithoutAParentTakesRows(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let child = store.child(of: store.context())
        let error = #expect(throws: PersistenceError.self) {
            try child.insertRows(Note.self, count: 1) { _, row in row[\.title] = "x" }
        }
        #expect(error?.code == .misuse)
        #expect(error?.message == "Rows are written to the store; insert them in a context without a parent")
    }

    @Test(arguments: StoreKind.allCases) func batchDeleteReturnsIDsAndCallsTheDeletionHook(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let prefix = UUID().uuidString
        for name in ["a", "b", "c"] { Doc(context: context).path = "\(prefix)/\(name)" }
        try context.save()
        let result = try context.batchDelete(FetchRequest<Doc>(predicate: \.path != "\(prefix)/b"))
        #expect(result.deletedObjectIDs.map(\.description).sorted() == ["Doc 1", "Doc 3"])
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["\(prefix)/b"])
        #expect(
            try store.stored(FetchRequest<Plan>(sortBy: [.init(\.path)])).map(\.path) == ["\(prefix)/a", "\(prefix)/c"])
        #expect(
            BatchLog.shared.events.filter { $0.contains(prefix) } == [
                "afterCommit \(prefix)/a", "afterCommit \(prefix)/c",
            ])
        // Objects already in memory are stale until the context merges the result.
        let stale = try #require(context.registeredObjects.first { ($0 as? Doc)?.path == "\(prefix)/a" })
        #expect(stale.managedObjectContext === context)
        context.mergeChanges(from: result)
        #expect(stale.managedObjectContext == nil)
        #expect(try context.fetch(FetchRequest<Doc>()).map(\.path) == ["\(prefix)/b"])
    }

    @Test(arguments: StoreKind.allCases) func batchDeleteAppliesDeleteRules(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "f"
        Note(context: context).folder = folder
        Note(context: context).folder = folder
        let sticker = Sticker(context: context)
        sticker.folder = folder
        let vault = Vault(context: context)
        Item(context: context).vault = vault
        try context.save()

        let result = try context.batchDelete(FetchRequest<Folder>())
        #expect(result.deletedObjectIDs.map(\.description).sorted() == ["Folder 1", "Note 1", "Note 2"])
        #expect(result.updatedObjectIDs == [sticker.objectID])
        #expect(try store.stored(FetchRequest<Sticker>())[0].folder == nil)

        let error = #expect(throws: PersistenceError.self) { try context.batchDelete(FetchRequest<Vault>()) }
        #expect(error?.message == "Vault 1 cannot be deleted: its relationship 'items' is not empty (deny rule)")
        #expect(try store.stored(FetchRequest<Vault>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func aFailedBatchDeleteWritesNothingAndRunsNoAfterCommitWork(_ kind: StoreKind)
        throws
    {
        let store = try TestStore(kind)
        let context = store.context()
        let prefix = UUID().uuidString
        Doc(context: context).path = "\(prefix)/x"
        try context.save()
        struct Injected: Error {}
        store.container.failNextCommit(with: Injected())
        #expect(throws: (any Error).self) { try context.batchDelete(FetchRequest<Doc>()) }
        #expect(try store.stored(FetchRequest<Doc>()).count == 1)
        #expect(try store.stored(FetchRequest<Plan>()).isEmpty)
        #expect(BatchLog.shared.events.filter { $0.contains(prefix) }.isEmpty)
    }
}
