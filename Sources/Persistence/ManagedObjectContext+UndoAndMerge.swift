import Foundation

extension ManagedObjectContext {
    // MARK: - Undoing

    /// Discards every unsaved change: deleted objects come back (their
    /// ``ManagedObject/awakeFromSnapshotEvents(_:)`` gets `.undoDeletion`),
    /// inserted ones leave the context, changed values return to their
    /// committed state.
    public func rollback() {
        deferredErrors = []
        pendingRowChanges = RowChanges()
        for o in insertedList {
            registered[o.objectID] = nil
            o.pendingInsert = false
            o.pendingDelete = false
            o.pendingUpdate = false
            o.managedObjectContext = nil
        }
        let undeleted = deletedList.filter { !$0.pendingInsert && $0.pendingDelete }
        for o in updatedList + deletedList where !o.pendingInsert {
            let changed = o.pendingUpdate
            o.pendingDelete = false
            o.pendingUpdate = false
            if !o.snapshot.isEmpty { o.values = o.snapshot }
            if changed && !undeleted.contains(where: { $0 === o }) { o.awakeFromSnapshotEvents(.rollback) }
        }
        // Changes made with primitive setters only.
        for o in registered.values where o.faultState == .loaded && !o.snapshot.isEmpty && o.values != o.snapshot {
            o.values = o.snapshot
            o.awakeFromSnapshotEvents(.rollback)
        }
        insertedList = []
        updatedList = []
        deletedList = []
        for o in undeleted { o.awakeFromSnapshotEvents(.undoDeletion) }
    }

    /// Forgets every object: each loaded one turns into a fault and leaves
    /// the context. Unsaved changes are lost; unsaved deletions are reported
    /// to ``discardedDeletionsHandler``.
    public func reset() {
        // Deletions forgotten unsaved are discarded, as if the context were.
        let discarded = deletedList.filter { $0.pendingDelete && !$0.pendingInsert }.map(\.objectID)
        defer { if !discarded.isEmpty { discardedDeletionsHandler?(Set(discarded)) } }
        let objects = Array(registered.values)
        registered = [:]
        insertedList = []
        updatedList = []
        deletedList = []
        pendingRowChanges = RowChanges()
        deferredErrors = []
        for o in objects {
            o.pendingInsert = false
            o.pendingDelete = false
            o.pendingUpdate = false
            turnIntoFault(o, detach: true)
        }
    }

    /// Re-reads `object` from the parent store. Without `mergeChanges`, its
    /// unsaved changes are dropped and it turns into a fault; with it, the
    /// store's values are taken and the object's own changes kept on top.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) {
        guard object.managedObjectContext === self, !object.pendingInsert, object.faultState == .loaded else { return }
        if !mergeChanges {
            guard !object.pendingDelete else { return }
            if object.pendingUpdate {
                object.pendingUpdate = false
                updatedList.removeAll { $0 === object }
            }
            turnIntoFault(object, detach: false)
            return
        }
        guard let row = try? sourceRows(entity: object.entity, ids: [object.objectID.rowID]).first else { return }
        var values = row.values
        for slot in values.indices where object.values[slot] != object.snapshot[slot] {
            values[slot] = object.values[slot]
        }
        object.values = values
        object.snapshot = row.values
        object.version = row.version
        object.awakeFromSnapshotEvents(.refresh)
    }

    func turnIntoFault(_ object: ManagedObject, detach: Bool) {
        if object.faultState == .loaded {
            object.willTurnIntoFault()
            object.values = []
            object.snapshot = []
            object.faultState = .fault
            object.didTurnIntoFault()
        }
        if detach {
            registered[object.objectID] = nil
            object.managedObjectContext = nil
        }
    }

    // MARK: - Merging

    /// Brings this context up to date with a save made elsewhere: updated
    /// objects are re-read (their unsaved changes kept on top), deleted ones
    /// without unsaved changes leave the context.
    public func mergeChanges(from notification: SaveNotification) {
        for id in notification.updatedObjectIDs {
            if let o = registered[id], o.faultState == .loaded { refresh(o, mergeChanges: true) }
        }
        for id in notification.deletedObjectIDs {
            guard let o = registered[id], !isDirty(o) else { continue }
            turnIntoFault(o, detach: true)
        }
        guard !notification.deletedRowRanges.isEmpty else { return }
        let deleted = notification.deletedRowRanges.mapValues { RowIDSet($0) }
        for o in Array(registered.values) where deleted[o.objectID.entityName]?.contains(o.objectID.rowID) == true {
            if !isDirty(o) { turnIntoFault(o, detach: true) }
        }
    }

    func mergeAsync(_ note: SaveNotification) {
        let box = UncheckedBox(self)
        async { box.value.mergeChanges(from: note) }
    }
}
