import Foundation
import Persistence
import Testing

@Test(arguments: StoreKind.allCases) func aChildSaveReachesOnlyTheParent(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let parent = store.context("parent")
    let child = store.child(of: parent)
    let note = Note(context: child)
    note.title = "draft"
    try child.save()
    #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    #expect(parent.insertedObjects.map(\.objectID) == [note.objectID])
    try parent.save()
    #expect(try store.stored(FetchRequest<Note>()).map(\.title) == ["draft"])
}

@Test(arguments: StoreKind.allCases) func childSaveThenParentRollbackWritesNothing(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let parent = store.context("parent")
    let folder = Folder(context: parent)
    folder.name = "Inbox"
    try parent.save()

    let child = store.child(of: parent)
    let edited = try child.existingObject(with: folder.objectID, as: Folder.self)
    edited.name = "Renamed"
    Note(context: child).folder = edited
    try child.save()
    #expect(folder.name == "Renamed")  // the parent sees the child's save
    #expect(folder.notes.count == 1)
    parent.rollback()
    #expect(folder.name == "Inbox")
    #expect(folder.notes.isEmpty)
    try parent.save()
    #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["Inbox"])
    #expect(try store.stored(FetchRequest<Note>()).isEmpty)
}

@Test(arguments: StoreKind.allCases) func discardingAChildDiscardsTheEdit(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let parent = store.context("parent")
    let note = Note(context: parent)
    note.title = "kept"
    try parent.save()
    do {
        let child = store.child(of: parent)
        try child.existingObject(with: note.objectID, as: Note.self).title = "thrown away"
    }
    #expect(note.title == "kept")
    #expect(!parent.hasChanges)
}

@Test(arguments: StoreKind.allCases) func aChildSeesItsParentsUnsavedChanges(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let parent = store.context("parent")
    let saved = Note(context: parent)
    saved.title = "saved"
    try parent.save()
    let pending = Note(context: parent)
    pending.title = "pending"
    saved.title = "renamed"
    let child = store.child(of: parent)
    let titles = try child.fetch(FetchRequest<Note>(sortBy: [.init(\.title)])).map(\.title)
    #expect(titles == ["pending", "renamed"])
    #expect(try child.count(for: FetchRequest<Note>(predicate: \.title == "saved")) == 0)
}

@Test(arguments: StoreKind.allCases) func discardingAContextWithUnsavedDeletionsReportsThem(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let parent = store.context("parent")
    let discarded = HookLog()
    parent.discardedDeletionsHandler = { ids in
        for id in ids.sorted() { discarded.record("\(id)") }
    }
    let folder = Folder(context: parent)
    Note(context: parent).folder = folder
    try parent.save()
    do {
        let child = store.child(of: parent)  // inherits the handler
        child.delete(try child.existingObject(with: folder.objectID))
        #expect(store.log.count("prepareForDeletion Note 1 @child") == 1)  // cascade
    }  // thrown away unsaved
    #expect(discarded.events == ["Folder 1", "Note 1"])
    #expect(!parent.hasChanges)
    // A saved or rolled-back deletion is not reported as discarded.
    do {
        let child = store.child(of: parent)
        child.delete(try child.existingObject(with: folder.objectID))
        child.rollback()
    }
    #expect(discarded.events.count == 2)
}
