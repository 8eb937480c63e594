/// The store-independent form of a predicate: resolved to properties, ready
/// to be compiled to SQL by a store or evaluated in memory by a context.
///
/// Comparisons are two-valued: a comparison with a `NULL` value is false
/// (never unknown), so that `!` means the same in SQL and in memory.
package indirect enum PredicateNode: Sendable, Hashable {
    case constant(Bool)
    case compare(PropertyRef, ComparisonOperator, StoreValue)
    case isIn(PropertyRef, [StoreValue])
    case text(PropertyRef, TextOperator, String)
    case rowIDIn([Int64])
    case rowIDAbove(Int64)
    /// The row's ID is the `column` (a to-one) of a row of `table` that `condition` matches;
    /// objects with unsaved changes are judged by `unsaved` instead.
    case related(table: String, column: String, condition: PredicateNode, unsaved: PredicateNode)
    /// The row's entry in the search index of `entity` matches every term.
    case matches(entity: String, [ResolvedSearchTerm])
    case and([PredicateNode])
    case or([PredicateNode])
    case not(PredicateNode)

    /// Evaluates the predicate against an object's current values.
    func evaluate(_ values: [StoreValue], rowID: Int64) -> Bool {
        switch self {
        case .constant(let b): return b
        case .compare(let p, let op, let rhs):
            let lhs = values[p.slot]
            switch op {
            case .equal: return lhs == rhs
            case .notEqual: return lhs != rhs
            default:
                guard !lhs.isNull, !rhs.isNull else { return false }
                switch op {
                case .less: return lhs < rhs
                case .lessOrEqual: return !(rhs < lhs)
                case .greater: return rhs < lhs
                default: return !(lhs < rhs)
                }
            }
        case .isIn(let p, let list): return list.contains(values[p.slot])
        case .text(let p, let op, let s):
            guard case .text(let v) = values[p.slot] else { return false }
            switch op {
            case .contains: return s.isEmpty || v.utf8.firstRange(of: s.utf8) != nil
            case .hasPrefix: return v.utf8.starts(with: s.utf8)
            case .hasSuffix: return v.utf8.reversed().starts(with: s.utf8.reversed())
            }
        case .rowIDIn(let ids): return ids.contains(rowID)
        case .rowIDAbove(let bound): return rowID > bound
        case .related(_, _, _, let unsaved): return unsaved.evaluate(values, rowID: rowID)
        // The index is the store's: a fetch that includes unsaved changes refuses a full-text
        // predicate before it would judge an object here (``readsSavedRowsOnly``).
        case .matches: return false
        case .and(let nodes): return nodes.allSatisfy { $0.evaluate(values, rowID: rowID) }
        case .or(let nodes): return nodes.contains { $0.evaluate(values, rowID: rowID) }
        case .not(let node): return !node.evaluate(values, rowID: rowID)
        }
    }
}

extension PredicateNode {
    /// Whether the predicate uses a full-text index, which only the store can judge.
    var readsSavedRowsOnly: Bool {
        switch self {
        case .matches: true
        case .related(_, _, let condition, _): condition.readsSavedRowsOnly
        case .and(let nodes), .or(let nodes): nodes.contains { $0.readsSavedRowsOnly }
        case .not(let node): node.readsSavedRowsOnly
        default: false
        }
    }
}

/// A property as predicates and sorts name it: its column and its slot.
package struct PropertyRef: Sendable, Hashable {
    package let column: String
    package let slot: Int

    init(_ property: PropertyDescription) {
        column = property.name
        slot = property.slot ?? -1
    }
}

package enum ComparisonOperator: String, Sendable, Hashable {
    case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual
}

package enum TextOperator: Sendable, Hashable {
    case contains, hasPrefix, hasSuffix
}

/// A typed condition on the objects of an entity, built from key paths.
///
/// ```swift
/// let recent: FetchPredicate<Note> = \.created > cutoff && \.folder == inbox
/// let titled = FetchPredicate<Note>.hasPrefix(\.title, "Re: ") || \.title == ""
/// ```
///
/// Predicates compile to SQL for the store and are evaluated in memory for
/// objects with unsaved changes, with the same result. A comparison with a
/// missing value (`NULL`) is false; use `== nil` to match missing values.
public struct FetchPredicate<Root: ManagedObject>: Sendable {
    let node: PredicateNode

    init(_ node: PredicateNode) { self.node = node }

    /// Matches every object.
    public static var all: FetchPredicate { FetchPredicate(.constant(true)) }
    /// Matches no object.
    public static var none: FetchPredicate { FetchPredicate(.constant(false)) }

    /// Matches the objects with one of these IDs.
    public static func objectIDs(_ ids: some Sequence<ManagedObjectID>) -> FetchPredicate {
        let entityName = Root.entityName  // String(describing:) of the type: once, not per ID
        return FetchPredicate(.rowIDIn(ids.filter { $0.entityName == entityName }.map(\.rowID)))
    }

    /// Matches the objects whose row ID is greater than `id`'s: with a sort by
    /// ``SortDescriptor/objectID(ascending:)`` and a limit, pages through an
    /// entity without the cost of an offset.
    public static func objectIDs(after rowID: Int64) -> FetchPredicate {
        FetchPredicate(.rowIDAbove(rowID))
    }

    /// Matches the objects that a row of another entity points at through its to-one `link`,
    /// among the rows that `condition` matches: in SQL, `id IN (SELECT link FROM Related WHERE
    /// condition)`, which an index on (`condition`'s attribute, `link`) answers in
    /// O(matches + log n). Negate it with `!` for the objects no such row points at.
    ///
    /// ```swift
    /// // The notes with a label "urgent" (a label row: its text, and its note)
    /// let urgent = FetchPredicate<Note>.related(
    ///     Label.self, via: \.note, where: \.text == "urgent", unsaved: .contains(\.labelText, "\nurgent\n"))
    /// ```
    ///
    /// The rows of `Related` are read from the store. An object with unsaved changes is not
    /// in the store as it is now, and neither are the rows its save will write: such an
    /// object (inserted or changed, in a fetch or count that includes pending changes) is
    /// judged by `unsaved` instead, a predicate on its own values that must say the same
    /// thing — for example on a column the entity keeps in step with the related rows.
    public static func related<Related: ManagedObject>(
        _ type: Related.Type, via link: KeyPath<Related, Root?>, where condition: FetchPredicate<Related>,
        unsaved: FetchPredicate<Root>
    ) -> FetchPredicate {
        let column = Related.entityDescription.propertyOrDie(for: link).name
        return FetchPredicate(
            .related(table: Related.entityName, column: column, condition: condition.node, unsaved: unsaved.node))
    }

    /// Matches the objects whose entry in the entity's search index (``ManagedObject/searchIndex``)
    /// matches every term of `search`; a query without terms matches every object. Sort by
    /// ``SortDescriptor/relevance`` for the best matches first.
    ///
    /// ```swift
    /// let found = FetchPredicate<Note>.matches(TextSearch([.init("grocer", isPrefix: true)]))
    /// ```
    ///
    /// Only the store can judge it: a fetch with it in a context with unsaved changes of the
    /// entity (and `includesPendingChanges`) throws ``PersistenceError/Code/misuse``.
    ///
    /// - Precondition: the entity has a search index, and each term's field is one of its fields.
    public static func matches(_ search: TextSearch) -> FetchPredicate {
        guard !search.terms.isEmpty else { return .all }
        let index: ResolvedSearchIndex?
        do { index = try Root.entityDescription.resolvedSearchIndex() } catch { preconditionFailure("\(error)") }
        guard let index else { preconditionFailure("\(Root.entityName) has no search index") }
        let terms = search.terms.map { term in
            let field = term.field.map { name in
                guard let i = index.fieldIndex(name) else {
                    preconditionFailure("The search index of \(Root.entityName) has no field '\(name)'")
                }
                return i
            }
            return ResolvedSearchTerm(words: term.words, isPrefix: term.isPrefix, field: field, fieldName: term.field)
        }
        return FetchPredicate(.matches(entity: Root.entityName, terms))
    }

    /// Matches the objects whose attribute is one of `values`.
    public static func `in`<Value: AttributeValue>(_ keyPath: KeyPath<Root, Value>, _ values: some Sequence<Value>)
        -> FetchPredicate
    {
        FetchPredicate(.isIn(ref(keyPath), values.map(\.storeValue)))
    }

    /// Matches the objects whose text attribute contains `substring`
    /// (case-sensitive, byte-exact).
    public static func contains(_ keyPath: KeyPath<Root, some TextAttribute>, _ substring: String) -> FetchPredicate {
        FetchPredicate(.text(ref(keyPath), .contains, substring))
    }

    /// Matches the objects whose text attribute starts with `prefix`.
    public static func hasPrefix(_ keyPath: KeyPath<Root, some TextAttribute>, _ prefix: String) -> FetchPredicate {
        FetchPredicate(.text(ref(keyPath), .hasPrefix, prefix))
    }

    /// Matches the objects whose text attribute ends with `suffix`.
    public static func hasSuffix(_ keyPath: KeyPath<Root, some TextAttribute>, _ suffix: String) -> FetchPredicate {
        FetchPredicate(.text(ref(keyPath), .hasSuffix, suffix))
    }

    static func ref(_ keyPath: AnyKeyPath) -> PropertyRef {
        PropertyRef(Root.entityDescription.propertyOrDie(for: keyPath))
    }

    static func compare(_ keyPath: AnyKeyPath, _ op: ComparisonOperator, _ value: StoreValue) -> FetchPredicate {
        switch op {
        case .equal, .notEqual: return FetchPredicate(.compare(ref(keyPath), op, value))
        default: return value.isNull ? .none : FetchPredicate(.compare(ref(keyPath), op, value))
        }
    }
}

/// `String` and `String?`: the attribute types text predicates accept.
public protocol TextAttribute: AttributeValue {}
extension String: TextAttribute {}
extension Optional: TextAttribute where Wrapped == String {}

/// Matches the objects whose attribute at `lhs` is equal to `rhs`.
public func == <Root, Value: AttributeValue & Equatable>(lhs: KeyPath<Root, Value>, rhs: Value) -> FetchPredicate<Root>
{
    .compare(lhs, .equal, rhs.storeValue)
}
/// Matches the objects whose attribute at `lhs` is not equal to `rhs`.
public func != <Root, Value: AttributeValue & Equatable>(lhs: KeyPath<Root, Value>, rhs: Value) -> FetchPredicate<Root>
{
    .compare(lhs, .notEqual, rhs.storeValue)
}
/// Matches the objects whose attribute at `lhs` is less than `rhs`.
public func < <Root, Value: AttributeValue & Comparable>(lhs: KeyPath<Root, Value>, rhs: Value) -> FetchPredicate<Root>
{
    .compare(lhs, .less, rhs.storeValue)
}
/// Matches the objects whose attribute at `lhs` is less than or equal to `rhs`.
public func <= <Root, Value: AttributeValue & Comparable>(lhs: KeyPath<Root, Value>, rhs: Value) -> FetchPredicate<Root>
{
    .compare(lhs, .lessOrEqual, rhs.storeValue)
}
/// Matches the objects whose attribute at `lhs` is greater than `rhs`.
public func > <Root, Value: AttributeValue & Comparable>(lhs: KeyPath<Root, Value>, rhs: Value) -> FetchPredicate<Root>
{
    .compare(lhs, .greater, rhs.storeValue)
}
/// Matches the objects whose attribute at `lhs` is greater than or equal to `rhs`.
public func >= <Root, Value: AttributeValue & Comparable>(lhs: KeyPath<Root, Value>, rhs: Value) -> FetchPredicate<Root>
{
    .compare(lhs, .greaterOrEqual, rhs.storeValue)
}
/// Matches the objects whose to-one relationship is `rhs` (or empty, for `nil`).
public func == <Root, Destination: ManagedObject>(lhs: KeyPath<Root, Destination?>, rhs: Destination?)
    -> FetchPredicate<Root>
{
    .compare(lhs, .equal, rhs.map { .integer($0.objectID.rowID) } ?? .null)
}
/// Matches the objects whose to-one relationship points at the object with ID `rhs`.
public func == <Root, Destination: ManagedObject>(lhs: KeyPath<Root, Destination?>, rhs: ManagedObjectID)
    -> FetchPredicate<Root>
{
    .compare(lhs, .equal, .integer(rhs.rowID))
}
/// Matches the objects whose to-one relationship is not `rhs`.
public func != <Root, Destination: ManagedObject>(lhs: KeyPath<Root, Destination?>, rhs: Destination?)
    -> FetchPredicate<Root>
{
    .compare(lhs, .notEqual, rhs.map { .integer($0.objectID.rowID) } ?? .null)
}
/// Matches the objects both predicates match.
public func && <Root>(lhs: FetchPredicate<Root>, rhs: FetchPredicate<Root>) -> FetchPredicate<Root> {
    FetchPredicate(.and([lhs.node, rhs.node]))
}
/// Matches the objects either predicate matches.
public func || <Root>(lhs: FetchPredicate<Root>, rhs: FetchPredicate<Root>) -> FetchPredicate<Root> {
    FetchPredicate(.or([lhs.node, rhs.node]))
}
/// Matches the objects the predicate does not match.
public prefix func ! <Root>(predicate: FetchPredicate<Root>) -> FetchPredicate<Root> {
    FetchPredicate(.not(predicate.node))
}

/// An ordering of fetch results by one attribute. Ties are broken by row ID,
/// so results are always in a stable order.
public struct SortDescriptor<Root: ManagedObject>: Sendable {
    let key: SortKey

    /// Sorts by an attribute (missing values first when ascending).
    public init<Value: AttributeValue>(_ keyPath: KeyPath<Root, Value>, ascending: Bool = true) {
        key = SortKey(property: FetchPredicate<Root>.ref(keyPath), ascending: ascending)
    }

    /// Sorts by row ID, that is, by order of insertion.
    public static func objectID(ascending: Bool = true) -> SortDescriptor {
        SortDescriptor(key: SortKey(property: nil, ascending: ascending))
    }

    /// Sorts the best matches of the fetch's full-text predicate (``FetchPredicate/matches(_:)``,
    /// as a condition every result meets) first, as the store ranks them (SQLite: BM25;
    /// PostgreSQL: `ts_rank`), the index's first field weighing most. Without such a
    /// predicate, it orders nothing.
    public static var relevance: SortDescriptor {
        SortDescriptor(key: SortKey(property: nil, ascending: true, relevance: true))
    }

    private init(key: SortKey) { self.key = key }
}

package struct SortKey: Sendable, Hashable {
    /// `nil`: the row ID (or, with ``relevance``, the rank of a full-text match).
    package let property: PropertyRef?
    package let ascending: Bool
    /// The rank of the fetch's full-text match, the best first.
    package var relevance = false

    /// Whether this is the row ID.
    package var isRowID: Bool { property == nil && !relevance }
}

/// A description of objects to fetch: an entity, a predicate, an order and a window.
///
/// ```swift
/// var request = FetchRequest<Note>(predicate: \.title == "Groceries", sortBy: [.init(\.created)])
/// request.fetchLimit = 10
/// let notes = try context.fetch(request)
/// ```
public struct FetchRequest<Result: ManagedObject>: Sendable {
    /// Which objects; `nil` for all.
    public var predicate: FetchPredicate<Result>?
    /// In what order; row ID order when empty.
    public var sortDescriptors: [SortDescriptor<Result>]
    /// At most this many objects; `nil` for no limit.
    public var fetchLimit: Int?
    /// Skip this many objects first.
    public var fetchOffset: Int
    /// When positive, objects beyond the first batch are returned as faults
    /// and loaded this many at a time as they are touched.
    public var fetchBatchSize: Int
    /// Whether unsaved inserts, changes and deletions of the context count
    /// (true by default, as in Core Data).
    public var includesPendingChanges: Bool

    /// A request for the objects `predicate` matches (all of them when `nil`), sorted by
    /// `sortBy` (by ID when empty), skipping `offset` and returning at most `limit`.
    public init(
        predicate: FetchPredicate<Result>? = nil, sortBy sortDescriptors: [SortDescriptor<Result>] = [],
        limit: Int? = nil, offset: Int = 0
    ) {
        self.predicate = predicate
        self.sortDescriptors = sortDescriptors
        fetchLimit = limit
        fetchOffset = offset
        fetchBatchSize = 0
        includesPendingChanges = true
    }

    var storeFetch: StoreFetch {
        StoreFetch(
            // A closure, not `\.key`: a key path in this generic context is made at every call.
            entity: Result.entityDescription, predicate: predicate?.node, sort: sortDescriptors.map { $0.key },
            limit: fetchLimit, offset: fetchOffset)
    }
}

/// A fetch as a store executes it.
package struct StoreFetch: Sendable {
    package var entity: EntityDescription
    package var predicate: PredicateNode?
    package var sort: [SortKey]
    package var limit: Int?
    package var offset: Int

    /// Whether only the store can answer the fetch (a full-text predicate or order).
    var readsSavedRowsOnly: Bool {
        predicate?.readsSavedRowsOnly == true || sort.contains(where: \.relevance)
    }

    /// The conjunct of the predicate that a full-text index answers, if there is one at its
    /// top level: what a store drives the fetch (and ranks it) by.
    package var drivingSearch: (entity: String, terms: [ResolvedSearchTerm], rest: [PredicateNode])? {
        guard let predicate else { return nil }
        var conjuncts: [PredicateNode] = []
        func flatten(_ node: PredicateNode) {
            if case .and(let nodes) = node { nodes.forEach(flatten) } else { conjuncts.append(node) }
        }
        flatten(predicate)
        guard let i = conjuncts.firstIndex(where: { if case .matches = $0 { true } else { false } }),
            case .matches(let entity, let terms) = conjuncts[i]
        else { return nil }
        conjuncts.remove(at: i)
        return (entity, terms, conjuncts.filter { $0 != .constant(true) })
    }

    /// The same fetch without its window (limit and offset).
    var unwindowed: StoreFetch {
        var copy = self
        copy.limit = nil
        copy.offset = 0
        return copy
    }

    /// Orders rows (row ID, values) as the store would.
    func areInIncreasingOrder(_ a: (Int64, [StoreValue]), _ b: (Int64, [StoreValue])) -> Bool {
        for key in sort where !key.relevance {
            guard let p = key.property else {
                if a.0 != b.0 { return key.ascending ? a.0 < b.0 : a.0 > b.0 }
                continue
            }
            let x = a.1[p.slot]
            let y = b.1[p.slot]
            if x != y { return key.ascending ? x < y : y < x }
        }
        return a.0 < b.0
    }
}
