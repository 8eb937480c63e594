import Foundation
import Persistence
import Testing

@Test(arguments: StoreKind.allCases) func performBackgroundTaskRunsOnAFreshContext(_ kind: StoreKind) async throws {
    let store = try TestStore(kind)
    let id = try await store.container.performBackgroundTask { context in
        let note = Note(context: context)
        note.title = "background"
        try context.save()
        return note.objectID
    }
    let title = try await store.container.viewContext.perform {
        try store.container.viewContext.existingObject(with: id, as: Note.self).title
    }
    #expect(title == "background")
}

@Test(arguments: StoreKind.allCases) func concurrentBackgroundTasksAllLand(_ kind: StoreKind) async throws {
    let store = try TestStore(kind)
    try await withThrowingTaskGroup(of: Void.self) { group in
        for task in 0..<8 {
            group.addTask {
                try await store.container.performBackgroundTask { context in
                    for i in 0..<25 { Note(context: context).title = "t\(task)-\(i)" }
                    try context.save()
                }
            }
        }
        try await group.waitForAll()
    }
    #expect(try store.context().count(for: FetchRequest<Note>()) == 200)
}

@Test(arguments: StoreKind.allCases) func postSaveCleanUpRunsAfterASaveAndItsChangesAreSaved(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    store.container.postSaveCleanUp = { context in
        // Keep only the 2 newest notes (the seeds' cleanUpOldObjects:).
        let notes = try context.fetch(FetchRequest<Note>(sortBy: [.objectID(ascending: false)], offset: 2))
        for note in notes { context.delete(note) }
    }
    let context = store.context()
    for i in 0..<5 { Note(context: context).title = "n\(i)" }
    try context.save()
    #expect(!context.hasChanges)
    #expect(try store.stored(FetchRequest<Note>()).map(\.title) == ["n3", "n4"])
}

@Test func aSaveInsideASaveHookIsAMisuseError() throws {
    final class Reentrant: ManagedObject {
        @Attribute var x = 0
        var caught: String?
        override func willSave() {
            do { try managedObjectContext?.save() } catch { caught = "\(error)" }
        }
    }
    let store = try TestStore()
    let container = try PersistentContainer(
        storeURL: store.directory.appending(path: "other.sqlite"), schema: try Schema([Reentrant.self]))
    let context = container.newBackgroundContext()
    let object = Reentrant(context: context)
    try context.save()
    #expect(object.caught == "save() was called on a context that is already saving (from a save hook)")
}
