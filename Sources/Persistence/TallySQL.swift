/// The expressions of the tallies' SQL (``Tally``) that both stores write alike, in a
/// store's dialect: a row's key, its sum, whether a tally counts it, and the selects that
/// count a tally from the rows. How each store keeps the counts (SQLite's row triggers,
/// PostgreSQL's statement triggers) is its own (`SQLiteTallies.swift`, `PostgreSQLTallies.swift`).
package struct TallySQL: Sendable {
    /// The table of the counts: (entity, tally, key, n, total).
    package static let table = "_persistence_tallies"

    package let dialect: StoreDialect

    package init(dialect: StoreDialect) {
        self.dialect = dialect
    }

    /// `value` written into a trigger's SQL.
    package func literal(_ value: StoreValue) -> String {
        dialect.triggerLiteral(value)
    }

    /// The key of the row `row` in a tally by `column`: its value as text, `''` for `NULL`
    /// and for a tally of one count.
    package func key(_ column: String?, row: String) -> String {
        column.map { dialect.textOrEmpty("\(row).\(quote($0))") } ?? "''"
    }

    /// What the row `row` adds to `tally`'s total: its summed column, `0` for `NULL`.
    package func sum(_ tally: ResolvedTally, row: String) -> String {
        tally.sum.map { "\(dialect.ifNull)(\(row).\(quote($0)), 0)" } ?? "0"
    }

    /// Whether `row` is one `tally` counts: its filter, never negated (so unknown is false),
    /// written so that the planner can use an index on the column, and match a partial index
    /// whose `WHERE` is the same filter.
    package func condition(_ tally: ResolvedTally, row: String) -> String {
        guard let filter = tally.filter else { return dialect.trueValue }
        let column = "\(row).\(quote(filter.column))"
        return filter.value.isNull
            ? "\(column) IS NULL" : "\(column) \(dialect.filterEquals) \(literal(filter.value))"
    }

    /// `SELECT`s of (entity, tally, key, n, total) that count `entity`'s tallies from its rows.
    package func expected(_ entity: String, table: String, _ tallies: [ResolvedTally]) -> [String] {
        let e = literal(.text(entity))
        let cast = dialect.integerCast
        var selects: [String] = []
        for tally in tallies {
            let name = literal(.text(tally.name))
            let sum = sum(tally, row: table)
            let cond = condition(tally, row: table)
            guard let distinct = tally.distinct else {
                let key = key(tally.key, row: table)
                selects.append(
                    "SELECT \(e), \(name), \(key), count(*), \(dialect.ifNull)(sum(\(sum)), 0)\(cast) FROM \(table) "
                        + "WHERE \(cond) GROUP BY 3")
                continue
            }
            let key = key(distinct, row: table)
            let values = "SELECT \(key) AS k, max(\(sum)) AS total FROM \(table) WHERE \(cond) GROUP BY 1"
            selects.append(
                "SELECT \(e), \(name), '', count(*), \(dialect.ifNull)(sum(g.total), 0)\(cast) FROM (\(values)) AS g "
                    + "HAVING count(*) > 0")
        }
        return selects
    }
}
