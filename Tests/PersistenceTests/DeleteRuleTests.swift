import Foundation
import Persistence
import Testing

@Test(arguments: StoreKind.allCases) func cascadeDeletesMembersNullifyClearsThem(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
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

@Test(arguments: StoreKind.allCases) func denyRefusesWhileMembersRemainAndAllowsOnceEmpty(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
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

@Test(arguments: StoreKind.allCases) func settingAToManyRepointsTheInverses(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
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

@Test(arguments: StoreKind.allCases) func deleteRulesCoverMembersAnotherContextAddedAfterDelete(_ kind: StoreKind)
    async throws
{
    let store = try TestStore(kind)
    let seed = store.context("seed")
    let folder = Folder(context: seed)
    let vault = Vault(context: seed)
    try seed.save()

    let a = store.context("a")
    a.delete(try a.existingObject(with: folder.objectID))  // its cascade and nullify run now: no members yet
    let b = store.context("b")
    let late = Note(context: b)
    late.folder = try b.existingObject(with: folder.objectID, as: Folder.self)
    let sticker = Sticker(context: b)
    sticker.folder = late.folder
    try b.save()  // members arrive after a's delete()

    let notifications = store.container.saveNotifications()
    try a.save()
    // Completed inside a's transaction: the late note is cascade-deleted, the sticker cleared.
    #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    let stored = try store.stored(FetchRequest<Sticker>())
    #expect(stored.count == 1 && stored[0].folder == nil)
    var iterator = notifications.makeAsyncIterator()
    let note = try #require(await iterator.next())
    #expect(note.deletedObjectIDs == [folder.objectID, late.objectID])
    #expect(note.updatedObjectIDs == [sticker.objectID])

    // Deny: members that arrive after delete() still refuse the save.
    let c = store.context("c")
    c.delete(try c.existingObject(with: vault.objectID))
    let d = store.context("d")
    Item(context: d).vault = try d.existingObject(with: vault.objectID, as: Vault.self)
    try d.save()
    let error = #expect(throws: PersistenceError.self) { try c.save() }
    #expect(error?.message == "Vault 1 cannot be deleted: its relationship 'items' is not empty (deny rule)")
    #expect(try store.stored(FetchRequest<Vault>()).count == 1)
}
