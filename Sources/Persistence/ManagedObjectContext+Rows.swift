import Foundation

extension ManagedObjectContext {
    // MARK: - Batch operations

    /// Adds `count` rows of `T` to the next ``save()``, written in its transaction together
    /// with the context's own changes, without making objects: the bulk form of inserting
    /// objects, for an import of many records that must commit with other changes or not
    /// at all. `configure` sets each row's values (others keep their defaults; a to-one
    /// relationship is set by ID). Returns the rows' IDs, reserved now, so that later rows
    /// and objects can point at them.
    ///
    /// No object stands for these rows, so `awakeFromInsert`, `validateForInsert` and
    /// `willSave` do not run for them: the save calls the entity's
    /// ``ManagedObject/willInsertRows(_:in:effects:)`` once, with all of them, instead
    /// (inside its transaction, as it writes them).
    /// The context does not register them (fetch them to work with them as objects);
    /// ``rollback()`` and ``reset()`` drop them, and a failed save keeps them for the
    /// next. Only a context without a parent takes rows: they go to the store.
    ///
    /// `configure` runs during this call and may not throw; for rows made by the save, a
    /// batch at a time, or a `configure` that throws, write `batchSize:`
    /// (``insertRows(_:count:batchSize:streaming:)``).
    ///
    /// ```swift
    /// let ids = try context.insertRows(Note.self, count: titles.count) { i, row in
    ///     row[\.title] = titles[i]
    /// }
    /// context.delete(draft)
    /// try context.save()  // the notes and the deletion: one transaction
    /// ```
    @discardableResult
    public func insertRows<T: ManagedObject>(
        _ type: T.Type, count: Int, _ configure: (Int, inout BatchInsertRow<T>) -> Void
    ) throws -> [ManagedObjectID] {
        try requireRowsAllowed()
        guard count > 0 else { return [] }
        let entity = self.entity(for: type)
        let ids = try core.store.reserveIDs(entity: entity, count: count)
        let rows = Self.rowValues(entity, 0..<count, configure)
        pendingRowChanges.insertions.append(
            .init(entity: entity, ids: ids.lowerBound..<ids.upperBound + 1, batchSize: count, listedByID: true) {
                Array(rows[$0])
            })
        return ids.map { ManagedObjectID(entityName: entity.name, rowID: $0) }
    }

    /// Adds `count` rows of `T` to the next ``save()`` like ``insertRows(_:count:_:)``, but
    /// produced by the save itself, `batchSize` at a time: an import of any size runs in
    /// constant memory. Returns the rows' IDs, reserved now and contiguous (row `i` gets
    /// `lowerBound + i`), so that later rows and objects can point at them; an empty range
    /// when `count` is 0.
    ///
    /// Nothing runs at the call. The save, inside its transaction and after writing the
    /// context's own changes (rows may point at objects it inserts), makes the rows in
    /// index order, a batch at a time: each starts from the entity's defaults and
    /// `configure` sets it; then the batch is checked as rows of ``insertRows(_:count:_:)``
    /// are, handed to the entity's ``ManagedObject/willInsertRows(_:in:effects:)`` and
    /// written. Only one batch is in memory. Rows planned through the hook's effects and
    /// its `beforeCommit` work come after every row is written. Rows of both forms of
    /// `insertRows` are written in the order they were added.
    ///
    /// If `configure` or the hook throws, the save throws that error and writes nothing;
    /// the rows stay pending. A later save, or a save that restarts after the merge policy
    /// resolved a conflict, makes them again from index 0: `configure` must give the same
    /// row each time it is called for an index. ``rollback()`` and ``reset()`` drop them;
    /// the save notification names them by range (``SaveNotification/insertedRowRanges``),
    /// not by ID. Only a context without a parent takes rows.
    ///
    /// The `batchSize:` label, which has no default, is what selects this form: a call
    /// without it is ``insertRows(_:count:_:)``, whose closure runs at once and may not
    /// throw (a throwing one does not compile). Which form runs never depends on
    /// whether the closure throws.
    ///
    /// ```swift
    /// let ids = try context.insertRows(Note.self, count: file.recordCount, batchSize: 1_000) { i, row in
    ///     row[\.title] = try file.record(at: i).title  // read during the save
    /// }
    /// context.delete(draft)
    /// try context.save()  // the notes, 1,000 at a time, and the deletion: one transaction
    /// ```
    @discardableResult
    public func insertRows<T: ManagedObject>(
        _ type: T.Type, count: Int, batchSize: Int,
        streaming configure: @escaping (Int, inout BatchInsertRow<T>) throws -> Void
    ) throws -> Range<Int64> {
        try requireRowsAllowed()
        guard batchSize > 0 else { throw PersistenceError(.misuse, "batchSize must be at least 1, not \(batchSize)") }
        guard count > 0 else { return 0..<0 }
        let entity = self.entity(for: type)
        let reserved = try core.store.reserveIDs(entity: entity, count: count)
        let ids = reserved.lowerBound..<reserved.upperBound + 1
        pendingRowChanges.insertions.append(
            .init(entity: entity, ids: ids, batchSize: batchSize, listedByID: false) { indexes in
                try Self.rowValues(entity, indexes, configure)
            })
        return ids
    }

    /// Deletes rows of `T` by ID in the next ``save()``, in its transaction, without making
    /// an object for any of them: the bulk form of deleting objects, for a change that
    /// replaces many records and must commit with its inserts or not at all. `pages` names
    /// the rows a page at a time, so a deletion of any size runs in constant memory.
    ///
    /// Nothing runs at the call. The save, inside its transaction — after the context's own
    /// deletions and updates, before its inserts and rows — calls `pages` with 0, then
    /// with the last ID of each page it got, until a page is empty; each page must list
    /// IDs in ascending order above the one asked for. An ID with no row is passed over.
    /// For each page, as ``batchDelete(_:)`` does: delete rules apply (cascade, a page of
    /// members at a time; nullify; deny refuses the save), each entity whose rows go gets
    /// ``ManagedObject/willBatchDelete(_:effects:)`` with this save's effects, and the rows
    /// it plans are written with the page. `prepareForDeletion` and `willSave` do not run:
    /// no object stands for these rows. A row or object this save inserts must not point at
    /// a deleted row, nor may an object it updates, or a row the hooks plan (the save throws
    /// `validation`).
    ///
    /// If `pages` or a `willBatchDelete` hook throws, the save throws that error and writes nothing; the
    /// deletions stay pending, and the next save, or one that restarts after the merge
    /// policy resolved a conflict, asks for the pages again from 0. ``rollback()`` and
    /// ``reset()`` drop them. Objects of this context for deleted rows leave it after the
    /// save; the save notification names the rows by range
    /// (``SaveNotification/deletedRowRanges``), not by ID, and the rows the hooks planned
    /// in ``SaveNotification/insertedRowRanges``. Only a context without a parent takes
    /// row deletions.
    ///
    /// ```swift
    /// context.deleteRows(Note.self) { after in try replaced.ids(after: after, limit: 500) }
    /// _ = try context.insertRows(Note.self, count: incoming.count, batchSize: 1_000, streaming: { i, row in
    ///     row[\.title] = try incoming.record(at: i).title
    /// })
    /// try context.save()  // the old notes go and the new ones come: one transaction
    /// ```
    public func deleteRows<T: ManagedObject>(_ type: T.Type, pages: @escaping (_ after: Int64) throws -> [Int64])
        throws
    {
        try requireRowsAllowed(deleting: true)
        pendingRowChanges.deletions.append(.init(entity: entity(for: type), selection: .pages(pages)))
    }

    /// The pending row changes as this save writes them: each batch of an insertion checked,
    /// as objects are, for a row that points at an object this save deletes, then handed to
    /// its entity's ``ManagedObject/willInsertRows(_:in:effects:)``.
    func rowChangesToWrite(_ effects: SaveEffects) -> RowChanges {
        var changes = pendingRowChanges
        guard !changes.insertions.isEmpty else { return changes }
        // What this save deletes, read now: the batches are made on the store's writer.
        var deleting: [String: Set<Int64>] = [:]
        for o in deletedList where o.pendingDelete && registered[o.objectID] === o {
            deleting[o.entity.name, default: []].insert(o.objectID.rowID)
        }
        changes.insertions = changes.insertions.map { insertion in
            let entity = insertion.entity
            let produce = insertion.rows
            // The to-one relationships that could point at a deleted object.
            let checked = entity.storedProperties.compactMap { property -> (PropertyDescription, String, Set<Int64>)? in
                guard case .toOne(let destination) = property.kind, let ids = deleting[destination] else { return nil }
                return (property, destination, ids)
            }
            var announced = insertion
            announced.rows = { indexes in
                let rows = try produce(indexes)
                var snapshots: [ObjectSnapshot] = []
                snapshots.reserveCapacity(rows.count)
                for (i, values) in zip(indexes, rows) {
                    let id = insertion.ids.lowerBound + Int64(i)
                    for (property, destination, deleted) in checked {
                        guard case .integer(let target) = values[property.slot!], deleted.contains(target) else {
                            continue
                        }
                        throw PersistenceError.pointsAtDeleted(
                            ManagedObjectID(entityName: entity.name, rowID: id), property,
                            ManagedObjectID(entityName: destination, rowID: target))
                    }
                    snapshots.append(ObjectSnapshot(entity: entity, id: id, values: values))
                }
                try entity.objectType.willInsertRows(snapshots, in: self, effects: effects)
                return rows
            }
            return announced
        }
        return changes
    }

    /// Rows go to the store (no parent), and are added before a save, not during one.
    private func requireRowsAllowed(deleting: Bool = false) throws {
        guard parent == nil else {
            throw PersistenceError(
                .misuse,
                "Rows are written to the store; \(deleting ? "delete" : "insert") them in a context without a parent")
        }
        guard !isSaving else {
            throw PersistenceError(
                .misuse,
                deleting
                    ? "deleteRows was called during a save (from a save hook); delete rows before save()"
                    : "insertRows was called during a save (from a save hook); add rows before save()")
        }
    }

    /// The values of the rows at `indexes` of an entity: its defaults, then what `configure` sets.
    private static func rowValues<T: ManagedObject>(
        _ entity: EntityDescription, _ indexes: Range<Int>, _ configure: (Int, inout BatchInsertRow<T>) throws -> Void
    ) rethrows -> [[StoreValue]] {
        var rows: [[StoreValue]] = []
        rows.reserveCapacity(indexes.count)
        var row = BatchInsertRow<T>(entity: entity)
        for i in indexes {
            row.values = entity.defaultValues
            try configure(i, &row)
            rows.append(row.values)
        }
        return rows
    }

    /// Deletes every row `request` matches, in set-based SQL without loading
    /// objects. Delete rules apply (cascade, nullify, deny), and each entity
    /// whose rows go gets ``ManagedObject/willBatchDelete(_:effects:)`` inside
    /// the transaction — so clean-up planned there (journal rows, after-commit
    /// work) happens for batch deletes too. Returns a notification with the
    /// deleted and nullified IDs: pass it to ``mergeChanges(from:)`` of live
    /// contexts (contexts that merge automatically get it anyway).
    ///
    /// The rows are selected and deleted a page at a time, in one transaction: each page is
    /// the matching rows with IDs above the last page's, selected when it is read, so memory
    /// holds one page however many rows match. What earlier pages did is seen: a row that
    /// matches by then (written or changed by a hook or a cascade) goes if its ID is above
    /// the last page's and stays if below; a row that no longer matches stays. A request
    /// with a limit or an offset deletes the rows of that window, listed first. If a hook or
    /// a delete rule throws on any page, nothing is written.
    @discardableResult
    public func batchDelete<T: ManagedObject>(_ request: FetchRequest<T>) throws -> SaveNotification {
        try batchDelete(request, namingRowsByRange: false)
    }

    /// Deletes every row `request` matches, as ``batchDelete(_:)`` does, but names the
    /// deleted rows in the returned notification by range
    /// (``SaveNotification/deletedRowRanges``), as a save's
    /// ``deleteRows(_:pages:)`` does, rather than by ID: a deletion of a million consecutive
    /// rows is a few ranges, not a million IDs. Rows its delete rules nullify are still
    /// named by ID (``SaveNotification/updatedObjectIDs``). Pass the notification to
    /// ``mergeChanges(from:)`` of live contexts as for ``batchDelete(_:)``.
    @discardableResult
    public func batchDeleteNamingRanges<T: ManagedObject>(_ request: FetchRequest<T>) throws -> SaveNotification {
        try batchDelete(request, namingRowsByRange: true)
    }

    /// Claims up to `limit` rows that `request` matches, lowest IDs first (or in the
    /// request's order), and changes them, in one transaction of its own: the rows no other
    /// claim gets. For a queue of work shared by several processes or hosts — jobs claimed
    /// by workers — where fetching rows and then saving them would make workers that fetched
    /// the same rows conflict.
    ///
    /// `update` is called for each selected row, inside the transaction, with the row as it
    /// is there and a ``BatchUpdateRow`` that starts with its values; what it sets is
    /// written, and the row's version goes up by one (an object of it that a context holds
    /// is then out of date: its save conflicts, as after any other save of the row). Returns
    /// the claimed rows as written, in the order they were selected; empty when none is
    /// free. A save notification names them (``SaveNotification/updatedObjectIDs``), and
    /// contexts that merge automatically get it.
    ///
    /// - PostgreSQL: `SELECT … FOR UPDATE SKIP LOCKED`, then one `UPDATE` of the selected
    ///   rows, then `COMMIT`: rows another transaction holds (another claim's, a save's) are
    ///   passed over, not waited for; a row another transaction changed and committed
    ///   meanwhile is checked against the predicate again and left if it no longer matches.
    ///   Concurrent claims get disjoint rows, and no claim throws a conflict.
    /// - SQLite: the same in one write transaction, which holds the store's one write lock:
    ///   claims run one at a time, each seeing what the previous committed.
    ///
    /// A request's offset is refused; its limit, if it has one, caps `limit`.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` in a child context, during a save, for a
    ///   `limit` under 1 or a request with an offset; what the store throws (nothing is
    ///   claimed then).
    public func claimRows<T: ManagedObject>(
        _ request: FetchRequest<T>, limit: Int, update: (ObjectSnapshot, inout BatchUpdateRow<T>) -> Void
    ) throws -> [ObjectSnapshot] {
        guard parent == nil else {
            throw PersistenceError(.misuse, "Claims write to the store; claim rows in a context without a parent")
        }
        guard !isSaving else {
            throw PersistenceError(.misuse, "claimRows was called during a save (from a save hook)")
        }
        guard limit > 0 else { throw PersistenceError(.misuse, "A claim's limit must be at least 1, not \(limit)") }
        var fetch = request.storeFetch
        guard fetch.offset == 0 else {
            throw PersistenceError(.misuse, "A claim takes the first rows that match: its request has no offset")
        }
        fetch.limit = min(limit, fetch.limit ?? limit)
        let entity = fetch.entity
        let rows = try core.store.claimRows(fetch) { rows in
            rows.map { row in
                var change = BatchUpdateRow<T>(entity: entity, values: row.values)
                update(ObjectSnapshot(entity: entity, row: row), &change)
                let slots = change.changed.sorted()
                return RowUpdate(slots: slots, values: slots.map { change.values[$0] })
            }
        }
        guard !rows.isEmpty else { return [] }
        let ids = rows.map { ManagedObjectID(entityName: entity.name, rowID: $0.id) }
        core.broadcast(SaveNotification(inserted: [], updated: ids, deleted: [], contextName: name), from: nil)
        return rows.map { ObjectSnapshot(entity: entity, row: $0) }
    }

    private func batchDelete<T: ManagedObject>(_ request: FetchRequest<T>, namingRowsByRange: Bool) throws
        -> SaveNotification
    {
        guard parent == nil else {
            throw PersistenceError(
                .misuse, "Batch operations write to the store; run them on a context without a parent")
        }
        // One deletion of rows, alone in its transaction.
        var changes = StoreChanges()
        let fetch = request.storeFetch
        changes.rows.deletions = [.init(entity: fetch.entity, selection: .matching(fetch))]
        let (outcome, effects) = try commitAlone(changes)
        let note =
            namingRowsByRange
            ? SaveNotification(
                inserted: [], updated: outcome.nullified, deleted: [], contextName: name,
                insertedRowRanges: effects.rowRanges.mapValues(\.ranges),
                deletedRowRanges: outcome.deletedRows.mapValues(\.ranges))
            : SaveNotification(
                inserted: [], updated: outcome.nullified,
                deleted: outcome.deletedRows.flatMap { name, ids in
                    ids.map { ManagedObjectID(entityName: name, rowID: $0) }
                },
                contextName: name, insertedRowRanges: effects.rowRanges.mapValues(\.ranges))
        core.broadcast(note, from: nil)
        return note
    }

    /// Commits `changes` in a transaction of their own — a batch delete's, an explicit
    /// transaction's — whose hooks run inside it: the effects' work after the commit runs, or
    /// on a failure their failure work, and the error is thrown as it is.
    func commitAlone(_ changes: StoreChanges) throws -> (StoreSaveResult, SaveEffects) {
        let effects = SaveEffects(commitsToStore: true, userInfo: userInfo, values: values)
        effects.deletionsTaken = true  // the hooks run inside the transaction
        var changes = changes
        changes.wrapsCommitFailures = false
        let outcome: StoreSaveResult
        do {
            outcome = try core.store.save(changes, effects: effects)
        } catch {
            effects.runOnFailure()
            throw error
        }
        effects.runAfterCommit()
        return (outcome, effects)
    }
}

/// One row of ``ManagedObjectContext/insertRows(_:count:_:)`` or
/// ``ManagedObjectContext/insertRows(_:count:batchSize:streaming:)``.
public struct BatchInsertRow<Root: ManagedObject> {
    let entity: EntityDescription
    var values: [StoreValue] = []

    init(entity: EntityDescription) { self.entity = entity }

    /// The value of an attribute of this row.
    public subscript<Value: AttributeValue>(keyPath: KeyPath<Root, Value>) -> Value {
        get {
            let property = entity.propertyOrDie(for: keyPath)
            return Value(storeValue: values[property.slot!]) ?? Value(storeValue: property.defaultValue)!
        }
        // Inlined, so that the caller's module specializes it for `Value`: an insertion sets
        // a dozen fields a row.
        @inlinable set { setStored(newValue.storeValue, for: keyPath) }
    }

    /// Sets the stored value of the property `keyPath` names.
    @usableFromInline
    mutating func setStored(_ value: StoreValue, for keyPath: AnyKeyPath) {
        values[entity.slotOrDie(for: keyPath)] = value
    }

    /// The destination of a to-one relationship of this row, by ID.
    public subscript<Destination: ManagedObject>(keyPath: KeyPath<Root, Destination?>) -> ManagedObjectID? {
        get {
            guard case .integer(let row) = values[entity.slotOrDie(for: keyPath)] else { return nil }
            return ManagedObjectID(entityName: Destination.entityName, rowID: row)
        }
        set { values[entity.slotOrDie(for: keyPath)] = newValue.map { .integer($0.rowID) } ?? .null }
    }
}

/// The change of one row that ``ManagedObjectContext/claimRows(_:limit:update:)`` claims: it
/// starts with the row's values, and what is set is written.
public struct BatchUpdateRow<Root: ManagedObject> {
    let entity: EntityDescription
    var values: [StoreValue]
    /// The slots set.
    var changed: Set<Int> = []

    init(entity: EntityDescription, values: [StoreValue]) {
        self.entity = entity
        self.values = values
    }

    /// The value of an attribute of this row: what was set, else the row's.
    public subscript<Value: AttributeValue>(keyPath: KeyPath<Root, Value>) -> Value {
        get {
            let property = entity.propertyOrDie(for: keyPath)
            return Value(storeValue: values[property.slot!]) ?? Value(storeValue: property.defaultValue)!
        }
        set {
            let slot = entity.slotOrDie(for: keyPath)
            values[slot] = newValue.storeValue
            changed.insert(slot)
        }
    }

    /// The destination of a to-one relationship of this row, by ID.
    public subscript<Destination: ManagedObject>(keyPath: KeyPath<Root, Destination?>) -> ManagedObjectID? {
        get {
            guard case .integer(let row) = values[entity.slotOrDie(for: keyPath)] else { return nil }
            return ManagedObjectID(entityName: Destination.entityName, rowID: row)
        }
        set {
            let slot = entity.slotOrDie(for: keyPath)
            values[slot] = newValue.map { .integer($0.rowID) } ?? .null
            changed.insert(slot)
        }
    }
}
