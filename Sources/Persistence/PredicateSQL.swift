/// A statement being built for a store — a fetch's select, its predicate — and its
/// arguments so far, in the store's ``StoreDialect``: what is the same on every store
/// (the tree of a predicate, the order, the search-driven form) is written here once; what
/// each engine spells its own way comes from the dialect.
///
/// A predicate compiles to two-valued SQL (a comparison with `NULL` is false, never
/// unknown), matching ``PredicateNode/evaluate(_:rowID:)``, so that `NOT` means the same
/// in SQL and in memory.
package struct PredicateSQL {
    package let dialect: StoreDialect
    /// The arguments so far, the first first.
    package private(set) var arguments: [StoreValue] = []

    package init(dialect: StoreDialect) {
        self.dialect = dialect
    }

    /// The placeholder of a new argument, `value`.
    package mutating func argument(_ value: StoreValue) -> String {
        arguments.append(value)
        return dialect.mark(arguments.count)
    }

    /// The condition `node`; with `qualifier` (a quoted table name or alias), the fetched
    /// entity's columns are named through it.
    package mutating func compile(_ node: PredicateNode, qualifier: String? = nil) -> String {
        let prefix = qualifier.map { $0 + "." } ?? ""
        func named(_ name: String) -> String { prefix + quote(name) }
        let id = prefix + "\"id\""
        switch node {
        case .constant(let b):
            return b ? dialect.trueValue : dialect.falseValue
        case .compare(let p, let op, let value):
            let column = named(p.column)
            let compare = dialect.compare
            if let written = compare(column, op, value, &self) { return written }
            let mark = argument(value)
            // A plain operator, made two-valued by `AND column IS NOT NULL`: an index serves it.
            switch op {
            case .equal: return "(\(column) = \(mark) AND \(column) IS NOT NULL)"
            case .notEqual: return "(\(column) IS DISTINCT FROM \(mark))"
            case .less: return "(\(column) < \(mark) AND \(column) IS NOT NULL)"
            case .lessOrEqual: return "(\(column) <= \(mark) AND \(column) IS NOT NULL)"
            case .greater: return "(\(column) > \(mark) AND \(column) IS NOT NULL)"
            case .greaterOrEqual: return "(\(column) >= \(mark) AND \(column) IS NOT NULL)"
            }
        case .isIn(let p, let list):
            let column = named(p.column)
            let present = list.filter { !$0.isNull }
            var parts: [String] = []
            if list.contains(where: \.isNull) { parts.append("\(column) IS NULL") }
            if !present.isEmpty {
                let marks = present.map { argument($0) }.joined(separator: ", ")
                parts.append("(\(column) IN (\(marks)) AND \(column) IS NOT NULL)")
            }
            return parts.isEmpty ? dialect.falseValue : "(" + parts.joined(separator: " OR ") + ")"
        case .text(let p, let op, let s):
            let text = dialect.text
            return text(named(p.column), op, s, &self)
        case .rowIDIn(let ids):
            guard !ids.isEmpty else { return dialect.falseValue }
            return "\(id) IN (" + ids.map { argument(.integer($0)) }.joined(separator: ", ") + ")"
        case .rowIDAbove(let bound):
            return "\(id) > \(argument(.integer(bound)))"
        case .related(let table, let link, let condition, _):
            let inner = compile(condition)  // in the subquery's own scope
            let linked = quote(link)
            // Not NULL: `id IN (…, NULL)` is NULL when nothing else matches, and its NOT too.
            return "\(id) IN (SELECT \(linked) FROM \(quote(table)) WHERE \(inner) AND \(linked) IS NOT NULL)"
        case .matches(let entity, let terms):
            // Not at the top level of a fetch (under `OR`, `NOT`): the IDs the index matches.
            let matches = dialect.matches
            return matches(id, entity, terms, &self)
        case .and(let nodes):
            return "(" + nodes.map { compile($0, qualifier: qualifier) }.joined(separator: " AND ") + ")"
        case .or(let nodes):
            return "(" + nodes.map { compile($0, qualifier: qualifier) }.joined(separator: " OR ") + ")"
        case .not(let node):
            return "(NOT " + compile(node, qualifier: qualifier) + ")"
        }
    }

    /// The statement of `fetch`, selecting `columns` from `table` (quoted). With `ordered`
    /// false, the rows come in no particular order (for a count).
    package mutating func select(_ columns: String, from table: String, _ fetch: StoreFetch, ordered: Bool) -> String {
        var query = "SELECT \(columns) FROM \(table)"
        if let predicate = fetch.predicate { query += " WHERE " + compile(predicate) }
        // Relevance without a full-text conjunct at the top level (which drives the fetch:
        // ``searchDrivenSelect(_:_:ordered:entity:rest:index:)``) has no rank to order by.
        if ordered {
            var order = fetch.sort.filter { !$0.relevance }.map { key in
                orderKey(key.property.map { quote($0.column) }, id: "\"id\"", ascending: key.ascending)
            }
            if !fetch.sort.contains(where: \.isRowID) { order.append("\"id\" ASC") }
            query += " ORDER BY " + order.joined(separator: ", ")
        }
        return query + window(fetch)
    }

    /// The clause of `fetch`'s limit and offset, its arguments added.
    package mutating func window(_ fetch: StoreFetch) -> String {
        let window = dialect.window
        return window(fetch.limit, fetch.offset, &self)
    }

    /// A key of an `ORDER BY`: `column`, or the row's ID (`id`) when there is none. An ID
    /// is never NULL: a `NULLS` clause on it would keep the primary key from giving the
    /// order (the whole index read and sorted for a page).
    private func orderKey(_ column: String?, id: String, ascending: Bool) -> String {
        guard let column else { return id + (ascending ? " ASC" : " DESC") }
        return column + (ascending ? " ASC" + dialect.nullsOrder.ascending : " DESC" + dialect.nullsOrder.descending)
    }

    /// A fetch whose predicate has a full-text conjunct at its top level (``StoreFetch/drivingSearch``):
    /// driven by the entity's search `index`, joined to the entity's rows by ID, ranked by the
    /// index for ``SortDescriptor/relevance``; `rest` are the other conjuncts. An order by
    /// ID is the index's own order, which it walks either way and stops at the limit.
    package mutating func searchDrivenSelect(
        _ columns: String, _ fetch: StoreFetch, ordered: Bool, entity: EntitySQL, rest: [PredicateNode],
        index: SearchIndexSQL
    ) -> String {
        let outer = entity.table
        // IDs (or a count) of a match alone, in ID order: the index answers without the rows
        // (a search's probe of how many match reads 10,001 entries, not 10,001 rows).
        let alone =
            rest.isEmpty && (columns == "\"id\"" || columns == "1")
            && fetch.sort.allSatisfy { $0.isRowID || !ordered }
        var query =
            alone
            ? "SELECT \(columns == "1" ? "1" : index.id) FROM \(index.from) WHERE \(index.match)"
            : "SELECT \(entity.qualified(columns)) FROM \(index.from) \(index.join) \(outer) "
                + "ON \(outer).\"id\" = \(index.id) WHERE \(index.match)"
        for node in rest {
            // A related row's condition (a tag), asked of each match through the related
            // table's index: the matches are few, the related rows may be millions (`IN` would
            // list them all first).
            var negated = false
            var condition = node
            if case .not(let inner) = node, case .related = inner {
                negated = true
                condition = inner
            }
            if case .related(let table, let column, let inner, _) = condition {
                let related = quote(table)
                let test = compile(inner)
                query +=
                    " AND \(negated ? "NOT " : "")EXISTS (SELECT 1 FROM \(related) WHERE \(test) "
                    + "AND \(related).\(quote(column)) = \(outer).\"id\")"
            } else {
                query += " AND " + compile(node, qualifier: outer)
            }
        }
        if ordered {
            var order = fetch.sort.map { key in
                key.relevance
                    ? index.rank
                    : orderKey(
                        key.property.map { "\(outer).\(quote($0.column))" }, id: index.id, ascending: key.ascending)
            }
            if !fetch.sort.contains(where: \.isRowID) { order.append("\(index.id) ASC") }
            query += " ORDER BY " + order.joined(separator: ", ")
        }
        return query + window(fetch)
    }
}

/// A store's search index as a search-driven select reads it
/// (``PredicateSQL/searchDrivenSelect(_:_:ordered:entity:rest:index:)``).
package struct SearchIndexSQL {
    /// What the select reads the index from: its table, named or aliased.
    package var from: String
    /// How the index's rows are joined to the entity's: `CROSS JOIN` (the index first), `JOIN`.
    package var join: String
    /// The ID of an entry of the index.
    package var id: String
    /// The condition that an entry matches the search, its argument bound already.
    package var match: String
    /// The key of an order by relevance, the most relevant first.
    package var rank: String

    package init(from: String, join: String, id: String, match: String, rank: String) {
        self.from = from
        self.join = join
        self.id = id
        self.match = match
        self.rank = rank
    }
}
