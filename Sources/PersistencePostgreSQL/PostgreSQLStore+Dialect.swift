import Persistence

extension StoreDialect {
    /// PostgreSQL's: numbered arguments (`$1`), `BIGINT` IDs, text that compares by its bytes
    /// (`COLLATE "C"`, as in SQLite), `NULL`s ordered first ascending as SQLite orders them,
    /// and the `tsvector` table of the search index.
    ///
    /// A comparison is written with a plain operator, made two-valued by `AND column IS NOT
    /// NULL` (a `NULL` column then gives false, not unknown): the planner can use an index for
    /// it, as it cannot for `IS NOT DISTINCT FROM` or `COALESCE(…)`, and can match a partial
    /// index's `WHERE column = value` when the argument is that value.
    static let postgresql = StoreDialect(
        mark: { "$\($0)" },
        ifNull: "COALESCE",
        asText: { "\($0)::TEXT" },
        trueValue: "TRUE",
        falseValue: "FALSE",
        filterEquals: "=",
        integerType: "BIGINT",
        columnType: PostgreSQLStore.columnType,
        integerCast: "::BIGINT",
        literal: SQLLiteral(blob: (prefix: "'\\x", suffix: "'::bytea", uppercase: false)),
        triggerLiteral: SQLLiteral(
            casts: (integer: "::BIGINT", real: "::DOUBLE PRECISION"),
            blob: (prefix: "'\\x", suffix: "'::BYTEA", uppercase: false)),
        nullsOrder: (ascending: " NULLS FIRST", descending: " NULLS LAST"),
        window: { limit, offset, sql in
            var clause = ""
            if let limit { clause += " LIMIT \(sql.argument(.integer(Int64(limit))))" }
            if offset > 0 { clause += " OFFSET \(sql.argument(.integer(Int64(offset))))" }
            return clause
        },
        compare: { column, op, value, _ in
            // In memory, `NULL` equals only `NULL`, and orders with nothing; any other value
            // takes the shared form.
            guard value.isNull else { return nil }
            switch op {
            case .equal: return "(\(column) IS NULL)"
            case .notEqual: return "(\(column) IS NOT NULL)"
            case .less, .lessOrEqual, .greater, .greaterOrEqual: return "FALSE"
            }
        },
        text: { column, op, s, sql in
            // Text holds no NUL in PostgreSQL, and a UTF-8 substring match is a byte match:
            // these agree with the in-memory judgement on bytes.
            guard !s.isEmpty else { return "(\(column) IS NOT NULL)" }
            let mark = sql.argument(.text(s))
            switch op {
            case .contains: return "COALESCE(strpos(\(column), \(mark)) > 0, FALSE)"
            case .hasPrefix: return "COALESCE(starts_with(\(column), \(mark)), FALSE)"
            case .hasSuffix: return "COALESCE(right(\(column), length(\(mark))) = \(mark), FALSE)"
            }
        },
        matches: { id, entity, terms, sql in
            let query = sql.argument(.text(PostgreSQLStore.queryText(terms)))
            return "\(id) IN (SELECT \"id\" FROM \(quote(PostgreSQLStore.searchTableName(entity))) "
                + "WHERE doc @@ to_tsquery('simple', \(query)))"
        })
}
