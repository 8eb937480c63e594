import Foundation
import Locking
import Logging

extension ManagedObjectContext {
    // MARK: - Saving

    /// Writes the context's changes: to the store in one transaction (a root
    /// context), or into the parent context (a child).
    ///
    /// In order: validation of every changed object (all refusals reported
    /// together), ``ManagedObject/willSave()`` passes until no object is
    /// re-dirtied through observed setters (at most ``maximumWillSavePasses``),
    /// one write transaction with the rows of ``SaveEffects``,
    /// ``ManagedObject/didSave()``, then ``SaveEffects/afterCommit(_:)`` work
    /// and the save notification.
    ///
    /// If anything fails, nothing is written, the error names the objects,
    /// and the context keeps its unsaved changes: fix them and save again, or
    /// ``rollback()``.
    ///
    /// - Throws: ``PersistenceError`` with code `validation`, `constraint`,
    ///   `conflict`, `willSaveLoop`, `io` or `misuse`.
    public func save() throws {
        try save(runCleanUp: true)
    }

    /// Throws what the next ``save()`` would throw, before writing anything, if it deleted
    /// `objects`: a deny rule that refuses one of their deletions (the object's own, or a
    /// to-one link's `onDestinationDelete: .deny` from an object that stays), and their
    /// ``ManagedObject/validateForDelete()``; then, in the store, a row this context never
    /// read that points at one of them through a deny rule, or through a link of an entity
    /// this schema lacks. Neither marks them deleted nor changes anything: what a dry run of
    /// a deletion asks. Objects pending deletion already count
    /// as gone, so deleting the objects first and passing ``deletedObjects`` checks a whole
    /// cascade.
    ///
    /// - Throws: ``PersistenceError/Code/validation``, all refusals together.
    public func validateDeletion(of objects: [ManagedObject]) throws {
        try Self.refusingTogether(objects) { o in
            try checkDenyRules(o)
            try o.validateForDelete()
        }
        // The links the store holds that this context never read: deny rules, and links of
        // entities this schema lacks.
        let byEntity = Dictionary(grouping: objects.filter { !$0.pendingInsert }, by: \.entity.name)
        for name in byEntity.keys.sorted() {
            let objects = byEntity[name]!
            try core.store.refuseDeletion(entity: objects[0].entity, ids: objects.map(\.objectID.rowID))
        }
    }

    private func save(runCleanUp: Bool) throws {
        guard !isSaving else {
            throw PersistenceError(.misuse, "save() was called on a context that is already saving (from a save hook)")
        }
        try throwDeferredErrors()
        guard hasChanges || !insertedList.isEmpty || !deletedList.isEmpty else { return }
        isSaving = true
        var saved = SavedObjects()
        var effects = SaveEffects(commitsToStore: parent == nil, userInfo: userInfo, values: values)
        var gone = Set<ManagedObjectID>()
        var attempt = 1
        while true {
            do {
                saved = try runSave(effects, gone: &gone, lastAttempt: attempt == 3)
                break
            } catch is RestartSave {
                // A conflict was resolved by the merge policy: the objects'
                // values changed, so hooks run again and plan afresh.
                clearSaveMarks()
                effects.runOnFailure()
                effects = SaveEffects(commitsToStore: parent == nil, userInfo: userInfo, values: values)
                attempt += 1
            } catch {
                isSaving = false
                clearSaveMarks()
                effects.runOnFailure()
                core.saveErrorHandler?(error, self)
                throw error
            }
        }
        isSaving = false
        for o in saved.all { o.didSave() }
        for o in saved.deleted {
            turnIntoFault(o, detach: true)
            o.pendingDelete = false
        }
        effects.runAfterCommit()
        if parent == nil {
            let (cascaded, nullified) = (committed.cascadeDeleted, committed.nullified)
            let deletedRanges = committed.deletedRows.mapValues(\.ranges)
            committed = StoreSaveResult()
            var rowRanges = saved.rowRanges
            for (entity, ids) in effects.rowRanges { rowRanges[entity, default: []] += ids.ranges }
            let note = SaveNotification(
                inserted: saved.inserted.map(\.objectID) + saved.rows
                    + effects.rows.map { .init(entityName: $0.entity.name, rowID: $0.id) },
                updated: saved.updated.map(\.objectID) + nullified,
                deleted: saved.deleted.map(\.objectID) + cascaded, contextName: name,
                insertedRowRanges: rowRanges, deletedRowRanges: deletedRanges)
            // Objects of this context that the transaction deleted or cleared are stale.
            if !cascaded.isEmpty || !nullified.isEmpty || !deletedRanges.isEmpty {
                mergeChanges(
                    from: SaveNotification(
                        inserted: [], updated: nullified, deleted: cascaded, deletedRowRanges: deletedRanges))
            }
            core.broadcast(note, from: self)
            if runCleanUp, let cleanUp = core.postSaveCleanUp {
                // The save has committed: a failing clean-up must not look like a failed save.
                do {
                    try cleanUp(self)
                    if hasChanges { try save(runCleanUp: false) }
                } catch {
                    core.logger.error("post-save clean-up failed after a committed save: \(error)")
                    core.saveErrorHandler?(error, self)
                }
            }
        } else if let parent {
            let note = SaveNotification(
                inserted: saved.inserted.map(\.objectID), updated: saved.updated.map(\.objectID),
                deleted: saved.deleted.map(\.objectID), contextName: name)
            parent.performAndWait { parent.childDidSave(note, from: self) }
        }
    }

    /// Thrown inside a save when a conflict was resolved and the save must run again.
    private struct RestartSave: Error {}

    private func clearSaveMarks() {
        for o in insertedList + updatedList + deletedList {
            o.currentSaveEffects = nil
            o.willSavePass = 0
        }
    }

    /// Errors found outside a save stay until `rollback()` or `reset()`: a
    /// save after one would write a graph that is not what was asked for.
    private func throwDeferredErrors() throws {
        guard let first = deferredErrors.first else { return }
        if deferredErrors.count == 1 { throw first }
        throw PersistenceError(
            first.code, deferredErrors.map(\.message).joined(separator: "; "), underlyingErrors: deferredErrors,
            cause: first.cause)
    }

    private struct SavedObjects {
        var inserted: [ManagedObject] = []
        var updated: [ManagedObject] = []
        var deleted: [ManagedObject] = []
        /// Rows of ``insertRows(_:count:_:)`` (the store's saves only).
        var rows: [ManagedObjectID] = []
        /// Rows of ``insertRows(_:count:batchSize:streaming:)``, by entity name.
        var rowRanges: [String: [Range<Int64>]] = [:]
        var all: [ManagedObject] { inserted + updated + deleted }
    }

    /// Whether `o` will be written by this save (inserted-then-deleted objects are simply forgotten).
    private func willBeWritten(_ o: ManagedObject) -> Bool {
        o.pendingInsert != o.pendingDelete || o.isUpdated
    }

    private func runSave(_ effects: SaveEffects, gone: inout Set<ManagedObjectID>, lastAttempt: Bool) throws
        -> SavedObjects
    {
        let changed =
            insertedList.filter { !$0.pendingDelete } + updatedList.filter(\.isUpdated)
            + deletedList.filter { !$0.pendingInsert }
        // Objects validated in this save, by the state they were validated in.
        var validated: [ObjectIdentifier: Bool] = [:]
        try validate(changed, &validated)
        var pass = 1
        var due = changed
        while !due.isEmpty {
            guard pass <= maximumWillSavePasses else {
                let names = due.map(\.objectID.description).joined(separator: ", ")
                throw PersistenceError(
                    .willSaveLoop,
                    "willSave kept changing \(names) through observed setters for \(maximumWillSavePasses) passes; "
                        + "change values in willSave with setPrimitiveValue(_:for:)",
                    objectIDs: due.map(\.objectID))
            }
            // Objects that became dirty, or deleted, during the last pass are validated too.
            try validate(due.filter { validated[ObjectIdentifier($0)] != $0.pendingDelete }, &validated)
            redirtied = []
            for o in due {
                o.willSavePass = pass
                o.currentSaveEffects = effects
                o.willSave()
            }
            var seen = Set<ObjectIdentifier>()
            let fresh = (insertedList + updatedList + deletedList).filter {
                $0.willSavePass == 0 && willBeWritten($0)
            }
            due = (redirtied + fresh).filter { seen.insert(ObjectIdentifier($0)).inserted && willBeWritten($0) }
            pass += 1
        }
        try throwDeferredErrors()
        var saved = SavedObjects()
        saved.inserted = insertedList.filter { !$0.pendingDelete }
        saved.updated = updatedList.filter(\.isUpdated)
        saved.deleted = deletedList.filter { !$0.pendingInsert }
        if let parent {
            parent.performAndWait { parent.absorb(saved, from: self) }
        } else {
            try commit(saved, effects, gone: &gone, lastAttempt: lastAttempt)
        }
        for o in saved.inserted + saved.updated {
            o.snapshot = o.values
            o.pendingInsert = false
            o.pendingUpdate = false
        }
        for o in deletedList where o.pendingInsert {  // inserted then deleted: never existed
            registered[o.objectID] = nil
            o.managedObjectContext = nil
        }
        for o in saved.all + deletedList {
            o.currentSaveEffects = nil
            o.willSavePass = 0
        }
        insertedList = []
        updatedList = []
        deletedList = []
        saved.rows = pendingRowChanges.listedIDs
        saved.rowRanges = pendingRowChanges.streamedRanges
        pendingRowChanges = RowChanges()
        return saved
    }

    private func validate(_ objects: [ManagedObject], _ validated: inout [ObjectIdentifier: Bool]) throws {
        try Self.refusingTogether(objects) { o in
            validated[ObjectIdentifier(o)] = o.pendingDelete
            if o.pendingDelete {
                try checkDenyRules(o)
                try o.validateForDelete()
            } else {
                try checkReferences(o)
                if o.pendingInsert { try o.validateForInsert() } else { try o.validateForUpdate() }
            }
        }
    }

    /// Runs `check` on every object, then throws what they refused: the one refusal, or one
    /// error holding them all (an error that is not a ``PersistenceError`` is one of code
    /// `validation` naming the object).
    private static func refusingTogether(_ objects: [ManagedObject], _ check: (ManagedObject) throws -> Void)
        throws
    {
        var refusals: [PersistenceError] = []
        for o in objects {
            do {
                try check(o)
            } catch let error as PersistenceError {
                refusals.append(error)
            } catch {
                refusals.append(
                    PersistenceError(.validation, "\(o.objectID): \(error)", objectIDs: [o.objectID], cause: error))
            }
        }
        guard !refusals.isEmpty else { return }
        if refusals.count == 1 { throw refusals[0] }
        throw PersistenceError(
            .validation,
            "\(refusals.count) objects refused to save: " + refusals.map(\.message).joined(separator: "; "),
            objectIDs: refusals.flatMap(\.objectIDs), underlyingErrors: refusals)
    }

    /// A to-one relationship must not point at an object this save deletes.
    private func checkReferences(_ object: ManagedObject) throws {
        for property in object.entity.storedProperties {
            guard case .toOne(let destination) = property.kind, case .integer(let row) = object.values[property.slot!],
                let target = registered[ManagedObjectID(entityName: destination, rowID: row)], target.pendingDelete
            else { continue }
            throw PersistenceError.pointsAtDeleted(object.objectID, property, target.objectID)
        }
    }

    private func checkDenyRules(_ object: ManagedObject) throws {
        for property in object.entity.properties where property.deleteRule == .deny {
            switch property.kind {
            case .attribute: continue
            case .toOne:
                if case .integer = object.values[property.slot!] {
                    throw PersistenceError.denial(object.entity, object.objectID.rowID, property)
                }
            case .toMany:
                if try members(of: object, toMany: property).contains(where: { !$0.pendingDelete }) {
                    throw PersistenceError.denial(object.entity, object.objectID.rowID, property)
                }
            }
        }
        for link in core.schema.incomingLinks(into: object.entity) where link.rule == .deny {
            if let member = try objects(of: link.source, pointingAt: object, through: link.property).first(where: {
                !$0.pendingDelete
            }) {
                throw PersistenceError.linkDenial(object.objectID, member.objectID, link.property)
            }
        }
    }

    /// Writes to the store. On a conflict, the merge policy resolves it and
    /// the save restarts (``RestartSave``); `gone` collects rows that another
    /// context already deleted, whose deletion here is therefore moot.
    private func commit(
        _ saved: SavedObjects, _ effects: SaveEffects, gone: inout Set<ManagedObjectID>, lastAttempt: Bool
    )
        throws
    {
        for work in effects.beforeTransactionWork { try work() }
        effects.beforeTransactionWork = []
        var changes = StoreChanges()
        for o in saved.inserted {
            changes.inserts.append(.init(entity: o.entity, id: o.objectID.rowID, values: o.values))
        }
        changes.rows = rowChangesToWrite(effects)
        changes.rows.deletions += effects.rowDeletions
        effects.deletionsTaken = true
        let checksVersions = mergePolicy != .overwrite
        for o in saved.updated where !gone.contains(o.objectID) {
            let slots = o.values.indices.filter {
                !checksVersions || o.snapshot.isEmpty || o.values[$0] != o.snapshot[$0]
            }
            guard !slots.isEmpty else { continue }
            changes.updates.append(
                .init(
                    entity: o.entity, id: o.objectID.rowID, expectedVersion: checksVersions ? o.version : nil,
                    slots: slots, values: slots.map { o.values[$0] }))
        }
        for o in saved.deleted where !gone.contains(o.objectID) {
            changes.deletes.append(
                .init(entity: o.entity, id: o.objectID.rowID, expectedVersion: checksVersions ? o.version : nil))
        }
        guard
            !changes.isEmpty || !effects.rows.isEmpty || !effects.beforeCommitWork.isEmpty
                || !effects.announcements.isEmpty
        else { return }
        do {
            let result = try core.store.save(changes, effects: effects)
            for o in saved.inserted { o.version = 1 }
            for o in saved.updated { o.version = result.versions[o.objectID] ?? o.version }
            committed = result
        } catch let conflict as StoreConflict {
            guard mergePolicy != .error, !lastAttempt else {
                let names = conflict.objectIDs.map(\.description).joined(separator: ", ")
                throw PersistenceError(
                    .conflict,
                    "Could not save: \(names) changed in the store since this context read "
                        + (conflict.objectIDs.count == 1 ? "it" : "them")
                        + "; merge the changes (refresh(_:mergeChanges:)) or choose a merge policy",
                    objectIDs: conflict.objectIDs)
            }
            try resolve(conflict.objectIDs, gone: &gone)
            throw RestartSave()
        }
    }

    /// Applies the merge policy to conflicting objects, from the store's current rows.
    private func resolve(_ ids: [ManagedObjectID], gone: inout Set<ManagedObjectID>) throws {
        for id in ids {
            guard let o = registered[id] else { continue }
            guard let row = try core.store.rows(entity: o.entity, ids: [id.rowID]).first else {
                if o.pendingDelete {
                    gone.insert(id)  // deleted elsewhere too: nothing to write
                } else if mergePolicy == .rollback {
                    gone.insert(id)  // take the store's state: the object no longer exists
                    o.pendingUpdate = false
                    updatedList.removeAll { $0 === o }
                    o.faultState = .unfulfillable
                } else {
                    throw PersistenceError(
                        .conflict, "Could not save: \(id) was deleted from the store", objectIDs: [id])
                }
                continue
            }
            if o.pendingDelete {
                if mergePolicy == .rollback {
                    // Take the store's state: the deletion is dropped.
                    o.pendingDelete = false
                    deletedList.removeAll { $0 === o }
                    o.values = row.values
                    o.snapshot = row.values
                    o.version = row.version
                    o.awakeFromSnapshotEvents(.undoDeletion)
                } else {
                    // Delete the row as it is now (hooks see its current values).
                    o.values = row.values
                    o.snapshot = row.values
                    o.version = row.version
                }
                continue
            }
            var values = row.values
            for slot in values.indices where o.snapshot.isEmpty || o.values[slot] != o.snapshot[slot] {
                switch mergePolicy {
                case .mergeByPropertyStoreTrump:
                    if row.values[slot] == o.snapshot[slot] { values[slot] = o.values[slot] }
                case .mergeByPropertyObjectTrump, .overwrite: values[slot] = o.values[slot]
                case .rollback, .error: break
                }
            }
            o.values = values
            o.snapshot = row.values
            o.version = row.version
            if mergePolicy == .rollback {
                o.pendingUpdate = false
                updatedList.removeAll { $0 === o }
            }
        }
    }

    /// Applies a child's save to this context's objects.
    private func absorb(_ saved: SavedObjects, from child: ManagedObjectContext) {
        for c in saved.inserted {
            if let existing = registered[c.objectID] {
                existing.values = c.values
                if !existing.pendingInsert {
                    // A fault for the ID (handed out early): it becomes the inserted object.
                    existing.snapshot = []
                    existing.faultState = .loaded
                    existing.faultBatch = nil
                    existing.pendingInsert = true
                    insertedList.append(existing)
                }
                continue
            }
            let o = c.entity.objectType.init(ObjectInitToken(entity: c.entity, objectID: c.objectID, context: self))
            o.values = c.values
            registerInserted(o)
        }
        for c in saved.updated {
            let o = object(with: c.objectID)
            o.fireFaultIfNeeded()
            for slot in c.values.indices where c.snapshot.isEmpty || c.values[slot] != c.snapshot[slot] {
                o.setValue(c.values[slot], atSlot: slot, observed: true)
            }
        }
        for c in saved.deleted {
            let o = object(with: c.objectID)
            delete(o)
        }
    }

    private func childDidSave(_ note: SaveNotification, from child: ManagedObjectContext) {
        for weak in children.withLock({ $0 }) {
            guard let other = weak.context, other !== child, other.automaticallyMergesChangesFromParent else {
                continue
            }
            let box = UncheckedBox(other)
            other.async { box.value.mergeChanges(from: note) }
        }
    }
}
