import Foundation
import Persistence
import Testing

@Test func cascadeDeletesMembersNullifyClearsThem() throws {
    let store = try TestStore()
    let context = store.context()
    let folder = Folder(context: context)
    let note = Note(context: context)
    note.folder = folder
    let sticker = Sticker(context: context)
    sticker.folder = folder
    try context.save()

    context.delete(folder)
    #expect(note.isDeleted)  // cascade
    #expect(!sticker.isDeleted && sticker.folder == nil && sticker.isUpdated)  // nullify
    try context.save()
    #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    let stored = try store.stored(FetchRequest<Sticker>())
    #expect(stored.count == 1 && stored[0].folder == nil)
}

@Test func denyRefusesWhileMembersRemainAndAllowsOnceEmpty() throws {
    let store = try TestStore()
    let context = store.context()
    let vault = Vault(context: context)
    let item = Item(context: context)
    item.vault = vault
    try context.save()
    context.delete(vault)
    #expect(throws: PersistenceError.self) { try context.save() }
    context.rollback()
    context.delete(item)
    context.delete(vault)
    try context.save()
    #expect(try store.stored(FetchRequest<Vault>()).isEmpty)
}

@Test func settingAToManyRepointsTheInverses() throws {
    let store = try TestStore()
    let context = store.context()
    let folder = Folder(context: context)
    let a = Note(context: context)
    let b = Note(context: context)
    folder.notes = [a, b]
    #expect(a.folder === folder && b.folder === folder)
    folder.notes = [b]
    #expect(a.folder == nil)
    try context.save()
    let reader = store.context("reader")
    let stored = try reader.existingObject(with: folder.objectID, as: Folder.self)
    #expect(stored.notes.map(\.objectID) == [b.objectID])
}
