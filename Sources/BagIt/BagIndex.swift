import Foundation
package import GRDB
import GRDBSQLite

/// A read's per-file state — each file's size and digests, each manifest line — kept in
/// private temporary SQLite databases rather than in memory, so that reading a bag takes
/// the same memory whatever its number of files. SQLite deletes each file as it opens it:
/// nothing is left behind, even by a crash. The checks after the read walk them.
///
/// Two databases: the files, written on the ``BagIndexWriter``'s thread while the read goes
/// on, and the manifests, which the reading thread looks payload files up in — the one
/// never waits for the other.
///
/// Paths are compared as Swift compares strings, by canonical equivalence: each row's key
/// is the path's NFC form (ASCII is its own), so that `é` as one scalar and as `e` + accent
/// are the same file, and a manifest can name a file in either form.
package final class BagIndex {
    /// The files read (`file`), and a directory's paths to read (`walk`).
    let files: DatabaseQueue
    /// The manifests' lines (`manifest`; those that wait are in the read's ``ByteSpool`` until then).
    /// A line's row keeps its checksum as bytes (``ManifestChecksum``), and its path only when
    /// it is not the key with the manifest's root taken off (``ManifestLinePath``): a line of
    /// a million-line manifest is about half the bytes it would be as text.
    let manifests: DatabaseQueue

    /// A private temporary database: SQLite deletes its file as it opens it, so nothing is
    /// left behind, even by a crash. Nothing in it outlives its user: no journal, no syncs,
    /// no other connection; a page cache of `cacheKB`, beyond which it is on disk.
    package static func temporaryDatabase(cacheKB: Int) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(
                sql: "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; "
                    + "PRAGMA cache_size = -\(cacheKB); PRAGMA temp_store = FILE")
        }
        return try DatabaseQueue(path: "", configuration: configuration)
    }

    init() throws(BagError) {
        do {
            files = try Self.temporaryDatabase(cacheKB: 2048)
            try files.inDatabase { db in
                try db.execute(
                    sql: """
                        CREATE TABLE file(
                            key TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL,
                            md5 TEXT, sha1 TEXT, sha224 TEXT, sha256 TEXT, sha384 TEXT, sha512 TEXT, link TEXT)
                            WITHOUT ROWID;
                        CREATE TABLE walk(
                            payload INTEGER NOT NULL, path TEXT NOT NULL, PRIMARY KEY (payload, path)) WITHOUT ROWID;
                        """)
            }
            manifests = try Self.temporaryDatabase(cacheKB: 2048)
            try manifests.inDatabase { db in
                try db.execute(
                    sql: """
                        CREATE TABLE manifest(
                            manifest INTEGER NOT NULL, key TEXT NOT NULL, path TEXT,
                            checksum BLOB NOT NULL, PRIMARY KEY (manifest, key)) WITHOUT ROWID;
                        CREATE TABLE fetchline(
                            file TEXT NOT NULL, number INTEGER NOT NULL, line BLOB NOT NULL,
                            PRIMARY KEY (file, number)) WITHOUT ROWID;
                        CREATE TABLE fetch(key TEXT PRIMARY KEY, path TEXT NOT NULL) WITHOUT ROWID;
                        """)
            }
        } catch {
            throw Self.failure(error)
        }
    }

    static func failure(_ error: any Error) -> BagError {
        BagError(.io, file: nil, "could not keep the bag's index in a temporary database: \(error)")
    }

    /// The statement that ``insertManifestLine(_:_:manifest:key:path:checksum:)`` runs.
    static let insertManifestLineSQL =
        "INSERT OR IGNORE INTO manifest(manifest, key, path, checksum) VALUES (?, ?, ?, ?)"

    /// Inserts a line of manifest `manifest` with `statement`, ``insertManifestLineSQL`` prepared
    /// on `db` (cached: the hottest statement of a read, a line at a time, its arguments bound
    /// where they are); whether it is new — `false` when the manifest has a line of that key.
    ///
    /// - Parameter path: The line's path, or `nil` when it is `key` without the manifest's
    ///   root (``ManifestLinePath``).
    static func insertManifestLine(
        _ statement: OpaquePointer, _ db: Database, manifest: Int, key: String, path: String?,
        checksum: ManifestChecksum
    ) throws -> Bool {
        var (key, path) = (key, path)
        sqlite3_reset(statement)
        sqlite3_bind_int64(statement, 1, Int64(manifest))
        // Bound without a copy (SQLITE_STATIC): the bytes outlive the step, and every use of
        // the statement binds its arguments anew.
        let code = key.withUTF8 { key in
            checksum.withUnsafeBytes { checksum in
                sqlite3_bind_text(statement, 2, key.baseAddress, Int32(key.count), nil)
                sqlite3_bind_blob(statement, 4, checksum.baseAddress, Int32(checksum.count), nil)
                let step = {
                    let code = sqlite3_step(statement)
                    sqlite3_reset(statement)
                    return code
                }
                guard path != nil else {
                    sqlite3_bind_null(statement, 3)
                    return step()
                }
                return path!.withUTF8 { path in
                    sqlite3_bind_text(statement, 3, path.baseAddress, Int32(path.count), nil)
                    return step()
                }
            }
        }
        guard code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                sql: insertManifestLineSQL)
        }
        return sqlite3_changes(db.sqliteConnection) == 1
    }

    /// The key of a path: its NFC form.
    static func key(_ path: String) -> String {
        path.utf8.allSatisfy { $0 < 0x80 } ? path : path.precomposedStringWithCanonicalMapping
    }

    /// What a manifest line's row keeps of its `path` (relative to the manifest's `root`),
    /// whose key is `key`: `nil` when the key is the root and the path byte for byte — every
    /// ASCII line of a bag whose root is ASCII — else the path (``manifestLinePath(stored:key:root:)``).
    static func storedManifestLinePath(_ path: String, key: String, root: String) -> String? {
        let bytes = key.utf8
        return bytes.count == root.utf8.count + path.utf8.count && bytes.starts(with: root.utf8)
            && bytes.dropFirst(root.utf8.count).elementsEqual(path.utf8) ? nil : path
    }

    /// The path of a manifest line's row (``storedManifestLinePath(_:key:root:)``).
    static func manifestLinePath(stored: String?, key: String, root: String) -> String {
        stored ?? key.droppingBytePrefix(root)
    }

    /// Runs `body` on `database` (``files`` unless said); the database's own errors become
    /// ``BagError`` `io`, any other passes as it is.
    func run<T>(_ database: KeyPath<BagIndex, DatabaseQueue> = \.files, _ body: (Database) throws -> T) throws -> T {
        do {
            return try self[keyPath: database].inDatabase(body)
        } catch {
            throw Self.mapped(error)
        }
    }

    /// Runs `body` on both databases: the files, then the manifests.
    func run<T>(_ body: (_ files: Database, _ manifests: Database) throws -> T) throws -> T {
        try run { files in try run(\.manifests) { manifests in try body(files, manifests) } }
    }

    /// Runs a query on both databases: any error is a ``BagError``.
    func query<T>(_ body: (_ files: Database, _ manifests: Database) throws -> T) throws(BagError) -> T {
        do {
            return try run(body)
        } catch {
            throw error as? BagError ?? Self.failure(error)
        }
    }

    /// A second file whose name is the same string as an earlier one's in another Unicode
    /// normalisation (`é` as one scalar and as `e` + accent): two files on Linux, one key in
    /// the index — without this, one of them would silently take the other's place.
    static func twin(_ path: String) -> BagError {
        BagError(
            .hostileEntry, file: path,
            "is a second file with this name in another Unicode normalisation (NFC and NFD); a bag cannot hold both")
    }

    /// `error`, or for an error of the database, a ``BagError`` that says what failed.
    static func mapped(_ error: any Error) -> any Error {
        error is DatabaseError ? failure(error) : error
    }

    /// The columns of a file that ``file(_:root:)`` reads, from `file AS f`.
    static let fileColumns = "f.path, f.size, f.md5, f.sha1, f.sha224, f.sha256, f.sha384, f.sha512, f.link"
    /// How many columns ``fileColumns`` names: a column selected after them is this one.
    static let fileColumnCount: Int32 = 3 + Int32(ChecksumAlgorithm.allCases.count)

    /// A payload file from a row of ``fileColumns`` (with nothing ``BagPayloadFile/listed``).
    static func file(_ row: OpaquePointer, root: String) -> BagPayloadFile {
        var digests: [ChecksumAlgorithm: String] = [:]
        for (i, algorithm) in ChecksumAlgorithm.allCases.enumerated() {
            if let digest = Database.text(row, Int32(2 + i)) { digests[algorithm] = digest }
        }
        let path = Database.text(row, 0) ?? ""
        let link = Database.text(row, BagIndex.fileColumnCount - 1)
        return BagPayloadFile(
            path: path.droppingBytePrefix(root), size: sqlite3_column_int64(row, 1), digests: digests, listed: [:],
            linkTarget: link.map { $0.hasBytePrefix(root) ? $0.droppingBytePrefix(root) : $0 })
    }
}

/// The payload of a bag as read: its files, with their sizes and digests, and what its
/// manifests list. Kept on disk (in a temporary database that goes with this object), not
/// in memory: a bag of a million files is read in the memory of a bag of ten.
public final class BagPayload {
    let index: BagIndex
    /// The bag's root in the bundle: `""`, or the top-level directory and `/`.
    let root: String
    /// The manifests of the bag's root that could be read, by algorithm: their IDs in the index.
    let manifests: [ChecksumAlgorithm: Int]

    /// The number of payload files.
    public let count: Int
    /// Their bytes (with ``count``, what `Payload-Oxum` counts).
    public let bytes: Int64

    /// Every manifest lists every payload file, with its digest: what each lists for a file
    /// is then known without a look.
    let manifestsListDigests: Bool

    init(
        index: BagIndex, root: String, manifests: [ChecksumAlgorithm: Int], manifestsListDigests: Bool, count: Int,
        bytes: Int64
    ) {
        self.index = index
        self.root = root
        self.manifests = manifests
        self.manifestsListDigests = manifestsListDigests
        self.count = count
        self.bytes = bytes
    }

    /// The algorithms of the payload manifests the bag has (those that could be read).
    public var manifestAlgorithms: [ChecksumAlgorithm] { manifests.keys.sorted() }

    /// The form in which paths are compared, and ordered by ``forEach(_:)``: NFC, so that a
    /// path in another Unicode normalisation names the same file.
    public static func key(_ path: String) -> String { BagIndex.key(path) }

    /// The payload file at `path` (`data/…`); a path in another Unicode normalisation names
    /// the same file.
    public func file(_ path: String) throws(BagError) -> BagPayloadFile? {
        let (low, high) = Self.range(root + "data/")
        let key = BagIndex.key(root + path)
        return try index.query { files, manifests in
            var file: BagPayloadFile?
            try files.run(
                "SELECT \(BagIndex.fileColumns) FROM file AS f WHERE f.key = ? AND f.path >= ? AND f.path < ?",
                [.text(key), .text(low), .text(high)]
            ) { file = BagIndex.file($0, root: root) }
            if manifestsListDigests, var listed = file {
                for algorithm in self.manifests.keys { listed.listed[algorithm] = listed.digests[algorithm] }
                return listed
            }
            for (algorithm, id) in self.manifests where file != nil {
                try manifests.run(
                    "SELECT checksum FROM manifest WHERE manifest = ? AND key = ?", [.integer(Int64(id)), .text(key)]
                ) { file!.listed[algorithm] = Database.checksum($0, 0).hex }
            }
            return file
        }
    }

    /// Calls `body` with each payload file, in the byte order of their ``key(_:)``, a page at
    /// a time (`body` may look files up meanwhile).
    public func forEach(_ body: (BagPayloadFile) throws -> Void) throws {
        let (low, high) = Self.range(root + "data/")
        var after = ""
        while true {
            let page = try index.query { files, manifests in
                var page: [(key: String, file: BagPayloadFile)] = []
                try files.run(
                    "SELECT \(BagIndex.fileColumns), f.key FROM file AS f WHERE f.key > ? AND f.path >= ? "
                        + "AND f.path < ? ORDER BY f.key LIMIT 1000", [.text(after), .text(low), .text(high)]
                ) {
                    page.append((Database.text($0, BagIndex.fileColumnCount) ?? "", BagIndex.file($0, root: root)))
                }
                // What each manifest lists for the page: its lines in the page's range, beside it.
                guard let first = page.first?.key, let last = page.last?.key else { return page }
                if manifestsListDigests {
                    for i in page.indices {
                        for algorithm in self.manifests.keys {
                            page[i].file.listed[algorithm] = page[i].file.digests[algorithm]
                        }
                    }
                    return page
                }
                for (algorithm, id) in self.manifests {
                    var i = 0
                    try manifests.run(
                        "SELECT key, checksum FROM manifest WHERE manifest = ? AND key >= ? AND key <= ? ORDER BY key",
                        [.integer(Int64(id)), .text(first), .text(last)]
                    ) { row in
                        let key = Database.text(row, 0) ?? ""
                        while i < page.count, page[i].key.utf8.lexicographicallyPrecedes(key.utf8) { i += 1 }
                        if i < page.count, page[i].key.utf8.elementsEqual(key.utf8) {
                            page[i].file.listed[algorithm] = Database.checksum(row, 1).hex
                        }
                    }
                }
                return page
            }
            for (_, file) in page { try body(file) }
            guard page.count == 1000, let last = page.last else { return }
            after = last.key
        }
    }

    /// The bounds of the paths that begin with `prefix` (which ends with `/`): `prefix`
    /// itself, and `prefix` with its `/` made `0`, the next byte.
    static func range(_ prefix: String) -> (String, String) {
        (prefix, String(prefix.dropLast()) + "0")
    }
}

/// An argument of ``Database/run(_:_:)``.
package enum SQLArgument {
    case text(String?)
    case integer(Int64)
    case real(Double)
    case blob(UnsafeRawBufferPointer)
}

extension Database {
    /// Runs a cached statement with its arguments bound through SQLite's C API — text by its
    /// byte length (GRDB binds text as a C string, which a NUL would cut short) — and calls
    /// `row` with each result row. For the read's hot statements: GRDB's arguments cost more
    /// than the statement itself.
    package func run(_ sql: String, _ arguments: [SQLArgument], row: (OpaquePointer) -> Void = { _ in }) throws {
        let handle = try cachedStatement(sql: sql).sqliteStatement
        sqlite3_reset(handle)
        defer { sqlite3_reset(handle) }
        Self.bind(arguments, to: handle)
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else {
                throw DatabaseError(
                    resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(sqliteConnection)),
                    sql: sql)
            }
            row(handle)
        }
    }

    /// Binds `arguments` to a statement, text by its byte length.
    static func bind(_ arguments: [SQLArgument], to handle: OpaquePointer) {
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        for (i, argument) in arguments.enumerated() {
            let index = Int32(i + 1)
            switch argument {
            case .text(nil):
                sqlite3_bind_null(handle, index)
            case .text(var text?):
                text.withUTF8 { _ = sqlite3_bind_text(handle, index, $0.baseAddress, Int32($0.count), transient) }
            case .integer(let value):
                sqlite3_bind_int64(handle, index, value)
            case .real(let value):
                sqlite3_bind_double(handle, index, value)
            case .blob(let bytes):
                sqlite3_bind_blob(
                    handle, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(bytes.count), transient)
            }
        }
    }

    /// The checksum in blob column `index` of the current row (a manifest line's).
    static func checksum(_ handle: OpaquePointer, _ index: Int32) -> ManifestChecksum {
        ManifestChecksum(
            bytes: UnsafeRawBufferPointer(
                start: sqlite3_column_blob(handle, index), count: Int(sqlite3_column_bytes(handle, index))))
    }

    /// The text of column `index` of the current row, whole (NULs included); `nil` for NULL.
    package static func text(_ handle: OpaquePointer, _ index: Int32) -> String? {
        guard let bytes = sqlite3_column_text(handle, index) else { return nil }
        return String(
            decoding: UnsafeBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(handle, index))), as: UTF8.self)
    }
}

/// A query whose rows are taken one at a time, so that two can be walked side by side.
final class RowWalk {
    private let statement: Statement
    private let sql: String
    private let connection: OpaquePointer?
    /// Whether there is a current row.
    private(set) var hasRow = false
    var handle: OpaquePointer { statement.sqliteStatement }

    init(_ db: Database, _ sql: String, _ arguments: [SQLArgument]) throws {
        statement = try db.makeStatement(sql: sql)
        self.sql = sql
        connection = db.sqliteConnection
        Database.bind(arguments, to: statement.sqliteStatement)
        try step()
    }

    /// Moves to the next row.
    func step() throws {
        let code = sqlite3_step(handle)
        guard code == SQLITE_ROW || code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)), sql: sql)
        }
        hasRow = code == SQLITE_ROW
    }

    /// The bytes of text column `index` of the current row (valid until the next step).
    func bytes(_ index: Int32) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(
            start: sqlite3_column_text(handle, index), count: Int(sqlite3_column_bytes(handle, index)))
    }

    func text(_ index: Int32) -> String? { Database.text(handle, index) }

    /// The path of the current row of a walk of manifest lines that selects `key, path` first,
    /// made once from the row's bytes (``BagIndex/manifestLinePath(stored:key:root:)``).
    func manifestLinePath(root: String) -> String {
        if let stored = text(1) { return stored }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes(0)[root.utf8.count...]), as: UTF8.self)
    }

    /// How the text of column `index` of this row and of `other`'s compare, as SQLite orders
    /// them (by bytes): negative, zero or positive.
    func compare(_ index: Int32, with other: RowWalk, _ otherIndex: Int32) -> Int {
        let a = bytes(index)
        let b = other.bytes(otherIndex)
        let common = min(a.count, b.count)
        if common > 0, let x = a.baseAddress, let y = b.baseAddress {
            let order = memcmp(x, y, common)
            if order != 0 { return Int(order) }
        }
        return a.count - b.count
    }
}

/// Writes a read's rows into its ``BagIndex`` on another thread, a batch at a time, while
/// the read goes on: the reading thread only hands them over (``BackgroundBatches``). At
/// most 16 batches wait, so memory stays bounded however far the read runs ahead.
final class BagIndexWriter: @unchecked Sendable {
    /// A row to write.
    enum Row: Sendable {
        /// A file read, and for an archive member, its path as the archive spells it (a
        /// second file with the same key is refused).
        case file(path: String, member: String?, size: Int64, digests: [ChecksumAlgorithm: String], link: String?)
        /// A line of a manifest, parsed (a path listed twice is noted: ``repeats(in:root:)``);
        /// its path as the row keeps it (``BagIndex/storedManifestLinePath(_:key:root:)``).
        case line(manifest: Int, number: Int, key: String, path: String?, checksum: ManifestChecksum)
        /// A line of a `fetch.txt` (by its path in the bundle), raw: parsed once the bag's root
        /// and version are known.
        case fetchLine(file: String, number: Int, line: [UInt8])
    }

    private let batches: BackgroundBatches<Row>
    private let duplicates = Duplicates()

    /// How a manifest line that lists a path again stands to the line before it.
    enum Repeat: Hashable, Sendable {
        /// The same path, byte for byte, with the same checksum.
        case sameLine
        /// The same path in another Unicode normalisation (NFC and NFD), with the same checksum.
        case otherNormalization
        /// Another checksum.
        case conflicting

        /// How the line `path checksum` stands to the line of `manifest` already in `db` under
        /// its key; `path` as the row keeps it (``BagIndex/storedManifestLinePath(_:key:root:)``).
        static func of(
            _ path: String?, _ checksum: ManifestChecksum, key: String, manifest: Int, _ db: Database
        ) throws -> Repeat {
            var earlier: (path: String?, checksum: ManifestChecksum)?
            try db.run(
                "SELECT path, checksum FROM manifest WHERE manifest = ? AND key = ?",
                [.integer(Int64(manifest)), .text(key)]
            ) { earlier = (Database.text($0, 0), Database.checksum($0, 1)) }
            guard let earlier, earlier.checksum == checksum else { return .conflicting }
            // Both kept (the key without the root is neither), or neither (it is both).
            switch (earlier.path, path) {
            case (nil, nil): return .sameLine
            case (let a?, let b?) where a.utf8.elementsEqual(b.utf8): return .sameLine
            default: return .otherNormalization
            }
        }
    }

    /// Each manifest's first line that lists a path again (its key, and its path as the row
    /// keeps it), and how many do, by how, noted by the writing thread.
    private final class Duplicates: @unchecked Sendable {
        typealias First = (number: Int, key: String, path: String?, count: Int)
        private let lock = NSLock()
        private var first: [Int: [Repeat: First]] = [:]

        func note(_ manifest: Int, _ number: Int, key: String, path: String?, _ kind: Repeat) {
            lock.withLock {
                let count = first[manifest]?[kind]?.count ?? 0
                let earlier = first[manifest]?[kind] ?? (number, key, path, 0)
                first[manifest, default: [:]][kind] = (earlier.number, earlier.key, earlier.path, count + 1)
            }
        }

        subscript(manifest: Int) -> [Repeat: First] {
            lock.withLock { first[manifest] ?? [:] }
        }
    }

    /// - Parameter duplicate: The error for an archive member (named as the archive spells
    ///   it) whose path an earlier member has.
    init(index: BagIndex, duplicate: @escaping @Sendable (_ member: String) -> any Error) {
        // Batches of 2,048 rows, four waiting: as many rows in flight as 512 and 16, and a
        // quarter of the commits (each writes the pages the rows filled, and rewrites the
        // last leaf and its parents).
        batches = BackgroundBatches(label: "BagIt.BagIndexWriter", batchSize: 2_048, waiting: 4) {
            [duplicates] rows in
            let isFile: (Row) -> Bool = {
                if case .file = $0 { true } else { false }
            }
            // Mostly one kind: a batch of one is written as it is, not copied.
            let files = rows.contains(where: isFile) ? rows.filter(isFile) : []
            let others = files.isEmpty ? rows : files.count == rows.count ? [] : rows.filter { !isFile($0) }
            for (database, chosen) in [(\BagIndex.files, files), (\.manifests, others)] where !chosen.isEmpty {
                try index.run(database) { db in
                    try db.inTransaction {
                        // The batch's manifest lines share a statement, looked up once.
                        var insertLine: OpaquePointer?
                        for row in chosen { try Self.write(row, db, &insertLine, duplicates, duplicate) }
                        return .commit
                    }
                }
            }
        }
    }

    /// Adds a row; throws what stopped an earlier write.
    func add(_ row: Row) throws {
        do { try batches.add(row) } catch { throw BagIndex.mapped(error) }
    }

    /// Waits until every row added is written; throws what stopped a write.
    func drain() throws {
        do { try batches.drain() } catch { throw BagIndex.mapped(error) }
    }

    /// Waits for the writes under way, without throwing (a read that failed ends with it).
    func stop() { batches.stop() }

    /// The first line of manifest `id` (whose root is `root`) that listed a path again, and how
    /// many did, by how they stand to the lines before them, once written.
    func repeats(in id: Int, root: String) -> [Repeat: (number: Int, path: String, count: Int)] {
        duplicates[id].mapValues {
            ($0.number, BagIndex.manifestLinePath(stored: $0.path, key: $0.key, root: root), $0.count)
        }
    }

    private static func write(
        _ row: Row, _ db: Database, _ insertLine: inout OpaquePointer?, _ duplicates: Duplicates,
        _ duplicate: (String) -> any Error
    ) throws {
        switch row {
        case .file(let path, let member, let size, let digests, let link):
            try db.run(
                "INSERT OR IGNORE INTO file(key, path, size, md5, sha1, sha224, sha256, sha384, sha512, link) "
                    + "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    .text(BagIndex.key(path)), .text(path), .integer(size), .text(digests[.md5]),
                    .text(digests[.sha1]), .text(digests[.sha224]), .text(digests[.sha256]),
                    .text(digests[.sha384]), .text(digests[.sha512]), .text(link),
                ])
            if db.changesCount != 1 {
                // The same bytes again (a member the archive holds twice), or a twin.
                var earlier: String?
                try db.run("SELECT path FROM file WHERE key = ?", [.text(BagIndex.key(path))]) {
                    earlier = Database.text($0, 0)
                }
                if let member, earlier?.utf8.elementsEqual(path.utf8) == true { throw duplicate(member) }
                throw BagIndex.twin(path)
            }
        case .line(let manifest, let number, let key, let path, let checksum):
            if insertLine == nil {
                insertLine = try db.cachedStatement(sql: BagIndex.insertManifestLineSQL).sqliteStatement
            }
            let isNew = try BagIndex.insertManifestLine(
                insertLine!, db, manifest: manifest, key: key, path: path, checksum: checksum)
            if !isNew {
                duplicates.note(
                    manifest, number, key: key, path: path,
                    try Repeat.of(path, checksum, key: key, manifest: manifest, db))
            }
        case .fetchLine(let file, let number, let line):
            try line.withUnsafeBytes { bytes in
                try db.run(
                    "INSERT INTO fetchline(file, number, line) VALUES (?, ?, ?)",
                    [.text(file), .integer(Int64(number)), .blob(bytes)])
            }
        }
    }
}
