import Foundation
@_spi(Testing) import Persistence
import Testing

/// Save-bound side effects: rows in the save's transaction, work after its
/// commit; both discarded when the save fails, is rolled back or only
/// reaches a parent.
@Suite struct SaveEffectsTests {
    func storeWithDoc(_ kind: StoreKind = .sqlite, _ path: String = "a.bin") throws -> (
        TestStore, ManagedObjectContext, Doc
    ) {
        let store = try TestStore(kind)
        let context = store.context()
        let doc = Doc(context: context)
        doc.path = path
        try context.save()
        return (store, context, doc)
    }

    /// The events of Doc's save effects, without other entities' hooks.
    func effects(_ store: TestStore) -> [String] {
        store.log.events.filter { $0.hasPrefix("plan ") || $0.hasPrefix("afterCommit ") || $0.hasPrefix("onFailure ") }
    }

    func plans(_ store: TestStore) throws -> [String] {
        try store.stored(FetchRequest<Plan>()).map(\.path)
    }

    @Test(arguments: StoreKind.allCases) func committedDeletionWritesTheRowAndRunsAfterCommitWorkAfterTheCommit(
        _ kind: StoreKind
    ) throws {
        let (store, context, doc) = try storeWithDoc(kind)
        var docsInStoreWhenWorkRan: [Int] = []
        context.userInfo["afterCommitCheck"] = {
            docsInStoreWhenWorkRan.append((try? store.stored(FetchRequest<Doc>()).count) ?? -1)
        }
        context.delete(doc)
        try context.save()
        #expect(docsInStoreWhenWorkRan == [0])  // the deletion was committed before the work ran
        #expect(try plans(store) == ["a.bin"])
        #expect(effects(store) == ["plan a.bin commitsToStore=true", "afterCommit a.bin"])
    }

    @Test(arguments: StoreKind.allCases) func rollbackDiscardsEverything(_ kind: StoreKind) throws {
        let (store, context, doc) = try storeWithDoc(kind)
        context.delete(doc)
        context.rollback()
        try context.save()
        #expect(try plans(store).isEmpty)
        #expect(effects(store).isEmpty)
        #expect(try store.stored(FetchRequest<Doc>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func failedCommitDiscardsRowsAndWorkAndRunsOnFailure(_ kind: StoreKind) throws
    {
        let (store, context, doc) = try storeWithDoc(kind)
        context.delete(doc)
        struct Injected: Error {}
        store.container.failNextCommit(with: Injected())
        #expect(throws: PersistenceError.self) { try context.save() }
        #expect(try plans(store).isEmpty)
        #expect(effects(store) == ["plan a.bin commitsToStore=true", "onFailure a.bin"])
        #expect(doc.isDeleted)
        #expect(try store.stored(FetchRequest<Doc>()).count == 1)
        // Saving again plans again, and this time commits.
        store.log.clear()
        try context.save()
        #expect(try plans(store) == ["a.bin"])
        #expect(effects(store) == ["plan a.bin commitsToStore=true", "afterCommit a.bin"])
    }

    @Test(arguments: StoreKind.allCases) func constraintFailureInTheSameSaveDiscardsTheEffects(_ kind: StoreKind) throws
    {
        let (store, context, doc) = try storeWithDoc(kind)
        Folder(context: context).name = "same"
        try context.save()
        context.delete(doc)
        Folder(context: context).name = "same"
        #expect(throws: PersistenceError.self) { try context.save() }
        #expect(try plans(store).isEmpty)
        #expect(effects(store) == ["plan a.bin commitsToStore=true", "onFailure a.bin"])
    }

    @Test(arguments: StoreKind.allCases) func validationFailureStopsBeforeWillSave(_ kind: StoreKind) throws {
        let (store, context, doc) = try storeWithDoc(kind)
        context.delete(doc)
        Note(context: context).title = "invalid"
        #expect(throws: PersistenceError.self) { try context.save() }
        #expect(effects(store).isEmpty)
        #expect(try plans(store).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func childSaveDiscardsEffectsAndTheParentsSaveRegistersThem(_ kind: StoreKind)
        throws
    {
        let (store, parent, doc) = try storeWithDoc(kind)
        let child = store.child(of: parent)
        child.delete(try child.existingObject(with: doc.objectID))
        try child.save()
        #expect(effects(store) == ["plan a.bin commitsToStore=false"])
        #expect(try plans(store).isEmpty)
        #expect(doc.isDeleted)
        store.log.clear()
        try parent.save()
        #expect(effects(store) == ["plan a.bin commitsToStore=true", "afterCommit a.bin"])
        #expect(try plans(store) == ["a.bin"])
    }

    @Test(arguments: StoreKind.allCases) func childSaveThenParentRollbackNeverCommitsTheEffects(_ kind: StoreKind)
        throws
    {
        let (store, parent, doc) = try storeWithDoc(kind)
        let child = store.child(of: parent)
        child.delete(try child.existingObject(with: doc.objectID))
        try child.save()
        parent.rollback()
        try parent.save()
        #expect(effects(store) == ["plan a.bin commitsToStore=false"])
        #expect(try plans(store).isEmpty)
        #expect(try store.stored(FetchRequest<Doc>()).count == 1)
    }

    @Test(arguments: StoreKind.allCases) func effectRowsAppearInTheSaveNotification(_ kind: StoreKind) async throws {
        let (store, context, doc) = try storeWithDoc(kind)
        let notifications = store.container.saveNotifications()
        context.delete(doc)
        try context.save()
        var iterator = notifications.makeAsyncIterator()
        let note = await iterator.next()
        #expect(note?.deletedObjectIDs == [doc.objectID])
        #expect(note?.insertedObjectIDs.map(\.entityName) == ["Plan"])
    }
}
