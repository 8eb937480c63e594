import Foundation
import Persistence
import Testing

@Suite struct MergeAndConflictTests {
    /// A store with one note read by two contexts.
    func twoReaders(_ kind: StoreKind = .sqlite) throws -> (
        TestStore, ManagedObjectContext, Note, ManagedObjectContext, Note
    ) {
        let store = try TestStore(kind)
        let seed = store.context("seed")
        let note = Note(context: seed)
        note.title = "v1"
        try seed.save()
        let a = store.context("a")
        let b = store.context("b")
        let noteA = try a.existingObject(with: note.objectID, as: Note.self)
        let noteB = try b.existingObject(with: note.objectID, as: Note.self)
        return (store, a, noteA, b, noteB)
    }

    @Test(arguments: StoreKind.allCases) func mergeChangesBringsAnotherContextUpToDateKeepingItsOwnChanges(
        _ kind: StoreKind
    ) async throws {
        let (store, a, noteA, b, noteB) = try twoReaders(kind)
        let notifications = store.container.saveNotifications()
        noteA.title = "from a"
        try a.save()
        var iterator = notifications.makeAsyncIterator()
        let notification = try #require(await iterator.next())
        #expect(notification.updatedObjectIDs == [noteA.objectID])
        #expect(notification.contextName == "a")
        noteB.body = "from b"
        b.mergeChanges(from: notification)
        #expect(noteB.title == "from a")
        #expect(noteB.body == "from b")
        try b.save()  // merged: no conflict
        let stored = try store.stored(FetchRequest<Note>())[0]
        #expect(stored.title == "from a" && stored.body == "from b")
    }

    @Test(arguments: StoreKind.allCases) func automaticMergeOnTheContextsQueue(_ kind: StoreKind) throws {
        let (_, a, noteA, b, noteB) = try twoReaders(kind)
        b.automaticallyMergesChangesFromParent = true
        noteA.title = "auto"
        try a.save()
        // The merge was queued on b's queue during a's save; it runs before this.
        let title = b.performAndWait { noteB.title }
        #expect(title == "auto")
    }

    @Test(arguments: StoreKind.allCases) func deletedElsewhereLeavesTheContextOnMerge(_ kind: StoreKind) throws {
        let (_, a, noteA, b, noteB) = try twoReaders(kind)
        a.delete(noteA)
        try a.save()
        b.mergeChanges(from: SaveNotification(inserted: [], updated: [], deleted: [noteB.objectID]))
        #expect(noteB.managedObjectContext == nil)
        #expect(try b.fetch(FetchRequest<Note>()).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func conflictingSaveIsRefusedByDefaultNamingTheObject(_ kind: StoreKind) throws
    {
        let (store, a, noteA, b, noteB) = try twoReaders(kind)
        noteA.title = "a wins the race"
        try a.save()
        noteB.title = "b is late"
        let error = #expect(throws: PersistenceError.self) { try b.save() }
        #expect(error?.code == .conflict)
        #expect(
            error?.message
                == "Could not save: Note 1 changed in the store since this context read it; merge the changes "
                + "(refresh(_:mergeChanges:)) or choose a merge policy")
        #expect(error?.objectIDs == [noteB.objectID])
        #expect(noteB.isUpdated && noteB.title == "b is late")
        #expect(try store.stored(FetchRequest<Note>())[0].title == "a wins the race")
    }

    /// A save of many changed objects (one statement on PostgreSQL) names exactly the one
    /// another context changed meanwhile, and writes none of them.
    @Test(arguments: StoreKind.allCases) func aConflictAmongManyUpdatesNamesItsObjectAndWritesNone(_ kind: StoreKind)
        throws
    {
        let store = try TestStore(kind)
        let seed = store.context("seed")
        let notes = (0..<50).map { i in
            let note = Note(context: seed)
            note.title = "v\(i)"
            return note
        }
        try seed.save()
        let a = store.context("a")
        let b = store.context("b")
        let mine = try notes.map { try b.existingObject(with: $0.objectID, as: Note.self) }
        try a.existingObject(with: notes[25].objectID, as: Note.self).title = "a was first"
        try a.save()
        for note in mine { note.title += " by b" }
        let error = #expect(throws: PersistenceError.self) { try b.save() }
        #expect(error?.code == .conflict)
        #expect(error?.objectIDs == [notes[25].objectID])
        let stored = try store.stored(FetchRequest<Note>()).map(\.title)
        #expect(stored == (0..<50).map { $0 == 25 ? "a was first" : "v\($0)" })
    }

    @Test(arguments: [
        (MergePolicy.mergeByPropertyStoreTrump, "from a", "from b"),
        (MergePolicy.mergeByPropertyObjectTrump, "b title", "from b"),
        (MergePolicy.overwrite, "b title", "from b"),
        (MergePolicy.rollback, "from a", nil),
    ])
    func mergePolicies(policy: MergePolicy, title: String, body: String?) throws {
        let (store, a, noteA, b, noteB) = try twoReaders()
        noteA.title = "from a"
        noteA.priority = 5
        try a.save()
        noteB.title = "b title"
        noteB.body = "from b"
        b.mergePolicy = policy
        try b.save()
        let stored = try store.stored(FetchRequest<Note>())[0]
        #expect(stored.title == title)
        #expect(stored.body == body)
        // A property only the store changed survives every policy but overwrite.
        #expect(stored.priority == (policy == .overwrite ? 0 : 5))
    }

    @Test(arguments: StoreKind.allCases) func refreshWithoutMergeDropsChanges(_ kind: StoreKind) throws {
        let (_, a, noteA, b, noteB) = try twoReaders(kind)
        noteA.title = "new"
        try a.save()
        noteB.body = "lost"
        b.refresh(noteB, mergeChanges: false)
        #expect(!b.hasChanges)
        #expect(noteB.title == "new" && noteB.body == nil)
    }
}
