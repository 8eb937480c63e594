import Foundation

extension ManagedObjectContext {
    // MARK: - Reading from the parent store

    /// Rows as the parent (store or context) sees them.
    func sourceRows(_ fetch: StoreFetch) throws -> [StoreRow] {
        if let parent { return try parent.performAndWait { try parent.rowsForChild(fetch) } }
        return try core.store.fetch(fetch)
    }

    func sourceRows(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        if let parent { return try parent.performAndWait { try parent.rowsForChild(entity: entity, ids: ids) } }
        return try core.store.rows(entity: entity, ids: ids)
    }

    func isDirty(_ object: ManagedObject) -> Bool {
        object.pendingInsert || object.pendingDelete || object.pendingUpdate
    }

    private func hasPendingChanges(for entity: EntityDescription) -> Bool {
        insertedList.contains { $0.entity === entity } || deletedList.contains { $0.entity === entity }
            || updatedList.contains { $0.entity === entity }
    }

    /// This context's view of `fetch`, for a child: the parent's rows with
    /// this context's unsaved changes applied.
    private func rowsForChild(_ fetch: StoreFetch) throws -> [StoreRow] {
        try merged(fetch).map { item in
            switch item {
            case .row(let row): row
            case .object(let o): StoreRow(id: o.objectID.rowID, version: o.version, values: o.values)
            }
        }
    }

    private func rowsForChild(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow] {
        var result: [StoreRow] = []
        var missing: [Int64] = []
        for id in ids {
            if let o = registered[ManagedObjectID(entityName: entity.name, rowID: id)], o.faultState == .loaded {
                if !o.pendingDelete { result.append(StoreRow(id: id, version: o.version, values: o.values)) }
            } else {
                missing.append(id)
            }
        }
        if !missing.isEmpty { result += try sourceRows(entity: entity, ids: missing) }
        return result
    }

    enum Item {
        case row(StoreRow)
        case object(ManagedObject)
    }

    /// The result of `fetch` with this context's unsaved changes applied.
    func merged(_ fetch: StoreFetch) throws -> [Item] {
        guard hasPendingChanges(for: fetch.entity) else { return try sourceRows(fetch).map(Item.row) }
        let entity = fetch.entity
        guard !fetch.readsSavedRowsOnly else {
            throw PersistenceError(
                .misuse,
                "A full-text search of \(entity.name) reads its rows as saved, and this context has unsaved "
                    + "changes of \(entity.name): save them first, or set includesPendingChanges to false")
        }
        var items: [Item] = []
        for row in try sourceRows(fetch.unwindowed) {
            if let o = registered[ManagedObjectID(entityName: entity.name, rowID: row.id)], isDirty(o) { continue }
            items.append(.row(row))
        }
        for o in insertedList + updatedList where o.entity === entity && !o.pendingDelete {
            if fetch.predicate?.evaluate(o.values, rowID: o.objectID.rowID) ?? true { items.append(.object(o)) }
        }
        func key(_ item: Item) -> (Int64, [StoreValue]) {
            switch item {
            case .row(let r): (r.id, r.values)
            case .object(let o): (o.objectID.rowID, o.values)
            }
        }
        items.sort { fetch.areInIncreasingOrder(key($0), key($1)) }
        let start = min(fetch.offset, items.count)
        let end = fetch.limit.map { min(start + $0, items.count) } ?? items.count
        return Array(items[start..<end])
    }

    // MARK: - Fetching

    /// The objects `request` describes, unsaved changes of this context
    /// included (unless `includesPendingChanges` is false).
    public func fetch<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
        let fetch = request.storeFetch
        let entity = fetch.entity
        if request.includesPendingChanges && hasPendingChanges(for: entity) {
            return try merged(fetch).map { item in
                switch item {
                case .row(let row): materialize(entity: entity, row: row) as! T
                case .object(let o): o as! T
                }
            }
        }
        if request.fetchBatchSize > 0 && parent == nil {
            return try batchFaulted(fetch, batchSize: request.fetchBatchSize) as! [T]
        }
        return try sourceRows(fetch).map { materialize(entity: entity, row: $0) as! T }
    }

    private func batchFaulted(_ fetch: StoreFetch, batchSize: Int) throws -> [ManagedObject] {
        let ids = try core.store.fetchIDs(fetch)
        var result: [ManagedObject] = []
        result.reserveCapacity(ids.count)
        for (i, chunk) in ids.chunked(batchSize).enumerated() {
            if i == 0 {
                let rows = Dictionary(
                    uniqueKeysWithValues: try sourceRows(entity: fetch.entity, ids: Array(chunk)).map { ($0.id, $0) })
                for id in chunk {
                    if let row = rows[id] { result.append(materialize(entity: fetch.entity, row: row)) }
                }
            } else {
                let batch = FaultBatch(ids: Array(chunk))
                for id in chunk {
                    let o = object(with: ManagedObjectID(entityName: fetch.entity.name, rowID: id))
                    if o.faultState == .fault { o.faultBatch = batch }
                    result.append(o)
                }
            }
        }
        return result
    }

    /// Loads every fault of `batch` with one query.
    func fulfillBatch(_ batch: FaultBatch, entity: EntityDescription) {
        guard let rows = try? sourceRows(entity: entity, ids: batch.ids) else { return }
        for row in rows {
            if let o = registered[ManagedObjectID(entityName: entity.name, rowID: row.id)], o.faultState == .fault {
                o.faultBatch = nil
                load(o, row)
            }
        }
    }

    /// The rows `request` describes, as ``fetch(_:)`` would see them, as snapshots of their
    /// values — without making objects: no object is registered or uniqued, and
    /// `awakeFromFetch` does not run. For reading many rows once (a listing, an export) where
    /// objects, their change tracking and their relationships are not needed. Unsaved changes
    /// of this context count as they do for ``fetch(_:)`` (unless `includesPendingChanges` is
    /// false); `fetchBatchSize` is ignored.
    public func fetchSnapshots<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ObjectSnapshot] {
        let fetch = request.storeFetch
        let entity = fetch.entity
        if request.includesPendingChanges && hasPendingChanges(for: entity) {
            return try merged(fetch).map { item in
                switch item {
                case .row(let row): ObjectSnapshot(entity: entity, row: row)
                case .object(let o): ObjectSnapshot(entity: entity, id: o.objectID.rowID, values: o.values)
                }
            }
        }
        return try sourceRows(fetch).map { ObjectSnapshot(entity: entity, row: $0) }
    }

    /// How many objects `request` would fetch.
    public func count<T: ManagedObject>(for request: FetchRequest<T>) throws -> Int {
        let fetch = request.storeFetch
        if request.includesPendingChanges && hasPendingChanges(for: fetch.entity) { return try merged(fetch).count }
        if let parent { return try parent.performAndWait { try parent.rowsForChild(fetch) }.count }
        return try core.store.count(fetch)
    }

    /// The IDs of the objects `request` would fetch, without loading them.
    public func fetchObjectIDs<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [ManagedObjectID] {
        let fetch = request.storeFetch
        if request.includesPendingChanges && hasPendingChanges(for: fetch.entity) || parent != nil {
            return try merged(fetch).map { item in
                switch item {
                case .row(let r): ManagedObjectID(entityName: fetch.entity.name, rowID: r.id)
                case .object(let o): o.objectID
                }
            }
        }
        return try core.store.fetchIDs(fetch).map { ManagedObjectID(entityName: fetch.entity.name, rowID: $0) }
    }
}

/// Objects of a `fetchBatchSize` fetch that load together.
final class FaultBatch {
    let ids: [Int64]
    init(ids: [Int64]) { self.ids = ids }
}
