import BagIt
import Foundation
import GRDB

#if canImport(Glibc)
    import Glibc
#endif

/// An export's per-asset state, kept out of memory: which assets were chosen, the payload
/// paths claimed, what each payload file is and whether it was written. A private temporary
/// SQLite database — on disk once it outgrows its page cache (a few MB), deleted by SQLite
/// when closed or when the process dies — so that an export's memory does not grow with the
/// number of assets.
final class ExportScratch {
    /// One payload file of the bundle.
    struct Payload {
        /// Relative to `data/`.
        var path: String
        /// The asset, as far as reading its content needs: its kind, tags, metadata and
        /// dates are not kept here (its line of the records file has them).
        var record: AssetRecord

        var item: BagPayloadItem { BagPayloadItem(path: path, size: record.size, sha256: record.sha256) }
    }

    private let queue: DatabaseQueue
    /// Payload files recorded so far, and their bytes.
    fileprivate(set) var files = 0
    fileprivate(set) var bytes: Int64 = 0

    init() throws {
        do {
            queue = try BagIndex.temporaryDatabase(cacheKB: 4096)
            try queue.inDatabase { db in
                try db.execute(
                    sql: """
                        CREATE TABLE chosen(id INTEGER PRIMARY KEY, archive INTEGER NOT NULL);
                        CREATE TABLE names(key TEXT PRIMARY KEY, folder INTEGER NOT NULL, spelling TEXT NOT NULL) WITHOUT ROWID;
                        CREATE TABLE payload(
                            id INTEGER PRIMARY KEY, path TEXT NOT NULL, name TEXT NOT NULL, size INTEGER NOT NULL,
                            sha256 TEXT NOT NULL, storage TEXT NOT NULL, file TEXT, archive INTEGER, member BLOB,
                            ordinal INTEGER NOT NULL, record BLOB NOT NULL, written INTEGER NOT NULL DEFAULT 0);
                        CREATE INDEX payload_member ON payload(archive, member, ordinal) WHERE storage = 'member';
                        CREATE TABLE occurrences(member BLOB PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
                        """)
            }
        } catch {
            throw Self.failure(error)
        }
    }

    static func failure(_ error: any Error) -> CatalogError {
        CatalogError(.io, "Could not keep the export's list of assets in a temporary database: \(error)", cause: error)
    }

    /// Runs `body` on the database, in one transaction, mapping its errors.
    private func run<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            var result: T?
            try queue.inTransaction { db in
                result = try body(db)
                return .commit
            }
            return result!
        } catch let error as CatalogError {
            throw error
        } catch {
            throw Self.failure(error)
        }
    }

    /// Runs `body` with the database, in one transaction: a page of assets at a time.
    func batch<T>(_ body: (Batch) throws -> T) throws -> T {
        try run { db in try body(Batch(db: db, scratch: self)) }
    }

    /// The database during a ``ExportScratch/batch(_:)``.
    struct Batch {
        let db: Database
        let scratch: ExportScratch

        // MARK: The selection

        /// Notes an asset the selection chose: an archive (whose members follow it, even
        /// when it is left out as damaged), or a member (named once every archive is).
        func choose(_ id: Int64, archive: Bool) throws {
            try db.cachedStatement(sql: "INSERT INTO chosen(id, archive) VALUES (?, ?)")
                .execute(arguments: [id, archive])
        }

        /// Whether the member `id`, or its archive, was chosen.
        func isChosen(member id: Int64, archive: Int64?) throws -> Bool {
            try Bool.fetchOne(
                db.cachedStatement(
                    sql: "SELECT EXISTS (SELECT 1 FROM chosen WHERE id = ? OR (id = ? AND archive = 1))"),
                arguments: [id, archive ?? 0]) ?? false
        }

        // MARK: Names

        /// Whether `key` is taken, as a folder or a file, and the spelling it was first taken with.
        func name(_ key: String) throws -> (taken: Bool, folder: Bool, spelling: String) {
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT folder, spelling FROM names WHERE key = ?"), arguments: [key])
            else { return (false, false, "") }
            return (true, row[0], row[1])
        }

        /// Takes `key` as a file, or as a folder (a folder may be taken again; it keeps its
        /// first spelling).
        func take(_ key: String, folder: Bool, spelling: String) throws {
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO names(key, folder, spelling) VALUES (?, ?, ?)")
                .execute(arguments: [key, folder, spelling])
        }

        /// Takes `key`, spelt `spelling`, as a file if it is free (as a file and as a folder).
        func takeIfFree(_ key: String, spelling: String) throws -> Bool {
            try db.cachedStatement(sql: "INSERT OR IGNORE INTO names(key, folder, spelling) VALUES (?, 0, ?)")
                .execute(arguments: [key, spelling])
            return db.changesCount == 1
        }

        // MARK: Payload

        /// Adds a payload file to the bundle, with its asset's line of the records file.
        func add(_ payload: Payload, record line: [UInt8]) throws {
            let record = payload.record
            try db.cachedStatement(
                sql:
                    "INSERT INTO payload(id, path, name, size, sha256, storage, file, archive, member, ordinal, record) "
                    + "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ).execute(arguments: [
                record.id.rawValue, payload.path, record.name, record.size, record.sha256, record.storage.rawValue,
                record.path, record.archive?.rawValue, record.member.map { Data($0.utf8) }, record.memberOrdinal,
                Data(line),
            ])
            scratch.files += 1
            scratch.bytes += record.size
        }

        /// The payload path of asset `id`, if it is in the bundle.
        func payloadPath(_ id: Int64) throws -> String? {
            try String.fetchOne(db.cachedStatement(sql: "SELECT path FROM payload WHERE id = ?"), arguments: [id])
        }
    }

    /// Whether any archive or member was chosen.
    func choseArchivesOrMembers() throws -> Bool {
        try run { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM chosen)") ?? false }
    }

    /// Passes each asset's line of the records file to `body`, by ID.
    func forEachRecord(_ body: (Data) throws -> Void) throws {
        try run { db in
            let rows = try Row.fetchCursor(db, sql: "SELECT record FROM payload ORDER BY id")
            while let row = try rows.next() { try body(row[0]) }
        }
    }

    /// Writes the SHA-256 manifest of the payload to `file`, sorted by path (SQLite compares
    /// text by its bytes).
    func writeManifest(to path: String) throws {
        let file = try ContentStore.BufferedFile(creating: path)
        try run { db in
            let rows = try Row.fetchCursor(db, sql: "SELECT sha256, path FROM payload ORDER BY path")
            while let row = try rows.next() {
                try file.append((row[0] as String).utf8)
                try file.append([0x20, 0x20])
                try file.append(TagFile.encodePath("data/" + (row[1] as String)).utf8)
                try file.append([0x0A])
            }
        }
        try file.flush()
    }

    private static let columns = "id, path, name, size, sha256, storage, file, archive, member, ordinal"

    private static func payload(_ row: Row) -> Payload {
        Payload(
            path: row[1],
            record: AssetRecord(
                id: AssetID(row[0]), archive: (row[7] as Int64?).map { AssetID($0) },
                fields: AssetFields(
                    name: row[2], kind: "", storage: Storage(rawValue: row[5]) ?? .managed, size: row[3],
                    sha256: row[4], path: row[6], member: (row[8] as Data?).map { String(decoding: $0, as: UTF8.self) },
                    memberOrdinal: row[9], created: Date(timeIntervalSince1970: 0),
                    modified: Date(timeIntervalSince1970: 0))))
    }

    /// Up to `limit` payload files read on their own (not through an archive), with IDs above `after`, by ID.
    func files(after: Int64, limit: Int) throws -> [Payload] {
        try run { db in
            try Row.fetchAll(
                db,
                sql: "SELECT \(Self.columns) FROM payload WHERE (storage != 'member' OR archive IS NULL) AND id > ? "
                    + "ORDER BY id LIMIT ?", arguments: [after, limit]
            ).map(Self.payload)
        }
    }

    /// The next archive (above `after`) whose members are in the bundle, and how many of them.
    func nextArchive(after: Int64) throws -> (id: Int64, members: Int)? {
        try run { db in
            guard
                let id = try Int64.fetchOne(
                    db,
                    sql: "SELECT min(archive) FROM payload WHERE storage = 'member' AND archive > ?", arguments: [after]
                )
            else { return nil }
            let count = try Int.fetchOne(
                db, sql: "SELECT count(*) FROM payload WHERE storage = 'member' AND archive = ?", arguments: [id])
            try db.execute(sql: "DELETE FROM occurrences")
            return (id, count ?? 0)
        }
    }

    /// The member of `archive` an entry with path bytes `member` is, if the bundle takes it
    /// and it was not written yet (it is then marked written). Entries with the same path are
    /// counted, the first being ordinal 0, as the catalog's archive index counts them — when
    /// the bundle takes a later one; otherwise the first unwritten one is it.
    func member(of archive: Int64, path member: [UInt8]) throws -> Payload? {
        try run { db in
            let key = Data(member)
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT \(Self.columns), written FROM payload "
                        + "WHERE storage = 'member' AND archive = ? AND member = ? ORDER BY ordinal"),
                arguments: [archive, key])
            guard let last = rows.last else { return nil }
            var ordinal = 0
            if last[9] as Int > 0 {
                ordinal =
                    try Int.fetchOne(
                        db.cachedStatement(sql: "SELECT count FROM occurrences WHERE member = ?"), arguments: [key])
                    ?? 0
                try db.cachedStatement(sql: "INSERT OR REPLACE INTO occurrences(member, count) VALUES (?, ?)")
                    .execute(arguments: [key, ordinal + 1])
            }
            guard let row = rows.first(where: { $0[9] == ordinal && $0[10] == false }) else { return nil }
            try db.cachedStatement(sql: "UPDATE payload SET written = 1 WHERE id = ?").execute(arguments: [row[0]])
            return Self.payload(row)
        }
    }

    /// The member of `archive` with the lowest ID that was not written.
    func unwrittenMember(of archive: Int64) throws -> Payload? {
        try run { db in
            try Row.fetchOne(
                db,
                sql: "SELECT \(Self.columns) FROM payload WHERE storage = 'member' AND archive = ? AND written = 0 "
                    + "ORDER BY id LIMIT 1", arguments: [archive]
            ).map(Self.payload)
        }
    }
}
