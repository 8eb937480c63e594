import Foundation
import Persistence
import Testing

@Test(arguments: StoreKind.allCases) func rollbackAfterDeleteRestoresTheObject(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    let folder = Folder(context: context)
    folder.name = "Inbox"
    let note = Note(context: context)
    note.folder = folder
    try context.save()
    store.log.clear()

    context.delete(folder)
    #expect(note.isDeleted)  // cascade
    context.rollback()
    #expect(!folder.isDeleted && !note.isDeleted)
    #expect(!context.hasChanges)
    #expect(folder.name == "Inbox")
    #expect(folder.notes == [note])
    #expect(store.log.count("undoDeletion Folder 1 @test") == 1)
    #expect(store.log.count("undoDeletion Note 1 @test") == 1)
    try context.save()
    #expect(try store.stored(FetchRequest<Note>()).count == 1)
}

@Test(arguments: StoreKind.allCases) func rollbackForgetsInsertsAndRestoresChangedValues(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    let note = Note(context: context)
    note.title = "saved"
    try context.save()
    let fresh = Note(context: context)
    note.title = "changed"
    note.setPrimitiveValue(3, for: \.priority)
    context.rollback()
    #expect(note.title == "saved")
    #expect(note.priority == 0)
    #expect(fresh.managedObjectContext == nil)
    #expect(try context.fetch(FetchRequest<Note>()) == [note])
}

@Test(arguments: StoreKind.allCases) func deletingAnUnsavedObjectForgetsIt(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    let note = Note(context: context)
    let kept = Note(context: context)
    context.delete(note)
    #expect(context.insertedObjects == [kept] && context.deletedObjects.isEmpty)
    try context.save()
    #expect(store.log.count("willSave Note 2 @test") == 1)
    #expect(note.managedObjectContext == nil)
    #expect(try store.stored(FetchRequest<Note>()).map(\.objectID) == [kept.objectID])
    #expect(store.log.count("willSave Note 1 @test") == 0)
}
