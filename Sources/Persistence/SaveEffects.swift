/// The side effects bound to one save: rows written in the save's own
/// transaction, and work that runs only after that transaction commits.
///
/// This is how an object makes something happen *because its change was
/// committed* — never before, never for a save that fails or is rolled back.
/// In ``ManagedObject/willSave()`` (or a batch-delete hook), an object reaches
/// its save's effects through ``ManagedObject/saveEffects``:
///
/// ```swift
/// override func willSave() {
///     guard isDeleted, let path = localPath else { return }
///     // (a) a journal row, committed or rolled back with the deletion itself
///     saveEffects?.insert(RemovalPlan.self) { $0.path = path }
///     // (b) the removal, only once the deletion is durable
///     saveEffects?.afterCommit { sweeper.sweep() }
/// }
/// ```
///
/// Guarantees:
/// - Rows inserted with ``insert(_:_:)`` are written in the same transaction
///   as the save's own changes: both are committed, or neither.
/// - ``afterCommit(_:)`` work runs after the commit of a save to the store,
///   on the saving context's queue, before `save()` returns. It never runs if
///   the save throws.
/// - A save of a child context reaches only its parent, not the store: its
///   effects are accepted and discarded (``commitsToStore`` is `false`). The
///   parent's own save calls `willSave` again and registers them for real.
/// - ``beforeCommit(_:)`` work runs inside the transaction, after its
///   writes and before `COMMIT`. Throwing aborts the save. On SQLite the
///   transaction holds the store's one write lock: no other writer (context,
///   container or process) commits in between, so a check there cannot race
///   with another writer. On PostgreSQL it does not: transactions are `READ
///   COMMITTED` and other writers (hosts) commit meanwhile; each statement of
///   a check sees what they had committed when it started, never their
///   uncommitted rows. Saves that must not interleave take a named lock:
///   ``lockFirst(_:shared:)`` or ``TransactionReader/lock(_:shared:)``.
/// - ``onFailure(_:)`` work runs when the save throws after `willSave` ran
///   (validation, constraint, conflict, I/O): use it to undo what a hook did
///   in memory. The context still has its unsaved changes.
public final class SaveEffects {
    /// Whether this save will commit to the store. `false` for the save of a
    /// child context, whose effects are discarded.
    public let commitsToStore: Bool
    /// The ``ManagedObjectContext/userInfo`` of the context that saves (or runs the batch
    /// delete), for hooks that have no object to reach it through
    /// (``ManagedObject/willBatchDelete(_:effects:)``).
    public let userInfo: [String: Any]
    /// The typed values of the context that saves (``subscript(_:)``).
    private let values: ContextValues

    /// Rows to insert; their IDs are reserved by the store inside the
    /// save's transaction (so a failed save leaves no gap), then filled in.
    package var rows: [StoreChanges.Insert] = []
    /// The IDs of rows already written, by entity name: those planned by the hooks of
    /// deletions without objects, written with each page.
    package var rowRanges: [String: RowIDSet] = [:]
    /// Rows to delete, planned by `willSave` (``delete(_:)``): written with the save's
    /// deletions of rows, before its inserts.
    var rowDeletions: [RowChanges.Deletion] = []
    /// Whether the save's changes went to the store: ``delete(_:)`` is too late.
    var deletionsTaken = false
    /// The named locks the save takes first in its transaction (``lockFirst(_:shared:)``):
    /// whether each is shared, by name.
    private var firstLocks: [String: Bool] = [:]
    var beforeTransactionWork: [() throws -> Void] = []
    package var beforeCommitWork: [(TransactionReader) throws -> Void] = []
    var afterCommitWork: [() -> Void] = []
    var onFailureWork: [() -> Void] = []
    /// What the save announces once committed (``announce(_:payload:)``), in order.
    package var announcements: [Announcement] = []
    private var sharedValues: [ObjectIdentifier: AnyObject] = [:]

    package init(commitsToStore: Bool, userInfo: [String: Any] = [:], values: ContextValues = .init()) {
        self.commitsToStore = commitsToStore
        self.userInfo = userInfo
        self.values = values
    }

    /// The value the saving context (or the context that runs the batch delete or the
    /// transaction) carries for `key` (``ManagedObjectContext/subscript(_:)``), for hooks
    /// that have no object to reach it through (``ManagedObject/willBatchDelete(_:effects:)``).
    public subscript<Key: ContextKey>(_ key: Key.Type) -> Key.Value? {
        values[key]
    }

    /// Adds a row of entity `T`, configured by `configure`, to the save's
    /// transaction. The object passed to `configure` is not inserted in any
    /// context: only its values are written. Its `awakeFromInsert` runs first.
    public func insert<T: ManagedObject>(_ type: T.Type, _ configure: (T) -> Void) {
        let entity = T.entityDescription
        let object = T(
            ObjectInitToken(entity: entity, objectID: .init(entityName: entity.name, rowID: 0), context: nil))
        object.awakeFromInsert()
        configure(object)
        guard commitsToStore else { return }
        rows.append(.init(entity: entity, id: 0, values: object.values))
    }

    /// Adds a row of entity `T` to the save's transaction, its values set by `configure` on
    /// the entity's defaults — attributes, and to-one relationships by ID, so a row can point
    /// at an object of the saving context (its ID is final) without being an object itself.
    /// Written as ``insert(_:_:)``'s rows are; no hook of `T` runs.
    public func insertRow<T: ManagedObject>(_ type: T.Type, _ configure: (inout BatchInsertRow<T>) -> Void) {
        guard commitsToStore else { return }
        let entity = T.entityDescription
        var row = BatchInsertRow<T>(entity: entity)
        row.values = entity.defaultValues
        configure(&row)
        rows.append(.init(entity: entity, id: 0, values: row.values))
    }

    /// Deletes the rows `request` matches in the save's transaction (with the schema's
    /// delete rules, as ``ManagedObjectContext/batchDelete(_:)`` does), after the save's
    /// deletions and updates of objects and before its inserts: the rows that match go, selected
    /// a page at a time as ``ManagedObjectContext/batchDelete(_:)`` selects them. The objects of live contexts are not touched: use it for rows
    /// no context holds as objects (rows kept in step with an object's values).
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` when called after `willSave` (from a
    ///   batch-delete or insert-rows hook, which run inside the transaction).
    public func delete<T: ManagedObject>(_ request: FetchRequest<T>) throws {
        guard !deletionsTaken else {
            throw PersistenceError(
                .misuse, "SaveEffects.delete(\(T.entityName)) was called inside the transaction; call it from willSave")
        }
        guard commitsToStore else { return }
        let fetch = request.storeFetch
        rowDeletions.append(.init(entity: fetch.entity, selection: .matching(fetch)))
    }

    /// Runs `work` once every `willSave` pass of the save is over, before its transaction
    /// begins (never for a child context's save). An object's `willSave` can run more than
    /// once in a save (when a hook changes it again); work that writes rows from an
    /// object's final state gathers that state in ``shared(_:_:)`` and plans its rows here,
    /// where ``insert(_:_:)``, ``insertRow(_:_:)`` and ``delete(_:)`` still apply. Throwing
    /// aborts the save: nothing is written.
    public func beforeTransaction(_ work: @escaping () throws -> Void) {
        if commitsToStore { beforeTransactionWork.append(work) }
    }

    /// Takes the lock named `name` first thing in the save's transaction — right after it
    /// begins, before the save writes or reads anything there — and holds it until the
    /// transaction ends (commit or rollback). Call it from `willSave` or
    /// ``beforeTransaction(_:)``; inside the transaction (a batch-delete or insert-rows hook,
    /// a ``beforeCommit(_:)`` check) take the lock with ``TransactionReader/lock(_:shared:)``.
    /// Does nothing for a child context's save, or a save that writes nothing.
    ///
    /// A named lock means what its users agree on; the store only keeps the rule: holders
    /// of a `shared` lock exclude holders of the exclusive one (`shared: false`) and not each
    /// other, an exclusive holder excludes every other holder, in every container and
    /// process on the store. A save that has to wait waits until the holder's
    /// transaction ends; once it has the lock, it sees what the holder committed. Asked for
    /// more than once in a save, a name is taken once, exclusive if any asked so; several
    /// names are taken in the order of their names, so two saves that take the same names
    /// first cannot deadlock on them.
    ///
    /// - PostgreSQL: a transaction-scoped advisory lock (`pg_advisory_xact_lock`, or
    ///   `pg_advisory_xact_lock_shared`), keyed by the store's schema and the name. Its wait
    ///   has no limit; a deadlock with other locks is found by the server, and fails one
    ///   of the saves.
    /// - SQLite: nothing more is taken. The save's transaction holds the store's one write
    ///   lock from its start, which excludes every other writer: a named lock, shared or
    ///   not, is held already — and two holders of a shared lock run one after the other.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` when called inside the transaction, or
    ///   with an empty name.
    public func lockFirst(_ name: String, shared: Bool) throws {
        guard !deletionsTaken else {
            throw PersistenceError(
                .misuse,
                "SaveEffects.lockFirst(\"\(name)\") was called inside the transaction; call it from willSave, or "
                    + "take the lock with TransactionReader.lock(_:shared:)")
        }
        try TransactionReader.requireLockName(name)
        guard commitsToStore else { return }
        firstLocks[name] = (firstLocks[name] ?? true) && shared
    }

    /// The locks of ``lockFirst(_:shared:)``, in the order a store takes them (by name).
    package var locksToTakeFirst: [(name: String, shared: Bool)] {
        firstLocks.sorted { $0.key < $1.key }.map { (name: $0.key, shared: $0.value) }
    }

    /// Runs `check` inside the save's transaction, after all its writes and
    /// before `COMMIT`. `check` can read the transaction's state through the
    /// reader. Throwing aborts the save: nothing is written. Not run for a
    /// child context's save.
    ///
    /// On SQLite the store's write lock is held (no other process or context
    /// can commit in between). On PostgreSQL other writers commit meanwhile:
    /// a count sees their commits up to its own start, not their work in
    /// progress.
    public func beforeCommit(_ check: @escaping (TransactionReader) throws -> Void) {
        if commitsToStore { beforeCommitWork.append(check) }
    }

    /// Runs `work` after the save commits to the store (never for a child
    /// context's save, a failed save or a rolled-back one).
    public func afterCommit(_ work: @escaping () -> Void) {
        if commitsToStore { afterCommitWork.append(work) }
    }

    /// Announces `topic` with `payload` to every container on the store — in this process,
    /// in others, on other hosts — once the save commits: their
    /// ``PersistentContainer/announcements()`` deliver it. A save that fails or is rolled
    /// back announces nothing; a child context's save announces nothing (its parent's save
    /// announces what its hooks ask for again). Can be called from `willSave`, a
    /// batch-delete or insert-rows hook, or a ``beforeCommit(_:)`` check.
    ///
    /// For rare events that others must hear of at once, not for every save: on
    /// PostgreSQL it is `pg_notify` in the save's transaction, and the server commits
    /// notifying transactions one at a time, database-wide. A receiver gets an announcement
    /// at most once, and may miss it when its connection is lost — it then gets the re-read
    /// marker (``Announcement/reread``) instead and looks at the store itself.
    ///
    /// - SQLite: the announcing container's own listeners get it as sent; every other
    ///   container (in this process or another) is woken by the commit as by any other
    ///   and gets the re-read marker.
    /// - PostgreSQL: every listening container gets it as sent, from the server
    ///   (`LISTEN`/`NOTIFY`), this one too.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` for an empty topic or
    ///   ``Announcement/rereadTopic``, a NUL character, or more than
    ///   ``Announcement/maximumBytes`` of topic and payload (PostgreSQL's limit; test with
    ///   ``Announcement/fits(topic:payload:)`` and announce less). Nothing is announced then.
    public func announce(_ topic: String, payload: String) throws {
        try Announcement.check(topic: topic, payload: payload)
        guard commitsToStore else { return }
        announcements.append(Announcement(topic: topic, payload: payload, isFromThisProcess: true))
    }

    /// Runs `work` if this save fails after `willSave` ran.
    public func onFailure(_ work: @escaping () -> Void) {
        onFailureWork.append(work)
    }

    /// The value of type `T` the hooks of this save share: made by `make` the first time it
    /// is asked for, the same object after (the type is the key: one value of each type a
    /// save). Through it, the hooks of many objects gather into one piece of work — `make`
    /// registers it — instead of one each: a save that deletes a hundred thousand objects
    /// sweeps once, not a hundred thousand times.
    ///
    /// ```swift
    /// final class DeletedNotes { var ids: [Int64] = [] }
    ///
    /// override func willSave() {
    ///     guard isDeleted, let effects = saveEffects else { return }
    ///     let gone = effects.shared(DeletedNotes.self) {
    ///         let gone = DeletedNotes()
    ///         effects.afterCommit { index.remove(gone.ids) }
    ///         return gone
    ///     }
    ///     gone.ids.append(objectID.rowID)
    /// }
    /// ```
    ///
    /// A save that restarts (after the merge policy resolved a conflict) starts with no
    /// shared values, as its hooks run again.
    public func shared<T: AnyObject>(_ type: T.Type, _ make: () -> T) -> T {
        let key = ObjectIdentifier(type)
        if let value = sharedValues[key] as? T { return value }
        let value = make()
        sharedValues[key] = value
        return value
    }

    func runAfterCommit() {
        let work = afterCommitWork
        afterCommitWork = []
        for w in work { w() }
    }

    func runOnFailure() {
        let work = onFailureWork
        onFailureWork = []
        for w in work { w() }
    }
}

/// How ``TransactionReader/count(for:lockingRows:)`` locks the rows it counts.
public enum RowLock: Sendable {
    /// A row is kept from being deleted by another transaction (on PostgreSQL,
    /// `FOR KEY SHARE`); changes of its values are not held off.
    case keyShare
}

/// Read access to a save's own transaction, for ``SaveEffects/beforeCommit(_:)``.
/// It sees the save's writes and the latest committed state of the store (on
/// PostgreSQL, as of the start of each of its statements).
public struct TransactionReader {
    let countRows: (StoreFetch, RowLock?) throws -> Int
    let takeLock: (_ name: String, _ shared: Bool) throws -> Void

    /// A reader that counts rows with `countRows` (locking them as asked) and takes named
    /// locks with `lock`, inside a store's transaction.
    package init(
        countRows: @escaping (StoreFetch, _ locking: RowLock?) throws -> Int,
        lock: @escaping (_ name: String, _ shared: Bool) throws -> Void
    ) {
        self.countRows = countRows
        takeLock = lock
    }

    /// How many rows match `request` in the transaction (pending changes of
    /// contexts do not count: only what the transaction has written).
    public func count<T: ManagedObject>(for request: FetchRequest<T>) throws -> Int {
        try countRows(request.storeFetch, nil)
    }

    /// How many rows match `request` in the transaction, as ``count(for:)`` counts them,
    /// each row counted locked with `lock` until the transaction ends: a check that rows
    /// exist which another transaction's deletion cannot make wrong before this one
    /// commits.
    ///
    /// On PostgreSQL (`FOR KEY SHARE`): a matching row that another transaction is
    /// deleting when the count runs is waited for, until that transaction ends, and
    /// counted only if it is still there then; a counted row's deletion by another
    /// transaction waits until this one ends. Changes of a row's values are neither waited
    /// for nor held off, and rows other transactions insert are counted only once
    /// committed. On SQLite it is ``count(for:)``: the transaction holds the store's one
    /// write lock, so no other transaction deletes a row before it ends.
    public func count<T: ManagedObject>(for request: FetchRequest<T>, lockingRows lock: RowLock) throws -> Int {
        try countRows(request.storeFetch, lock)
    }

    /// Takes the lock named `name` now, and holds it until the transaction ends (commit or
    /// rollback): the named lock of ``SaveEffects/lockFirst(_:shared:)`` (see there for
    /// what `shared` means and what each store does), taken at this point of the
    /// transaction rather than first. Returns once it is held. A count after it sees
    /// what the lock's last holder committed.
    ///
    /// Taking locks inside the transaction, after its writes, risks a deadlock with a
    /// save that took them first and then waits for those rows: take them in one order
    /// everywhere. Ask for the strongest mode first: a shared holder that asks again for the
    /// exclusive lock waits for the other shared holders.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` for an empty name; what the store throws
    ///   when the lock cannot be taken (a deadlock found by the server, a lost connection).
    public func lock(_ name: String, shared: Bool) throws {
        try Self.requireLockName(name)
        try takeLock(name, shared)
    }

    static func requireLockName(_ name: String) throws {
        guard !name.isEmpty else { throw PersistenceError(.misuse, "A named lock needs a name: the name is empty") }
    }
}
