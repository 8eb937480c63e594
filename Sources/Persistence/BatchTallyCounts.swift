/// A tally by key (``ResolvedTally`` without `distinct`) counted over rows about to be
/// inserted, from the values being written: what SQLite's aggregate over the rows
/// (``SQLiteStore/rangeTallySQL(_:of:table:)``) would count once they are in, without reading
/// them back and sorting them. As the aggregate does, it keys a row by
/// `IFNULL(CAST(key AS TEXT), '')`, compares and groups keys by their bytes (not as Swift
/// compares strings: `é` written as one scalar or as two are two keys), and adds up
/// `IFNULL(sum, 0)`.
///
/// It copies SQLite's reading only for values stored as their column's type is — text in a
/// `TEXT` column, an integer in an `INTEGER` one, and `NULL` — in a column the table declares
/// as the store declares it (its definition found as such in the table's SQL: a migration
/// that changed a column's type or collation leaves that column to SQLite). A row holding
/// anything else where the tally reads (a real, a blob, a text in an `INTEGER` column, which
/// SQLite would convert, a text with a NUL, which a bound key would lose), or a total that
/// overflows, makes the whole batch the aggregate's: `init` is `nil`.
struct BatchTallyCounts {
    /// One key's rows: how many, and what they add to the total.
    struct Key {
        var text: String
        var count: Int64
        var total: Int64
    }

    /// The keys, in the order their first rows come.
    private(set) var keys: [Key] = []

    /// Counts `tally` of `entity` over `rows`; `table` is the `CREATE TABLE` text of the
    /// entity's table, as `sqlite_master` holds it.
    init?(_ tally: ResolvedTally, of entity: EntityDescription, table: String, rows: [StoreChanges.Insert]) {
        // A filter belongs to distinct tallies, which look for other rows.
        guard tally.distinct == nil, tally.filter == nil else { return nil }
        let key = Self.column(tally.key, of: entity, table: table)
        let sum = Self.column(tally.sum, of: entity, table: table)
        guard (key != nil) == (tally.key != nil), (sum != nil) == (tally.sum != nil) else { return nil }
        var index: [BytewiseText: Int] = [:]
        var last: Int?
        for row in rows {
            var text = ""
            if let key {
                guard let value = Self.text(row.values[key.slot], columnType: key.type) else { return nil }
                text = value
            }
            var adds: Int64 = 0
            if let sum {
                guard let value = Self.integer(row.values[sum.slot], columnType: sum.type) else { return nil }
                adds = value
            }
            let at: Int
            if let last, keys[last].text.utf8.elementsEqual(text.utf8) {  // a run of one key
                at = last
            } else if let known = index[BytewiseText(text)] {
                at = known
            } else {
                at = keys.count
                index[BytewiseText(text)] = at
                keys.append(Key(text: text, count: 0, total: 0))
            }
            last = at
            let (total, overflow) = keys[at].total.addingReportingOverflow(adds)
            // SQLite's `sum` fails on an overflow: the aggregate then reports it.
            guard !overflow else { return nil }
            keys[at].total = total
            keys[at].count += 1
        }
    }

    /// The slot and SQL type of the column `name` of `entity`, when the table `table` (its
    /// `CREATE TABLE` text) declares it as the store does; `nil` for no name, and for a
    /// column a migration made otherwise.
    private static func column(_ name: String?, of entity: EntityDescription, table: String) -> (
        slot: Int, type: String
    )? {
        guard let name, let property = entity.property(named: name), let slot = property.slot else { return nil }
        let declared = StoreDialect.sqlite.columnDefinition(property)
        guard table.contains(declared + ",") || table.contains(declared + ")") else { return nil }
        return (slot, StoreDialect.sqlite.columnType(of: property))
    }

    /// `IFNULL(CAST(value AS TEXT), '')` for a value stored as its column's type; `nil` for
    /// any other, and for a text with a NUL (the key's upsert binds it as a C string).
    private static func text(_ value: StoreValue, columnType: String) -> String? {
        switch value {
        case .null: ""
        case .text(let s) where columnType == "TEXT" && !s.utf8.contains(0): s
        case .integer(let i) where columnType == "INTEGER": String(i)
        default: nil
        }
    }

    /// `IFNULL(value, 0)` for an integer (or `NULL`) in an `INTEGER` column; `nil` for any
    /// other value.
    private static func integer(_ value: StoreValue, columnType: String) -> Int64? {
        switch value {
        case .null: 0
        case .integer(let i) where columnType == "INTEGER": i
        default: nil
        }
    }

    /// Whether the filter of `tally` (a distinct tally's `IS` test) passes none of `rows`, so
    /// that the batch adds nothing to it: what an aggregate over the rows would find without
    /// reading them (a reference add's rows, for a tally of managed files). `table` is the
    /// `CREATE TABLE` text of the entity's table. `false` when a row passes, when the tally
    /// has no filter, and for a value or a column whose SQL reading this does not copy (a
    /// real, which SQLite stores as `NULL` when it is not a number, or a filter's real, whose
    /// literal is then `NULL`).
    static func filterPassesNone(
        _ tally: ResolvedTally, of entity: EntityDescription, table: String, rows: [StoreChanges.Insert]
    ) -> Bool {
        guard let filter = tally.filter, let column = column(filter.column, of: entity, table: table) else {
            return false
        }
        return rows.allSatisfy { row in
            switch (row.values[column.slot], filter.value) {
            case (.null, .null): false
            case (.null, .text), (.null, .integer): true
            case (.text, .null), (.integer, .null): true
            case (.text(let s), .text(let w)) where column.type == "TEXT": !s.utf8.elementsEqual(w.utf8)
            case (.integer(let i), .integer(let w)) where column.type == "INTEGER": i != w
            default: false
            }
        }
    }
}

/// A text compared and hashed by its UTF-8 bytes, as SQLite's `BINARY` collation compares
/// it (Swift's `String` equates canonically equivalent texts).
private struct BytewiseText: Hashable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (a: Self, b: Self) -> Bool { a.text.utf8.elementsEqual(b.text.utf8) }

    func hash(into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}
