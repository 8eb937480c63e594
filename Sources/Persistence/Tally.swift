/// A count the store keeps of an entity's rows, exact in every transaction that
/// changes them (``ManagedObject/tallies``): how many rows, and the sum of one
/// integer attribute, per value of a key — or the number of distinct values of an
/// attribute. Reading one (``PersistentContainer/tally(_:of:)``) costs one lookup per
/// key, whatever the number of rows.
///
/// The store keeps them itself, in the transaction that writes the rows — an object's
/// save, rows inserted or deleted without objects, a delete rule's cascade, a migration:
/// no write of the entity's rows escapes them, and a rollback or a failed save undoes
/// them with the rows. A tally declared for a store that has rows already is counted
/// when the store is next opened for writing.
/// ``PersistentContainer/recountTallies(fix:)`` counts them again from the rows and
/// says which were wrong.
///
/// ```swift
/// override class var tallies: [Tally] {
///     [Tally("byColour", by: \Paint.colour, summing: \Paint.litres),
///      .distinct("suppliers", of: \Paint.supplier, where: \Paint.inStock, is: true)]
/// }
/// ```
public struct Tally {
    /// The tally's name, unique in its entity.
    public let name: String
    let key: AnyKeyPath?
    let sum: AnyKeyPath?
    let distinct: AnyKeyPath?
    let filter: (keyPath: AnyKeyPath, value: StoreValue)?

    /// Counts the rows, and sums `summing` over them (0 without it), per value of `key`
    /// (one count for all rows without it). A key's count is read with its stored value
    /// as text (`""` for `NULL`).
    public init<Root: ManagedObject>(
        _ name: String, by key: PartialKeyPath<Root>? = nil, summing: KeyPath<Root, Int64>? = nil
    ) {
        self.name = name
        self.key = key
        sum = summing
        distinct = nil
        filter = nil
    }

    private init(
        name: String, distinct: AnyKeyPath, sum: AnyKeyPath?, filter: (keyPath: AnyKeyPath, value: StoreValue)
    ) {
        self.name = name
        key = nil
        self.distinct = distinct
        self.sum = sum
        self.filter = filter
    }

    /// Counts the distinct values of `value` among the rows whose `filter` is `equal`, and
    /// sums `summing` once per distinct value (the rows that share a value are expected to
    /// agree on it). Read under the key `""`. Each write of a row looks for another row
    /// with the same value: declare `value` indexed (``AttributeOptions/indexed``).
    public static func distinct<Root: ManagedObject, Filter: AttributeValue>(
        _ name: String, of value: PartialKeyPath<Root>, summing: KeyPath<Root, Int64>? = nil,
        where filter: KeyPath<Root, Filter>, is equal: Filter
    ) -> Tally {
        Tally(name: name, distinct: value, sum: summing, filter: (filter, equal.storeValue))
    }
}

/// One count of a ``Tally``: for one key, how many rows and the sum it keeps.
public struct TallyCount: Sendable, Hashable {
    /// The key's value, as text (`""` for a tally without a key).
    public var key: String
    /// How many rows (or distinct values) it counts.
    public var count: Int
    /// The sum of the tally's summed attribute over them.
    public var total: Int64

    /// A count of `count` rows summing to `total` under `key`.
    public init(key: String, count: Int, total: Int64) {
        self.key = key
        self.count = count
        self.total = total
    }
}

/// A count of a ``Tally`` that did not match its rows, found by
/// ``PersistentContainer/recountTallies(fix:)``.
public struct TallyDiscrepancy: Sendable, Hashable, CustomStringConvertible {
    /// The entity's name.
    public var entity: String
    /// The tally's name.
    public var tally: String
    /// The key whose count was wrong.
    public var key: String
    /// What the store had recorded (`nil`: nothing for this key).
    public var recorded: TallyCount?
    /// What the rows count (`nil`: no row has this key).
    public var counted: TallyCount?

    package init(entity: String, tally: String, key: String, recorded: TallyCount?, counted: TallyCount?) {
        self.entity = entity
        self.tally = tally
        self.key = key
        self.recorded = recorded
        self.counted = counted
    }
    /// One line naming what was wrong.
    public var description: String {
        func text(_ count: TallyCount?) -> String {
            count.map { "\($0.count) (total \($0.total))" } ?? "nothing"
        }
        let what = "\(entity) \(tally)" + (key.isEmpty ? "" : " '\(key)'")
        return "\(what): recorded \(text(recorded)), counted \(text(counted))"
    }
}

/// A ``Tally`` with its properties' column names.
package struct ResolvedTally {
    package let name: String
    package let key: String?
    package let sum: String?
    package let distinct: String?
    package let filter: (column: String, value: StoreValue)?
}

extension EntityDescription {
    /// The entity's ``ManagedObject/tallies``, with their columns.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` when a key path is not an attribute or
    ///   to-one relationship of the entity, or two tallies share a name.
    package func resolvedTallies() throws -> [ResolvedTally] {
        func column(_ keyPath: AnyKeyPath?) throws -> String? {
            guard let keyPath else { return nil }
            guard let property = property(for: keyPath), property.slot != nil else {
                throw PersistenceError(
                    .misuse,
                    "A tally of \(name) names \(keyPath), which is not an attribute or to-one relationship of it")
            }
            return property.name
        }
        var names = Set<String>()
        return try objectType.tallies.map { tally in
            guard names.insert(tally.name).inserted else {
                throw PersistenceError(.misuse, "\(name) declares the tally '\(tally.name)' twice")
            }
            return ResolvedTally(
                name: tally.name, key: try column(tally.key), sum: try column(tally.sum),
                distinct: try column(tally.distinct),
                filter: try tally.filter.map { (try column($0.keyPath)!, $0.value) })
        }
    }
}
