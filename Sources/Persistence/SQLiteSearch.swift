import Foundation
import GRDB
import GRDBSQLite

/// The search indexes (``SearchIndex``) in SQLite: an FTS5 table an entity, kept by triggers
/// on the entity's table (and on the tables its related sources read), so that every
/// statement that writes rows — whoever issues it — keeps it, in its own transaction. The
/// FTS5 table keeps its own copy of each row's text, so that a row's entry is deleted by ID,
/// whatever its related rows have become meanwhile.
extension SQLiteStore {
    /// The FTS5 table of `entity`'s index, quoted.
    static func searchTable(_ entity: String) -> String { quote("_persistence_search_" + entity) }

    /// What FTS5 cuts text with: letters and digits (Unicode), case-folded, diacritics
    /// removed (`café` is found by `cafe`).
    static let searchTokenizer = "unicode61 remove_diacritics 2"

    /// The SQL of the objects the index needs, by name: its FTS5 table, then its triggers.
    /// Compared with `sqlite_master` to tell whether the store's index is the one declared.
    static func searchObjects(_ index: ResolvedSearchIndex, table: String) -> [(name: String, sql: String)] {
        let fts = searchTable(index.entity)
        let columns = index.fields.map { quote($0.name) }.joined(separator: ", ")
        let prefix = "_persistence_search_\(index.entity)"
        let changed = index.columns.map { "OLD.\(quote($0)) IS NOT NEW.\(quote($0))" }.joined(separator: " OR ")
        var objects: [(String, String)] = [
            (prefix, "CREATE VIRTUAL TABLE \(fts) USING fts5(\(columns), tokenize = '\(searchTokenizer)')"),
            (
                "\(prefix)_insert",
                "CREATE TRIGGER \(quote("\(prefix)_insert")) AFTER INSERT ON \(table) BEGIN "
                    + "INSERT INTO \(fts) (rowid, \(columns)) VALUES (NEW.\"id\", \(documentSQL(index, row: "NEW"))); END"
            ),
            (
                "\(prefix)_delete",
                "CREATE TRIGGER \(quote("\(prefix)_delete")) AFTER DELETE ON \(table) BEGIN "
                    + "DELETE FROM \(fts) WHERE rowid = OLD.\"id\"; END"
            ),
            (
                "\(prefix)_update",
                "CREATE TRIGGER \(quote("\(prefix)_update")) AFTER UPDATE OF "
                    + index.columns.map(quote).joined(separator: ", ") + " ON \(table) WHEN \(changed) BEGIN "
                    + "DELETE FROM \(fts) WHERE rowid = OLD.\"id\"; "
                    + "INSERT INTO \(fts) (rowid, \(columns)) VALUES (NEW.\"id\", \(documentSQL(index, row: "NEW"))); END"
            ),
        ]
        for (i, related) in index.relatedSources.enumerated() {
            // A change of a related row's text re-indexes the rows that link to it.
            let name = "\(prefix)_related_\(i)"
            let linked = "SELECT \"id\" FROM \(table) WHERE \(quote(related.link)) = NEW.\"id\""
            objects.append(
                (
                    name,
                    "CREATE TRIGGER \(quote(name)) AFTER UPDATE OF \(quote(related.column)) ON \(quote(related.table)) "
                        + "WHEN OLD.\(quote(related.column)) IS NOT NEW.\(quote(related.column)) BEGIN "
                        + "DELETE FROM \(fts) WHERE rowid IN (\(linked)); "
                        + "INSERT INTO \(fts) (rowid, \(columns)) SELECT r.\"id\", \(documentSQL(index, row: "r")) "
                        + "FROM \(table) AS r WHERE r.\(quote(related.link)) = NEW.\"id\"; END"
                ))
        }
        return objects
    }

    /// The fields' texts of the row `row` (`NEW`, or an alias of the entity's table),
    /// comma-separated (`ownConnection`: ``fieldTexts(_:row:ownConnection:)``).
    static func documentSQL(_ index: ResolvedSearchIndex, row: String, ownConnection: Bool = false) -> String {
        fieldTexts(index, row: row, ownConnection: ownConnection).joined(separator: ", ")
    }

    /// The fields' texts of the row `row`, one expression a field. Plain SQL, for the
    /// triggers (which every program that writes the table runs) and for the check of the
    /// index; `ownConnection`: for a statement of the store's own, on a connection that has
    /// ``pathExtensionFunction``, which computes an extension a fifth of the time.
    static func fieldTexts(_ index: ResolvedSearchIndex, row: String, ownConnection: Bool = false) -> [String] {
        index.fields.map { field in
            field.sources.map { source in
                switch source {
                case .column(let column):
                    return StoreDialect.sqlite.textOrEmpty("\(row).\(quote(column))")
                case .related(let link, let table, let column):
                    return StoreDialect.sqlite.relatedText(column, of: quote(table), linkedBy: "\(row).\(quote(link))")
                case .pathExtension(let column):
                    let path = StoreDialect.sqlite.textOrEmpty("\(row).\(quote(column))")
                    let plain = pathExtensionSQL(path)
                    // The function's answer, or the plain SQL's for a text it leaves to it.
                    return ownConnection ? "COALESCE(\(pathExtensionFunction)(\(path)), \(plain))" : plain
                }
            }.joined(separator: " || ' ' || ")
        }
    }

    /// Why the SQLite this process runs on cannot keep `schema`'s search indexes (it was built
    /// without FTS5, whose name `compileOptions` — `PRAGMA compile_options` — would hold);
    /// `nil` when it can, or the schema declares none.
    static func searchUnavailable(schema: Schema, compileOptions: [String], version: String) throws -> String? {
        guard let entity = try schema.entities.first(where: { try $0.resolvedSearchIndex() != nil }),
            !compileOptions.contains("ENABLE_FTS5")
        else { return nil }
        return "the SQLite this program runs on (\(version)) was built without FTS5, which the search index of "
            + "\(entity.name) needs: run it with a SQLite built with FTS5 (Debian's and most distributions' are)"
    }

    /// Throws when the SQLite of this process cannot keep the search indexes (``searchUnavailable``).
    static func requireSearch(_ db: Database, schema: Schema) throws {
        let options = try String.fetchAll(db, sql: "PRAGMA compile_options")
        let version = try String.fetchOne(db, sql: "SELECT sqlite_version()") ?? "?"
        if let reason = try searchUnavailable(schema: schema, compileOptions: options, version: version) {
            throw PersistenceError(.unsupported, reason)
        }
    }

    /// Makes each entity's index as `schema` declares it. An entity whose index changes (a new
    /// one, changed fields, a store that had none) has it made again from its rows, in this
    /// transaction; an index no longer declared is dropped.
    static func installSearchIndexes(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws {
        try requireSearch(db, schema: schema)
        let objects = try SchemaObjects(db)
        for entity in schema.entities {
            guard try !searchIndexIsCurrent(entity, table: sql[entity].table, in: objects) else { continue }
            let wanted = try entity.resolvedSearchIndex().map { searchObjects($0, table: sql[entity].table) } ?? []
            for name in objects.searchTriggers(of: entity.name) {
                try db.execute(sql: "DROP TRIGGER IF EXISTS \(quote(name))")
            }
            try db.execute(sql: "DROP TABLE IF EXISTS \(searchTable(entity.name))")
            for (_, text) in wanted { try db.execute(sql: text) }
            if let fill = try rangeSearchSQL(entity, table: sql[entity].table) {
                try db.execute(sql: fill, arguments: [Int64.min, Int64.max])
            }
        }
    }

    /// Whether `objects` hold the search index of `entity` as it declares it, and nothing
    /// else of an index: its FTS5 table and each trigger as this version writes them; none
    /// of them when it declares none.
    static func searchIndexIsCurrent(_ entity: EntityDescription, table: String, in objects: SchemaObjects) throws
        -> Bool
    {
        let triggers = objects.searchTriggers(of: entity.name)
        guard let index = try entity.resolvedSearchIndex() else {
            return triggers.isEmpty && !objects.hasTable("_persistence_search_\(entity.name)")
        }
        let wanted = searchObjects(index, table: table)
        return wanted.count == triggers.count + 1 && wanted.allSatisfy { objects.sql(of: $0.name) == $0.sql }
    }

    /// Whether each entity's index is the one `schema` declares (a read-only open of a store
    /// not opened for writing since its index changed: no).
    static func searchIndexesAreCurrent(_ db: Database, schema: Schema, sql: EntityMap<EntitySQL>) throws -> Bool {
        let objects = try SchemaObjects(db)
        return try schema.entities.allSatisfy { entity in
            guard let index = try entity.resolvedSearchIndex() else { return true }
            return searchObjects(index, table: sql[entity].table).allSatisfy { objects.sql(of: $0.name) == $0.sql }
        }
    }

    /// The statement that indexes the rows of `entity` whose IDs are in `?1...?2`, inserted by
    /// the current transaction with the triggers off; `nil` when it has no index.
    static func rangeSearchSQL(_ entity: EntityDescription, table: String) throws -> String? {
        guard let index = try entity.resolvedSearchIndex() else { return nil }
        let columns = index.fields.map { quote($0.name) }.joined(separator: ", ")
        return "INSERT INTO \(searchTable(entity.name)) (rowid, \(columns)) "
            + "SELECT r.\"id\", \(documentSQL(index, row: "r", ownConnection: true)) FROM \(table) AS r "
            + "WHERE r.\"id\" BETWEEN ?1 AND ?2"
    }

    /// The extension of the text `path` (an SQL expression) in plain SQL: what follows the
    /// last `.` (`rtrim` by every other character leaves the text up to it), lower-cased, when
    /// no `/` follows it, something precedes it and that is not a `/`. Each value once, in a
    /// subquery: written as one expression, which repeated each part, it cost 17 µs a row to
    /// this 4.5 µs.
    static func pathExtensionSQL(_ path: String) -> String {
        "CASE WHEN instr(\(path), '.') = 0 THEN '' ELSE (SELECT CASE WHEN length(s) > 1 "
            + "AND length(e) > 0 AND instr(e, '/') = 0 AND substr(s, -2, 1) <> '/' THEN lower(e) ELSE '' "
            + "END FROM (SELECT s, substr(\(path), length(s) + 1) AS e "
            + "FROM (SELECT rtrim(\(path), replace(\(path), '.', '')) AS s))) END"
    }

    /// The name of the SQL function of one text that the store's own range statements
    /// compute an extension with (``addPathExtensionFunction(_:)``): ``pathExtensionSQL(_:)``'s
    /// result, or NULL for a text that holds a NUL or is not valid UTF-8, where SQLite's
    /// `length` and `rtrim` count otherwise (the statement then asks the plain SQL). A test
    /// holds the two to each other, and `checkSearchIndex` compares the index with the plain
    /// SQL's text. In a large insertion's range statement the plain SQL cost 2.3 µs a row.
    static let pathExtensionFunction = "_persistence_path_extension"

    /// Registers ``pathExtensionFunction`` on `db`'s connection, reading its argument's bytes
    /// as SQLite holds them.
    static func addPathExtensionFunction(_ db: Database) throws {
        let code = sqlite3_create_function_v2(
            db.sqliteConnection, pathExtensionFunction, 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, _, arguments in
                guard let argument = arguments?[0], let text = sqlite3_value_text(argument),
                    let range = SQLiteStore.pathExtension(
                        of: UnsafeBufferPointer(start: text, count: Int(sqlite3_value_bytes(argument))))
                else { return sqlite3_result_null(context) }
                guard !range.isEmpty else { return sqlite3_result_text(context, "", 0, nil) }
                var lowered = range.map { text[$0] }
                for i in lowered.indices where (0x41...0x5A).contains(lowered[i]) { lowered[i] |= 0x20 }
                sqlite3_result_text(context, lowered, Int32(lowered.count), SQLiteStore.transient)
            }, nil, nil, nil)
        guard code == SQLITE_OK else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: "could not add \(pathExtensionFunction)")
        }
    }

    /// Where in the UTF-8 `bytes` of a path its extension is (empty when it has none), as
    /// ``pathExtensionSQL(_:)`` finds it; `nil` when they hold a NUL or are not valid UTF-8.
    static func pathExtension(of bytes: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        decoding: while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar): if scalar == "\0" { return nil }
            case .emptyInput: break decoding
            case .error: return nil
            }
        }
        let none = bytes.count..<bytes.count
        // `.` and `/` are ASCII: no byte of another character equals them.
        guard let dot = bytes.lastIndex(of: UInt8(ascii: ".")), dot > 0, bytes[dot - 1] != UInt8(ascii: "/")
        else { return none }
        let after = (dot + 1)..<bytes.count
        guard !after.isEmpty, !bytes[after].contains(UInt8(ascii: "/")) else { return none }
        return after
    }

    /// The statement that drops the entries of the rows whose IDs are bound to `marks`,
    /// deleted by the current transaction with the triggers off; `nil` when it has no index.
    static func deletionSearchSQL(_ entity: EntityDescription, marks: String) throws -> String? {
        guard try entity.resolvedSearchIndex() != nil else { return nil }
        return "DELETE FROM \(searchTable(entity.name)) WHERE rowid IN (\(marks))"
    }

    /// The FTS5 query of `terms`, all of which must match: each word quoted (a word holds no
    /// quote, but one would be doubled), a phrase's words joined by `+`, a prefix marked `*`,
    /// a term restricted to its field's column. Bound as an argument, never written into SQL.
    static func matchText(_ terms: [ResolvedSearchTerm]) -> String {
        terms.map { term in
            var phrase = term.words.map { "\"" + $0.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
                .joined(separator: " + ")
            if term.isPrefix { phrase += "*" }
            return term.fieldName.map { "{\(quote($0))} : (\(phrase))" } ?? "(\(phrase))"
        }.joined(separator: " AND ")
    }

    /// The ranking of a match: BM25 over the fields, the first weighing most.
    static func rankSQL(_ index: ResolvedSearchIndex) -> String {
        let weights = [10.0, 4.0, 2.0, 1.0].prefix(index.fields.count).map { "\($0)" }.joined(separator: ", ")
        return "bm25(\(searchTable(index.entity)), \(weights))"
    }

    /// A fetch whose predicate has a full-text conjunct at its top level: driven by the FTS5
    /// table (`MATCH`), joined to the entity's rows by ID, ranked by ``rankSQL(_:)`` for
    /// ``SortDescriptor/relevance``. An order by ID is the FTS5 table's own order (its
    /// `rowid`), which it walks either way and stops at the limit: the first page of a query
    /// that a million rows match costs a page, not a million. `nil` for any other fetch.
    func searchDrivenSelect(_ columns: String, _ fetch: StoreFetch, ordered: Bool) -> (String, [StoreValue])? {
        guard let (entityName, terms, rest) = fetch.drivingSearch, entityName == fetch.entity.name,
            let index = try? fetch.entity.resolvedSearchIndex()
        else { return nil }
        let fts = Self.searchTable(entityName)
        var statement = PredicateSQL(dialect: .sqlite)
        let source = SearchIndexSQL(
            from: fts, join: "CROSS JOIN", id: "\(fts).rowid",
            match: "\(fts) MATCH \(statement.argument(.text(Self.matchText(terms))))", rank: Self.rankSQL(index))
        let query = statement.searchDrivenSelect(
            columns, fetch, ordered: ordered, entity: sql[fetch.entity], rest: rest, index: source)
        return (query, statement.arguments)
    }

    /// Compares each index with its rows: that it is the one declared; that the text it keeps
    /// for each row is what the row holds now, and that no row lacks an entry (each a walk by
    /// ID: memory stays flat); and, on a writable store, FTS5's own `integrity-check` of the
    /// index against that text. With `fix` (a writable store), makes a wrong index again from
    /// the rows, in one transaction.
    func checkSearchIndex(fix: Bool) throws -> [SearchIndexDiscrepancy] {
        let schema = schema
        let sql = sql
        let indexes = try schema.entities.compactMap { entity in
            try entity.resolvedSearchIndex().map { (entity, $0) }
        }
        return try mapErrors(nil) {
            var found: [SearchIndexDiscrepancy] = []
            for (entity, index) in indexes {
                let table = sql[entity].table
                let fts = Self.searchTable(entity.name)
                var problems = try pool.read { db -> [String] in
                    guard try Self.searchIndexesAreCurrent(db, schema: schema, sql: sql) else {
                        return ["is missing or not the one this version keeps"]
                    }
                    let fields = zip(index.fields, Self.fieldTexts(index, row: "r"))
                    let differs = fields.map { "\(fts).\(quote($0.name)) IS NOT \($1)" }.joined(separator: " OR ")
                    let stale =
                        try Int.fetchOne(
                            db,
                            sql: "SELECT count(*) FROM \(fts) LEFT JOIN \(table) AS r ON r.\"id\" = \(fts).rowid "
                                + "WHERE r.\"id\" IS NULL OR \(differs)") ?? 0
                    let missing =
                        try Int.fetchOne(
                            db,
                            sql: "SELECT count(*) FROM \(table) AS r "
                                + "WHERE NOT EXISTS (SELECT 1 FROM \(fts) WHERE \(fts).rowid = r.\"id\")") ?? 0
                    guard stale > 0 || missing > 0 else { return [] }
                    return [
                        "does not match its rows: \(missing) without an entry, \(stale) entries for rows gone or changed"
                    ]
                }
                if problems.isEmpty && !isReadOnly {
                    // A write statement that writes nothing: FTS5 reads its index through.
                    do {
                        try pool.writeWithoutTransaction { db in
                            try db.execute(sql: "INSERT INTO \(fts) (\(fts)) VALUES ('integrity-check')")
                        }
                    } catch let error as DatabaseError {
                        problems.append("is damaged (\(error.message ?? "\(error.resultCode)"))")
                    }
                }
                found += problems.map { SearchIndexDiscrepancy(entity: entity.name, problem: $0) }
                guard fix, !problems.isEmpty, !isReadOnly else { continue }
                try pool.write { db in
                    for (name, _) in Self.searchObjects(index, table: table).dropFirst() {
                        try db.execute(sql: "DROP TRIGGER IF EXISTS \(quote(name))")
                    }
                    try db.execute(sql: "DROP TABLE IF EXISTS \(fts)")
                    try Self.installSearchIndexes(db, schema: schema, sql: sql)
                }
            }
            return found
        }
    }
}
