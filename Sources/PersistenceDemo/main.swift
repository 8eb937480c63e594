// `make demo`: the persistence layer's lifecycle, event by event, on a store
// it creates in a temporary directory.
import Foundation
import Persistence

/// Prints every lifecycle hook as it fires.
class Traced: ManagedObject {
    func trace(_ event: String) { print("    \(event) \(objectID)\(isDeleted ? " (isDeleted)" : "")") }
    override func awakeFromInsert() { trace("awakeFromInsert") }
    override func awakeFromFetch() { trace("awakeFromFetch") }
    override func willSave() { trace("willSave") }
    override func didSave() { trace("didSave") }
    override func prepareForDeletion() { trace("prepareForDeletion") }
    override func willTurnIntoFault() { trace("willTurnIntoFault") }
    override func didTurnIntoFault() { trace("didTurnIntoFault") }
    override func awakeFromSnapshotEvents(_ events: SnapshotEvents) {
        if events.contains(.undoDeletion) { trace("awakeFromSnapshotEvents(.undoDeletion)") }
        if events.contains(.rollback) { trace("awakeFromSnapshotEvents(.rollback)") }
    }
}

final class Folder: Traced {
    @Attribute(.unique) var name = ""
    @ToMany(inverse: \Note.folder, deleteRule: .cascade) var notes: [Note]
}

final class Note: Traced {
    @Attribute(.indexed) var title = ""
    @Attribute var created = Date.distantPast
    @Attribute var modified = Date.distantPast
    @Attribute var attachment: String?
    @ToOne var folder: Folder?

    override func awakeFromInsert() {
        super.awakeFromInsert()
        setPrimitiveValue(Date(), for: \.created)  // primitive: no observers, no extra willSave
    }

    override func willSave() {
        super.willSave()
        if !isDeleted { setPrimitiveValue(Date(), for: \.modified) }
        // Clean-up is planned in willSave, and happens only once the deletion committed.
        if isDeleted, let attachment, let effects = saveEffects {
            print("      plans removal of \(attachment) (commitsToStore: \(effects.commitsToStore))")
            effects.afterCommit { print("    afterCommit: the deletion is durable; remove \(attachment) now") }
        }
    }
}

func step(_ title: String) { print("\n== \(title)") }

let directory = FileManager.default.temporaryDirectory.appending(path: "persistence-demo-\(UUID().uuidString)")
let storeURL = directory.appending(path: "store.sqlite")
do {
    step("Open a store at \(storeURL.path)")
    let container = try PersistentContainer(storeURL: storeURL, schema: try Schema([Folder.self, Note.self]))
    let context = container.newBackgroundContext(name: "demo")
    try context.performAndWait {
        step("Insert a folder and two notes")
        let folder = Folder(context: context)
        folder.name = "Inbox"
        let groceries = Note(context: context)
        groceries.title = "Groceries"
        groceries.attachment = "groceries.jpg"
        groceries.folder = folder
        let todo = Note(context: context)
        todo.title = "To do"
        todo.folder = folder

        step("save(): willSave on each, one transaction, didSave on each")
        try context.save()

        step("Change a title (observed setter), then roll back")
        todo.title = "To do (urgent)"
        print("    changedValues: \(todo.changedValues().keys.sorted())")
        context.rollback()
        print("    title after rollback: \(todo.title)")

        step("Delete the folder: prepareForDeletion runs now, cascading to its notes")
        context.delete(folder)
        print("    inserted \(context.insertedObjects.count), deleted \(context.deletedObjects.count); nothing written")

        step("Roll the deletion back: every object comes back, no file was touched")
        context.rollback()
        print("    folder has \(folder.notes.count) notes")

        step("Edit in a child context and throw it away (the seeds' edit-with-discard)")
        do {
            let child = context.newChildContext(name: "edit")
            let draft = try child.existingObject(with: todo.objectID, as: Note.self)
            draft.title = "Discarded edit"
            print("    child sees \"\(draft.title)\", parent still sees \"\(todo.title)\"")
        }

        step("A failed save writes nothing and keeps the changes")
        let twin = Folder(context: context)
        twin.name = "Inbox"  // unique name: the store refuses it
        do {
            try context.save()
        } catch {
            print("    save failed: \(error)")
        }
        context.delete(twin)

        step("Delete a note for real and save: clean-up runs only after the commit")
        context.delete(groceries)
        try context.save()
    }

    step("Reopen the store and list what it holds")
    container.close()
    let reopened = try PersistentContainer(storeURL: storeURL, schema: try Schema([Folder.self, Note.self]))
    let reader = reopened.newBackgroundContext(name: "reader")
    try reader.performAndWait {
        for note in try reader.fetch(FetchRequest<Note>(sortBy: [.init(\.title)])) {
            print("    \(note.objectID): \"\(note.title)\" in \(note.folder?.name ?? "-")")
        }
    }
    reopened.close()
    try? FileManager.default.removeItem(at: directory)
    print("\nDone.")
} catch {
    FileHandle.standardError.write(Data("demo failed: \(error)\n".utf8))
    exit(1)
}
