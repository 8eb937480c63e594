import Foundation
import Persistence
import PostgresNIO

/// The search indexes (``SearchIndex``) in PostgreSQL: a table an entity of each row's
/// `tsvector` (`"_persistence_search_<Entity>"`, with a GIN index), kept by statement triggers
/// on the entity's table (and on the tables its related sources read), so that every
/// statement that writes rows keeps it, in its own transaction.
///
/// Text is cut as SQLite's FTS5 cuts it: ASCII punctuation becomes a space before the `simple`
/// configuration reads it (its parser would otherwise keep `beach.png` or `a-b` as one
/// token), so that words are the runs of letters and digits, lower-cased as the database's
/// locale lower-cases them. Diacritics are kept (SQLite's index removes them). Field *i* has
/// the weight `A`, `B`, `C` or `D`, the first the most relevant.
extension PostgreSQLStore {
    /// The table of `entity`'s index, unquoted.
    static func searchTableName(_ entity: String) -> String { "_persistence_search_" + entity }

    /// The punctuation that separates words: the 32 ASCII characters a document's SQL turns
    /// into spaces (``DocumentSQL``).
    static let punctuation = ##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##
    private static let weights = ["A", "B", "C", "D"]

    /// How a version's trigger functions write a row's document: how punctuation becomes
    /// spaces, and how a path's extension is found. Versions whose ways give the same
    /// documents for every text (tests hold them to each other on the server) share an index:
    /// an open replaces only the functions of an ``earlier`` one.
    struct DocumentSQL: Sendable {
        /// `text` (an SQL expression) with each character of ``punctuation`` made a space.
        let separated: @Sendable (_ text: String) -> String
        /// The extension of the path in `column` (a column of a row, which may be NULL): what
        /// follows its last `.`, lower-cased, when that is not empty, holds no `/`, and the
        /// `.` follows something other than a `/`; else empty. As SQLite's index reads it.
        let pathExtension: @Sendable (_ column: String) -> String

        /// This version's: one regular expression of the four ranges of ASCII punctuation,
        /// and `split_part` of the reversed path. Where earlier versions called `translate`
        /// with the 32 characters (2.3 µs a file name, 8 µs a member's path of 45 characters:
        /// it searches them for each character) and a regular expression for the extension
        /// (1.6 µs), these cost a sixth, and 0.9 µs.
        static let current = DocumentSQL(
            separated: { "regexp_replace(\($0), '[!-/:-@\\[-`{-~]', ' ', 'g')" },
            pathExtension: { column in
                let path = StoreDialect.postgresql.textOrEmpty(column)
                // What follows the last `.` (`split_part` counts from the end only since
                // PostgreSQL 14).
                let last = "reverse(split_part(reverse(\(path)), '.', 1))"
                return "CASE WHEN strpos(\(path), '.') > 0 AND \(last) <> '' AND strpos(\(last), '/') = 0 "
                    + "AND right(left(\(path), -length(\(last)) - 1), 1) NOT IN ('', '/') THEN lower(\(last)) ELSE '' END"
            })

        /// Earlier versions' (until 2026-11-30): the same documents.
        static let earlier = DocumentSQL(
            separated: { text in
                let from = "'" + punctuation.replacingOccurrences(of: "'", with: "''") + "'"
                let to = "'" + String(repeating: " ", count: punctuation.count) + "'"
                return "translate(\(text), \(from), \(to))"
            },
            pathExtension: { "COALESCE(lower(substring(\($0)::TEXT FROM '[^/]\\.([^./]+)$')), '')" })
    }

    /// The `tsvector` of the row `row` (an alias of the entity's table, or a transition table's),
    /// written as `version`'s functions write it.
    static func documentSQL(
        _ index: ResolvedSearchIndex, row: String, schema: String, version: DocumentSQL = .current
    ) -> String {
        zip(index.fields, weights).map { field, weight in
            let text = field.sources.map { source in
                switch source {
                case .column(let column):
                    return StoreDialect.postgresql.textOrEmpty("\(row).\(quote(column))")
                case .related(let link, let table, let column):
                    return StoreDialect.postgresql.relatedText(
                        column, of: "\(quote(schema)).\(quote(table))", linkedBy: "\(row).\(quote(link))")
                case .pathExtension(let column):
                    return version.pathExtension("\(row).\(quote(column))")
                }
            }.joined(separator: " || ' ' || ")
            return "setweight(to_tsvector('simple', \(version.separated(text))), '\(weight)')"
        }.joined(separator: " || ")
    }

    /// The trigger functions of `index`: one on the entity's table (its insertions, deletions
    /// and updates), and one on each table a related source reads (a change of that text
    /// re-indexes the rows that link to the changed row).
    func searchFunctions(
        _ index: ResolvedSearchIndex, version: DocumentSQL = .current
    ) -> [(table: String, function: TriggerFunction)] {
        let schema = location.schema
        let table = "\(quote(schema)).\(quote(index.entity))"
        let search = "\(quote(schema)).\(quote(Self.searchTableName(index.entity)))"
        let name = Self.searchTableName(index.entity)
        let changed = index.columns.map { "r.\(quote($0)) IS DISTINCT FROM o.\(quote($0))" }.joined(separator: " OR ")
        let triggers: (String) -> [(name: String, event: String, then: String)] = { name in
            [
                (name + "_insert", "AFTER INSERT", "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"),
                (name + "_delete", "AFTER DELETE", "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT"),
                (
                    name + "_update",
                    "AFTER UPDATE", "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT"
                ),
            ]
        }
        var functions = [
            (
                index.entity,
                TriggerFunction(
                    name: name,
                    body: """

                        BEGIN
                        IF TG_OP = 'INSERT' THEN
                        INSERT INTO \(search) ("id", doc) SELECT r."id", \(Self.documentSQL(index, row: "r", schema: schema, version: version)) \
                        FROM new_rows AS r;
                        ELSIF TG_OP = 'DELETE' THEN
                        DELETE FROM \(search) WHERE "id" IN (SELECT "id" FROM old_rows);
                        ELSE
                        UPDATE \(search) AS s SET doc = \(Self.documentSQL(index, row: "r", schema: schema, version: version)) \
                        FROM new_rows AS r JOIN old_rows AS o ON o."id" = r."id" WHERE s."id" = r."id" AND (\(changed));
                        END IF;
                        RETURN NULL;
                        END;

                        """,
                    triggers: triggers(name))
            )
        ]
        for (i, related) in index.relatedSources.enumerated() {
            let relatedName = "\(name)_related_\(i)"
            functions.append(
                (
                    related.table,
                    TriggerFunction(
                        name: relatedName,
                        body: """

                            BEGIN
                            UPDATE \(search) AS s SET doc = \(Self.documentSQL(index, row: "m", schema: schema, version: version)) \
                            FROM \(table) AS m WHERE s."id" = m."id" AND m.\(quote(related.link)) IN \
                            (SELECT r."id" FROM new_rows AS r JOIN old_rows AS o ON o."id" = r."id" \
                            WHERE r.\(quote(related.column)) IS DISTINCT FROM o.\(quote(related.column)));
                            RETURN NULL;
                            END;

                            """,
                        triggers: [
                            (
                                relatedName, "AFTER UPDATE",
                                "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT"
                            )
                        ])
                ))
        }
        return functions
    }

    /// Makes each entity's index as the schema declares it. An entity whose index changes (a
    /// new one, changed fields, a store that had none) has it made again from its rows, in
    /// this transaction. An index whose functions are those of earlier versions
    /// (``DocumentSQL/earlier``), which hold the same documents, keeps its rows: only its
    /// functions and triggers are made again.
    func installSearchIndexes(_ connection: PostgreSQLConnection) throws {
        for entity in schema.entities {
            guard let index = try entity.resolvedSearchIndex() else { continue }
            if try searchIndexIsCurrent(connection, index) {
                try boundPendingList(connection, index)
            } else if try searchIndexIsCurrent(connection, index, version: .earlier) {
                try makeSearchFunctions(connection, index)
                try boundPendingList(connection, index)
            } else {
                try makeSearchIndex(connection, index)
            }
        }
    }

    /// The storage parameter of each search index's GIN index, as `pg_class.reloptions` lists
    /// it: a pending list of at most 256 kB. New entries wait in GIN's pending list until it is
    /// merged, and every search reads the list whole; at the default 4 MB, a rare word took
    /// 2.9 ms after 100,000 inserts, 0.09 ms with this limit (which cost the inserts 1.5 µs a
    /// row: 703 → 854 ms for 100,000 in psql; 1,311 ms with no pending list at all).
    static let searchIndexStorage = "gin_pending_list_limit=256"

    /// The name of `entity`'s search index's GIN index.
    static func searchDocIndexName(_ entity: String) -> String { searchTableName(entity) + "_doc" }

    /// Gives an index an earlier version made the storage parameter this one makes it with.
    private func boundPendingList(_ connection: PostgreSQLConnection, _ index: ResolvedSearchIndex) throws {
        let name = quote(Self.searchDocIndexName(index.entity))
        let options = try connection.run(
            "SELECT COALESCE(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = $1::regclass",
            [.text(name)]
        ).rows.first?.decode(String.self)
        guard options != Self.searchIndexStorage else { return }
        try connection.run("ALTER INDEX \(name) SET (\(Self.searchIndexStorage))", [])
    }

    /// Drops `index`'s trigger functions and triggers if they are there, and makes them again
    /// (as `version` made them).
    func makeSearchFunctions(
        _ connection: PostgreSQLConnection, _ index: ResolvedSearchIndex,
        version: DocumentSQL = .current
    ) throws {
        let functions = searchFunctions(index, version: version)
        try dropSearchFunctions(connection, functions)
        for (table, function) in functions { try function.create(on: quote(table), connection) }
    }

    /// Drops `functions` and their triggers, where they are.
    private func dropSearchFunctions(
        _ connection: PostgreSQLConnection, _ functions: [(table: String, function: TriggerFunction)]
    ) throws {
        for (table, function) in functions {
            for trigger in function.triggers {
                try connection.run("DROP TRIGGER IF EXISTS \(quote(trigger.name)) ON \(quote(table))", [])
            }
            try connection.run("DROP FUNCTION IF EXISTS \(quote(function.name))()", [])
        }
    }

    /// Drops `index`'s table and triggers if they are there, and makes them again from the rows.
    private func makeSearchIndex(_ connection: PostgreSQLConnection, _ index: ResolvedSearchIndex) throws {
        let functions = searchFunctions(index)
        try dropSearchFunctions(connection, functions)
        let search = quote(Self.searchTableName(index.entity))
        try connection.run("DROP TABLE IF EXISTS \(search)", [])
        try connection.run("CREATE TABLE \(search) (\"id\" BIGINT PRIMARY KEY, doc TSVECTOR NOT NULL)", [])
        try connection.run(
            "INSERT INTO \(search) (\"id\", doc) SELECT r.\"id\", "
                + "\(Self.documentSQL(index, row: "r", schema: location.schema)) FROM \(quote(index.entity)) AS r", [])
        try connection.run(
            "CREATE INDEX \(quote(Self.searchDocIndexName(index.entity))) ON \(search) USING GIN (doc) "
                + "WITH (\(Self.searchIndexStorage))", [])
        // Its statistics at once (as a copy into the store makes them): the planner tells a word
        // in every row from a rare one before autovacuum's first pass.
        try connection.run("ANALYZE \(search)", [])
        for (table, function) in functions { try function.create(on: quote(table), connection) }
    }

    /// Whether `index`'s table and trigger functions are those the schema declares (with
    /// `version`: those that version made).
    func searchIndexIsCurrent(
        _ connection: PostgreSQLConnection, _ index: ResolvedSearchIndex,
        version: DocumentSQL = .current
    ) throws -> Bool {
        let table = "\(quote(location.schema)).\(quote(Self.searchTableName(index.entity)))"
        guard
            try connection.run("SELECT to_regclass($1) IS NOT NULL", [.text(table)]).rows.first?.decode(Bool.self)
                == true
        else { return false }
        for (_, function) in searchFunctions(index, version: version)
        where try existingBody(connection, function.name) != function.body {
            return false
        }
        return true
    }

    /// Whether every entity's index holds the documents this version writes: its functions
    /// this version's, or an earlier version's that write the same (``DocumentSQL/earlier``,
    /// which a read-only open or another version's host may find until a writable open of this
    /// version replaces them).
    func searchIndexesAreCurrent(_ connection: PostgreSQLConnection) throws -> Bool {
        for entity in schema.entities {
            guard let index = try entity.resolvedSearchIndex() else { continue }
            guard try searchIndexHoldsCurrentDocuments(connection, index) else { return false }
        }
        return true
    }

    /// Whether `index` holds the documents this version writes (``searchIndexesAreCurrent(_:)``).
    func searchIndexHoldsCurrentDocuments(_ connection: PostgreSQLConnection, _ index: ResolvedSearchIndex) throws
        -> Bool
    {
        try searchIndexIsCurrent(connection, index) || searchIndexIsCurrent(connection, index, version: .earlier)
    }

    /// The `tsquery` text of `terms`, all of which must match: each word quoted (a word holds
    /// no quote or backslash, but one would be escaped), a phrase's words joined by `<->`, a
    /// prefix marked `:*`, a term restricted to its field by the field's weight. Bound as an
    /// argument of `to_tsquery('simple', …)`, never written into SQL.
    static func queryText(_ terms: [ResolvedSearchTerm]) -> String {
        terms.map { term in
            let weight = term.field.map { weights[$0] } ?? ""
            let words = term.words.enumerated().map { i, word in
                let quoted =
                    "'"
                    + word.replacingOccurrences(of: "\\", with: "\\\\")
                    .replacingOccurrences(of: "'", with: "''") + "'"
                let last = i == term.words.count - 1
                let marks = (last && term.isPrefix ? "*" : "") + weight
                return marks.isEmpty ? quoted : quoted + ":" + marks
            }
            return "(" + words.joined(separator: " <-> ") + ")"
        }.joined(separator: " & ")
    }

    /// A fetch whose predicate has a full-text conjunct at its top level: driven by the index
    /// (`@@`, which its GIN index answers), joined to the entity's rows by ID, ranked by
    /// `ts_rank` for ``SortDescriptor/relevance``. `nil` for any other fetch.
    func searchDrivenSelect(_ columns: String, _ fetch: StoreFetch, ordered: Bool) -> (String, [StoreValue])? {
        guard let (entityName, terms, rest) = fetch.drivingSearch, entityName == fetch.entity.name,
            (try? fetch.entity.resolvedSearchIndex()) != nil
        else { return nil }
        let search = quote(Self.searchTableName(entityName))
        var statement = PredicateSQL(dialect: .postgresql)
        let query = "to_tsquery('simple', \(statement.argument(.text(Self.queryText(terms)))))"
        let source = SearchIndexSQL(
            from: "\(search) AS s", join: "JOIN", id: "s.\"id\"", match: "s.doc @@ \(query)",
            rank: "ts_rank(s.doc, \(query)) DESC")
        let text = statement.searchDrivenSelect(
            columns, fetch, ordered: ordered, entity: sql[fetch.entity], rest: rest, index: source)
        return (text, statement.arguments)
    }

    /// Compares each index with its rows: that it is the one declared, that each row's entry
    /// is what the row holds now, and that no row lacks one (joins by ID, in the server). With
    /// `fix` (a writable store), makes a wrong index again from the rows, in one transaction.
    func checkSearchIndex(fix: Bool) throws -> [SearchIndexDiscrepancy] {
        let fix = fix && !isReadOnly
        if fix { try refuseIfSessionLost() }
        let indexes = try schema.entities.compactMap { try $0.resolvedSearchIndex() }
        return try mapErrors(nil) {
            try writer.withLock {
                try transaction(writer) {
                    var found: [SearchIndexDiscrepancy] = []
                    for index in indexes {
                        let search = quote(Self.searchTableName(index.entity))
                        let table = quote(index.entity)
                        var problem: String?
                        if try !searchIndexHoldsCurrentDocuments(writer, index) {
                            problem = "is missing or not the one this version keeps"
                        } else {
                            let doc = Self.documentSQL(index, row: "r", schema: location.schema)
                            let stale =
                                try writer.run(
                                    "SELECT count(*) FROM \(search) AS s LEFT JOIN \(table) AS r ON r.\"id\" = s.\"id\" "
                                        + "WHERE r.\"id\" IS NULL OR s.doc IS DISTINCT FROM \(doc)", []
                                ).rows.first?.decode(Int64.self) ?? 0
                            let missing =
                                try writer.run(
                                    "SELECT count(*) FROM \(table) AS r "
                                        + "WHERE NOT EXISTS (SELECT 1 FROM \(search) AS s WHERE s.\"id\" = r.\"id\")",
                                    []
                                ).rows.first?.decode(Int64.self) ?? 0
                            if stale > 0 || missing > 0 {
                                problem =
                                    "does not match its rows: \(missing) without an entry, "
                                    + "\(stale) entries for rows gone or changed"
                            }
                        }
                        guard let problem else { continue }
                        found.append(SearchIndexDiscrepancy(entity: index.entity, problem: problem))
                        if fix {
                            try fenceSave()  // a write, fenced as a save is
                            try makeSearchIndex(writer, index)
                        }
                    }
                    return found
                }
            }
        }
    }
}
