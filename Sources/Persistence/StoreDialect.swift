import Foundation

/// How one engine spells what the stores' shared SQL is built from: the SQL of an entity
/// (``EntitySQL``), of its schema, of a fetch and its predicate (``PredicateSQL``) and of
/// the tallies' counts (``TallySQL``) is written once, in this module, and each store gives
/// its dialect as data — SQLite's in `SQLiteDialect.swift`, PostgreSQL's in its module.
///
/// ```swift
/// var sql = PredicateSQL(dialect: .sqlite)
/// let query = sql.select("\"id\"", from: "\"Asset\"", fetch, ordered: true)
/// // query: SELECT "id" FROM "Asset" WHERE "name" IS ? ORDER BY "id" ASC; sql.arguments: [.text("a")]
/// ```
package struct StoreDialect: Sendable {
    /// The placeholder of a statement's `number`th argument (from 1): `?`, `$1`.
    package var mark: @Sendable (_ number: Int) -> String
    /// The function that gives its second argument for a `NULL` first: `IFNULL`, `COALESCE`.
    package var ifNull: String
    /// `expression` converted to text: `CAST(… AS TEXT)`, `…::TEXT`.
    package var asText: @Sendable (_ expression: String) -> String
    /// True and false as conditions: `1` and `0`, `TRUE` and `FALSE`.
    package var trueValue: String
    package var falseValue: String
    /// How a filter's value (of an index, of a tally) is compared with its column: `IS`
    /// (as a predicate compiles `==`, so that the planner sees one imply the other), `=`.
    package var filterEquals: String
    /// The column type of an ID, a version and a link.
    package var integerType: String
    /// The column type of an attribute.
    package var columnType: @Sendable (AttributeType) -> String
    /// What makes an aggregate of integers an integer of the column type again where the
    /// engine widens it (PostgreSQL's `sum` of `BIGINT`s is a `NUMERIC`): `""`, `::BIGINT`.
    package var integerCast: String
    /// A value written into the schema's SQL: a default, an index's filter.
    package var literal: SQLLiteral
    /// A value written into a trigger's SQL (a tally's filter).
    package var triggerLiteral: SQLLiteral
    /// What follows an ascending and a descending key of a column in an `ORDER BY`, so
    /// that `NULL` comes before every value ascending, as SQLite orders it.
    package var nullsOrder: (ascending: String, descending: String)
    /// The clause of a fetch's limit and offset (`""` for neither), its arguments added to
    /// `sql`.
    package var window: @Sendable (_ limit: Int?, _ offset: Int, _ sql: inout PredicateSQL) -> String
    /// A comparison of `column` (a name, qualified as needed) with `value` as the engine
    /// needs it written to be two-valued, its arguments added to `sql`; `nil` for the
    /// shared form `(column < $n AND column IS NOT NULL)` (``PredicateSQL/compile(_:qualifier:)``).
    package var compare:
        @Sendable (_ column: String, _ op: ComparisonOperator, _ value: StoreValue, _ sql: inout PredicateSQL) ->
            String?
    /// A text condition (`contains`, `hasPrefix`, `hasSuffix`) on `column`, never `NULL`.
    package var text:
        @Sendable (_ column: String, _ op: TextOperator, _ text: String, _ sql: inout PredicateSQL) -> String
    /// Whether the row whose ID is `id` has an entry in the search index of `entity` that
    /// matches every term.
    package var matches:
        @Sendable (_ id: String, _ entity: String, _ terms: [ResolvedSearchTerm], _ sql: inout PredicateSQL) ->
            String

    package init(
        mark: @escaping @Sendable (_ number: Int) -> String, ifNull: String,
        asText: @escaping @Sendable (_ expression: String) -> String, trueValue: String, falseValue: String,
        filterEquals: String, integerType: String, columnType: @escaping @Sendable (AttributeType) -> String,
        integerCast: String, literal: SQLLiteral, triggerLiteral: SQLLiteral,
        nullsOrder: (ascending: String, descending: String),
        window: @escaping @Sendable (_ limit: Int?, _ offset: Int, _ sql: inout PredicateSQL) -> String,
        compare:
            @escaping @Sendable (
                _ column: String, _ op: ComparisonOperator, _ value: StoreValue, _ sql: inout PredicateSQL
            ) -> String?,
        text:
            @escaping @Sendable (_ column: String, _ op: TextOperator, _ text: String, _ sql: inout PredicateSQL) ->
            String,
        matches:
            @escaping @Sendable (
                _ id: String, _ entity: String, _ terms: [ResolvedSearchTerm], _ sql: inout PredicateSQL
            ) -> String
    ) {
        self.mark = mark
        self.ifNull = ifNull
        self.asText = asText
        self.trueValue = trueValue
        self.falseValue = falseValue
        self.filterEquals = filterEquals
        self.integerType = integerType
        self.columnType = columnType
        self.integerCast = integerCast
        self.literal = literal
        self.triggerLiteral = triggerLiteral
        self.nullsOrder = nullsOrder
        self.window = window
        self.compare = compare
        self.text = text
        self.matches = matches
    }

    /// `expression` as text, `''` for `NULL`: what a tally's key and a search field read.
    package func textOrEmpty(_ expression: String) -> String {
        "\(ifNull)(\(asText(expression)), '')"
    }

    /// The text of `column` of the row of `table` whose ID is `link` (qualified as needed),
    /// `''` when there is none: a search field read from a related row.
    package func relatedText(_ column: String, of table: String, linkedBy link: String) -> String {
        "\(ifNull)((SELECT \(asText("d.\(quote(column))")) FROM \(table) AS d WHERE d.\"id\" = \(link)), '')"
    }
}

/// How a store writes a value into SQL text (where it cannot be bound): `NULL`, a number
/// (followed by a cast where the engine needs its type), quoted text, a blob in hex.
package struct SQLLiteral: Sendable {
    /// What follows an integer and a real: `""`, `::BIGINT`.
    package var casts: (integer: String, real: String)
    /// What comes before and after a blob's hexadecimal digits (`X'` and `'`), and whether
    /// they are `A`–`F` rather than `a`–`f`.
    package var blob: (prefix: String, suffix: String, uppercase: Bool)

    package init(
        casts: (integer: String, real: String) = ("", ""), blob: (prefix: String, suffix: String, uppercase: Bool)
    ) {
        self.casts = casts
        self.blob = blob
    }

    /// `value` as SQL: a real that is not finite is `NULL`.
    package func callAsFunction(_ value: StoreValue) -> String {
        switch value {
        case .null: "NULL"
        case .integer(let v): "\(v)\(casts.integer)"
        case .real(let v): v.isFinite ? "\(v)\(casts.real)" : "NULL"
        case .text(let v): "'" + v.replacingOccurrences(of: "'", with: "''") + "'"
        case .blob(let v):
            blob.prefix + v.map { String(format: blob.uppercase ? "%02X" : "%02x", $0) }.joined() + blob.suffix
        }
    }
}

/// A quoted SQL identifier, as SQLite and PostgreSQL both read it. (Not Foundation's
/// `replacingOccurrences`, which bridges to `NSString`: a search's statement quotes a few
/// dozen names, and that was 3 % of `Catalog.search`.)
package func quote(_ identifier: String) -> String {
    guard identifier.contains("\"") else { return "\"" + identifier + "\"" }
    return "\"" + identifier.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
}

extension StoreDialect {
    /// The type of `property`'s column: its attribute's, or a to-one relationship's row ID.
    package func columnType(of property: PropertyDescription) -> String {
        if case .attribute(let type) = property.kind { return columnType(type) }
        return integerType
    }

    /// The definition of `property`'s column, in a `CREATE TABLE` or an `ADD COLUMN`.
    package func columnDefinition(_ property: PropertyDescription) -> String {
        let null = property.isOptional ? "" : " NOT NULL"
        return "\(quote(property.name)) \(columnType(of: property))\(null) DEFAULT \(literal(property.defaultValue))"
    }

    /// The columns of a new table of `entity`: its ID, its version, then its properties'.
    package func tableColumns(_ entity: EntityDescription) -> [String] {
        ["\"id\" \(integerType) PRIMARY KEY NOT NULL", "\"_version\" \(integerType) NOT NULL DEFAULT 1"]
            + entity.storedProperties.map(columnDefinition)
    }

    /// The statements that make the indexes of `entity` (its table `table`, quoted) that are
    /// missing: one for each property that is indexed, unique or a link, and one for each
    /// composite index. A partial index is named by its filter's column too.
    package func indexStatements(_ entity: EntityDescription, table: String) throws -> [String] {
        var statements: [String] = []
        for property in entity.storedProperties {
            guard property.isIndexed || property.isUnique || !property.isAttribute else { continue }
            let unique = property.isUnique ? "UNIQUE " : ""
            let index = quote(entity.indexName(of: property))
            statements.append("CREATE \(unique)INDEX IF NOT EXISTS \(index) ON \(table) (\(quote(property.name)))")
        }
        for composite in try entity.compositeIndexDescriptions() {
            let unique = composite.isUnique ? "UNIQUE " : ""
            let index = quote(
                entity.indexName(
                    columns: composite.columns, isUnique: composite.isUnique, filterColumn: composite.filter?.column))
            let condition =
                composite.filter.map { " WHERE \(quote($0.column)) \(filterEquals) \(literal($0.value))" } ?? ""
            statements.append(
                "CREATE \(unique)INDEX IF NOT EXISTS \(index) ON \(table) "
                    + "(\(composite.columns.map(quote).joined(separator: ", ")))\(condition)")
        }
        return statements
    }
}
