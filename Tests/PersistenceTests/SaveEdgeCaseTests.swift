import Foundation
import TestScratch
import Testing

@testable import Persistence

/// Deletes the Doc whose row ID it holds from its own willSave when it is
/// deleted: a hand-written cascade, reached after the Doc's own willSave ran.
final class DocSweeper: ManagedObject {
    @Attribute var target = 0
    override func willSave() {
        guard isDeleted, let context = managedObjectContext else { return }
        context.delete(
            context.object(with: ManagedObjectID(entityName: "Doc", rowID: Int64(primitiveValue(for: \.target)))))
    }
}

/// The same, for a Vault (whose items deny its deletion).
final class VaultSweeper: ManagedObject {
    @Attribute var target = 0
    override func willSave() {
        guard isDeleted, let context = managedObjectContext else { return }
        context.delete(
            context.object(with: ManagedObjectID(entityName: "Vault", rowID: Int64(primitiveValue(for: \.target)))))
    }
}

struct Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

@Suite struct SaveEdgeCaseTests {
    func store(with extra: [ManagedObject.Type]) throws -> (PersistentContainer, HookLog) {
        let directory = ScratchDirectory.path("edge")
        let container = try PersistentContainer(
            storeURL: directory.appending(path: "store.sqlite"), schema: try Schema(allEntities + extra))
        return (container, HookLog())
    }

    @Test func anObjectDeletedDuringWillSaveGetsItsOwnWillSaveAndJournalRow() throws {
        let (container, log) = try store(with: [DocSweeper.self])
        let context = container.newBackgroundContext()
        context.userInfo["log"] = log
        let doc = Doc(context: context)
        doc.path = "a.bin"
        let sweeper = DocSweeper(context: context)
        try context.save()
        sweeper.target = Int(doc.objectID.rowID)
        try context.save()
        doc.path = "b.bin"  // doc's willSave runs first, as an update…
        context.delete(sweeper)  // …then the sweeper's willSave deletes it
        try context.save()
        let check = container.newBackgroundContext()
        #expect(try check.fetch(FetchRequest<Doc>()).isEmpty)
        #expect(try check.fetch(FetchRequest<Plan>()).map(\.path) == ["b.bin"])
        #expect(log.events.contains("afterCommit b.bin"))
    }

    @Test func denyRulesAreCheckedForObjectsDeletedDuringWillSave() throws {
        let (container, _) = try store(with: [VaultSweeper.self])
        let context = container.newBackgroundContext()
        let vault = Vault(context: context)
        Item(context: context).vault = vault
        let sweeper = VaultSweeper(context: context)
        try context.save()
        sweeper.target = Int(vault.objectID.rowID)
        try context.save()
        context.delete(sweeper)
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message == "Vault 1 cannot be deleted: its relationship 'items' is not empty (deny rule)")
        #expect(try container.newBackgroundContext().fetch(FetchRequest<Vault>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func rollbackPolicyDropsAConflictingDeletion(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let seed = store.context("seed")
        let doc = Doc(context: seed)
        doc.path = "a.bin"
        try seed.save()
        let a = store.context("a")
        let b = store.context("b")
        let docA = try a.existingObject(with: doc.objectID, as: Doc.self)
        let docB = try b.existingObject(with: doc.objectID, as: Doc.self)
        docB.path = "renamed.bin"
        try b.save()
        a.mergePolicy = .rollback
        a.delete(docA)
        try a.save()
        #expect(try store.stored(FetchRequest<Doc>()).map(\.path) == ["renamed.bin"])
        #expect(try store.stored(FetchRequest<Plan>()).isEmpty)
        #expect(!docA.isDeleted && docA.path == "renamed.bin")
    }

    @Test(arguments: StoreKind.allCases) func aConflictingDeletionIsPlannedFromTheRowAsItIsNow(_ kind: StoreKind) throws
    {
        let store = try TestStore(kind)
        let seed = store.context("seed")
        let doc = Doc(context: seed)
        doc.path = "a.bin"
        try seed.save()
        let a = store.context("a")
        let b = store.context("b")
        let docA = try a.existingObject(with: doc.objectID, as: Doc.self)
        try b.existingObject(with: doc.objectID, as: Doc.self).path = "renamed.bin"
        try b.save()
        a.userInfo["log"] = store.log
        a.mergePolicy = .mergeByPropertyObjectTrump
        a.delete(docA)
        try a.save()
        #expect(try store.stored(FetchRequest<Doc>()).isEmpty)
        // The journal names the file the row named when it was deleted, not the stale one.
        #expect(try store.stored(FetchRequest<Plan>()).map(\.path) == ["renamed.bin"])
        #expect(store.log.events.filter { $0.hasPrefix("afterCommit") } == ["afterCommit renamed.bin"])
        #expect(store.log.events.contains("onFailure a.bin"))  // the first attempt's plan was discarded
    }

    @Test(arguments: StoreKind.allCases) func deletingAnObjectAnotherContextAlreadyDeletedSucceedsUnderAMergePolicy(
        _ kind: StoreKind
    ) throws {
        let store = try TestStore(kind)
        let seed = store.context("seed")
        let note = Note(context: seed)
        try seed.save()
        let a = store.context("a")
        let b = store.context("b")
        let noteA = try a.existingObject(with: note.objectID)
        let noteB = try b.existingObject(with: note.objectID)
        b.delete(noteB)
        try b.save()
        a.mergePolicy = .mergeByPropertyObjectTrump
        a.delete(noteA)
        try a.save()
        #expect(!a.hasChanges)
        // Under the default policy it is a conflict, named.
        let c = store.context("c")
        Note(context: c).title = "x"
        try c.save()
        let d = store.context("d")
        let e = store.context("e")
        let x1 = try d.fetch(FetchRequest<Note>())[0]
        let x2 = try e.fetch(FetchRequest<Note>())[0]
        d.delete(x1)
        try d.save()
        e.delete(x2)
        let error = #expect(throws: PersistenceError.self) { try e.save() }
        #expect(error?.code == .conflict)
    }

    @Test(arguments: StoreKind.allCases) func aChildsInsertReachesAParentThatHeldAFaultForItsID(_ kind: StoreKind)
        throws
    {
        let store = try TestStore(kind)
        let parent = store.context("parent")
        let child = store.child(of: parent)
        let note = Note(context: child)
        note.title = "draft"
        _ = parent.object(with: note.objectID)
        try child.save()
        #expect(parent.hasChanges)
        try parent.save()
        #expect(try store.stored(FetchRequest<Note>()).map(\.title) == ["draft"])
    }

    @Test(arguments: StoreKind.allCases) func deletingAndReinsertingAUniqueValueInOneSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let old = Folder(context: context)
        old.name = "Inbox"
        try context.save()
        context.delete(old)
        Folder(context: context).name = "Inbox"
        try context.save()
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["Inbox"])
    }

    @Test(arguments: ["x\u{0}y", "\u{0}", "a\u{0}b\u{0}"])
    func textWithNULSurvivesEveryWritePathAndPredicatesAgree(text: String) throws {
        let store = try TestStore()
        let context = store.context()
        let note = Note(context: context)
        note.title = "before"
        try context.save()
        note.title = text  // update path
        try context.save()
        try context.insertRows(Note.self, count: 1) { _, row in row[\.title] = text }  // row path
        try context.save()
        let stored = try store.stored(FetchRequest<Note>())
        #expect(stored.map { Array($0.title.utf8) } == [Array(text.utf8), Array(text.utf8)])
        let predicates: [FetchPredicate<Note>] = [
            \.title == text, .hasPrefix(\.title, String(text.prefix(2))), .hasSuffix(\.title, String(text.suffix(1))),
            .contains(\.title, "\u{0}"), \.title == "x",
        ]
        let reader = store.context("reader")
        for predicate in predicates {
            let inSQL = try reader.count(for: FetchRequest<Note>(predicate: predicate))
            let all = try reader.fetch(FetchRequest<Note>())
            all[0].priority = 1  // pending: evaluated in memory
            let inMemory = try reader.count(for: FetchRequest<Note>(predicate: predicate))
            reader.rollback()
            #expect(inSQL == inMemory)
        }
    }

    @Test(.timeLimit(.minutes(5))) func nestedPerformAndWaitThroughAChildDoesNotDeadlock() async throws {
        let store = try TestStore()
        let parent = Unchecked(store.context("parent"))
        let finished = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                parent.value.performAndWait {
                    let child = parent.value.newChildContext()
                    child.performAndWait {
                        Note(context: child).title = "nested"
                        try? child.save()
                    }
                }
                continuation.resume(returning: parent.value.performAndWait { parent.value.insertedObjects.count })
            }
        }
        #expect(finished == 1)
    }

    @Test(arguments: StoreKind.allCases) func aFailingCleanUpHookDoesNotMakeACommittedSaveThrow(_ kind: StoreKind)
        throws
    {
        let store = try TestStore(kind)
        struct CleanUpFailed: Error {}
        let reported = HookLog()
        store.container.postSaveCleanUp = { _ in throw CleanUpFailed() }
        store.container.saveErrorHandler = { error, _ in reported.record("\(error)") }
        let context = store.context()
        Note(context: context).title = "x"
        try context.save()
        #expect(try store.stored(FetchRequest<Note>()).count == 1)
        #expect(reported.events == ["CleanUpFailed()"])
    }

    @Test(arguments: StoreKind.allCases) func rollbackClearsAChangedObjectWhoseRowIsGone(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let a = store.context("a")
        let note = Note(context: a)
        try a.save()
        let b = store.context("b")
        let ghost = try #require(b.object(with: note.objectID) as? Note)
        a.delete(note)
        try a.save()
        ghost.title = "edit"
        #expect(b.hasChanges)
        b.rollback()
        #expect(!ghost.hasChanges && !b.hasChanges)
    }

    @Test(arguments: StoreKind.allCases) func aReferenceToAnObjectBeingDeletedIsRefused(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        let sticker = Sticker(context: context)
        try context.save()
        context.delete(folder)  // nullifies sticker.folder…
        sticker.folder = folder  // …which is then pointed back at it
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message == "Sticker 1.folder points at Folder 1, which is being deleted")
    }

    @Test func keyPathsThatOnlyPassThroughAPropertyAreRefused() {
        #expect(Note.entityDescription.property(for: \Note.folder?.name) == nil)
        #expect(Note.entityDescription.property(for: \Note.folder)?.name == "folder")
        #expect(Note.entityDescription.property(for: \Note.title)?.name == "title")
    }
}
