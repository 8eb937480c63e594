/// The rows one save's to-one links point at, checked in the store before its commit: a
/// link is a foreign key. A context links to the objects it knows; another context or
/// process may have deleted one of them and committed since. Its own save cannot see that,
/// so the store looks, in the save's transaction (on SQLite under the store's one write
/// lock, which every deletion takes too; on PostgreSQL the server's deferred foreign keys
/// hold the line against deletions that commit after the look).
///
/// What the save itself inserts needs no look: a tagged add of a million rows that point at
/// the assets it inserts in the same save costs two ranges, not a million queries.
package final class LinkTargets {
    /// An object's link, named in the error if its target is gone.
    private struct ObjectLink {
        var source: ManagedObjectID
        var property: PropertyDescription
        var target: Int64
    }

    /// The links of objects (few: every one is in memory already), by destination entity.
    private var objectLinks: [String: [ObjectLink]] = [:]
    /// The targets of rows written without objects, by `Entity.property`: a set of ranges,
    /// small whatever the number of rows.
    private var rowTargets: [String: (entity: EntityDescription, property: PropertyDescription, targets: RowIDSet)] =
        [:]
    /// The rows this save inserts, by entity.
    private var inserted: [String: RowIDSet] = [:]

    package init() {}

    /// Notes an object's inserted row (`slots` nil) or the changed `slots` of its update.
    package func object(_ entity: EntityDescription, _ id: Int64, _ values: [StoreValue], slots: [Int]? = nil) {
        if slots == nil { inserted[entity.name, default: RowIDSet()].insert(id) }
        for (i, slot) in (slots ?? Array(values.indices)).enumerated() {
            let property = entity.storedProperties[slot]
            guard case .toOne(let destination) = property.kind, case .integer(let target) = values[i] else { continue }
            objectLinks[destination, default: []].append(
                ObjectLink(
                    source: ManagedObjectID(entityName: entity.name, rowID: id), property: property, target: target)
            )
        }
    }

    /// Notes rows inserted without objects (an insertion's page, a hook's planned rows).
    package func rows(_ rows: [StoreChanges.Insert]) {
        // A run of one entity's rows at a time: each set is looked up once a run, not once a
        // row (a tagged add's tag rows, one a file, each link to its asset).
        var start = rows.startIndex
        while start < rows.endIndex {
            let entity = rows[start].entity
            let run = rows[start...].prefix { $0.entity === entity }
            start = run.endIndex
            var ids = inserted.removeValue(forKey: entity.name) ?? RowIDSet()
            for row in run { ids.insert(row.id) }
            inserted[entity.name] = ids
            for property in entity.storedProperties {
                guard case .toOne = property.kind, let slot = property.slot else { continue }
                let key = "\(entity.name).\(property.name)"
                var targets = rowTargets.removeValue(forKey: key)?.targets ?? RowIDSet()
                for row in run {
                    if case .integer(let target) = row.values[slot] { targets.insert(target) }
                }
                if !targets.isEmpty { rowTargets[key] = (entity, property, targets) }
            }
        }
    }

    /// Throws if a noted link points at a row the store does not hold. `existing` returns
    /// those of the IDs (at most 500 at a time) that the store holds for an entity.
    ///
    /// - Throws: ``PersistenceError/Code/validation`` naming the first link found whose
    ///   target is gone (by object where an object wrote it).
    package func requireTargets(
        existing: (_ entity: String, _ ids: ArraySlice<Int64>) throws -> Set<Int64>
    ) throws {
        func missing(_ destination: String, _ ids: [Int64]) throws -> Int64? {
            let sorted = Array(Set(ids)).sorted()
            for start in stride(from: 0, to: sorted.count, by: 500) {
                let page = sorted[start..<min(start + 500, sorted.count)]
                let found = try existing(destination, page)
                if let gone = page.first(where: { !found.contains($0) }) { return gone }
            }
            return nil
        }
        for destination in objectLinks.keys.sorted() {
            let links = objectLinks[destination]!.filter { inserted[destination]?.contains($0.target) != true }
            guard let gone = try missing(destination, links.map(\.target)) else { continue }
            let link = links.first { $0.target == gone }!
            throw Self.gone(link.source, link.property, ManagedObjectID(entityName: destination, rowID: gone))
        }
        for key in rowTargets.keys.sorted() {
            let (entity, property, targets) = rowTargets[key]!
            guard case .toOne(let destination) = property.kind else { continue }
            let unsaved = Self.subtracting(inserted[destination] ?? RowIDSet(), from: targets)
            var page: [Int64] = []
            func check() throws {
                defer { page.removeAll(keepingCapacity: true) }
                guard let gone = try missing(destination, page) else { return }
                throw PersistenceError(
                    .validation,
                    "A row of \(entity.name) saved points at \(ManagedObjectID(entityName: destination, rowID: gone)) "
                        + "through \(entity.name).\(property.name), which is not in the store: another save deleted "
                        + "it. Nothing was saved")
            }
            for range in unsaved.ranges {
                for id in range {
                    page.append(id)
                    if page.count == 500 { try check() }
                }
            }
            if !page.isEmpty { try check() }
        }
    }

    /// The error of a link, written by `source` through `property`, to `target`, a row no
    /// longer in the store.
    static func gone(_ source: ManagedObjectID, _ property: PropertyDescription, _ target: ManagedObjectID)
        -> PersistenceError
    {
        PersistenceError(
            .validation,
            "\(source).\(property.name) points at \(target), which is not in the store: another save deleted it. "
                + "Nothing was saved",
            objectIDs: [source])
    }

    /// The IDs of `set` that `removed` does not hold.
    static func subtracting(_ removed: RowIDSet, from set: RowIDSet) -> RowIDSet {
        guard !removed.isEmpty else { return set }
        var result = RowIDSet()
        var r = removed.ranges.startIndex
        for range in set.ranges {
            var low = range.lowerBound
            while r < removed.ranges.endIndex, removed.ranges[r].upperBound <= low { r += 1 }
            var k = r
            while low < range.upperBound {
                guard k < removed.ranges.endIndex, removed.ranges[k].lowerBound < range.upperBound else {
                    result.insert(low..<range.upperBound)
                    break
                }
                let cut = removed.ranges[k]
                if cut.lowerBound > low { result.insert(low..<cut.lowerBound) }
                low = max(low, cut.upperBound)
                k += 1
            }
        }
        return result
    }
}
