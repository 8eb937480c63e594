/// The statements a store runs for one save (``SavePipeline``), inside its write transaction,
/// in its own SQL: those of ``DeletionStatements``, and the objects' own deletes, updates and
/// inserts.
package protocol SaveStatements: DeletionStatements {
    /// The store's SQL of each entity.
    var sql: EntityMap<EntitySQL> { get }
    /// Runs `statement` (its SQL and arguments), a write of the object `id`; returns how
    /// many rows it changed.
    func run(_ statement: (String, [StoreValue]), for id: ManagedObjectID) throws -> Int
    /// Writes `updates`, each only if its row's version is still the one expected; returns
    /// the new versions of the rows written, by ID (a row missing is a conflict).
    func updateObjects(_ updates: [StoreChanges.Update]) throws -> [ManagedObjectID: Int64]
    /// Runs `body`, turning the store's own errors into ``PersistenceError``s (naming `id`
    /// when it is the object at fault).
    func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T
    /// What work before the commit (``SaveEffects/beforeCommitWork``) reads in the
    /// transaction.
    var transactionReader: TransactionReader { get }
}

/// One save, in the order every store writes it, inside the store's write transaction: the
/// engine's algorithm, the same on every store; only the statements (``SaveStatements``)
/// differ. The store opens and commits the transaction around it, and does what is its own
/// before (PostgreSQL's session fence and first locks) and after (announcements, injected
/// faults).
///
/// 0. The body of an explicit transaction (``ManagedObjectContext/write(_:)``), which has no
///    other changes: its deletions go through the delete rules as a batch deletion's do.
/// 1. The objects' deletes, refused when another program's rows still link to them, then
///    their updates; a row whose version changed meanwhile is a conflict, which ends the save.
/// 2. The rows deleted without objects (``RowChanges/deletions``), before anything is
///    written that could point at them.
/// 3. The objects' inserts, then the rows inserted without objects, batch by batch, each
///    followed by the rows its hooks add (``SaveEffects/rows``).
/// 4. The delete rules of the objects deleted (cascade, nullify, deny), and the rows the
///    rules' hooks add.
/// 5. Every link written must point at a row that exists (``LinkTargets``), and the work
///    that runs last before the commit (``SaveEffects/beforeCommitWork``).
package struct SavePipeline<Statements: SaveStatements> {
    package let rules: DeleteRules<Statements>

    package init(schema: Schema, statements: Statements, effects: SaveEffects) {
        rules = DeleteRules(schema: schema, statements: statements, effects: effects)
    }

    private var statements: Statements { rules.statements }

    package func write(_ changes: StoreChanges) throws -> StoreSaveResult {
        // 0. An explicit transaction's body.
        let transactionDeletions = Box(DeletionTally())
        if let work = changes.work { try work(transaction(deleting: transactionDeletions)) }

        // 1. Deletes first: a save may delete a row and insert another with its unique value.
        for (entity, ids) in DeleteRules<Statements>.grouped(changes.deletes) {
            try rules.refuseForeignLinks(entity, ids)
        }
        var conflicts: [ManagedObjectID] = []
        for delete in changes.deletes {
            let wasDeleted = try statements.deleteObject(delete)
            if !wasDeleted, delete.expectedVersion != nil {
                conflicts.append(ManagedObjectID(entityName: delete.entity.name, rowID: delete.id))
            }
        }
        let versions = try statements.updateObjects(changes.updates)
        for update in changes.updates {
            let id = ManagedObjectID(entityName: update.entity.name, rowID: update.id)
            if versions[id] == nil { conflicts.append(id) }
        }
        if !conflicts.isEmpty { throw StoreConflict(objectIDs: conflicts) }

        // 2. Rows deleted without objects; what is written after must not point at them.
        var paged = transactionDeletions.value
        for deletion in changes.rows.deletions {
            try statements.mapErrors(nil) { try rules.deleteRows(deletion, &paged) }
        }

        // 3. Inserts, and the links of what is written.
        for update in changes.updates {
            try DeleteRules<Statements>.requireNoLink(
                update.entity, update.id, update.values, slots: update.slots, into: paged.deleted)
            rules.links.object(update.entity, update.id, update.values, slots: update.slots)
        }
        for insert in changes.inserts {
            try DeleteRules<Statements>.requireNoLink(insert.entity, insert.id, insert.values, into: paged.deleted)
            rules.links.object(insert.entity, insert.id, insert.values)
        }
        try statements.insert(changes.inserts)
        for insertion in changes.rows.insertions { try insertRows(insertion, deleted: paged.deleted) }

        // 4. The delete rules of the objects deleted.
        var result = StoreSaveResult(versions: versions, deletedRows: paged.deleted, nullified: paged.clearedAndKept)
        var deleted = paged.deleted
        if !changes.deletes.isEmpty {
            let completed = try statements.mapErrors(nil) { try rules.completeDeleteRules(changes.deletes) }
            result.cascadeDeleted = completed.deleted.flatMap { name, ids in
                ids.map { ManagedObjectID(entityName: name, rowID: $0) }
            }
            result.nullified += completed.clearedAndKept
            for (name, ids) in completed.deleted { deleted[name, default: RowIDSet()].formUnion(ids) }
        }
        try statements.mapErrors(nil) { try rules.insertEffectRows(refusingLinksInto: deleted) }

        // 5. Links that point at nothing, and the last work before the commit.
        try statements.mapErrors(nil) { try rules.requireLinkTargets() }
        if !rules.effects.beforeCommitWork.isEmpty {
            let reader = statements.transactionReader
            for work in rules.effects.beforeCommitWork { try work(reader) }
        }
        return result
    }

    /// The transaction handed to an explicit transaction's body: its deletions are counted in
    /// `deletions`.
    private func transaction(deleting deletions: Box<DeletionTally>) -> StoreTransaction {
        StoreTransaction(
            effects: rules.effects, reader: statements.transactionReader,
            fetchRows: { fetch in try statements.mapErrors(nil) { try statements.fetchRows(fetch) } },
            deleteRows: { fetch in
                let entity = fetch.entity.name
                let before = deletions.value.deleted[entity]?.count ?? 0
                try statements.mapErrors(nil) {
                    try rules.deleteRows(.init(entity: fetch.entity, selection: .matching(fetch)), &deletions.value)
                }
                return (deletions.value.deleted[entity]?.count ?? 0) - before
            })
    }

    /// A value the closures of a transaction change.
    private final class Box<Value> {
        var value: Value
        init(_ value: Value) { self.value = value }
    }

    /// Inserts the rows of `insertion`, a batch at a time, each batch followed by the rows
    /// its hooks add; none may link to a row of `deleted`.
    private func insertRows(_ insertion: RowChanges.Insertion, deleted: [String: RowIDSet]) throws {
        for start in stride(from: 0, to: insertion.ids.count, by: insertion.batchSize) {
            let indexes = start..<min(start + insertion.batchSize, insertion.ids.count)
            let planned = rules.effects.rows.count
            let rows: [[StoreValue]]
            do {
                rows = try insertion.rows(indexes)
            } catch {
                throw StreamFailure(error: error)
            }
            let inserts = zip(indexes, rows).map { i, values in
                StoreChanges.Insert(entity: insertion.entity, id: insertion.ids.lowerBound + Int64(i), values: values)
            }
            for insert in inserts {
                try DeleteRules<Statements>.requireNoLink(insert.entity, insert.id, insert.values, into: deleted)
            }
            rules.links.rows(inserts)
            try statements.insertBatch(insertion.entity, inserts)
            try statements.mapErrors(nil) { try rules.insertEffectRows(from: planned, refusingLinksInto: deleted) }
        }
    }
}

extension SaveStatements {
    /// Deletes the row of `delete`, if its version is still the one expected (any version
    /// when none is); returns whether a row was deleted.
    func deleteObject(_ delete: StoreChanges.Delete) throws -> Bool {
        let statement = sql[delete.entity].delete(id: delete.id, expectedVersion: delete.expectedVersion)
        return try run(statement, for: ManagedObjectID(entityName: delete.entity.name, rowID: delete.id)) > 0
    }
}

extension StoreChanges {
    /// Runs `write` — a store's transaction of these changes — and throws what a store's
    /// `save` throws when it fails: a conflict, a ``PersistenceError`` and a hook's error
    /// (``StreamFailure``) as they are, any other error as `otherwise` makes it (the store's
    /// own errors mapped, a commit's failure wrapped when ``wrapsCommitFailures``).
    package func committing<T>(_ write: () throws -> T, otherwise: (any Error) -> any Error) throws -> T {
        do {
            return try write()
        } catch let error as StoreConflict {
            throw error
        } catch let failure as StreamFailure {
            throw failure.error
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw otherwise(error)
        }
    }
}
