import Foundation
import Persistence
import Testing

@Suite struct BeforeCommitTests {
    struct Refused: Error, CustomStringConvertible {
        var description: String { "refused by the check" }
    }

    @Test(arguments: StoreKind.allCases) func seesTheTransactionsOwnWrites(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        var seen: [Int] = []
        context.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            seen.append(try reader.count(for: FetchRequest<Note>()))
            seen.append(try store.stored(FetchRequest<Note>()).count)  // outside the transaction: not yet
        }
        Note(context: context).title = "a"
        Note(context: context).title = "b"
        Checked(context: context).label = "check"
        try context.save()
        #expect(seen == [2, 0])
    }

    @Test(arguments: StoreKind.allCases) func throwingAbortsTheSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        context.userInfo["beforeCommit"] = { (_: TransactionReader) in throw Refused() }
        let note = Note(context: context)
        Checked(context: context).label = "check"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.message == "Could not commit to \(store.storeName): refused by the check")
        #expect(note.isInserted)
        #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    }

    /// The hooks of one save share one value per type, which gathers their work into one
    /// piece; the next save starts afresh.
    @Test func theHooksOfOneSaveShareAValue() throws {
        final class Gathered { var count = 0 }
        final class Other {}
        let store = try TestStore()
        let context = store.context()
        var runs: [Int] = []
        context.userInfo["effects"] = { (effects: SaveEffects) in
            let gathered = effects.shared(Gathered.self) {
                let made = Gathered()
                effects.afterCommit { runs.append(made.count) }
                return made
            }
            gathered.count += 1
            #expect(effects.shared(Gathered.self) { Gathered() } === gathered)
            #expect(effects.shared(Other.self) { Other() } as AnyObject !== gathered)
        }
        for n in 0..<3 { Checked(context: context).label = "\(n)" }
        try context.save()
        for n in 0..<2 { Checked(context: context).label = "again \(n)" }
        try context.save()
        #expect(runs == [3, 2])
    }

    /// A save that restarts (the merge policy resolved a conflict) runs its hooks again
    /// with fresh effects: the first attempt's shared value is dropped with its work, and a
    /// child's save shares nothing with its parent's.
    @Test func aRestartedSaveSharesAFreshValue() throws {
        final class Gathered { var count = 0 }
        let store = try TestStore()
        let seed = store.context("seed")
        let checked = Checked(context: seed)
        checked.label = "first"
        try seed.save()
        let a = store.context("a")
        let stale = try a.existingObject(with: checked.objectID, as: Checked.self)  // read before b's change
        let b = store.context("b")
        try b.existingObject(with: checked.objectID, as: Checked.self).label = "from b"
        try b.save()
        var made = 0
        var runs: [Int] = []
        a.userInfo["effects"] = { (effects: SaveEffects) in
            let gathered = effects.shared(Gathered.self) {
                made += 1
                let value = Gathered()
                effects.afterCommit { runs.append(value.count) }
                return value
            }
            gathered.count += 1
        }
        a.mergePolicy = .mergeByPropertyObjectTrump
        stale.label = "from a"
        Checked(context: a).label = "new"
        try a.save()
        #expect(made == 2)  // the first attempt conflicted: its hooks ran again
        #expect(runs == [2])  // only the committed attempt's work, counting its two objects once

        let child = store.child(of: a)
        var childCommits: [Bool] = []
        child.userInfo["effects"] = { (effects: SaveEffects) in
            _ = effects.shared(Gathered.self) {
                childCommits.append(effects.commitsToStore)
                return Gathered()
            }
        }
        Checked(context: child).label = "from the child"
        try child.save()
        #expect(childCommits == [false])
        runs = []
        try a.save()  // the parent's hooks, with its own effects
        #expect(runs == [1])
    }

    @Test(arguments: StoreKind.allCases) func notRunForAChildSave(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let parent = store.context("parent")
        let child = store.child(of: parent)
        var runs = 0
        let check = { (_: TransactionReader) in runs += 1 }
        child.userInfo["beforeCommit"] = check
        parent.userInfo["beforeCommit"] = check
        Checked(context: child).label = "check"
        try child.save()
        #expect(runs == 0)
        try parent.save()
        #expect(runs == 1)
    }

    // SQLite only: one writer at a time is SQLite's lock; PostgreSQL locks rows, so another

    // writer commits other rows meanwhile (see PostgreSQLStore).

    @Test(arguments: [StoreKind.sqlite]) func holdsTheWriteLockSoNoOtherWriterCommitsMeanwhile(_ kind: StoreKind) throws
    {
        let store = try TestStore(kind)
        var options = PersistentContainer.Options()
        options.busyTimeout = 0.2
        let other = try store.reopen(options: options)
        let context = store.context()
        var otherWriterError: PersistenceError?
        context.userInfo["beforeCommit"] = { (_: TransactionReader) in
            let intruder = other.newBackgroundContext()
            Note(context: intruder).title = "intruder"
            do { try intruder.save() } catch let error as PersistenceError { otherWriterError = error }
        }
        Checked(context: context).label = "check"
        try context.save()
        #expect(otherWriterError?.code == .io)
        #expect(otherWriterError?.message.hasSuffix("database is locked") == true)
    }
}
