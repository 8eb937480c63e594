import Persistence

/// Compiles a ``PredicateNode`` to PostgreSQL: two-valued, as
/// `PredicateNode.evaluate(_:rowID:)` judges objects in memory (a comparison with `NULL`
/// is false, never unknown, so that `NOT` means the same in SQL and in memory).
///
/// The tree is the engine-neutral part, shared with SQLite; the SQL differs in nearly every
/// case (`IS NULL` or `= $n AND … IS NOT NULL` for SQLite's `IS`, numbered arguments,
/// `AND … IS NOT NULL` where SQLite's `0`/`1` results need no care), so it is written here rather than bent into one generator.
struct PredicateCompiler {
    /// The arguments so far, `$1` first.
    private(set) var arguments: [StoreValue] = []

    /// The placeholder of a new argument.
    mutating func argument(_ value: StoreValue) -> String {
        arguments.append(value)
        return "$\(arguments.count)"
    }

    /// The condition `node`; with `qualifier` (a quoted table name or alias), the fetched
    /// entity's columns are named through it.
    mutating func compile(_ node: PredicateNode, qualifier: String? = nil) -> String {
        let prefix = qualifier.map { $0 + "." } ?? ""
        func named(_ name: String) -> String { prefix + quote(name) }
        let id = prefix + "\"id\""
        switch node {
        case .constant(let b):
            return b ? "TRUE" : "FALSE"
        case .compare(let p, let op, let value):
            let column = named(p.column)
            guard !value.isNull else {
                // In memory, `NULL` equals only `NULL`, and orders with nothing.
                switch op {
                case .equal: return "(\(column) IS NULL)"
                case .notEqual: return "(\(column) IS NOT NULL)"
                case .less, .lessOrEqual, .greater, .greaterOrEqual: return "FALSE"
                }
            }
            let mark = argument(value)
            // A plain operator, made two-valued by `AND column IS NOT NULL` (a `NULL`
            // column then gives false, not unknown): the planner can use an index for it,
            // as it cannot for `IS NOT DISTINCT FROM` or `COALESCE(…)`, and can match a
            // partial index's `WHERE column = value` when the argument is that value.
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
            return parts.isEmpty ? "FALSE" : "(" + parts.joined(separator: " OR ") + ")"
        case .text(let p, let op, let s):
            // Text holds no NUL in PostgreSQL, and a UTF-8 substring match is a byte match:
            // these agree with the in-memory judgement on bytes.
            let column = named(p.column)
            guard !s.isEmpty else { return "(\(column) IS NOT NULL)" }
            let mark = argument(.text(s))
            switch op {
            case .contains: return "COALESCE(strpos(\(column), \(mark)) > 0, FALSE)"
            case .hasPrefix: return "COALESCE(starts_with(\(column), \(mark)), FALSE)"
            case .hasSuffix: return "COALESCE(right(\(column), length(\(mark))) = \(mark), FALSE)"
            }
        case .rowIDIn(let ids):
            guard !ids.isEmpty else { return "FALSE" }
            return "\(id) IN (" + ids.map { argument(.integer($0)) }.joined(separator: ", ") + ")"
        case .rowIDAbove(let bound):
            return "\(id) > \(argument(.integer(bound)))"
        case .related(let table, let link, let condition, _):
            let inner = compile(condition)  // in the subquery's own scope
            let linked = quote(link)
            return "\(id) IN (SELECT \(linked) FROM \(quote(table)) WHERE \(inner) AND \(linked) IS NOT NULL)"
        case .matches(let entity, let terms):
            // Not at the top level of a fetch (under `OR`, `NOT`): the IDs the index matches.
            let query = argument(.text(PostgreSQLStore.queryText(terms)))
            return "\(id) IN (SELECT \"id\" FROM \(quote(PostgreSQLStore.searchTableName(entity))) "
                + "WHERE doc @@ to_tsquery('simple', \(query)))"
        case .and(let nodes):
            return "(" + nodes.map { compile($0, qualifier: qualifier) }.joined(separator: " AND ") + ")"
        case .or(let nodes):
            return "(" + nodes.map { compile($0, qualifier: qualifier) }.joined(separator: " OR ") + ")"
        case .not(let node):
            return "(NOT " + compile(node, qualifier: qualifier) + ")"
        }
    }
}
