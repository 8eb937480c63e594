/// The SQL of one entity in one store's dialect, built once when the store opens and
/// held by it in an ``EntityMap``: its table, its columns by slot, and the statements of an
/// object's insert, update and delete. Each store reads rows its own way (an extension in
/// its own files: `decode`).
package struct EntitySQL: Sendable {
    package let entity: EntityDescription
    package let dialect: StoreDialect
    /// The table, quoted.
    package let table: String
    /// Quoted column names, by slot.
    package let columns: [String]
    /// The ID, the version and the columns, quoted: what a fetch of rows selects.
    package let selectList: String
    /// The ID and the columns, quoted, as an `INSERT` names them.
    package let insertColumns: String
    /// The insert of one row: its ID, then its values by slot.
    package let insert: String

    package init(_ entity: EntityDescription, dialect: StoreDialect) {
        self.entity = entity
        self.dialect = dialect
        table = quote(entity.name)
        columns = entity.storedProperties.map { quote($0.name) }
        selectList = (["\"id\"", "\"_version\""] + columns).joined(separator: ", ")
        insertColumns = (["\"id\""] + columns).joined(separator: ", ")
        let marks = (1...columns.count + 1).map(dialect.mark).joined(separator: ", ")
        insert = "INSERT INTO \(table) (\(insertColumns)) VALUES (\(marks))"
    }

    /// The insert of `rows` rows in one statement: each row's ID, then its values by slot.
    package func insert(rows: Int) -> String {
        let width = columns.count + 1
        let values = (0..<rows).map { row in
            "(" + (1...width).map { dialect.mark(row * width + $0) }.joined(separator: ", ") + ")"
        }
        return "INSERT INTO \(table) (\(insertColumns)) VALUES " + values.joined(separator: ", ")
    }

    /// `columns` (the ``selectList``, the ID, or an expression) named through the table, for
    /// a select that joins another table.
    package func qualified(_ columns: String) -> String {
        switch columns {
        case selectList: (["\"id\"", "\"_version\""] + self.columns).map { "\(table).\($0)" }.joined(separator: ", ")
        case "\"id\"": "\(table).\"id\""
        default: columns
        }
    }

    /// The statement that deletes the row `id` if its version is still `expectedVersion`
    /// (whatever it is, for `nil`), and its arguments.
    package func delete(id: Int64, expectedVersion: Int64?) -> (String, [StoreValue]) {
        var query = "DELETE FROM \(table) WHERE \"id\" = \(dialect.mark(1))"
        var arguments: [StoreValue] = [.integer(id)]
        if let expectedVersion {
            arguments.append(.integer(expectedVersion))
            query += " AND \"_version\" = \(dialect.mark(2))"
        }
        return (query, arguments)
    }

    /// The statement that writes `values` into the columns of `slots` of the row `id`, and
    /// steps its version, if its version is still `expectedVersion` (whatever it is, for
    /// `nil`); it returns the new version. And its arguments.
    package func update(slots: [Int], values: [StoreValue], id: Int64, expectedVersion: Int64?) -> (
        String, [StoreValue]
    ) {
        var arguments = values
        var assignments = slots.enumerated().map { i, slot in "\(columns[slot]) = \(dialect.mark(i + 1))" }
        assignments.append("\"_version\" = \"_version\" + 1")
        arguments.append(.integer(id))
        var query =
            "UPDATE \(table) SET \(assignments.joined(separator: ", ")) WHERE \"id\" = \(dialect.mark(arguments.count))"
        if let expectedVersion {
            arguments.append(.integer(expectedVersion))
            query += " AND \"_version\" = \(dialect.mark(arguments.count))"
        }
        return (query + " RETURNING \"_version\"", arguments)
    }

    /// SQLite's statement that writes the columns of `slots` of several rows at once, each
    /// row's values a tuple of a `VALUES` list (its ID, its expected version when `versioned`,
    /// then its values by slot), and steps each row's version if it is still the one expected;
    /// it returns the ID and new version of each row written. `rows` tuples of arguments.
    package func update(slots: [Int], rows: Int, versioned: Bool) -> String {
        let first = versioned ? 3 : 2
        let assignments =
            slots.enumerated().map { i, slot in "\(columns[slot]) = v.column\(first + i)" }
            + ["\"_version\" = \(table).\"_version\" + 1"]
        let tuple = "(" + Array(repeating: "?", count: first - 1 + slots.count).joined(separator: ", ") + ")"
        return "UPDATE \(table) SET \(assignments.joined(separator: ", ")) FROM (VALUES "
            + Array(repeating: tuple, count: rows).joined(separator: ", ") + ") AS v WHERE \(table).\"id\" = v.column1"
            + (versioned ? " AND \(table).\"_version\" = v.column2" : "")
            + " RETURNING \(table).\"id\", \(table).\"_version\""
    }
}
