/// One transaction of the store, opened by ``ManagedObjectContext/write(_:)``: what runs
/// inside it reads, counts, locks and deletes rows, and says what happens once it commits —
/// GRDB's `dbQueue.write { db in }` with its `afterNextTransaction`.
///
/// ```swift
/// let carriedOut = try context.write { transaction in
///     let plans = try transaction.fetch(FetchRequest<Plan>(limit: 100))
///     try transaction.delete(FetchRequest<Plan>(predicate: .objectIDs(plans.map(\.objectID))))
///     try transaction.lock("files", shared: false)
///     transaction.afterCommit { print("\(plans.count) plans gone") }
///     return plans.count
/// }
/// ```
///
/// Everything it does commits together when the body returns, or not at all when the body
/// (or anything the store runs for it: a delete rule, a hook) throws. What it reads sees
/// its own deletions and the store's committed state (on PostgreSQL, `READ COMMITTED`: as
/// of the start of each of its statements; on SQLite the transaction holds the store's one
/// write lock from its start, so no other writer commits meanwhile).
public struct StoreTransaction {
    let effects: SaveEffects
    /// The transaction as a ``SaveEffects/beforeCommit(_:)`` check reads it: for code that
    /// serves both (a lock both take).
    public let reader: TransactionReader
    let fetchRows: (StoreFetch) throws -> [StoreRow]
    let deleteRows: (StoreFetch) throws -> Int

    /// The rows `request` matches in the transaction, in its order, offset and limit, as
    /// snapshots (no object is made; the context does not register them).
    public func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ObjectSnapshot] {
        let fetch = request.storeFetch
        return try fetchRows(fetch).map { ObjectSnapshot(entity: fetch.entity, row: $0) }
    }

    /// How many rows match `request` in the transaction.
    public func count<T: ManagedObject>(for request: FetchRequest<T>) throws -> Int {
        try reader.count(for: request)
    }

    /// How many rows match `request` in the transaction, each locked with `lock` until it
    /// ends (``TransactionReader/count(for:lockingRows:)`` says what each store does).
    public func count<T: ManagedObject>(for request: FetchRequest<T>, lockingRows lock: RowLock) throws -> Int {
        try reader.count(for: request, lockingRows: lock)
    }

    /// Takes the lock named `name` and holds it until the transaction ends
    /// (``TransactionReader/lock(_:shared:)`` says what `shared` means and what each store
    /// does).
    public func lock(_ name: String, shared: Bool) throws {
        try reader.lock(name, shared: shared)
    }

    /// Deletes the rows `request` matches, with the schema's delete rules and the deleted
    /// entities' ``ManagedObject/willBatchDelete(_:effects:)`` hooks, as
    /// ``ManagedObjectContext/batchDelete(_:)`` does — but in this transaction, committed
    /// with the rest of it. Returns how many rows of `T` it deleted (rows its cascades
    /// reach not counted): a row another transaction deleted first is not counted.
    @discardableResult
    public func delete<T: ManagedObject>(_ request: FetchRequest<T>) throws -> Int {
        try deleteRows(request.storeFetch)
    }

    /// Runs `work` once the transaction has committed, before ``ManagedObjectContext/write(_:)``
    /// returns — never when it throws.
    public func afterCommit(_ work: @escaping () -> Void) {
        effects.afterCommit(work)
    }
}

extension ManagedObjectContext {
    /// Runs `body` in one transaction of the store and commits it: what `body` deletes
    /// through its ``StoreTransaction`` goes, what it locks stays locked until the commit,
    /// and its ``StoreTransaction/afterCommit(_:)`` work runs after the commit. Returns what
    /// `body` returns. When `body` throws, nothing it did is written and the error is thrown
    /// as it is.
    ///
    /// The context's own unsaved changes are not part of it (save them with ``save()``);
    /// contexts that merge automatically learn of the rows it deleted, as after a
    /// ``batchDelete(_:)``.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` in a child context or during a save; what
    ///   `body` or the store throws (nothing is written then).
    public func write<T>(_ body: (StoreTransaction) throws -> T) throws -> T {
        guard parent == nil else {
            throw PersistenceError(.misuse, "A transaction writes to the store; run it on a context without a parent")
        }
        guard !isSaving else {
            throw PersistenceError(.misuse, "write was called during a save (from a save hook)")
        }
        var result: T?
        let outcome = try withoutActuallyEscaping(body) { body in
            var changes = StoreChanges()  // dropped by the time `body` goes out of scope
            changes.work = { result = try body($0) }
            return try commitAlone(changes).0
        }
        let deleted = outcome.deletedRows.flatMap { name, ids in
            ids.map { ManagedObjectID(entityName: name, rowID: $0) }
        }
        if !deleted.isEmpty || !outcome.nullified.isEmpty {
            core.broadcast(
                SaveNotification(inserted: [], updated: outcome.nullified, deleted: deleted, contextName: name),
                from: nil)
        }
        guard let result else { preconditionFailure("the store committed a transaction without running its body") }
        return result
    }
}
