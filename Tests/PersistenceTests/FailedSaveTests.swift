import Foundation
@_spi(Testing) import Persistence
import Testing

import class GRDB.DatabaseQueue

/// A save that fails, in any way, writes nothing and leaves the context's
/// unsaved changes in place.
@Suite struct FailedSaveTests {
    struct DiskFull: Error, CustomStringConvertible {
        var description: String { "disk full" }
    }

    /// A store with one saved note and folder, and a context with pending
    /// changes of every kind: an insert, an update and a delete.
    func prepared(_ kind: StoreKind = .sqlite) throws -> (
        TestStore, ManagedObjectContext, inserted: Note, updated: Note, deleted: Folder
    ) {
        let store = try TestStore(kind)
        let context = store.context()
        let updated = Note(context: context)
        updated.title = "original"
        let deleted = Folder(context: context)
        deleted.name = "doomed"
        try context.save()
        let inserted = Note(context: context)
        inserted.title = "new"
        updated.title = "changed"
        context.delete(deleted)
        return (store, context, inserted, updated, deleted)
    }

    func expectUnchanged(
        _ store: TestStore, _ context: ManagedObjectContext, inserted: Note, updated: Note, deleted: Folder
    )
        throws
    {
        #expect(try store.stored(FetchRequest<Note>()).map(\.title) == ["original"])
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["doomed"])
        #expect(inserted.isInserted)
        #expect(updated.isUpdated && updated.title == "changed")
        #expect(deleted.isDeleted)
        #expect(context.hasChanges)
    }

    @Test(arguments: StoreKind.allCases) func validationFailure(_ kind: StoreKind) throws {
        let (store, context, inserted, updated, deleted) = try prepared(kind)
        updated.title = "invalid"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message == "Note 1: title must not be 'invalid'")
        updated.title = "changed"
        try expectUnchanged(store, context, inserted: inserted, updated: updated, deleted: deleted)
        try context.save()  // fixed: the same changes now save
        #expect(try store.stored(FetchRequest<Note>(sortBy: [.init(\.title)])).map(\.title) == ["changed", "new"])
    }

    @Test(arguments: StoreKind.allCases) func constraintFailure(_ kind: StoreKind) throws {
        let (store, context, inserted, updated, deleted) = try prepared(kind)
        let twin = Folder(context: context)
        twin.name = "twin"
        let other = Folder(context: context)
        other.name = "twin"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .constraint)
        #expect(error?.message == "Could not save \(other.objectID): UNIQUE constraint failed: Folder.name")
        #expect(error?.objectIDs == [other.objectID])
        try expectUnchanged(store, context, inserted: inserted, updated: updated, deleted: deleted)
        context.delete(other)
        try context.save()
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["twin"])
    }

    /// Many rows of one entity go in by multi-row statements (SQLite: 64 rows a statement):
    /// a constraint failure among them still names the row that caused it, and writes none.
    @Test(arguments: StoreKind.allCases) func constraintFailureAmongManyInserts(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folders = (0..<200).map { i in
            let folder = Folder(context: context)
            folder.name = "folder \(i)"
            return folder
        }
        folders[150].name = "folder 3"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .constraint)
        #expect(error?.message == "Could not save \(folders[150].objectID): UNIQUE constraint failed: Folder.name")
        #expect(error?.objectIDs == [folders[150].objectID])
        #expect(try store.stored(FetchRequest<Folder>()).isEmpty)
        folders[150].name = "folder 150"
        try context.save()
        let stored = try store.stored(FetchRequest<Folder>(sortBy: [.init(\.name)]))
        #expect(stored.map(\.name) == (0..<200).map { "folder \($0)" }.sorted())
        #expect(stored.map(\.objectID) == folders.sorted { $0.name < $1.name }.map(\.objectID))
    }

    /// A trigger of another program's on the table can end the statement (`RAISE(FAIL)`:
    /// the rows it wrote stay) or the whole transaction (`RAISE(ROLLBACK)`). Either way the
    /// failed save writes nothing: the first is undone with the multi-row statement's
    /// savepoint and its row named; after the second nothing is tried again outside the
    /// transaction, and the error names the statement's rows.
    @Test(arguments: ["FAIL", "ROLLBACK"]) func aForeignTriggersRaiseAmongManyInserts(_ raise: String) throws {
        let store = try TestStore(.sqlite)
        try DatabaseQueue(path: store.storeURL.path).write { db in
            try db.execute(
                sql: """
                    CREATE TRIGGER "refuse_150" BEFORE INSERT ON "Folder" WHEN NEW."name" = 'folder 150' \
                    BEGIN SELECT RAISE(\(raise), 'no folder 150'); END
                    """)
        }
        let context = store.context()
        let folders = (0..<200).map { i in
            let folder = Folder(context: context)
            folder.name = "folder \(i)"
            return folder
        }
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .constraint)
        if raise == "FAIL" {
            #expect(error?.message == "Could not save \(folders[150].objectID): no folder 150")
            #expect(error?.objectIDs == [folders[150].objectID])
        } else {
            let chunk = folders[128..<192].map(\.objectID)
            #expect(
                error?.message
                    == "Could not save 64 rows of Folder (\(chunk[0]) to \(chunk[63])): no folder 150")
            #expect(error?.objectIDs == chunk)
        }
        #expect(try store.stored(FetchRequest<Folder>()).isEmpty)
        folders[150].name = "folder one-fifty"
        try context.save()
        #expect(try store.stored(FetchRequest<Folder>()).count == 200)
    }

    @Test(arguments: StoreKind.allCases) func denyRule(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let vault = Vault(context: context)
        Item(context: context).vault = vault
        try context.save()
        context.delete(vault)
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .validation)
        #expect(error?.message == "Vault 1 cannot be deleted: its relationship 'items' is not empty (deny rule)")
        #expect(vault.isDeleted)
        #expect(try store.stored(FetchRequest<Vault>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func ioErrorAtCommit(_ kind: StoreKind) throws {
        let (store, context, inserted, updated, deleted) = try prepared(kind)
        let handled = HookLog()
        store.container.saveErrorHandler = { error, _ in handled.record("\(error)") }
        store.container.failNextCommit(with: DiskFull())
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .io)
        #expect(error?.message == "Could not commit to \(store.storeName): disk full")
        #expect(handled.events == ["Could not commit to \(store.storeName): disk full"])
        try expectUnchanged(store, context, inserted: inserted, updated: updated, deleted: deleted)
        try context.save()
        #expect(try store.stored(FetchRequest<Folder>()).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func misuseIsAnErrorAtSaveNotACrash(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let a = store.context("a")
        let b = store.context("b")
        let note = Note(context: a)
        let folder = Folder(context: b)
        note.folder = folder
        let error = #expect(throws: PersistenceError.self) { try a.save() }
        #expect(error?.code == .misuse)
        #expect(
            error?.message
                == "Note 1.folder was set to Folder 1, which lives in another context; pass its objectID and fetch it "
                + "in this context")
        #expect(note.folder == nil)
        // Until rolled back, every save reports it: saving would write what was not asked for.
        #expect(throws: PersistenceError.self) { try a.save() }
        a.rollback()
        try a.save()
    }
}
