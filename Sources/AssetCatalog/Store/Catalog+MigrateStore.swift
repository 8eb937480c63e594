import CFileSync
public import Foundation
public import Persistence
import PersistencePostgreSQL

#if canImport(Glibc)
    import Glibc
#endif

/// Where ``Catalog/migrateStore(at:to:entities:progress:)`` moves a catalog's records.
public enum StoreDestination: Sendable {
    /// Into the empty PostgreSQL schema this URL names.
    case postgresql(CatalogStoreLocation)
    /// Back into `catalog.sqlite` in the catalog's directory.
    case sqlite
}

/// What ``Catalog/migrateStore(at:to:entities:progress:)`` did.
public struct StoreMigration: Sendable {
    /// The store the records were in (a path, or a URL without its password).
    public let from: String
    /// The store they are in now.
    public let to: String
    /// How many rows were copied (0 when this run only finished an earlier one's last steps).
    public let rows: Int
    /// Where the old `catalog.sqlite` was moved to (kept, never deleted), when it was moved.
    public let movedAside: String?
    /// Whether an earlier run had copied the records already (it was stopped after its
    /// commit), and this one finished its last steps.
    public let finishedEarlierRun: Bool
}

extension Catalog {
    /// Moves the records of the catalog in `directory` between `catalog.sqlite` and a
    /// PostgreSQL schema, keeping every ID, version, tag, job and statistic: all or nothing,
    /// a page of rows in memory at a time. Content (`objects/`) stays where it is.
    ///
    /// **SQLite → PostgreSQL**, in this order: the catalog is opened (which brings its store to
    /// this version) and its store held (`BEGIN IMMEDIATE`: every other writer waits); the rows
    /// are copied into the schema in one transaction, which commits only when no other process
    /// has the catalog open; `catalog.json` then names the store (replaced atomically), the
    /// store is let go, `catalog.sqlite` (with its `-wal` and `-shm`) is renamed
    /// `catalog.sqlite.moved-<date>` — kept, never deleted — and a stub `catalog.sqlite` is
    /// written that versions of assetcat without PostgreSQL refuse to open ("written by a newer
    /// version"): unavoidable, as they cannot reach the records any more.
    ///
    /// **PostgreSQL → SQLite**: the rows are copied into `catalog.sqlite.new` with the schema
    /// held (every other writer, on any host, waits), which is renamed over the stub; then
    /// `catalog.json` stops naming the store, and the schema is marked as moved, so that a host
    /// that still names it is refused with a message saying where the catalog went. The schema
    /// keeps its rows.
    ///
    /// A run stopped at any point (a kill) leaves either the old store in force, untouched, or
    /// the new one; running it again finishes. The schema's catalog ID matching `catalog.json`
    /// and the two stores' fingerprints (`StoreFingerprint`) tell a copy that committed.
    ///
    /// - Parameters:
    ///   - directory: The catalog's directory.
    ///   - destination: Where its records go: a PostgreSQL store, or back to SQLite.
    ///   - entities: A program's own entities kept in the catalog's store
    ///     (``OpenOptions/entities``): their rows move too. A store with tables of entities
    ///     not given is refused (naming them).
    ///   - progress: Called with the rows copied so far, and in all, after each page.
    /// - Throws: ``CatalogError/Code/exists`` when the records are in that store already, or
    ///   the target holds a catalog or rows; ``CatalogError/Code/store`` when another process
    ///   (or host) has the catalog open, when the store has tables of entities not given, or
    ///   when the store cannot be reached. Nothing was changed then.
    public static func migrateStore(
        at directory: URL, to destination: StoreDestination, entities: [ManagedObject.Type] = [],
        progress: (_ copied: Int, _ total: Int) -> Void = { _, _ in }
    ) throws -> StoreMigration {
        try migrateStore(
            at: directory, to: destination, entities: entities, testing: CatalogTesting(), progress: progress)
    }

    /// ``migrateStore(at:to:entities:progress:)`` with the catalog opened with test
    /// instrumentation (its fault points).
    @_spi(Testing) public static func migrateStore(
        at directory: URL, to destination: StoreDestination, entities: [ManagedObject.Type] = [],
        testing: CatalogTesting, progress: (_ copied: Int, _ total: Int) -> Void = { _, _ in }
    ) throws -> StoreMigration {
        let root = directory.standardizedFileURL
        var options = OpenOptions(access: .readWrite)
        options.entities = entities
        options.testing = testing
        switch destination {
        case .postgresql(let location):
            return try migrateToPostgreSQL(root, location, options: options, progress: progress)
        case .sqlite:
            return try migrateToSQLite(root, options: options, progress: progress)
        }
    }

    // MARK: - SQLite → PostgreSQL

    private static func migrateToPostgreSQL(
        _ root: URL, _ location: CatalogStoreLocation, options: OpenOptions,
        progress: (_ copied: Int, _ total: Int) -> Void
    ) throws -> StoreMigration {
        let entities = options.entities
        let faults = options.testing.faults
        let target = location.redacted.absoluteString
        let sqlitePath = storeURL(in: root).path
        if let identity = try CatalogIdentity.read(in: root), let store = identity.store {
            guard store == target else {
                throw CatalogError(
                    .exists,
                    "The catalog at \(root.path) keeps its records in \(store) already; nothing was changed",
                    path: root.path)
            }
            // An earlier run switched catalog.json and stopped before its last steps.
            let moved = try moveSQLiteAside(root)
            try StoreStub.write(in: root)
            return StoreMigration(
                from: sqlitePath, to: target, rows: 0, movedAside: moved, finishedEarlierRun: true)
        }
        let source = try Catalog.open(at: root, options: options)  // brings the store to this version
        var sourceOpen = true
        defer { if sourceOpen { source.close() } }
        guard let identity = try CatalogIdentity.read(in: root) else {
            throw CatalogError(.store, "The catalog at \(root.path) has no catalog.json", path: root.path)
        }
        try refuseOutsideTables(source.container, root: root)
        try refuseOtherProcesses(source, root: root)
        let schema = try Self.schema(with: entities)
        let container = try openTarget(location, schema: schema, root: root)
        defer { container.close() }
        if location.hasPassword {  // for this host only, as `init --store` keeps it
            try PerHostStore.write(location.url, for: identity.id, environment: ProcessInfo.processInfo.environment)
        }
        var switched = identity
        switched.store = target
        var rows = 0
        var finished = false
        if let held = try catalogID(in: container) {
            guard held == identity.id.uuidString else {
                throw CatalogError(
                    .exists,
                    "\(location) already holds catalog \(held); migrate into an empty schema. Nothing was changed",
                    path: root.path)
            }
            // An earlier run committed the copy and stopped before catalog.json named it.
            guard try source.container.fingerprint() == container.fingerprint() else {
                throw CatalogError(
                    .store,
                    "\(location) holds a copy of this catalog that an earlier migrate-store made, but "
                        + "\(storeName) changed since; the catalog stays in \(storeName). Drop the schema and run "
                        + "migrate-store again. Nothing was changed", path: root.path)
            }
            try switched.replace(in: root)
            finished = true
        } else {
            do {
                rows = try copyRecords(
                    of: source, to: container, root: root, progress: progress,
                    afterCommit: {
                        faults.reach(.afterStoreCommit)
                        try switched.replace(in: root)  // with the store still held: no write is lost
                    })
            } catch let error as Persistence.PersistenceError {
                throw CatalogError(
                    error.code == .misuse ? .exists : .store, withoutPassword(error.message, location), cause: error)
            }
        }
        source.close()
        sourceOpen = false
        faults.reach(.afterStoreSwitch)
        let moved = try moveSQLiteAside(root)
        faults.reach(.afterStoreMoved)
        try StoreStub.write(in: root)
        return StoreMigration(
            from: sqlitePath, to: target, rows: rows, movedAside: moved, finishedEarlierRun: finished)
    }

    /// Opens the PostgreSQL store to copy into (making its schema), with errors as `openStore` words them.
    private static func openTarget(_ location: CatalogStoreLocation, schema: Schema, root: URL) throws
        -> PersistentContainer
    {
        do {
            return try PersistentContainer.open(url: location.url, schema: schema)
        } catch let error as Persistence.PersistenceError {
            if error.code == .newerStore {
                throw CatalogError(
                    .store,
                    "\(location) was written by a newer version of assetcat; upgrade to use it. Nothing was changed",
                    cause: error)
            }
            throw CatalogError(.store, withoutPassword(error.message, location), cause: error)
        }
    }

    /// The catalog ID the store's ``CatalogInfo`` holds, if it holds one.
    private static func catalogID(in container: PersistentContainer) throws -> String? {
        let context = container.newBackgroundContext(name: "catalog-info")
        return try context.performAndWait { try context.fetch(FetchRequest<CatalogInfo>()).first?.catalogID }
    }

    /// Renames `catalog.sqlite` (unless it is the stub) to `catalog.sqlite.moved-<date>`, then
    /// its `-wal` and `-shm` beside it (to the name an earlier, stopped run chose, if it moved
    /// the store already). Never replaces a file; returns the name the store has now.
    static func moveSQLiteAside(_ root: URL) throws -> String? {
        let store = storeURL(in: root).path
        var moved: String?
        if FileManager.default.fileExists(atPath: store), !StoreStub.isStubFile(store) {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "UTC")
            formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
            let name = "\(store).moved-\(formatter.string(from: Date()))"
            guard cfilesync_rename_noreplace(store, name) == 0 else {
                throw CatalogError(
                    .io, "Could not rename \(store) to \(name): \(ContentStore.errnoText())", path: store)
            }
            moved = name
        } else {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
            moved = entries.filter {
                $0.hasPrefix(storeName + ".moved-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm")
            }
            .sorted().last.map { root.appending(path: $0).path }
        }
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: store + suffix) {
            let name = (moved ?? "\(store).moved-unpaired") + suffix
            guard cfilesync_rename_noreplace(store + suffix, name) == 0 else {
                throw CatalogError(
                    .io, "Could not rename \(store + suffix) to \(name): \(ContentStore.errnoText())", path: store)
            }
        }
        try ContentStore.syncDirectory(root.path)
        return moved
    }

    // MARK: - PostgreSQL → SQLite

    private static func migrateToSQLite(
        _ root: URL, options: OpenOptions, progress: (_ copied: Int, _ total: Int) -> Void
    ) throws -> StoreMigration {
        let entities = options.entities
        let faults = options.testing.faults
        let sqlitePath = storeURL(in: root).path
        guard let identity = try CatalogIdentity.read(in: root), identity.store != nil else {
            throw CatalogError(
                .exists, "The catalog at \(root.path) keeps its records in \(storeName) already; nothing was changed",
                path: root.path)
        }
        guard
            let location = try CatalogStoreLocation.resolve(
                for: identity, environment: ProcessInfo.processInfo.environment)
        else { throw CatalogError(.store, "The catalog at \(root.path) names no store", path: root.path) }
        let source = try Catalog.open(at: root, options: options)
        defer { source.close() }
        try refuseOutsideTables(source.container, root: root)
        try refuseOtherProcesses(source, root: root)
        let schema = try Self.schema(with: entities)
        var switched = identity
        switched.store = nil
        var rows = 0
        var finished = false
        if FileManager.default.fileExists(atPath: sqlitePath), !StoreStub.isStubFile(sqlitePath) {
            // An earlier run put the copy in place and stopped before catalog.json stopped naming
            // the store: finish if nothing changed since.
            let copy = try PersistentContainer.open(url: storeURL(in: root), schema: schema)
            defer { copy.close() }
            guard try copy.fingerprint() == source.container.fingerprint() else {
                throw CatalogError(
                    .store,
                    "\(storeName) holds a copy of this catalog that an earlier migrate-store made, but \(location) "
                        + "changed since; the catalog stays in \(location). Move \(storeName) away and run "
                        + "migrate-store again. Nothing was changed", path: sqlitePath)
            }
            try switched.replace(in: root)
            finished = true
        } else {
            let new = root.appending(path: storeName + ".new")
            for suffix in ["", "-wal", "-shm"] { unlink(new.path + suffix) }  // a stopped run's: never in use
            let container: PersistentContainer
            do {
                container = try PersistentContainer.open(url: new, schema: schema)
            } catch let error as Persistence.PersistenceError {
                throw CatalogError(.store, error.message, path: new.path, cause: error)
            }
            var closed = false
            defer { if !closed { container.close() } }
            do {
                rows = try copyRecords(
                    of: source, to: container, root: root, progress: progress,
                    afterCommit: {
                        container.close()
                        closed = true
                        faults.reach(.afterStoreCommit)
                        // With the schema still held: no host's write is lost.
                        guard rename(new.path, sqlitePath) == 0 else {
                            throw CatalogError(
                                .io, "Could not rename \(new.path) to \(sqlitePath): \(ContentStore.errnoText())",
                                path: sqlitePath)
                        }
                        try ContentStore.syncDirectory(root.path)
                        faults.reach(.afterStoreMoved)
                        try switched.replace(in: root)
                    })
            } catch let error as Persistence.PersistenceError {
                for suffix in ["", "-wal", "-shm"] { unlink(new.path + suffix) }
                throw CatalogError(.store, withoutPassword(error.message, location), cause: error)
            } catch {
                if !FileManager.default.fileExists(atPath: sqlitePath) || StoreStub.isStubFile(sqlitePath) {
                    for suffix in ["", "-wal", "-shm"] { unlink(new.path + suffix) }
                }
                throw error
            }
        }
        faults.reach(.afterStoreSwitch)
        try markMoved(source.container, to: root, location: location)
        return StoreMigration(
            from: location.redacted.absoluteString, to: sqlitePath, rows: rows, movedAside: nil,
            finishedEarlierRun: finished)
    }

    /// Marks the schema's ``CatalogInfo`` as moved back to SQLite at `root`.
    private static func markMoved(_ container: PersistentContainer, to root: URL, location: CatalogStoreLocation)
        throws
    {
        let context = container.newBackgroundContext(name: "catalog-info")
        do {
            try context.performAndWait {
                for info in try context.fetch(FetchRequest<CatalogInfo>()) { info.movedTo = root.path }
                try context.save()
            }
        } catch let error as Persistence.PersistenceError {
            throw CatalogError(.store, withoutPassword(error.message, location), cause: error)
        }
    }

    // MARK: - Refusals

    /// Refuses a store with tables of entities the schema does not declare: a copy would
    /// leave them behind.
    private static func refuseOutsideTables(_ container: PersistentContainer, root: URL) throws {
        let outside = try container.tablesOutsideSchema()
        guard outside.isEmpty else {
            throw CatalogError(
                .store,
                "The catalog at \(root.path) keeps tables of a program's own entities (\(outside.joined(separator: ", "))) "
                    + "that assetcat does not know, so it cannot move them: move the catalog from that program, with "
                    + "Catalog.migrateStore(at:to:entities:progress:) and its entities. Nothing was changed",
                path: root.path)
        }
    }

    /// Refuses while another process of this host has the catalog open (a live owner of a
    /// staging folder), or another host (a live session on the store).
    /// Copies every record of `source` into `container` (``PersistentContainer/copyAll(to:progress:beforeCommit:afterCommit:)``),
    /// refusing before the commit if another process opened the catalog during the copy;
    /// `afterCommit` runs with the source still held. Returns the rows copied.
    private static func copyRecords(
        of source: Catalog, to container: PersistentContainer, root: URL,
        progress: (_ copied: Int, _ total: Int) -> Void, afterCommit: () throws -> Void
    ) throws -> Int {
        var rows = 0
        try source.container.copyAll(
            to: container,
            progress: { report in
                rows = report.total
                progress(report.copied, report.total)
            },
            beforeCommit: {
                try refuseOtherProcesses(source, root: root)  // one may have opened during the copy
                source.content.faults.reach(.beforeStoreCommit)
            },
            afterCommit: afterCommit)
        return rows
    }

    private static func refuseOtherProcesses(_ catalog: Catalog, root: URL) throws {
        let staging = root.appending(path: "staging").path
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []
        let others = entries.filter { $0.hasSuffix(".lock") }.map { String($0.dropLast(5)) }
            .filter { $0 != catalog.content.owner && catalog.content.isOwnerAlive($0) }.sorted()
        if let other = others.first {
            let pid = other.split(separator: "-").first.map(String.init) ?? other
            throw CatalogError(
                .store,
                "The catalog at \(root.path) is open in another process (pid \(pid)); close it and run "
                    + "migrate-store again. Nothing was changed", path: root.path)
        }
        let own = catalog.container.session?.id
        if let session = try catalog.container.sessions().first(where: { $0.isAlive && $0.id != own }) {
            throw CatalogError(
                .store,
                "The catalog at \(root.path) is open on host \(HostIdentity.host(ofLabel: session.label)); close it "
                    + "there and run migrate-store again. Nothing was changed", path: root.path)
        }
    }
}

extension CatalogIdentity {
    /// Writes this identity over the one in `root`: a temporary file synced, renamed over
    /// it, the folder synced. A kill leaves the old file or the new one, whole.
    func replace(in root: URL) throws {
        let bytes = try fileBytes()
        let target = Self.url(in: root).path
        let temporary = root.appending(path: ".\(Self.fileName).new-\(getpid())").path
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            throw CatalogError(.io, "Could not write \(target): \(ContentStore.errnoText())", path: target)
        }
        do {
            defer { close(fd) }
            try bytes.withUnsafeBytes { try ContentStore.writeAll(fd, $0, path: temporary) }
            guard fsync(fd) == 0, rename(temporary, target) == 0 else {
                throw CatalogError(.io, "Could not write \(target): \(ContentStore.errnoText())", path: target)
            }
        } catch {
            unlink(temporary)
            throw error
        }
        try ContentStore.syncDirectory(root.path)
    }
}

extension StoreStub {
    /// Whether the file at `path` is a stub (it records ``marker``): opened read-only, once.
    static func isStubFile(_ path: String) -> Bool {
        SQLiteMarkerStore.records(marker, at: path)
    }
}
