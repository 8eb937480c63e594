import Foundation

/// The rows of a store held still for a copy (``PersistentStore/holdingStill(_:)``).
package protocol StoreRowSource {
    /// Up to `limit` rows of `entity` whose IDs are greater than `after`, by ascending ID.
    func page(_ entity: EntityDescription, after: Int64, limit: Int) throws -> [StoreRow]
    /// The next ID the store would hand out for `entity`.
    func nextID(_ entity: EntityDescription) throws -> Int64
    /// How many rows `entity` has.
    func count(_ entity: EntityDescription) throws -> Int
}

/// A summary of every row of a store: per entity, how many rows, and the sums of their IDs and
/// versions. Two stores with the same rows have the same fingerprint; a save in between (an
/// insert, a deletion, an update, which raises a version) changes it. Tells whether a copy
/// (``PersistentContainer/copyAll(to:progress:beforeCommit:afterCommit:)``) still matches its source.
public struct StoreFingerprint: Hashable, Sendable, CustomStringConvertible {
    /// Per entity name: rows, sum of IDs, sum of versions (wrapping).
    var entities: [String: [Int64]] = [:]

    mutating func add(_ entity: String, _ rows: [StoreRow]) {
        var sums = entities[entity] ?? [0, 0, 0]
        for row in rows {
            sums[0] &+= 1
            sums[1] &+= row.id
            sums[2] &+= row.version
        }
        entities[entity] = sums
    }

    public var description: String {
        entities.keys.sorted().map { "\($0): \(entities[$0]!.map(String.init).joined(separator: "/"))" }
            .joined(separator: ", ")
    }
}

/// How far ``PersistentContainer/copyAll(to:progress:beforeCommit:afterCommit:)`` is.
public struct StoreCopyProgress: Sendable, Equatable {
    /// The rows written so far.
    public var copied: Int
    /// The rows to write in all.
    public var total: Int
}

extension PersistentContainer {
    /// How many rows a page of ``copyAll(to:progress:beforeCommit:afterCommit:)`` holds: the most it keeps
    /// in memory at once.
    package static let copyPageSize = 10_000

    /// The tables of the store that are neither entities of ``schema`` nor the store's own
    /// bookkeeping: the tables of entities a program declares and this schema does not (a
    /// copy with this schema would leave them behind). Sorted by name.
    public func tablesOutsideSchema() throws -> [String] {
        try core.store.tableNames().filter { name in
            !name.hasPrefix("_persistence") && !name.hasPrefix("sqlite_") && schema.entity(named: name) == nil
        }.sorted()
    }

    /// Copies every row of this container's store into `target`'s, whose schema has the same
    /// entities and whose tables are empty: IDs, versions and links are kept, each entity's
    /// next ID is at least this store's, and the tallies come out exact.
    ///
    /// All or nothing: the target writes everything in one transaction, which commits only
    /// when every row is written and `beforeCommit` returned; if anything throws (a page that
    /// cannot be read or written, `beforeCommit`, a lost connection) the target holds none of
    /// the rows. This store is held still for the whole copy: it is read as of one moment, and
    /// every other writer (another process's too) waits until the copy commits or fails.
    /// Memory stays flat: the rows go a page (`copyPageSize` rows) at a time, by ascending ID.
    ///
    /// Nothing of this store changes. Use `target` only after the copy: a container that has
    /// inserted objects before it may hold IDs the copy gives to rows.
    ///
    /// - Parameters:
    ///   - target: The container of the store the rows go to: the same entities, empty tables.
    ///   - progress: Called after each page with the rows written so far and in all.
    ///   - beforeCommit: Runs when every row is written, before the target commits, with this
    ///     store still held: a last check (throw to write nothing).
    ///   - afterCommit: Runs once the target committed, with this store still held (no other
    ///     writer got in since the copy): to switch users over to the target. What it throws
    ///     is thrown; the target keeps the rows.
    /// - Returns: The fingerprint of the rows copied (``fingerprint()`` of both stores then).
    /// - Throws: ``PersistenceError/Code/misuse`` when the schemas' entities differ or the
    ///   target holds rows; ``PersistenceError/Code/unsupported`` naming the tables of this
    ///   store that the schema does not declare (``tablesOutsideSchema()``); what a store
    ///   or `beforeCommit` throws.
    @discardableResult
    public func copyAll(
        to target: PersistentContainer, progress: (StoreCopyProgress) -> Void = { _ in },
        beforeCommit: () throws -> Void = {}, afterCommit: () throws -> Void = {}
    ) throws -> StoreFingerprint {
        let names = schema.entities.map(\.name)
        guard names == target.schema.entities.map(\.name) else {
            throw PersistenceError(
                .misuse,
                "The stores' schemas differ (\(names.joined(separator: ", ")) and "
                    + "\(target.schema.entities.map(\.name).joined(separator: ", "))): nothing was copied")
        }
        for (entity, other) in zip(schema.entities, target.schema.entities)
        where entity.storedProperties.map(\.name) != other.storedProperties.map(\.name) {
            throw PersistenceError(
                .misuse, "\(entity.name) has other properties in the two schemas: nothing was copied")
        }
        let outside = try tablesOutsideSchema()
        guard outside.isEmpty else {
            throw PersistenceError(
                .unsupported,
                "\(storeName) holds tables of entities the schema does not declare (\(outside.joined(separator: ", "))): "
                    + "copy it with a schema that declares them; nothing was copied")
        }
        return try core.store.holdingStill { source in
            let total = try schema.entities.reduce(0) { $0 + (try source.count($1)) }
            var copied = 0
            progress(StoreCopyProgress(copied: 0, total: total))
            let fingerprinting = Fingerprinting(source: EntityMatching(source: source, entities: schema.entities))
            try target.core.store.load(
                target.schema.entities, from: fingerprinting,
                progress: { rows in
                    copied += rows
                    progress(StoreCopyProgress(copied: copied, total: total))
                }, beforeCommit: beforeCommit)
            try afterCommit()
            return fingerprinting.box.fingerprint
        }
    }

    /// The fingerprint of every row of the store, read a page at a time with the store held
    /// still (as a copy reads it).
    public func fingerprint() throws -> StoreFingerprint {
        try core.store.holdingStill { source in
            var fingerprint = StoreFingerprint()
            for entity in schema.entities {
                var after = Int64.min
                while true {
                    let page = try source.page(entity, after: after, limit: Self.copyPageSize)
                    guard let last = page.last else { break }
                    fingerprint.add(entity.name, page)
                    after = last.id
                }
            }
            return fingerprint
        }
    }

    /// How messages name the store: its path, or its URL without a password.
    var storeName: String { storeURL.isFileURL ? storeURL.path : storeURL.absoluteString }
}

/// A source read with its own schema's entities, asked with the target's (the same names).
private struct EntityMatching: StoreRowSource {
    let source: any StoreRowSource
    let byName: [String: EntityDescription]

    init(source: any StoreRowSource, entities: [EntityDescription]) {
        self.source = source
        byName = Dictionary(entities.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    func page(_ entity: EntityDescription, after: Int64, limit: Int) throws -> [StoreRow] {
        try source.page(byName[entity.name]!, after: after, limit: limit)
    }

    func nextID(_ entity: EntityDescription) throws -> Int64 { try source.nextID(byName[entity.name]!) }

    func count(_ entity: EntityDescription) throws -> Int { try source.count(byName[entity.name]!) }
}

/// A source that adds every page it reads to a fingerprint.
private struct Fingerprinting: StoreRowSource {
    final class Box { var fingerprint = StoreFingerprint() }
    let source: any StoreRowSource
    let box = Box()

    func page(_ entity: EntityDescription, after: Int64, limit: Int) throws -> [StoreRow] {
        let rows = try source.page(entity, after: after, limit: limit)
        box.fingerprint.add(entity.name, rows)
        return rows
    }

    func nextID(_ entity: EntityDescription) throws -> Int64 { try source.nextID(entity) }

    func count(_ entity: EntityDescription) throws -> Int { try source.count(entity) }
}
