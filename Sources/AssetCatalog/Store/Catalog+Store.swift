public import Foundation
import Persistence
import PersistencePostgreSQL

#if canImport(Glibc)
    import Glibc
#endif

/// A store that holds no catalog (no tables, or no ``CatalogInfo``): what `recover` may
/// start again.
struct StoreHoldsNoCatalog: Error {}

extension Catalog {
    /// Creates a new, empty catalog in `directory` whose records are in the PostgreSQL
    /// schema `store` names (made if missing); `directory` holds its content (`objects/`),
    /// work in progress (`staging/`) and `catalog.json`, which names the store without a
    /// password. Every host that mounts `directory` opens it with ``open(at:options:)``.
    ///
    /// In this order, so that a failure at any step leaves nothing another step trusts:
    /// the schema and its `CatalogInfo` row, `objects/` and `staging/`, `catalog.json`, and
    /// last a `catalog.sqlite` that versions of assetcat without PostgreSQL refuse to open
    /// ("written by a newer version"). Nothing is written to `directory` before the store
    /// is made.
    ///
    /// When the URL carries a password, it is written to this host's own file for the
    /// catalog (`$XDG_CONFIG_HOME/assetcat/catalogs/<id>.url`, mode 0600), never into
    /// `directory`; ``CreatedOnStore/passwordFile`` says where.
    ///
    /// - Throws: ``CatalogError/Code/exists`` when `directory` is not absent or empty, or
    ///   the schema already holds a catalog (join it: ``join(at:store:options:)``);
    ///   ``CatalogError/Code/store`` when the server cannot be reached or refuses (one line,
    ///   the server's reason).
    public static func create(at directory: URL, store: CatalogStoreLocation, options: OpenOptions = OpenOptions())
        throws -> CreatedOnStore
    {
        let root = directory.standardizedFileURL
        if let entries = try? FileManager.default.contentsOfDirectory(atPath: root.path), !entries.isEmpty {
            throw CatalogError(
                .exists,
                "\(root.path) is not empty: a catalog on a store is made in a new or empty directory; to use a "
                    + "catalog that exists, run `assetcat init --join \(root.path)`", path: root.path)
        }
        var options = options
        options.createIfMissing = true
        options.access = .readWrite
        let identity = CatalogIdentity(
            id: UUID(), created: Date(), store: try store.withoutPassword.redacted.absoluteString)
        let catalog = try Catalog(root: root, options: options, creating: true, store: (store, identity))
        var passwordFile: String?
        if store.hasPassword {
            do {
                passwordFile = try PerHostStore.write(
                    store.url, for: identity.id, environment: ProcessInfo.processInfo.environment)
            } catch {
                catalog.close()
                throw error
            }
        }
        return CreatedOnStore(catalog: catalog, id: identity.id, passwordFile: passwordFile)
    }

    /// What ``create(at:store:options:)`` made.
    public struct CreatedOnStore: Sendable {
        /// The new catalog, open.
        public let catalog: Catalog
        /// Its ID (`catalog.json`'s).
        public let id: UUID
        /// Where the URL's password was written for this host (mode 0600), if it had one.
        public let passwordFile: String?
    }

    /// What ``join(at:store:options:)`` found.
    public struct Joined: Sendable {
        /// The catalog's ID.
        public let id: UUID
        /// The store this host now uses for it.
        public let store: CatalogStoreLocation
        /// Where this host's URL for it was recorded, if one was given.
        public let recordedIn: String?
    }

    /// Joins, from this host, the catalog in `directory` whose records are in PostgreSQL:
    /// connects to `store` (else the store this host would use, see
    /// ``CatalogStoreLocation``), checks that it holds this catalog, and records `store` as
    /// this host's (`$XDG_CONFIG_HOME/assetcat/catalogs/<id>.url`, mode 0600: it may carry
    /// a password). Joining again does the same, and changes nothing else.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when `directory` holds no catalog whose
    ///   `catalog.json` names a store; ``CatalogError/Code/store`` when the store holds
    ///   another catalog, or none, or cannot be reached.
    public static func join(at directory: URL, store: CatalogStoreLocation?, options: OpenOptions = OpenOptions())
        throws -> Joined
    {
        let root = directory.standardizedFileURL
        let environment = ProcessInfo.processInfo.environment
        guard let identity = try? CatalogIdentity.read(in: root), identity.store != nil else {
            throw CatalogError(
                .notFound,
                "\(root.path) holds no catalog whose records are in a store (its catalog.json names none); "
                    + "make one with `assetcat init --store URL \(root.path)`", path: root.path)
        }
        let location = try store ?? CatalogStoreLocation.resolve(for: identity, environment: environment)!
        var options = options
        options.access = .readOnly  // a check: it takes no part in the catalog's work
        try Catalog(root: root, options: options, creating: false, store: (location, identity)).close()
        let recorded = try store.map { try PerHostStore.write($0.url, for: identity.id, environment: environment) }
        return Joined(id: identity.id, store: location, recordedIn: recorded)
    }

    /// Starts the catalog again on its PostgreSQL store when the store holds no catalog.
    static func recover(
        _ root: URL, store: CatalogStoreLocation, identity: CatalogIdentity, options: OpenOptions
    ) throws -> (catalog: Catalog, report: GarbageReport) {
        do {
            try Catalog(root: root, options: options, creating: false, store: (store, identity)).close()
            throw CatalogError(
                .exists,
                "The catalog at \(root.path) opens: \(store) holds it, and there is nothing to recover "
                    + "(`assetcat gc --adopt` records content no asset uses)", path: root.path)
        } catch let error as CatalogError where error.cause is StoreHoldsNoCatalog {
            // Started again below.
        }
        var options = options
        options.access = .readWrite
        let catalog = try Catalog(root: root, options: options, creating: true, store: (store, identity))
        do {
            return (catalog, try catalog.collectGarbage(.adopt))
        } catch {
            catalog.close()
            throw error
        }
    }

    /// Opens the SQLite store `catalog.sqlite` in `root`.
    static func openSQLite(root: URL, schema: Schema, options: OpenOptions, creating: Bool, readOnly: Bool) throws
        -> PersistentContainer
    {
        var storeOptions = PersistentContainer.Options()
        storeOptions.onUnreadableStore = options.onUnreadableStore
        storeOptions.logger = options.logger
        storeOptions.createsStore = creating
        storeOptions.readOnly = readOnly
        let storeURL = Self.storeURL(in: root)
        do {
            return try PersistentContainer.open(url: storeURL, schema: schema, options: storeOptions)
        } catch let error as PersistenceError {
            if let quarantine = error.quarantine {
                throw Self.quarantined(root, folder: quarantine.folder, reason: quarantine.reason)
            }
            if StoreStub.isStub(error) {
                throw CatalogError(
                    .store,
                    "The catalog at \(root.path) keeps its records in PostgreSQL, but its catalog.json, which names "
                        + "the store, is missing or unreadable. Nothing was changed; restore catalog.json from a "
                        + "backup or from another host that mounts this directory", path: storeURL.path, cause: error)
            }
            if error.code == .newerStore {
                throw CatalogError(
                    .store,
                    "The catalog at \(root.path) was written by a newer version of assetcat; upgrade to open it. "
                        + "Nothing was changed",
                    path: storeURL.path, cause: error)
            }
            if error.code == .diskFull { throw CatalogError.diskFull(root.path, cause: error) }
            if error.code == .notFound {
                throw CatalogError(
                    .store,
                    "The catalog at \(root.path) has lost its store: \(Self.storeName) is missing. Nothing was "
                        + "changed; restore \(Self.storeName) from a backup, or run `assetcat recover` to start a "
                        + "new store that lists the content of objects/",
                    path: storeURL.path, cause: error)
            }
            throw CatalogError(.store, error.message, path: storeURL.path, cause: error)
        }
    }

    /// Opens the PostgreSQL store `location` for the catalog `identity` names, and checks
    /// that it holds that catalog (``CatalogInfo``), making the row when `creating`. A
    /// writable open opens this process's session on the store (``openHostSession(_:)``),
    /// whatever other hosts have it open. Nothing is written to `root` here.
    static func openStore(
        _ location: CatalogStoreLocation, identity: CatalogIdentity, root: URL, schema: Schema, options: OpenOptions,
        creating: Bool, readOnly: Bool
    ) throws -> PersistentContainer {
        var storeOptions = PersistentContainer.Options()
        storeOptions.logger = options.logger
        storeOptions.createsStore = creating
        storeOptions.readOnly = readOnly
        storeOptions.expectsSession = !readOnly  // openHostSession, below
        let container: PersistentContainer
        do {
            container = try PersistentContainer.open(url: location.url, schema: schema, options: storeOptions)
        } catch let error as PersistenceError {
            if error.code == .notFound {
                throw noCatalog(root, location)
            }
            if error.code == .newerStore {
                throw CatalogError(
                    .store,
                    "The catalog at \(root.path) was written by a newer version of assetcat (\(location)); upgrade "
                        + "to open it. Nothing was changed", cause: error)
            }
            throw CatalogError(.store, Self.withoutPassword(error.message, location), cause: error)
        }
        do {
            let context = container.newBackgroundContext(name: "catalog-info")
            try context.performAndWait {
                let rows = try context.fetch(FetchRequest<CatalogInfo>())
                if creating {
                    guard rows.isEmpty else {
                        throw CatalogError(
                            .exists,
                            "\(location) already holds catalog \(rows[0].catalogID); to use it from this host, run "
                                + "`assetcat init --join --store URL DIR` on the directory that holds it",
                            path: root.path)
                    }
                    let info = CatalogInfo(context: context)
                    info.catalogID = identity.id.uuidString
                    info.created = identity.created
                    try context.save()
                    return
                }
                guard let info = rows.first else { throw noCatalog(root, location) }
                if let moved = info.movedTo {
                    throw CatalogError(
                        .store,
                        "The catalog at \(root.path) moved back to SQLite at \(moved) (`assetcat migrate-store "
                            + "--to sqlite`): \(location) is no longer its store. Use it from one host (SQLite over "
                            + "NFS is unsafe). Nothing was changed", path: root.path)
                }
                guard info.catalogID == identity.id.uuidString else {
                    throw CatalogError(
                        .store,
                        "\(root.path) is catalog \(identity.id.uuidString) but \(location) holds catalog "
                            + "\(info.catalogID); nothing was changed", path: root.path)
                }
            }
            if !readOnly { try openHostSession(container) }
        } catch let error as PersistenceError {
            container.close()
            if error.code == .constraint {
                throw CatalogError(
                    .exists,
                    "\(location) already holds a catalog; to use it from this host, run "
                        + "`assetcat init --join --store URL DIR` on the directory that holds it", path: root.path)
            }
            throw CatalogError(.store, Self.withoutPassword(error.message, location), cause: error)
        } catch {
            container.close()
            throw error
        }
        return container
    }

    /// The refusal of a store that holds no catalog: no tables, or no ``CatalogInfo``.
    private static func noCatalog(_ root: URL, _ location: CatalogStoreLocation) -> CatalogError {
        CatalogError(
            .store,
            "The catalog at \(root.path) has lost its store: \(location) holds no catalog. Nothing was changed; "
                + "restore the schema from a backup, or run `assetcat recover` to start a new store there that "
                + "lists the content of objects/", path: root.path, cause: StoreHoldsNoCatalog())
    }

    /// `message` with the password of `location`'s URL taken out, should it be there.
    static func withoutPassword(_ message: String, _ location: CatalogStoreLocation) -> String {
        guard let password = URLComponents(url: location.url, resolvingAgainstBaseURL: false)?.password,
            !password.isEmpty
        else { return message }
        return message.replacingOccurrences(of: password, with: "…")
    }

    /// Opens this process's session on the store, labelled with its host and process
    /// (``HostIdentity``). Every host that mounts the catalog's directory may have the
    /// catalog open and write at once: the others tell this process's liveness by its
    /// session (``SessionLiveness``: a dead one's staging, jobs and journals are taken over
    /// at the next writable open), its saves are fenced by it, and the content lock orders
    /// its content checks against the removal sweep (``CatalogRuntime/contentLock``).
    static func openHostSession(_ container: PersistentContainer) throws {
        _ = try container.openSession(label: HostIdentity.label())
    }

    /// Records, at a writable open of a SQLite catalog, which catalog its store holds
    /// (``CatalogInfo``, made at the first open since it existed), and refuses a store that
    /// holds another catalog than `catalog.json` names. A catalog without `catalog.json` (made
    /// before it existed, or that lost it) gets one: with the ID its store records, if it
    /// records one, else a new one.
    static func recordIdentity(_ container: PersistentContainer, root: URL) throws {
        let context = container.newBackgroundContext(name: "catalog-info")
        do {
            try context.performAndWait {
                let info = try context.fetch(FetchRequest<CatalogInfo>()).first
                if !CatalogIdentity.exists(in: root) {
                    if let info, let id = UUID(uuidString: info.catalogID) {
                        try CatalogIdentity(id: id, created: info.created).write(in: root)
                    } else {
                        try CatalogIdentity.write(in: root)
                    }
                }
                guard let identity = try? CatalogIdentity.read(in: root) else { return }
                if let info {
                    guard info.catalogID == identity.id.uuidString else {
                        throw CatalogError(
                            .store,
                            "\(root.path) is catalog \(identity.id.uuidString) but the store at "
                                + "\(storeURL(in: root).path) holds catalog \(info.catalogID); nothing was changed",
                            path: root.path)
                    }
                    return
                }
                let row = CatalogInfo(context: context)
                row.catalogID = identity.id.uuidString
                row.created = identity.created
                try context.save()
            }
        } catch let error as PersistenceError {
            throw CatalogError(.store, error.message, path: storeURL(in: root).path, cause: error)
        }
    }
}
