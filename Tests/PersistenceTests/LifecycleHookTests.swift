import Foundation
import Persistence
import Testing

/// Each lifecycle hook of ManagedObject fires exactly when, and as often as, it should.
@Suite struct LifecycleHookTests {
    @Test(arguments: StoreKind.allCases) func insertThenSaveCallsAwakeFromInsertOnceThenWillSaveAndDidSave(
        _ kind: StoreKind
    ) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let note = Note(context: context)
        #expect(store.log.events == ["awakeFromInsert Note 1 @test"])
        note.title = "a"
        try context.save()
        note.title = "b"
        try context.save()
        #expect(
            store.log.events == [
                "awakeFromInsert Note 1 @test", "willSave Note 1 @test", "didSave Note 1 @test",
                "willSave Note 1 @test", "didSave Note 1 @test",
            ])
    }

    @Test(arguments: StoreKind.allCases) func awakeFromFetchRunsEachTimeTheObjectIsMaterialised(_ kind: StoreKind)
        throws
    {
        let store = try TestStore(kind)
        let writer = store.context("writer")
        Note(context: writer).title = "a"
        try writer.save()
        let reader = store.context("reader")
        let note = try reader.fetch(FetchRequest<Note>())[0]
        _ = try reader.fetch(FetchRequest<Note>())  // already registered: not materialised again
        #expect(store.log.count("awakeFromFetch Note 1 @reader") == 1)
        reader.refresh(note, mergeChanges: false)
        #expect(store.log.events.suffix(2) == ["willTurnIntoFault Note 1 @reader", "didTurnIntoFault Note 1 @reader"])
        #expect(note.isFault)
        #expect(note.title == "a")  // fires the fault
        #expect(store.log.count("awakeFromFetch Note 1 @reader") == 2)
    }

    @Test(arguments: StoreKind.allCases) func prepareForDeletionRunsAtDeleteForTheObjectAndEveryCascadeTarget(
        _ kind: StoreKind
    ) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        let notes = [Note(context: context), Note(context: context)]
        for note in notes { note.folder = folder }
        try context.save()
        store.log.clear()
        context.delete(folder)
        #expect(
            store.log.events == [
                "prepareForDeletion Folder 1 @test", "prepareForDeletion Note 1 @test",
                "prepareForDeletion Note 2 @test",
            ])
        #expect(notes.allSatisfy { $0.isDeleted })
        store.log.clear()
        try context.save()
        for id in ["Folder 1", "Note 1", "Note 2"] {
            #expect(store.log.count("willSave \(id) @test") == 1)
            #expect(store.log.count("didSave \(id) @test") == 1)
            #expect(store.log.count("willTurnIntoFault \(id) @test") == 1)
            #expect(store.log.count("didTurnIntoFault \(id) @test") == 1)
        }
        #expect(store.log.count("prepareForDeletion Folder 1 @test") == 0)
        #expect(folder.managedObjectContext == nil)
        #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func hooksInAChildContextAndItsParent(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let parent = store.context("parent")
        Note(context: parent).title = "a"
        try parent.save()
        store.log.clear()

        let child = store.child(of: parent)
        let inserted = Note(context: child)
        inserted.title = "new"
        let existing = try child.fetch(FetchRequest<Note>(predicate: \.title == "a"))[0]
        child.delete(existing)
        try child.save()
        #expect(
            store.log.events == [
                "awakeFromInsert Note 2 @child", "awakeFromFetch Note 1 @child", "prepareForDeletion Note 1 @child",
                "willSave Note 2 @child", "willSave Note 1 @child",
                // the parent's instance of Note 1 is deleted by the child's save
                "prepareForDeletion Note 1 @parent",
                "didSave Note 2 @child", "didSave Note 1 @child",
                "willTurnIntoFault Note 1 @child", "didTurnIntoFault Note 1 @child",
            ])
        store.log.clear()
        try parent.save()
        // awakeFromInsert ran once in the object's life: in the child.
        #expect(store.log.count("awakeFromInsert Note 2 @parent") == 0)
        #expect(store.log.count("willSave Note 2 @parent") == 1)
        #expect(store.log.count("willSave Note 1 @parent") == 1)
        #expect(store.log.count("didSave Note 1 @parent") == 1)
        #expect(try store.stored(FetchRequest<Note>()).map(\.title) == ["new"])
    }

    @Test(arguments: StoreKind.allCases) func resetTurnsEveryLoadedObjectIntoAFault(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let note = Note(context: context)
        try context.save()
        store.log.clear()
        context.reset()
        #expect(store.log.events == ["willTurnIntoFault Note 1 @test", "didTurnIntoFault Note 1 @test"])
        #expect(note.managedObjectContext == nil)
        #expect(context.registeredObjects.isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func willSaveWithPrimitiveSetterSavesOnceAndTheValueIsWritten(
        _ kind: StoreKind
    ) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let stamp = Stamp(context: context)
        stamp.count = 1
        try context.save()
        #expect(store.log.events.filter { $0.hasPrefix("willSave Stamp 1") }.count == 1)
        #expect(try store.stored(FetchRequest<Stamp>())[0].saves == 1)
        // The primitive change did not leave the object dirty.
        #expect(!context.hasChanges)
    }

    @Test(arguments: StoreKind.allCases) func validationErrorsOfOneSaveAreReportedTogether(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let a = Note(context: context)
        a.title = "invalid"
        let b = Note(context: context)
        b.title = "invalid"
        Note(context: context).title = "fine"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .validation)
        #expect(
            error?.message
                == "2 objects refused to save: Note 1: title must not be 'invalid'; Note 2: title must not be 'invalid'"
        )
        #expect(error?.objectIDs == [a.objectID, b.objectID])
        #expect(error?.underlyingErrors.count == 2)
        #expect(store.log.events.filter { $0.hasPrefix("willSave") }.isEmpty)
    }
}
