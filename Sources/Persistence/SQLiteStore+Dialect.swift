extension StoreDialect {
    /// SQLite's: anonymous `?` arguments, `IS` for a comparison that is never `NULL`, text
    /// compared by its bytes (SQLite's text functions stop at a NUL), a limit of `-1` for
    /// none, and FTS5 for the search index.
    package static let sqlite = StoreDialect(
        mark: { _ in "?" },
        ifNull: "IFNULL",
        asText: { "CAST(\($0) AS TEXT)" },
        trueValue: "1",
        falseValue: "0",
        filterEquals: "IS",
        integerType: "INTEGER",
        columnType: { $0.sqlType },
        integerCast: "",
        literal: SQLLiteral(blob: (prefix: "X'", suffix: "'", uppercase: false)),
        triggerLiteral: SQLLiteral(blob: (prefix: "X'", suffix: "'", uppercase: true)),
        nullsOrder: (ascending: "", descending: ""),
        window: { limit, offset, sql in
            guard limit != nil || offset > 0 else { return "" }
            let limit = sql.argument(.integer(Int64(limit ?? -1)))
            return " LIMIT \(limit) OFFSET \(sql.argument(.integer(Int64(offset))))"
        },
        compare: { column, op, value, sql in
            // `IS` is never NULL; the order comparisons take the shared form.
            switch op {
            case .equal: "\(column) IS \(sql.argument(value))"
            case .notEqual: "\(column) IS NOT \(sql.argument(value))"
            case .less, .lessOrEqual, .greater, .greaterOrEqual: nil
            }
        },
        text: { column, op, s, sql in
            // On bytes, not characters: SQLite's text functions stop at a NUL.
            let bytes = "CAST(\(column) AS BLOB)"
            guard !s.isEmpty else { return "(typeof(\(column)) = 'text')" }
            let mark = sql.argument(.text(s))
            switch op {
            case .contains:
                return "(instr(\(bytes), CAST(\(mark) AS BLOB)) > 0 AND typeof(\(column)) = 'text')"
            case .hasPrefix:
                let again = sql.argument(.text(s))
                return "(substr(\(bytes), 1, length(CAST(\(mark) AS BLOB))) = CAST(\(again) AS BLOB) "
                    + "AND typeof(\(column)) = 'text')"
            case .hasSuffix:
                let again = sql.argument(.text(s))
                return "(substr(\(bytes), -length(CAST(\(mark) AS BLOB))) = CAST(\(again) AS BLOB) "
                    + "AND typeof(\(column)) = 'text')"
            }
        },
        matches: { id, entity, terms, sql in
            let fts = SQLiteStore.searchTable(entity)
            let query = sql.argument(.text(SQLiteStore.matchText(terms)))
            return "\(id) IN (SELECT rowid FROM \(fts) WHERE \(fts) MATCH \(query))"
        })
}
