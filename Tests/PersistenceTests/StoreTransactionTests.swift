import Foundation
@_spi(Testing) import Persistence
import Testing

/// `ManagedObjectContext.write`: one transaction whose body reads, counts, locks and
/// deletes rows, committed whole or not at all, with work after its commit.
@Suite struct StoreTransactionTests {
    private struct Refused: Error, Equatable {}

    /// Two folders of two notes each, saved.
    private func seed(_ store: TestStore) throws -> (inbox: ManagedObjectID, archive: ManagedObjectID) {
        let context = store.context("seed")
        let inbox = Folder(context: context)
        inbox.name = "inbox"
        let archive = Folder(context: context)
        archive.name = "archive"
        for (folder, titles) in [(inbox, ["a", "b"]), (archive, ["c", "d"])] {
            for title in titles {
                let note = Note(context: context)
                note.title = title
                note.folder = folder
            }
        }
        try context.save()
        return (inbox.objectID, archive.objectID)
    }

    @Test(arguments: StoreKind.allCases) func aBodyThatReturnsCommitsWhatItDeleted(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let (inbox, _) = try seed(store)
        let context = store.context()
        var committed: [Int] = []
        let deleted = try context.write { transaction in
            let folders = try transaction.fetch(FetchRequest<Folder>(predicate: \.name == "inbox"))
            #expect(folders.map(\.objectID) == [inbox])
            #expect(try transaction.count(for: FetchRequest<Note>()) == 4)
            let deleted = try transaction.delete(FetchRequest<Folder>(predicate: .objectIDs([inbox])))
            // What it reads sees its own deletion, and the cascade of the folder's notes.
            #expect(try transaction.count(for: FetchRequest<Note>()) == 2)
            #expect(try transaction.fetch(FetchRequest<Folder>(predicate: \.name == "inbox")).isEmpty)
            transaction.afterCommit {
                committed.append(deleted)
                // Committed by now: a reader elsewhere sees it.
                #expect((try? store.stored(FetchRequest<Note>()).count) == 2)
            }
            return deleted
        }
        #expect(deleted == 1)
        #expect(committed == [1])
        #expect(try store.stored(FetchRequest<Folder>()).map(\.name) == ["archive"])
        #expect(try store.stored(FetchRequest<Note>(sortBy: [.init(\.title)])).map(\.title) == ["c", "d"])
    }

    @Test(arguments: StoreKind.allCases) func aBodyThatThrowsWritesNothing(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let (inbox, archive) = try seed(store)
        let context = store.context()
        var afterCommit = 0
        #expect(throws: Refused()) {
            try context.write { transaction in
                try transaction.delete(FetchRequest<Folder>(predicate: .objectIDs([inbox, archive])))
                transaction.afterCommit { afterCommit += 1 }
                throw Refused()
            }
        }
        #expect(afterCommit == 0)
        #expect(try store.stored(FetchRequest<Folder>()).count == 2)
        #expect(try store.stored(FetchRequest<Note>()).count == 4)
        // The context is usable after: the next transaction commits.
        #expect(try context.write { try $0.delete(FetchRequest<Folder>(predicate: .objectIDs([archive]))) } == 1)
        #expect(try store.stored(FetchRequest<Note>()).count == 2)
    }

    /// A failure of the commit itself (an injected one) writes nothing either, and skips the
    /// work after the commit.
    @Test(arguments: StoreKind.allCases) func aFailedCommitWritesNothing(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let (inbox, _) = try seed(store)
        let context = store.context()
        store.container.failNextCommit(with: Refused())
        var afterCommit = 0
        #expect(throws: Refused()) {
            try context.write { transaction in
                transaction.afterCommit { afterCommit += 1 }
                return try transaction.delete(FetchRequest<Folder>(predicate: .objectIDs([inbox])))
            }
        }
        #expect(afterCommit == 0)
        #expect(try store.stored(FetchRequest<Note>()).count == 4)
    }

    /// A context that holds the deleted rows as objects hears of their deletion, as after a
    /// batch delete.
    @Test func contextsThatMergeLearnOfTheDeletion() throws {
        let store = try TestStore()
        let (inbox, _) = try seed(store)
        let watcher = store.context("watcher")
        watcher.automaticallyMergesChangesFromParent = true
        let folder = try watcher.existingObject(with: inbox, as: Folder.self)
        _ = try store.context().write { try $0.delete(FetchRequest<Folder>(predicate: .objectIDs([inbox]))) }
        watcher.performAndWait {}  // the merge, queued on the watcher's queue
        #expect(folder.isDeleted || folder.managedObjectContext == nil)
    }

    @Test func refusedInAChildContextAndDuringASave() throws {
        let store = try TestStore()
        let parent = store.context()
        let child = store.child(of: parent)
        #expect {
            try child.write { _ in }
        } throws: {
            ($0 as? PersistenceError)?.message
                == "A transaction writes to the store; run it on a context without a parent"
        }
        var duringSave: (any Error)?
        parent.userInfo["effects"] = { (_: SaveEffects) in
            duringSave = Result { try parent.write { _ in } }.failure
        }
        Checked(context: parent).label = "saved"
        try parent.save()
        #expect((duringSave as? PersistenceError)?.message == "write was called during a save (from a save hook)")
        #expect(try store.stored(FetchRequest<Checked>()).map(\.label) == ["saved"])
    }

    @Test(arguments: StoreKind.allCases) func theLockItTakesIsHeldUntilItEnds(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        _ = try seed(store)
        let context = store.context()
        let taken = try context.write { transaction in
            try transaction.lock("files", shared: false)
            return try transaction.count(for: FetchRequest<Folder>(), lockingRows: .keyShare)
        }
        #expect(taken == 2)
        #expect(throws: PersistenceError.self) {
            try context.write { try $0.lock("", shared: true) }
        }
    }
}

/// Typed values of a context: set and read by key type, copied to a child, carried by a
/// save's effects.
@Suite struct ContextValuesTests {
    private enum Journal: ContextKey { typealias Value = [String] }
    private enum Other: ContextKey { typealias Value = [String] }

    @Test func aValueIsReadByItsKeyAndCopiedToAChild() throws {
        let store = try TestStore()
        let context = store.context()
        #expect(context[Journal.self] == nil)
        context[Journal.self] = ["first"]
        #expect(context[Journal.self] == ["first"])
        #expect(context[Other.self] == nil)  // another key with a value of the same type
        let child = store.child(of: context)
        #expect(child[Journal.self] == ["first"])
        child[Journal.self] = ["child's"]
        #expect(context[Journal.self] == ["first"])  // a copy
        context[Journal.self] = nil
        #expect(context[Journal.self] == nil)
    }

    @Test(arguments: StoreKind.allCases) func aSaveCarriesItsContextsValues(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        context[Journal.self] = ["saved"]
        var seen: [[String]?] = []
        context.userInfo["effects"] = { (effects: SaveEffects) in seen.append(effects[Journal.self]) }
        Checked(context: context).label = "one"
        try context.save()
        #expect(seen == [["saved"]])
    }
}

extension Result {
    /// The error of a failure; `nil` for a success.
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
