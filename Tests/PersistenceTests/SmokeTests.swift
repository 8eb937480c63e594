import Foundation
import Persistence
import Testing

@Test(arguments: StoreKind.allCases) func insertSaveFetch(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    let folder = Folder(context: context)
    folder.name = "Inbox"
    let note = Note(context: context)
    note.title = "Groceries"
    note.folder = folder
    #expect(note.isInserted)
    #expect(folder.notes == [note])
    try context.save()
    #expect(!note.isInserted)
    let fresh = store.context("fresh")
    let notes = try fresh.fetch(FetchRequest<Note>(predicate: \.title == "Groceries"))
    #expect(notes.count == 1)
    #expect(notes[0].title == "Groceries")
    #expect(notes[0].folder?.name == "Inbox")
    #expect(notes[0].objectID == note.objectID)
    #expect(notes[0].created > Date(timeIntervalSince1970: 1_000_000))
}
