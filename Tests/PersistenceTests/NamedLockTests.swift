import Foundation
import Logging
import Persistence
import PostgresNIO
import Testing

@testable import PersistencePostgreSQL

/// Named locks (``SaveEffects/lockFirst(_:shared:)``, ``TransactionReader/lock(_:shared:)``):
/// two containers on one store, one save parked in its `beforeCommit` while it holds a
/// lock, the other trying to take it. "Waits" is shown by state, never by time: the other
/// save has not returned while the first is parked (on PostgreSQL, the server also shows
/// it waiting for that lock), and returns once the first has ended.
@Suite struct NamedLockTests {
    /// A save that holds a named lock shared, parked in its `beforeCommit`, keeps a save that
    /// takes it exclusive first waiting; once the first commits, the second runs and counts
    /// the first's rows.
    @Test(arguments: StoreKind.allCases) func anExclusiveLockWaitsForTheSharedHolderThenSeesItsRows(
        _ kind: StoreKind
    ) async throws {
        let store = try TestStore(kind, options: .patient)
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let gate = Gate()
        defer { gate.open() }
        let a = store.context("a")
        Note(context: a).title = "from a"
        Checked(context: a).label = "a"
        a.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            try reader.lock("shelf", shared: true)
            try gate.park()
        }
        // Every object made before A parks: on SQLite an insert reserves its ID in the store.
        let b = other.newBackgroundContext(name: "b")
        let refusals = HookLog()
        b.userInfo["effects"] = { (effects: SaveEffects) in
            do { try effects.lockFirst("shelf", shared: false) } catch { refusals.record("\(error)") }
        }
        let seen = HookLog()
        b.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            seen.record("\(try reader.count(for: FetchRequest<Note>(predicate: \.title == "from a")))")
        }
        Checked(context: b).label = "b"

        let savingA = Saving(a)
        #expect(try await eventually { gate.isParked })
        let observer = try LockObserver(kind, store)
        defer { observer?.close() }
        let savingB = Saving(b)
        if let observer {  // the server shows A holding this very lock, and B waiting for it
            #expect(
                try await eventually {
                    try observer.modes("shelf").sorted() == ["ExclusiveLock waiting", "ShareLock granted"]
                })
        }
        try await pauseUnlessShown(by: observer)
        #expect(!savingB.isDone)
        #expect(!savingA.isDone)
        gate.open()
        try await savingA.result()
        try await savingB.result()
        #expect(refusals.events.isEmpty)
        #expect(seen.events == ["1"])
        if let observer { #expect(try observer.modes("shelf") == []) }  // released as each transaction ended
    }

    /// Two holders of a shared lock: on PostgreSQL neither waits for the other. On SQLite
    /// what holds instead is the store's one write lock: the second save waits for the
    /// first's transaction to end, shared lock or not.
    @Test(arguments: StoreKind.allCases) func twoSharedHolders(_ kind: StoreKind) async throws {
        let store = try TestStore(kind, options: .patient)
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let gate = Gate()
        defer { gate.open() }
        let a = store.context("a")
        Checked(context: a).label = "a"
        a.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            try reader.lock("shelf", shared: true)
            try gate.park()
        }
        let b = other.newBackgroundContext(name: "b")
        let refusals = HookLog()
        b.userInfo["effects"] = { (effects: SaveEffects) in
            do { try effects.lockFirst("shelf", shared: true) } catch { refusals.record("\(error)") }
        }
        Checked(context: b).label = "b"

        let savingA = Saving(a)
        #expect(try await eventually { gate.isParked })
        let savingB = Saving(b)
        switch kind {
        case .postgresql:
            try await savingB.result()  // committed while A holds the lock too
            #expect(!savingA.isDone)
        case .sqlite:
            try await pauseUnlessShown(by: nil)
            #expect(!savingB.isDone)
        }
        gate.open()
        try await savingA.result()
        try await savingB.result()
        #expect(refusals.events.isEmpty)
        #expect(try store.stored(FetchRequest<Checked>()).map(\.label).sorted() == ["a", "b"])
    }

    /// A save that fails releases its lock with its rollback: the save waiting for it goes
    /// on, and sees nothing of the failed one. Here the first takes the lock exclusive
    /// first; the second asks for it shared inside its transaction.
    @Test(arguments: StoreKind.allCases) func aFailedSaveReleasesItsLock(_ kind: StoreKind) async throws {
        let store = try TestStore(kind, options: .patient)
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let gate = Gate()
        defer { gate.open() }
        let a = store.context("a")
        Note(context: a).title = "from a"
        Checked(context: a).label = "a"
        let refusals = HookLog()
        a.userInfo["effects"] = { (effects: SaveEffects) in
            do { try effects.lockFirst("shelf", shared: false) } catch { refusals.record("\(error)") }
        }
        a.userInfo["beforeCommit"] = { (_: TransactionReader) in
            try gate.park()
            throw ValidationMessage("refused after the wait")
        }
        let b = other.newBackgroundContext(name: "b")
        let seen = HookLog()
        b.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            try reader.lock("shelf", shared: true)
            seen.record("\(try reader.count(for: FetchRequest<Note>()))")
        }
        Checked(context: b).label = "b"

        let savingA = Saving(a)
        #expect(try await eventually { gate.isParked })
        let observer = try LockObserver(kind, store)
        defer { observer?.close() }
        let savingB = Saving(b)
        if let observer {
            #expect(
                try await eventually {
                    try observer.modes("shelf").sorted() == ["ExclusiveLock granted", "ShareLock waiting"]
                })
        }
        try await pauseUnlessShown(by: observer)
        #expect(!savingB.isDone)
        gate.open()
        let error = await #expect(throws: PersistenceError.self) { try await savingA.result() }
        #expect(error?.message == "Could not commit to \(store.storeName): refused after the wait")
        try await savingB.result()
        #expect(refusals.events.isEmpty)
        #expect(seen.events == ["0"])
        #expect(try store.stored(FetchRequest<Checked>()).map(\.label) == ["b"])
    }

    /// The locks a save takes first are taken in the order of their names, whatever the
    /// order they were asked for in, and a name asked for exclusive and shared is taken
    /// once, exclusive. Here B asks for "y", then "x", then "x" shared: on PostgreSQL it
    /// waits for "x" — the first by name, exclusive — holding nothing, while A holds both.
    @Test(arguments: StoreKind.allCases) func locksTakenFirstAreTakenInTheOrderOfTheirNames(_ kind: StoreKind)
        async throws
    {
        let store = try TestStore(kind, options: .patient)
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let gate = Gate()
        defer { gate.open() }
        let refusals = HookLog()
        let a = store.context("a")
        Checked(context: a).label = "a"
        a.userInfo["effects"] = { (effects: SaveEffects) in
            do {
                try effects.lockFirst("y", shared: false)
                try effects.lockFirst("x", shared: false)
            } catch { refusals.record("\(error)") }
        }
        a.userInfo["beforeCommit"] = { (_: TransactionReader) in try gate.park() }
        let b = other.newBackgroundContext(name: "b")
        b.userInfo["effects"] = { (effects: SaveEffects) in
            do {
                try effects.lockFirst("y", shared: false)
                try effects.lockFirst("x", shared: false)
                try effects.lockFirst("x", shared: true)
            } catch { refusals.record("\(error)") }
        }
        Checked(context: b).label = "b"

        let savingA = Saving(a)
        #expect(try await eventually { gate.isParked })
        let observer = try LockObserver(kind, store)
        defer { observer?.close() }
        let savingB = Saving(b)
        if let observer {
            #expect(
                try await eventually {
                    try observer.modes("x").sorted() == ["ExclusiveLock granted", "ExclusiveLock waiting"]
                })
            #expect(try observer.modes("y") == ["ExclusiveLock granted"])
        }
        try await pauseUnlessShown(by: observer)
        #expect(!savingB.isDone)
        gate.open()
        try await savingA.result()
        try await savingB.result()
        #expect(refusals.events.isEmpty)
    }

    /// `lockFirst` is for before the transaction: called inside it (here from a
    /// `beforeCommit` check) it refuses the save, saying where to take the lock instead.
    @Test(arguments: StoreKind.allCases) func lockFirstInsideTheTransactionIsRefused(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        context.userInfo["effects"] = { (effects: SaveEffects) in
            effects.beforeCommit { _ in try effects.lockFirst("shelf", shared: false) }
        }
        Checked(context: context).label = "late"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .misuse)
        #expect(
            error?.message
                == "SaveEffects.lockFirst(\"shelf\") was called inside the transaction; call it from willSave, or "
                + "take the lock with TransactionReader.lock(_:shared:)")
        #expect(try store.stored(FetchRequest<Checked>()).isEmpty)
    }

    /// A lock needs a name: an empty one is refused by both ways of taking it.
    @Test(arguments: StoreKind.allCases) func anEmptyNameIsRefused(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let refusals = HookLog()
        context.userInfo["effects"] = { (effects: SaveEffects) in
            do { try effects.lockFirst("", shared: true) } catch { refusals.record("\(error)") }
        }
        context.userInfo["beforeCommit"] = { (reader: TransactionReader) in try reader.lock("", shared: false) }
        Checked(context: context).label = "nameless"
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .misuse)
        #expect(error?.message == "A named lock needs a name: the name is empty")
        #expect(refusals.events == ["A named lock needs a name: the name is empty"])
        #expect(try store.stored(FetchRequest<Checked>()).isEmpty)
    }
}

/// Counts that lock the rows they count (``TransactionReader/count(for:lockingRows:)``):
/// a save parked in its `beforeCommit` on one container, the other save on another.
@Suite struct LockingCountTests {
    /// A locking count waits for a save that is deleting a row it would count (parked
    /// before its commit): once the deletion commits, the row is not counted; once it is
    /// rolled back, it is (and locked).
    @Test(arguments: StoreKind.allCases, [true, false]) func aLockingCountWaitsForADeletionInProgress(
        _ kind: StoreKind, deletionCommits: Bool
    ) async throws {
        let store = try TestStore(kind, options: .patient)
        let seed = store.context("seed")
        let note = Note(context: seed)
        note.title = "counted"
        try seed.save()
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let gate = Gate()
        defer { gate.open() }
        let a = store.context("a")
        a.delete(try a.existingObject(with: note.objectID, as: Note.self))
        Checked(context: a).label = "a"
        a.userInfo["beforeCommit"] = { (_: TransactionReader) in
            try gate.park()
            if !deletionCommits { throw ValidationMessage("the deletion is rolled back") }
        }
        let b = other.newBackgroundContext(name: "b")
        let seen = HookLog()
        b.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            let request = FetchRequest<Note>(predicate: \.title == "counted")
            seen.record("\(try reader.count(for: request, lockingRows: .keyShare))")
        }
        Checked(context: b).label = "b"

        let savingA = Saving(a)
        #expect(try await eventually { gate.isParked })
        let observer = try LockObserver(kind, store)
        defer { observer?.close() }
        let savingB = Saving(b)
        if let observer {  // B is queued on the row A is deleting
            #expect(try await eventually { try observer.rowWaiters(Note.self) == 1 })
        }
        try await pauseUnlessShown(by: observer)
        #expect(!savingB.isDone)
        gate.open()
        if deletionCommits {
            try await savingA.result()
        } else {
            await #expect(throws: PersistenceError.self) { try await savingA.result() }
        }
        try await savingB.result()
        #expect(seen.events == [deletionCommits ? "0" : "1"])
        #expect(try store.stored(FetchRequest<Note>()).count == (deletionCommits ? 0 : 1))
    }

    /// A row counted with a lock cannot be deleted before the counting save ends: the
    /// deleting save waits, and deletes the row once the count's save has committed.
    @Test(arguments: StoreKind.allCases) func aCountedRowsDeletionWaitsForTheCountingSave(_ kind: StoreKind)
        async throws
    {
        let store = try TestStore(kind, options: .patient)
        let seed = store.context("seed")
        let note = Note(context: seed)
        note.title = "counted"
        try seed.save()
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let gate = Gate()
        defer { gate.open() }
        let b = other.newBackgroundContext(name: "b")
        let seen = HookLog()
        b.userInfo["beforeCommit"] = { (reader: TransactionReader) in
            let request = FetchRequest<Note>(predicate: \.title == "counted")
            seen.record("\(try reader.count(for: request, lockingRows: .keyShare))")
            try gate.park()
        }
        Checked(context: b).label = "b"
        let a = store.context("a")
        a.delete(try a.existingObject(with: note.objectID, as: Note.self))

        let savingB = Saving(b)
        #expect(try await eventually { gate.isParked })
        let observer = try LockObserver(kind, store)
        defer { observer?.close() }
        let savingA = Saving(a)
        if let observer {  // A's deletion is queued on the row B counted
            #expect(try await eventually { try observer.rowWaiters(Note.self) == 1 })
        }
        try await pauseUnlessShown(by: observer)
        #expect(!savingA.isDone)
        gate.open()
        try await savingB.result()
        try await savingA.result()
        #expect(seen.events == ["1"])
        #expect(try store.stored(FetchRequest<Note>()).isEmpty)
    }
}

extension PersistentContainer.Options {
    /// Options whose SQLite busy timeout outlasts a save parked in these tests: the test
    /// that opens the gate may itself wait long for a thread of the shared pool.
    static var patient: Self {
        var options = Self()
        options.busyTimeout = 300
        return options
    }
}

/// A save run on a thread of its own, since it may wait for a lock; awaited without
/// blocking the concurrency pool.
final class Saving: @unchecked Sendable {
    private let lock = NSLock()
    private var outcome: Result<Void, any Error>?

    init(_ context: ManagedObjectContext) {
        let context = Unchecked(context)
        Thread { [self] in
            let result = Result { try context.value.performAndWait { try context.value.save() } }
            lock.withLock { outcome = result }
        }.start()
    }

    /// Whether the save has returned or thrown.
    var isDone: Bool { lock.withLock { outcome != nil } }

    /// Waits for the save to end (a generous guard, not a timing), then returns or throws
    /// as it did.
    func result() async throws {
        guard try await eventually({ isDone }) else { throw ValidationMessage("the save never ended") }
        try lock.withLock { outcome! }.get()
    }
}

/// Where a save parks, inside its transaction, until the test opens the gate.
final class Gate: @unchecked Sendable {
    private let condition = NSCondition()
    private var parked = false
    private var opened = false

    /// Parks the calling thread until ``open()``; throws after five minutes (a guard
    /// against a hang, never reached by a passing run).
    func park() throws {
        condition.lock()
        defer { condition.unlock() }
        parked = true
        let deadline = Date(timeIntervalSinceNow: 300)
        while !opened {
            guard condition.wait(until: deadline) else { throw ValidationMessage("the gate was never opened") }
        }
    }

    /// Whether a save is parked (or was).
    var isParked: Bool {
        condition.lock()
        defer { condition.unlock() }
        return parked
    }

    func open() {
        condition.lock()
        opened = true
        condition.broadcast()
        condition.unlock()
    }
}

/// Before a test checks that a save has not returned: on PostgreSQL the server has already
/// shown it waiting (`observer`), which proves it, and nothing is added. SQLite shows nothing of
/// a save in its busy handler, so a pause gives a save that was not waiting the time to return.
private func pauseUnlessShown(by observer: LockObserver?) async throws {
    guard observer == nil else { return }
    try await Task.sleep(for: .milliseconds(200))
}

/// Polls until `condition` holds, and says whether it did. The deadline only guards
/// against a hang: the suite shares two threads with tests that block them.
func eventually(_ condition: () throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(300)
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(5))
    }
    return try condition()
}

/// What the PostgreSQL server shows of a store's named locks, through a connection of its
/// own; `nil` on SQLite, which has no such locks to show.
private struct LockObserver {
    let connection: PostgreSQLConnection
    let schema: String
    let space: String

    init?(_ kind: StoreKind, _ store: TestStore) throws {
        guard kind == .postgresql else { return nil }
        let location = try PostgreSQLLocation(store.storeURL)
        connection = try PostgreSQLConnection(location, logger: Logger(label: "lock-observer"))
        schema = location.schema
        space = "persistence-lock:" + schema
    }

    /// How many transactions are queued on a row of `entity`'s table that another one
    /// holds: each holds the row's tuple lock while it waits (the one that holds the row
    /// does not).
    func rowWaiters(_ entity: ManagedObject.Type) throws -> Int64 {
        let table = "\"\(schema)\".\"\(entity.entityName)\""
        return try connection.run(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'tuple' AND relation = to_regclass($1)", [.text(table)]
        ).rows.first?.decode(Int64.self) ?? -1
    }

    /// The advisory locks of the name `name` held or asked for, as "MODE granted" or "MODE
    /// waiting": only in the two-`int4` form (`objsubid` 2), keyed by the store's schema and
    /// the name.
    func modes(_ name: String) throws -> [String] {
        try connection.run(
            """
            SELECT mode || CASE WHEN granted THEN ' granted' ELSE ' waiting' END FROM pg_locks \
            WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
            AND classid = hashtext($1)::oid AND objid = hashtext($2)::oid AND objsubid = 2
            """, [.text(space), .text(name)]
        ).rows.map { try $0.decode(String.self) }
    }

    func close() { connection.close() }
}
