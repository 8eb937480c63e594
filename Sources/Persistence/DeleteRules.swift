/// The statements a store runs for ``DeleteRules``, inside the transaction of one save, in
/// its own SQL. The rules (what cascades, what is cleared, what refuses, in which order,
/// with which hooks) are the engine's and the same on every store; only the statements
/// differ.
package protocol DeletionStatements {
    /// The rows of `entity` with these IDs that exist, in any order.
    func rows(_ entity: EntityDescription, ids: ArraySlice<Int64>) throws -> [StoreRow]
    /// At most `limit` rows of `entity` whose `link` (a to-one relationship) is one of
    /// `owners` and whose ID is above `after` (any ID when `nil`), in ID order.
    func members(
        _ entity: EntityDescription, link: PropertyDescription, owners: ArraySlice<Int64>, limit: Int, after: Int64?
    ) throws -> [StoreRow]
    /// The rows `fetch` matches, in its order and limit.
    func fetchRows(_ fetch: StoreFetch) throws -> [StoreRow]
    /// The IDs of the rows `fetch` matches, in its order, offset and limit.
    func fetchIDs(_ fetch: StoreFetch) throws -> [Int64]
    /// Sets `link` of the rows of `entity` that point at one of `owners` to `NULL`, a new
    /// version each; returns their IDs.
    func nullify(_ entity: EntityDescription, link: PropertyDescription, owners: ArraySlice<Int64>) throws -> [Int64]
    /// Deletes the rows of `entity` with these IDs.
    func delete(_ entity: EntityDescription, ids: ArraySlice<Int64>) throws
    /// Reserves `count` row IDs of the entity named `entity` (never handed out again).
    func reserve(entity: String, count: Int) throws -> ClosedRange<Int64>
    /// Inserts rows whose IDs are set.
    func insert(_ rows: [StoreChanges.Insert]) throws
    /// Inserts one batch of rows of `entity` with consecutive IDs (of an insertion of rows,
    /// ``RowChanges/Insertion``, or of the rows save effects add), counting its tallies once.
    func insertBatch(_ entity: EntityDescription, _ rows: [StoreChanges.Insert]) throws
    /// The to-one relationships with an `onDestinationDelete` rule that the store records
    /// (``ForeignLink``) for entities the schema does not have, by destination entity.
    func foreignLinks() throws -> [String: [ForeignLink]]
    /// The first row, by ID, of the table `table` whose column `column` is one of
    /// `targets`: its ID and the target it points at.
    func firstLinked(table: String, column: String, targets: ArraySlice<Int64>) throws -> (row: Int64, target: Int64)?
}

/// A to-one relationship with an `onDestinationDelete` rule, of an entity that is not in
/// the schema (another program's, sharing the store): recorded in the store's
/// `_persistence_links` table when a program opened it with that entity.
package struct ForeignLink: Sendable {
    package var entity: String
    package var property: String
    package var rule: String

    package init(entity: String, property: String, rule: String) {
        self.entity = entity
        self.property = property
        self.rule = rule
    }
}

/// The error of an insertion's rows, a deletion's page or a hook (`willBatchDelete`,
/// `willInsertRows`), carried out of a store's transaction past its error mapping, to be
/// thrown as it is.
package struct StreamFailure: Error {
    package var error: any Error

    package init(error: any Error) { self.error = error }
}

/// The delete rules of a schema (cascade, nullify, deny; to-many rules and the
/// `onDestinationDelete` rules of to-one links, the schema's own and those the store
/// records for other programs' entities), applied in the store: to rows deleted without
/// objects (batch deletes, ``RowChanges/Deletion``s) and to the members a save's object
/// deletions reach that the saving context never read. One engine for every store, over
/// its ``DeletionStatements``.
package struct DeleteRules<Statements: DeletionStatements> {
    package let schema: Schema
    package let statements: Statements
    package let effects: SaveEffects
    /// The links the save writes, checked by ``requireLinkTargets()`` before its commit.
    package let links = LinkTargets()

    package init(schema: Schema, statements: Statements, effects: SaveEffects) {
        self.schema = schema
        self.statements = statements
        self.effects = effects
    }

    /// Refuses the save if a link it writes points at a row the store no longer holds (see
    /// ``LinkTargets``): the last step of a save's writes, before its commit.
    package func requireLinkTargets() throws {
        try links.requireTargets { name, ids in
            guard let entity = schema.entity(named: name) else { return Set(ids) }  // another program's
            return Set(try statements.rows(entity, ids: ids).map(\.id))
        }
    }

    /// The rows a batch deletion reads and deletes at a time.
    package static var pageSize: Int { 500 }

    /// Deletes the rows a ``RowChanges/Deletion`` names, a page at a time.
    package func deleteRows(_ deletion: RowChanges.Deletion, _ tally: inout DeletionTally) throws {
        let entity = deletion.entity
        let pages: (Int64) throws -> [Int64]
        switch deletion.selection {
        case .pages(let named):
            pages = named
        case .matching(let fetch) where fetch.limit != nil || fetch.offset > 0:
            // A window: its rows, listed now (no more than its limit), deleted a page at a time.
            let ids = try statements.fetchIDs(fetch)
            for chunk in ids.chunked(Self.pageSize) {
                // A row an earlier page's cascade deleted is gone: it is not read again.
                let rows = try statements.rows(entity, ids: chunk).sorted { $0.id < $1.id }
                try deleteWithRules([.rows(entity, rows)], &tally)
            }
            return
        case .matching(let fetch):
            // Each page is the matching rows with IDs above the last page's, selected as it is
            // read: memory holds one page, whatever the number of rows. What earlier pages did
            // (cascades, rows their hooks wrote) is seen: a row that matches by then is deleted
            // if its ID is above the last page's, and left if below; a row that no longer
            // matches when its page is read is left.
            var after: Int64 = 0
            while true {
                var page = fetch
                page.predicate = fetch.predicate.map { .and([$0, .rowIDAbove(after)]) } ?? .rowIDAbove(after)
                page.sort = [SortKey(property: nil, ascending: true)]
                page.limit = Self.pageSize
                let rows = try statements.fetchRows(page)
                guard let last = rows.last else { return }
                try deleteWithRules([.rows(entity, rows)], &tally)
                after = last.id
            }
        }
        var after: Int64 = 0
        while true {
            let page: [Int64]
            do {
                page = try pages(after)
            } catch {
                throw StreamFailure(error: error)
            }
            guard let last = page.last else { return }
            guard page[0] > after, zip(page, page.dropFirst()).allSatisfy({ $0 < $1 }) else {
                throw PersistenceError(
                    .misuse,
                    "The pages of deleteRows(\(entity.name)) must list IDs in ascending order, each page after "
                        + "the ID it is asked for (\(after)); got \(page[0])...\(last)")
            }
            let rows = try statements.rows(entity, ids: page[...]).sorted { $0.id < $1.id }
            try deleteWithRules([.rows(entity, rows)], &tally)
            after = last
        }
    }

    /// A context applies delete rules to the members it knew of at
    /// `delete()`; another context may have committed more since. Inside the
    /// transaction, the rules are completed for those: cascade deletes them
    /// (with the rules of their own entity, whose `willBatchDelete` hook runs
    /// with this save's effects), nullify clears their link, deny refuses the save.
    package func completeDeleteRules(_ deletes: [StoreChanges.Delete]) throws -> DeletionTally {
        var tally = DeletionTally()
        for (entity, ids) in Self.grouped(deletes) {
            for property in entity.properties {
                guard case .toMany(let destinationName) = property.kind,
                    let destination = schema.entity(named: destinationName)
                else { continue }
                let inverse = try entity.inverse(of: property)
                switch property.deleteRule {
                case .deny:
                    guard let owner = try firstOwner(destination, inverse, of: ids) else { continue }
                    let ownerID = ManagedObjectID(entityName: entity.name, rowID: owner)
                    throw PersistenceError(
                        .validation,
                        "\(ownerID) cannot be deleted: its relationship '\(property.name)' gained members meanwhile (deny rule)",
                        objectIDs: [ownerID])
                case .nullify:
                    tally.nullified += try nullify(destination, inverse, owners: ids)
                case .cascade:
                    let members = ids.chunked(Self.pageSize).map {
                        DeletionWork.members(destination, inverse, $0, after: nil)
                    }
                    try deleteWithRules(members, &tally)
                }
            }
            try refuseDeniedLinks(entity, ids)
            let cascades = try applyIncomingLinks(entity, ids, &tally)
            try deleteWithRules(cascades, &tally)
        }
        return tally
    }

    /// Refuses the deletion of the rows `ids` of `entity` when a row points at one of them
    /// through a to-one relationship whose `onDestinationDelete` rule is deny.
    private func refuseDeniedLinks(_ entity: EntityDescription, _ ids: [Int64]) throws {
        for link in schema.incomingLinks(into: entity) where link.rule == .deny {
            for chunk in ids.chunked(Self.pageSize) {
                let first = try statements.members(
                    link.source, link: link.property, owners: chunk, limit: 1, after: nil)
                if let member = first.first, case .integer(let target) = member.values[link.property.slot!] {
                    throw PersistenceError.linkDenial(
                        ManagedObjectID(entityName: entity.name, rowID: target),
                        ManagedObjectID(entityName: link.source.name, rowID: member.id), link.property)
                }
            }
        }
    }

    /// Refuses the deletion of the rows `ids` of `entity` as a save would for the links the
    /// store holds (``refuseForeignLinks(_:_:)``, then the deny rules), deleting nothing.
    package func refuseDeletion(_ entity: EntityDescription, _ ids: [Int64]) throws {
        try refuseForeignLinks(entity, ids)
        try refuseDeniedLinks(entity, ids)
    }

    /// The IDs of `deletes`, by entity.
    package static func grouped(_ deletes: [StoreChanges.Delete]) -> [(EntityDescription, [Int64])] {
        Dictionary(grouping: deletes, by: { $0.entity.name }).values.map { ($0[0].entity, $0.map(\.id)) }
    }

    /// Refuses the deletion of the rows `ids` of `entity` when a row of an entity the schema
    /// does not have points at one of them through a relationship with an
    /// `onDestinationDelete` rule: that rule, and that entity's hooks, cannot run here, and
    /// the link must not be left pointing at nothing.
    package func refuseForeignLinks(_ entity: EntityDescription, _ ids: [Int64]) throws {
        guard let links = try statements.foreignLinks()[entity.name] else { return }
        for link in links {
            for chunk in ids.chunked(Self.pageSize) {
                guard
                    let (member, target) = try statements.firstLinked(
                        table: link.entity, column: link.property, targets: chunk)
                else { continue }
                let targetID = ManagedObjectID(entityName: entity.name, rowID: target)
                throw PersistenceError(
                    .validation,
                    "\(targetID) cannot be deleted: \(link.entity) \(member) points at it through "
                        + "\(link.entity).\(link.property), whose delete rule (\(link.rule)) this store cannot apply: it "
                        + "was opened without the entity \(link.entity). Open it with \(link.entity) in its schema to "
                        + "delete \(targetID)", objectIDs: [targetID])
            }
        }
    }

    /// The nullify and cascade `onDestinationDelete` rules of the to-one relationships that
    /// point at `entity`, for its rows `ids` being deleted: the links are cleared now; the
    /// rows to delete are returned as work for ``deleteWithRules(_:_:)``.
    private func applyIncomingLinks(_ entity: EntityDescription, _ ids: [Int64], _ tally: inout DeletionTally) throws
        -> [DeletionWork]
    {
        var work: [DeletionWork] = []
        for link in schema.incomingLinks(into: entity) {
            switch link.rule {
            case .deny: continue
            case .nullify: tally.nullified += try nullify(link.source, link.property, owners: ids)
            case .cascade:
                work += ids.chunked(Self.pageSize).map {
                    DeletionWork.members(link.source, link.property, $0, after: nil)
                }
            }
        }
        return work
    }

    /// Deletes rows inside the transaction, with the schema's delete rules —
    /// the one way rows are deleted without objects (batch deletes, a save's paged
    /// deletions, and the members a save's deletions reach in the store).
    ///
    /// For each page of rows: deny refuses first; the entity's `willBatchDelete` hook gets
    /// the rows; the rows go, and the rows the hook planned are written (none may point at
    /// a row deleted by now); nullify clears the links to them; cascade deletes what they
    /// own, read a page of members at a time (an archive of a million members is not a
    /// million rows in memory). The work waits in a list, not on the stack: a chain of
    /// cascades thousands deep is as safe as one level.
    private func deleteWithRules(_ work: [DeletionWork], _ tally: inout DeletionTally) throws {
        var work = work
        while let next = work.popLast() {
            switch next {
            case .members(let destination, let inverse, let owners, let after):
                let page = try statements.members(
                    destination, link: inverse, owners: owners, limit: Self.pageSize, after: after)
                guard let last = page.last else { continue }
                // Read on past this page once it is gone: every member up to it is deleted by
                // then (a page goes whole, or the save fails), and none can be added to an owner
                // deleted already. Read again from the first, each page stepped over every row
                // deleted before it, which PostgreSQL keeps in its indexes until the
                // transaction ends: quadratic in the size of an archive.
                work.append(.members(destination, inverse, owners, after: last.id))
                work.append(.rows(destination, page))
            case .rows(let entity, let rows):
                try deletePage(entity, rows, &tally, then: &work)
            }
        }
    }

    /// What ``deleteWithRules(_:_:)`` has still to do.
    private enum DeletionWork {
        /// Rows read, to delete with their rules.
        case rows(EntityDescription, [StoreRow])
        /// The members of `owners` through `inverse` with IDs above `after`, to delete a page
        /// at a time, in ID order, until none is left.
        case members(EntityDescription, PropertyDescription, ArraySlice<Int64>, after: Int64?)
    }

    /// Deletes one page of rows; what their cascade rules reach goes to `work`.
    private func deletePage(
        _ entity: EntityDescription, _ rows: [StoreRow], _ tally: inout DeletionTally, then work: inout [DeletionWork]
    ) throws {
        guard !rows.isEmpty else { return }
        let ids = rows.map(\.id)
        for property in entity.properties where property.deleteRule == .deny {
            switch property.kind {
            case .attribute: continue
            case .toOne:
                if let first = rows.first(where: { !$0.values[property.slot!].isNull }) {
                    throw PersistenceError.denial(entity, first.id, property)
                }
            case .toMany(let destinationName):
                guard let destination = schema.entity(named: destinationName) else { continue }
                if let owner = try firstOwner(destination, try entity.inverse(of: property), of: ids) {
                    throw PersistenceError.denial(entity, owner, property)
                }
            }
        }
        try refuseDeniedLinks(entity, ids)
        try refuseForeignLinks(entity, ids)
        let planned = effects.rows.count
        do {
            try entity.objectType.willBatchDelete(
                rows.map { ObjectSnapshot(entity: entity, row: $0) }, effects: effects)
        } catch {
            throw StreamFailure(error: error)  // the hook's error, as it is
        }
        for chunk in ids.chunked(Self.pageSize) { try statements.delete(entity, ids: chunk) }
        for id in ids { tally.deleted[entity.name, default: RowIDSet()].insert(id) }
        try insertEffectRows(from: planned, refusingLinksInto: tally.deleted)
        for property in entity.properties {
            switch property.kind {
            case .attribute: continue
            case .toOne(let destinationName):
                guard property.deleteRule == .cascade, let destination = schema.entity(named: destinationName) else {
                    continue
                }
                let targets = Set(
                    rows.compactMap { row -> Int64? in
                        if case .integer(let target) = row.values[property.slot!] { return target }
                        return nil
                    })
                for chunk in targets.sorted().chunked(Self.pageSize) {
                    let owned = try statements.rows(destination, ids: chunk).sorted { $0.id < $1.id }
                    if !owned.isEmpty { work.append(.rows(destination, owned)) }
                }
            case .toMany(let destinationName):
                guard property.deleteRule != .deny, let destination = schema.entity(named: destinationName) else {
                    continue
                }
                let inverse = try entity.inverse(of: property)
                if property.deleteRule == .nullify {
                    tally.nullified += try nullify(destination, inverse, owners: ids)
                } else {
                    for chunk in ids.chunked(Self.pageSize) {
                        work.append(.members(destination, inverse, chunk, after: nil))
                    }
                }
            }
        }
        work += try applyIncomingLinks(entity, ids, &tally)
    }

    /// The owner of the first member found of one of `owners`, if any has a member.
    private func firstOwner(_ destination: EntityDescription, _ inverse: PropertyDescription, of owners: [Int64])
        throws -> Int64?
    {
        for chunk in owners.chunked(Self.pageSize) {
            let first = try statements.members(destination, link: inverse, owners: chunk, limit: 1, after: nil)
            if let member = first.first, case .integer(let owner) = member.values[inverse.slot!] { return owner }
        }
        return nil
    }

    /// Clears the link of the members of `owners`; returns the members.
    private func nullify(_ destination: EntityDescription, _ inverse: PropertyDescription, owners: [Int64]) throws
        -> [ManagedObjectID]
    {
        var cleared: [ManagedObjectID] = []
        for chunk in owners.chunked(Self.pageSize) {
            cleared += try statements.nullify(destination, link: inverse, owners: chunk).map {
                ManagedObjectID(entityName: destination.name, rowID: $0)
            }
        }
        return cleared
    }

    /// Refuses a row this transaction writes that points at a row it deleted without an
    /// object. `values` are those of `slots` (all of them by default).
    package static func requireNoLink(
        _ entity: EntityDescription, _ id: Int64, _ values: [StoreValue], slots: [Int]? = nil,
        into deleted: [String: RowIDSet]
    ) throws {
        guard !deleted.isEmpty else { return }
        for (i, slot) in (slots ?? Array(values.indices)).enumerated() {
            let property = entity.storedProperties[slot]
            guard case .toOne(let destination) = property.kind, case .integer(let target) = values[i],
                deleted[destination]?.contains(target) == true
            else { continue }
            throw PersistenceError.pointsAtDeleted(
                ManagedObjectID(entityName: entity.name, rowID: id), property,
                ManagedObjectID(entityName: destination, rowID: target))
        }
    }

    /// Inserts the rows of save effects from index `start` on, reserving their IDs in this
    /// transaction, one block per entity. Rows planned by the hooks of deletions without
    /// objects (`start` given) are written page by page and leave `effects`, kept as
    /// ranges: a deletion of any size plans in constant memory.
    package func insertEffectRows(from start: Int? = nil, refusingLinksInto deleted: [String: RowIDSet]) throws {
        let first = start ?? 0
        guard first < effects.rows.count else { return }
        // The rows in runs of one entity (a hook plans them so, most often all of one entity):
        // what is looked up by entity is looked up once a run, not once a row.
        var runs: [(entity: EntityDescription, rows: Range<Int>)] = []
        var end = first
        while end < effects.rows.count {
            let entity = effects.rows[end].entity
            let runStart = end
            while end < effects.rows.count && effects.rows[end].entity === entity { end += 1 }
            runs.append((entity, runStart..<end))
        }
        var counts: [String: Int] = [:]
        var order: [String] = []
        for run in runs {
            if counts[run.entity.name] == nil { order.append(run.entity.name) }
            counts[run.entity.name, default: 0] += run.rows.count
        }
        var next: [String: Int64] = [:]
        for name in order {
            let ids = try statements.reserve(entity: name, count: counts[name]!)
            next[name] = ids.lowerBound
            if start != nil { effects.rowRanges[name, default: RowIDSet()].insert(ids.lowerBound..<ids.upperBound + 1) }
        }
        for run in runs {
            var id = next[run.entity.name]!
            for i in run.rows {
                effects.rows[i].id = id
                id += 1
                try Self.requireNoLink(run.entity, effects.rows[i].id, effects.rows[i].values, into: deleted)
            }
            next[run.entity.name] = id
        }
        let rows = Array(effects.rows[first...])
        links.rows(rows)
        // Each entity's rows as one batch of consecutive IDs (the order of its rows kept), so
        // that its tallies are counted once for the batch, not by a trigger a row.
        var byEntity: [String: [StoreChanges.Insert]] = [:]
        for run in runs { byEntity[run.entity.name, default: []].append(contentsOf: effects.rows[run.rows]) }
        for name in order { try statements.insertBatch(byEntity[name]![0].entity, byEntity[name]!) }
        if start != nil { effects.rows.removeSubrange(first...) }
    }
}
