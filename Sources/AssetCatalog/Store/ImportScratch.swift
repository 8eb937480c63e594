import BagIt
import Foundation
import GRDB
import GRDBSQLite

/// An import's per-asset state, kept out of memory: the bundle's entries (our records, or one
/// per payload file of a bag without them) and what the plan does with each. A private
/// temporary SQLite database (``BagIndex/temporaryDatabase(cacheKB:)``: on disk beyond a few
/// MB of page cache, deleted by SQLite when closed or when the process dies), so that an
/// import's memory does not grow with the number of assets. The records are checked against
/// the payload, the plan made and the rows written from here, a page at a time.
final class ImportScratch: @unchecked Sendable {
    private let queue: DatabaseQueue
    /// The most rows read at a time.
    static let pageSize = 1_000

    /// What the plan does with an entry (``Row/outcome``).
    enum Outcome: Int64 {
        case imported = 0
        case alreadyPresent = 1
        case skipped = 2
    }

    /// The tables of the bundle's entries and of the plan (``resetEntries()`` makes them anew).
    private static let entrySchema = """
        CREATE TABLE entry(
            seq INTEGER PRIMARY KEY, key INTEGER NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL,
            storage TEXT NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
            payload TEXT NOT NULL, payload_key TEXT NOT NULL, path TEXT, archive INTEGER,
            member TEXT, member_ordinal INTEGER, tags TEXT NOT NULL, metadata TEXT NOT NULL,
            created REAL NOT NULL, modified REAL NOT NULL,
            top INTEGER NOT NULL DEFAULT 1, outcome INTEGER NOT NULL DEFAULT 0,
            new_name TEXT, referenced INTEGER NOT NULL DEFAULT 0, row_id INTEGER);
        CREATE TABLE existing(
            id INTEGER PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL, tags TEXT NOT NULL,
            metadata TEXT NOT NULL);
        CREATE INDEX existing_name ON existing(name);
        CREATE TABLE taken(name TEXT PRIMARY KEY) WITHOUT ROWID;
        CREATE TABLE replaced(id INTEGER PRIMARY KEY);
        CREATE TABLE kept(id INTEGER PRIMARY KEY);
        """

    init() throws {
        do {
            queue = try BagIndex.temporaryDatabase(cacheKB: 4096)
            try queue.inDatabase { db in
                try db.execute(
                    sql: Self.entrySchema + """
                        -- The staged copy of each content read (the file number in the import's
                        -- staging folder), and whether objects/ lacked it when the read began.
                        CREATE TABLE staged(
                            digest TEXT PRIMARY KEY, file INTEGER NOT NULL, absent INTEGER NOT NULL) WITHOUT ROWID;
                        """)
            }
        } catch {
            throw Self.failure(error)
        }
    }

    /// Drops the entries and the plan (not what was staged): for a bag whose records file,
    /// read early, turned out not to be at its root.
    func resetEntries() throws {
        try run { db in
            try db.execute(
                sql: "DROP TABLE entry; DROP TABLE existing; DROP TABLE taken; DROP TABLE replaced; DROP TABLE kept; "
                    + Self.entrySchema
            )
        }
    }

    private static func failure(_ error: any Error) -> CatalogError {
        if let error = error as? CatalogError { return error }
        return CatalogError(.io, "Could not keep the import's entries in a temporary database: \(error)", cause: error)
    }

    /// Runs `body` on the database; its errors become ``CatalogError`` `io`, others pass.
    func run<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try queue.inDatabase(body)
        } catch let error as CatalogError {
            throw error
        } catch let error as BagError {
            throw error
        } catch {
            throw Self.failure(error)
        }
    }

    // MARK: Entries

    /// Adds entries, after those added before, in one transaction.
    func add(_ entries: [BundleRecords.Entry]) throws {
        try run { db in
            try db.inTransaction {
                for e in entries {
                    try db.run(
                        """
                        INSERT INTO entry(key, archive, payload, payload_key, \(Self.fieldColumns()))
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                        [
                            .integer(e.key), e.archive.map(SQLArgument.integer) ?? .text(nil), .text(e.payload),
                            .text(BagPayload.key(e.payload)),
                        ] + Self.arguments(e.fields))
                }
                return .commit
            }
        }
    }

    /// The columns of table `entry` that hold an entry's ``AssetFields``, in the order of
    /// ``arguments(_:)`` and ``fields(_:from:)``: tags and metadata as the catalog stores them.
    private static func fieldColumns(of table: String = "") -> String {
        [
            "name", "kind", "storage", "size", "sha256", "path", "member", "member_ordinal", "tags", "metadata",
            "created", "modified",
        ]
        .map { table.isEmpty ? $0 : table + "." + $0 }.joined(separator: ", ")
    }

    private static func arguments(_ f: AssetFields) -> [SQLArgument] {
        [
            .text(f.name), .text(f.kind), .text(f.storage.rawValue), .integer(f.size), .text(f.sha256), .text(f.path),
            .text(f.member), .integer(Int64(f.memberOrdinal)), .text(f.tagText), .text(f.metadataJSON),
            .real(f.created.timeIntervalSince1970), .real(f.modified.timeIntervalSince1970),
        ]
    }

    /// The fields in the ``fieldColumns`` of a result row, from its column `first` on.
    private static func fields(_ h: OpaquePointer, from first: Int32) -> AssetFields {
        func text(_ i: Int32) -> String { Database.text(h, first + i) ?? "" }
        var fields = AssetFields(
            name: text(0), kind: text(1), storage: Storage(rawValue: text(2)) ?? .managed,
            size: sqlite3_column_int64(h, first + 3), sha256: text(4), path: Database.text(h, first + 5),
            member: Database.text(h, first + 6), memberOrdinal: Int(sqlite3_column_int64(h, first + 7)),
            created: Date(timeIntervalSince1970: sqlite3_column_double(h, first + 10)),
            modified: Date(timeIntervalSince1970: sqlite3_column_double(h, first + 11)))
        fields.tagText = text(8)
        fields.metadataJSON = text(9)
        return fields
    }

    /// Every entry is in: indexes the entries, and marks the members of an archive the
    /// bundle has (the others are top-level assets).
    func seal() throws {
        try run { db in
            try db.execute(
                sql: """
                    -- Covering what the records check reads, which walks it in its order.
                    CREATE INDEX entry_payload
                        ON entry(payload_key, seq, key, name, storage, size, sha256, payload, archive, member);
                    CREATE INDEX entry_key ON entry(key);
                    UPDATE entry SET top = 0
                        WHERE storage = 'member' AND archive IS NOT NULL AND archive IN (SELECT key FROM entry);
                    CREATE INDEX entry_name ON entry(top, name);
                    """)
        }
    }

    /// One entry, as a page gives it.
    struct Row {
        var seq: Int64
        var key: Int64
        /// For a member: its archive's key in the records.
        var archive: Int64?
        var payload: String
        var fields: AssetFields
        var outcome: Outcome
        /// The name the plan gives it (the entry's, or a free one for keep-both).
        var plannedName: String
        /// Whether the plan keeps it referenced (its file is here, the same).
        var referenced: Bool
        /// For a member: its archive's row ID in the catalog, once given.
        var archiveRowID: Int64?
    }

    private static let rowColumns =
        "e.seq, e.key, e.archive, e.payload, e.outcome, e.new_name, e.referenced, " + fieldColumns(of: "e")

    private static func row(_ h: OpaquePointer, archiveRowID: Int32? = nil) -> Row {
        func optionalInt(_ i: Int32) -> Int64? {
            sqlite3_column_type(h, i) == SQLITE_NULL ? nil : sqlite3_column_int64(h, i)
        }
        let fields = fields(h, from: 7)
        return Row(
            seq: sqlite3_column_int64(h, 0), key: sqlite3_column_int64(h, 1), archive: optionalInt(2),
            payload: Database.text(h, 3) ?? "", fields: fields,
            outcome: Outcome(rawValue: sqlite3_column_int64(h, 4)) ?? .imported,
            plannedName: Database.text(h, 5) ?? fields.name, referenced: sqlite3_column_int64(h, 6) != 0,
            archiveRowID: archiveRowID.flatMap { optionalInt($0) })
    }

    /// The entries `condition` selects (SQL on `e`, the entry) that follow the one with `seq`
    /// `after` (0: from the first), in the records' order: a page of them.
    func page(where condition: String, _ arguments: [SQLArgument] = [], after: Int64) throws -> [Row] {
        try run { db in
            var page: [Row] = []
            try db.run(
                "SELECT \(Self.rowColumns) FROM entry AS e WHERE e.seq > ? AND (\(condition)) ORDER BY e.seq LIMIT ?",
                [.integer(after)] + arguments + [.integer(Int64(Self.pageSize))]
            ) { page.append(Self.row($0)) }
            return page
        }
    }

    /// Calls `body` with the entries `condition` selects, in the records' order, a page at a time.
    func forEach(
        where condition: String, _ arguments: [SQLArgument] = [], _ body: (Row) throws -> Void
    ) throws {
        var after: Int64 = 0
        while true {
            let page = try self.page(where: condition, arguments, after: after)
            for row in page { try body(row) }
            guard page.count == Self.pageSize, let last = page.last else { return }
            after = last.seq
        }
    }

    /// One value of a query (a count, a sum).
    func value(_ sql: String, _ arguments: [SQLArgument] = []) throws -> Int64 {
        try run { db in
            var value: Int64 = 0
            try db.run(sql, arguments) { value = sqlite3_column_int64($0, 0) }
            return value
        }
    }

    func execute(_ sql: String, _ arguments: [SQLArgument] = []) throws {
        try run { db in try db.run(sql, arguments) }
    }

    // MARK: The plan

    /// The imported top-level entries (``Outcome/imported``), in the records' order. (`+top`:
    /// the pages walk the table by `seq`; the index on `(top, name)` would sort each page.)
    static let importedTop = "+e.top = 1 AND e.outcome = 0"

    /// Pages through the distinct names of the top-level entries.
    func forEachNamePage(_ body: ([String]) throws -> Void) throws {
        var after: String?
        while true {
            var names: [String] = []
            try run { db in
                try db.run(
                    "SELECT DISTINCT name FROM entry WHERE top = 1 AND \(after == nil ? "1" : "name > ?") "
                        + "ORDER BY name LIMIT ?",
                    (after.map { [.text($0)] } ?? []) + [.integer(Int64(Self.pageSize))]
                ) { names.append(Database.text($0, 0) ?? "") }
            }
            if !names.isEmpty { try body(names) }
            guard names.count == Self.pageSize else { return }
            after = names.last
        }
    }

    /// Notes the catalog's top-level assets that have a bundle asset's name.
    func addExisting(_ records: [AssetRecord]) throws {
        try run { db in
            for r in records {
                try db.run(
                    "INSERT OR IGNORE INTO existing(id, name, sha256, tags, metadata) VALUES (?, ?, ?, ?, ?)",
                    [
                        .integer(r.id.rawValue), .text(r.name), .text(r.sha256), .text(Asset.tagText(r.tags)),
                        .text(Asset.metadataJSON(r.metadata)),
                    ])
            }
        }
    }

    /// The catalog's assets with `name`, as (ID, SHA-256, tags, metadata) in ID order.
    func existing(named name: String) throws -> [(id: Int64, sha256: String, tags: String, metadata: String)] {
        try run { db in
            var found: [(Int64, String, String, String)] = []
            try db.run("SELECT id, sha256, tags, metadata FROM existing WHERE name = ? ORDER BY id", [.text(name)]) {
                found.append(
                    (
                        sqlite3_column_int64($0, 0), Database.text($0, 1) ?? "", Database.text($0, 2) ?? "",
                        Database.text($0, 3) ?? ""
                    ))
            }
            return found
        }
    }

    /// Whether a top-level entry of the bundle has `name`, or the plan gave it to one.
    func isTaken(_ name: String) throws -> Bool {
        try value(
            "SELECT EXISTS (SELECT 1 FROM entry WHERE top = 1 AND name = ?) OR EXISTS (SELECT 1 FROM taken WHERE name = ?)",
            [.text(name), .text(name)]) != 0
    }

    /// Notes that the plan deletes the catalog's assets named `name` (``ConflictPolicy/replace``),
    /// but for those an entry of the bundle is already (``keep(_:)``).
    func replace(named name: String) throws {
        try execute(
            "INSERT OR IGNORE INTO replaced(id) SELECT id FROM existing WHERE name = ? AND id NOT IN (SELECT id FROM kept)",
            [.text(name)])
    }

    /// Notes that an entry of the bundle is the catalog's asset `id`, already present: the
    /// plan does not delete it, whichever other entry of its name replaces the rest.
    func keep(_ id: Int64) throws {
        try execute("INSERT OR IGNORE INTO kept(id) VALUES (?)", [.integer(id)])
        try execute("DELETE FROM replaced WHERE id = ?", [.integer(id)])
    }

    /// The catalog's assets the plan deletes: how many, and the first `limit` IDs.
    func replaced(limit: Int) throws -> CappedList<AssetID> {
        let count = try value("SELECT count(*) FROM replaced")
        return try run { db in
            var first: [AssetID] = []
            try db.run("SELECT id FROM replaced ORDER BY id LIMIT ?", [.integer(Int64(limit))]) {
                first.append(AssetID(sqlite3_column_int64($0, 0)))
            }
            return CappedList(count: Int(count), first: first)
        }
    }

    /// A page of the IDs of the catalog's assets the plan deletes: those after `after`, in order.
    func replacedPage(after: Int64) throws -> [Int64] {
        try run { db in
            var page: [Int64] = []
            try db.run(
                "SELECT id FROM replaced WHERE id > ? ORDER BY id LIMIT ?",
                [.integer(after), .integer(Int64(Self.pageSize))]
            ) { page.append(sqlite3_column_int64($0, 0)) }
            return page
        }
    }

    /// Records what the plan does with an entry.
    func plan(_ seq: Int64, outcome: Outcome, name: String? = nil) throws {
        try run { db in
            try db.run(
                "UPDATE entry SET outcome = ?, new_name = ? WHERE seq = ?",
                [.integer(outcome.rawValue), .text(name), .integer(seq)])
            if let name { try db.run("INSERT OR IGNORE INTO taken(name) VALUES (?)", [.text(name)]) }
        }
    }

    /// Forgets a plan (made during the read, for a catalog that changed since).
    func resetPlan() throws {
        try run { db in
            try db.execute(
                sql: """
                    UPDATE entry SET outcome = 0, new_name = NULL, referenced = 0, row_id = NULL
                        WHERE outcome != 0 OR new_name IS NOT NULL OR referenced != 0 OR row_id IS NOT NULL;
                    DELETE FROM existing;
                    DELETE FROM taken;
                    DELETE FROM replaced;
                    DELETE FROM kept;
                    """)
        }
    }

    // MARK: The rows

    /// The members of the imported archives that follow the one with `seq` `after`, in the
    /// records' order, with their archive's row ID (see ``giveRowIDs(from:jobs:)``).
    func memberPage(after: Int64) throws -> [Row] {
        try run { db in
            var page: [Row] = []
            try db.run(
                """
                SELECT \(Self.rowColumns), a.row_id FROM entry AS e JOIN entry AS a ON a.key = e.archive
                WHERE e.seq > ? AND +e.top = 0 AND a.top = 1 AND a.outcome = 0 ORDER BY e.seq LIMIT ?
                """, [.integer(after), .integer(Int64(Self.pageSize))]
            ) { page.append(Self.row($0, archiveRowID: 19)) }  // after the 7 + 12 columns of a row
            return page
        }
    }

    /// How many members of imported archives there are.
    func importedMemberCount() throws -> Int {
        Int(
            try value(
                """
                SELECT count(*) FROM entry AS e JOIN entry AS a ON a.key = e.archive
                WHERE e.top = 0 AND a.top = 1 AND a.outcome = 0
                """))
    }

    /// Gives the imported top-level entries that need it their row's ID — the imported
    /// top-level rows take theirs in the records' order, from `first` — : each archive that
    /// has members (they point at it), and with `jobs`, each archive or image a job is queued
    /// for (``jobPage(after:)``).
    func giveRowIDs(from first: Int64, jobs: Bool) throws {
        let needed =
            "entry.key IN (SELECT archive FROM entry WHERE top = 0)"
            + (jobs ? " OR entry.kind IN \(Self.jobKinds)" : "")
        try execute(
            """
            UPDATE entry SET row_id = ? + r.n - 1
            FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM entry AS e WHERE \(Self.importedTop)) AS r
            WHERE entry.seq = r.seq AND (\(needed))
            """, [.integer(first)])
    }

    /// The kinds of asset an import from another tool queues a job for, as an SQL list.
    static let jobKinds =
        "(" + BuiltInProcessors.jobForKind.keys.sorted().map { "'\($0)'" }.joined(separator: ", ") + ")"

    /// An imported top-level entry a job is queued for: its kind and its row's ID.
    struct JobRow: Sequenced {
        var seq: Int64
        var kind: String
        var rowID: Int64
    }

    /// How many imported top-level entries a job is queued for (in a bag from another tool).
    func jobCount() throws -> Int {
        Int(try value("SELECT count(*) FROM entry AS e WHERE \(Self.importedTop) AND e.kind IN \(Self.jobKinds)"))
    }

    /// The imported top-level entries a job is queued for that follow the one with `seq`
    /// `after`, in the records' order, with their row IDs (``giveRowIDs(from:jobs:)``).
    func jobPage(after: Int64) throws -> [JobRow] {
        try run { db in
            var page: [JobRow] = []
            try db.run(
                """
                SELECT e.seq, e.kind, e.row_id FROM entry AS e
                WHERE e.seq > ? AND \(Self.importedTop) AND e.kind IN \(Self.jobKinds) ORDER BY e.seq LIMIT ?
                """, [.integer(after), .integer(Int64(Self.pageSize))]
            ) {
                page.append(
                    JobRow(
                        seq: sqlite3_column_int64($0, 0), kind: Database.text($0, 1) ?? "",
                        rowID: sqlite3_column_int64($0, 2)))
            }
            return page
        }
    }
}

// MARK: - The content

extension ImportScratch {
    /// A payload file staged: its content, its file in the import's staging folder, and
    /// whether `objects/` lacked the content when the read began.
    struct Staged: Sendable {
        var digest: String
        var file: Int64
        var absent: Bool
    }

    /// Notes staged files, in one transaction. The first file of a content is its pin (any
    /// copy will do); the content counts as absent when any file found it so.
    func addStaged(_ files: [Staged]) throws {
        try run { db in
            try db.inTransaction {
                for f in files {
                    try db.run(
                        """
                        INSERT INTO staged(digest, file, absent) VALUES (?, ?, ?)
                        ON CONFLICT(digest) DO UPDATE SET absent = max(absent, excluded.absent)
                        """, [.text(f.digest), .integer(f.file), .integer(f.absent ? 1 : 0)])
                }
                return .commit
            }
        }
    }

    /// The number, in the import's staging folder, of a staged file with this content.
    func stagedFile(_ digest: String) throws -> Int64? {
        try run { db in
            var file: Int64?
            try db.run("SELECT file FROM staged WHERE digest = ?", [.text(digest)]) {
                file = sqlite3_column_int64($0, 0)
            }
            return file
        }
    }

    /// What the commit adopts: the content of the imported managed assets, each once.
    struct Adoption {
        /// A content no payload file had (the first, by SHA-256), if any.
        var missing: String?
        /// How many contents, and how many of them `objects/` does not have.
        var count: Int
        var newCount: Int
        /// The bytes of the new content.
        var newBytes: Int64
    }

    /// Works out the content to adopt (table `adopt`), and which of it is new: what the read
    /// found missing from `objects/`, or what `hasObject` does not find now.
    func planAdoption(hasObject: (String) -> Bool) throws -> Adoption {
        try execute("DROP TABLE IF EXISTS adopt")
        try execute(
            """
            CREATE TABLE adopt(
                digest TEXT PRIMARY KEY, size INTEGER NOT NULL, file INTEGER, new INTEGER NOT NULL) WITHOUT ROWID
            """)
        try execute(
            """
            INSERT INTO adopt(digest, size, file, new)
            SELECT e.sha256, max(e.size), s.file, coalesce(s.absent, 0)
            FROM entry AS e LEFT JOIN staged AS s ON s.digest = e.sha256
            WHERE \(Self.importedTop) AND e.referenced = 0 GROUP BY e.sha256
            """)
        var missing: String?
        try run { db in
            try db.run("SELECT digest FROM adopt WHERE file IS NULL ORDER BY digest LIMIT 1", []) {
                missing = Database.text($0, 0)
            }
        }
        if missing == nil {
            // What the read found missing needs no second look; the rest, one each.
            try forEachAdoptPage(where: "new = 0") { page in
                let new = page.map(\.digest).filter { !hasObject($0) }
                if !new.isEmpty {
                    try execute(
                        "UPDATE adopt SET new = 1 WHERE digest IN (SELECT value FROM json_each(?))",
                        [.text(Self.jsonArray(new))])
                }
            }
        }
        return try run { db in
            var adoption = Adoption(missing: missing, count: 0, newCount: 0, newBytes: 0)
            try db.run("SELECT count(*), sum(new), coalesce(sum(CASE WHEN new = 1 THEN size END), 0) FROM adopt", []) {
                adoption.count = Int(sqlite3_column_int64($0, 0))
                adoption.newCount = Int(sqlite3_column_int64($0, 1))
                adoption.newBytes = sqlite3_column_int64($0, 2)
            }
            return adoption
        }
    }

    /// Calls `body` with the content to adopt that `condition` selects (SQL on `adopt`), in
    /// SHA-256 order, a page at a time, with the number of each content's pin.
    func forEachAdoptPage(
        where condition: String = "1", _ body: ([(digest: String, file: Int64)]) throws -> Void
    ) throws {
        var after = ""
        while true {
            var page: [(digest: String, file: Int64)] = []
            try run { db in
                try db.run(
                    "SELECT digest, file FROM adopt WHERE (\(condition)) AND digest > ? ORDER BY digest LIMIT ?",
                    [.text(after), .integer(Int64(Self.pageSize))]
                ) { page.append((Database.text($0, 0) ?? "", sqlite3_column_int64($0, 1))) }
            }
            if !page.isEmpty { try body(page) }
            guard page.count == Self.pageSize, let last = page.last else { return }
            after = last.digest
        }
    }

    /// Those of `digests` the commit adopts, in one query.
    func adopted(among digests: Set<String>) throws -> Set<String> {
        guard !digests.isEmpty else { return [] }
        // Non-digests (a row's stray value) are left out: they are adopted by nobody.
        let list = digests.filter(ContentStore.isDigest)
        return try run { db in
            var found = Set<String>()
            try db.run(
                "SELECT value FROM json_each(?) WHERE value IN (SELECT digest FROM adopt)",
                [.text(Self.jsonArray(list))]
            ) { found.insert(Database.text($0, 0) ?? "") }
            return found
        }
    }

    /// Digests as a JSON array, for `json_each`: one argument, whatever their number.
    private static func jsonArray(_ digests: some Collection<String>) -> String {
        digests.isEmpty ? "[]" : "[\"" + digests.joined(separator: "\",\"") + "\"]"
    }

    /// The content to adopt, `size` digests from the `chunk`th such block on, in order: one
    /// row of the import's journal.
    func adoptedContent(chunk: Int, size: Int) throws -> [String] {
        try run { db in
            var digests: [String] = []
            try db.run(
                "SELECT digest FROM adopt ORDER BY digest LIMIT ? OFFSET ?",
                [.integer(Int64(size)), .integer(Int64(chunk * size))]
            ) { digests.append(Database.text($0, 0) ?? "") }
            return digests
        }
    }
}

/// The pins of the content an import adopts (``ImportScratch/planAdoption(hasObject:)``):
/// files of its staging folder, read from its scratch database a page at a time.
struct ImportPins: StagedContent {
    let scratch: ImportScratch
    let folder: ContentStore.StagingFolder

    func forEachPin(_ body: ([(path: String, digest: String)]) throws -> Void) throws {
        try scratch.forEachAdoptPage { page in try body(page.map { (folder.file($0.file), $0.digest) }) }
    }

    func holds(_ digests: Set<String>) throws -> Set<String> { try scratch.adopted(among: digests) }
}

/// A row of the import's entries, known by its `seq` (the key pages are walked by).
protocol Sequenced {
    var seq: Int64 { get }
}

extension ImportScratch.Row: Sequenced {}

/// Pages through rows given by index, in order, for a streamed insert: `page(after)` gives
/// the rows that follow the row with `seq` `after` (0: from the first).
final class RowPages<Row: Sequenced> {
    private let page: (Int64) throws -> [Row]
    private var rows: [Row] = []
    private var first = 0

    init(_ page: @escaping (Int64) throws -> [Row]) {
        self.page = page
    }

    /// Row `index`: the rows are asked for in order, from 0 (again, should a save restart).
    func row(_ index: Int) throws -> Row {
        if index == 0 {
            rows = try page(0)
            first = 0
        } else if index >= first + rows.count {
            let after = rows.last?.seq ?? 0
            first += rows.count
            rows = try page(after)
        }
        guard index - first < rows.count, index >= first else {
            throw CatalogError(.store, "The import's entries changed while they were recorded")
        }
        return rows[index - first]
    }
}

extension ImportScratch {
    /// A page of the records' entries (``BundleRecords/Check`` walks them), by payload key and
    /// then `seq`, after `after` (from the first when `nil`): each with its `seq` and payload key,
    /// and the fields the check reads (the others blank).
    func entriesByPayloadKey(after: (key: String, seq: Int64)?) throws -> [(
        seq: Int64, key: String, entry: BundleRecords.Entry
    )] {
        try run { db in
            var rows: [(seq: Int64, key: String, entry: BundleRecords.Entry)] = []
            try db.run(
                """
                SELECT seq, payload_key, key, name, storage, size, sha256, payload, archive, member
                FROM entry WHERE \(after == nil ? "1" : "(payload_key, seq) > (?, ?)")
                ORDER BY payload_key, seq LIMIT ?
                """,
                // (A condition that always holds on the first page: `? IS NULL OR …`
                // would keep SQLite from using the index, a sort per page.)
                (after.map { [.text($0.key), .integer($0.seq)] } ?? [])
                    + [.integer(Int64(ImportScratch.pageSize))]
            ) { h in
                // What the check reads: the rest of the fields stay blank.
                let entry = BundleRecords.Entry(
                    key: sqlite3_column_int64(h, 2),
                    archive: sqlite3_column_type(h, 8) == SQLITE_NULL ? nil : sqlite3_column_int64(h, 8),
                    payload: Database.text(h, 7) ?? "",
                    fields: AssetFields(
                        name: Database.text(h, 3) ?? "", kind: "",
                        storage: Storage(rawValue: Database.text(h, 4) ?? "") ?? .managed,
                        size: sqlite3_column_int64(h, 5), sha256: Database.text(h, 6) ?? "",
                        member: Database.text(h, 9), created: Date(timeIntervalSince1970: 0),
                        modified: Date(timeIntervalSince1970: 0)))
                rows.append((sqlite3_column_int64(h, 0), Database.text(h, 1) ?? "", entry))
            }
            return rows
        }
    }

    /// Calls `body` with the `seq` and key of each entry whose key an earlier entry has.
    func forEachKeyUsedAgain(_ body: (_ seq: Int64, _ key: Int64) -> Void) throws {
        try run { db in
            try db.run(
                "SELECT e.seq, e.key FROM entry AS e WHERE EXISTS (SELECT 1 FROM entry AS f WHERE f.key = e.key AND f.seq < e.seq)",
                []
            ) { h in body(sqlite3_column_int64(h, 0), sqlite3_column_int64(h, 1)) }
        }
    }

    /// Calls `body`, in the entries' order, for each entry that links to an archive: its name,
    /// the archive's key, whether an entry has that key, and whether the entry is a member
    /// (storage `member`, with a member path).
    func forEachArchiveLink(_ body: (_ name: String, _ archive: Int64, _ listed: Bool, _ isMember: Bool) -> Void)
        throws
    {
        try run { db in
            try db.run(
                """
                SELECT e.name, e.archive, EXISTS (SELECT 1 FROM entry AS a WHERE a.key = e.archive),
                    e.storage = 'member' AND e.member IS NOT NULL
                FROM entry AS e WHERE e.archive IS NOT NULL ORDER BY e.seq
                """, []
            ) { h in
                body(
                    Database.text(h, 0) ?? "", sqlite3_column_int64(h, 1), sqlite3_column_int64(h, 2) != 0,
                    sqlite3_column_int64(h, 3) != 0)
            }
        }
    }
}
