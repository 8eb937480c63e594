public import Foundation
import Locking
public import Logging
public import Persistence
import Synchronization

/// What every context of a catalog carries (its value for the key `CatalogRuntime`): the
/// content store and the sweeper that carries out committed removals.
final class CatalogRuntime: Sendable, ContextKey {
    typealias Value = CatalogRuntime

    let content: ContentStore
    /// Who owns work in the catalog and whether they are alive.
    let liveness: any OwnerLiveness
    weak let container: PersistentContainer?
    weak let jobs: JobQueue?
    let logger: Logger
    private let sweeping = Locked(())
    /// How many sweeps this process has run (tests count them: one per save, not per asset).
    let sweepsRun = Atomic<Int>(0)

    init(
        content: ContentStore, liveness: any OwnerLiveness, container: PersistentContainer, jobs: JobQueue,
        logger: Logger
    ) {
        self.content = content
        self.liveness = liveness
        self.container = container
        self.jobs = jobs
        self.logger = logger
    }

    /// Deletions of these assets never committed (a context was discarded):
    /// the jobs their `prepareForDeletion` stopped run again.
    func deletionsDiscarded(_ ids: Set<ManagedObjectID>) {
        for id in ids where id.entityName == Asset.entityName { jobs?.resume(for: AssetID(id.rowID)) }
    }

    /// The removals of this process that watch what the sweep unlinks
    /// (``watchingUnlinks(_:_:)``).
    private let unlinkWatches = Locked<[UnlinkWatch]>([])

    /// Runs `body` — a save that deletes assets, and the sweep its commit runs — while
    /// `watch` learns which of its content the sweeps of this process unlink.
    func watchingUnlinks<T>(_ watch: UnlinkWatch, _ body: () throws -> T) rethrows -> T {
        unlinkWatches.withLock { $0.append(watch) }
        defer { unlinkWatches.withLock { $0.removeAll { $0 === watch } } }
        return try body()
    }

    /// The named lock that keeps a removal from racing a save that starts using the content
    /// it removes. On SQLite the store's one write lock does that already (the lock is
    /// nothing more there); on PostgreSQL several hosts write at once, under `READ
    /// COMMITTED`, and this is what orders them:
    ///
    /// - **Shared**, by every save that certifies content exists — an add's, an import's, a
    ///   change of content, `gc --adopt` (``AssetRules``): taken in `beforeCommit`, before
    ///   its check of `objects/`, held until its commit. Such saves do not wait for each
    ///   other.
    /// - **Exclusive**, by every save that carries out removal plans
    ///   (``carryOut(_:in:)``): taken before it counts the assets that use the
    ///   content and unlinks what none uses. It waits for the certifying saves in progress
    ///   to end, and its count — a statement started after they committed — sees their
    ///   rows; a certifying save that starts meanwhile waits for the removal to commit, then
    ///   finds its content gone and puts it back from its pin (or fails: nothing dangles).
    ///
    /// No deadlock: a certifying save takes the tallies' lock (its asset rows' triggers)
    /// and row locks of its own rows, then this one, last. A removal deletes plan rows, then
    /// takes this one; it never writes an asset or a tag (no tallies' lock), and no
    /// certifying save waits for a plan row (they only insert plans). So no holder of this
    /// lock waits for a lock a waiter for it holds.
    static let contentLock = "assetcat.content"

    /// Takes ``contentLock`` in a save's transaction, or the sweep's — unless a test turned it off
    /// (``FaultPoint/skipContentLock``), to show the race it prevents.
    static func lockContent(_ reader: TransactionReader, shared: Bool, faults: FaultPoints) throws {
        guard !faults.isActive(.skipContentLock) else { return }
        try reader.lock(contentLock, shared: shared)
    }

    // MARK: - Removal after commit

    /// Called after a commit that journaled removals (``AssetRules``): carry them out now.
    func didCommitRemovals() {
        content.faults.reach(.afterCommit)
        do {
            _ = try sweep()
        } catch {
            logger.warning("removals stay pending until the next sweep: \(error)")
        }
    }

    /// Carries out every pending removal plan, a page of plans to a transaction
    /// (``carryOut(_:in:)``). A crash anywhere leaves the plans, and the next sweep does the
    /// work. Returns how many plans were carried out.
    func sweep() throws -> Int {
        guard let container else { return 0 }
        sweepsRun.add(1, ordering: .relaxed)
        // One look at the owners for the whole sweep (a killed import leaves a journal row
        // per file): see OwnerLiveness.pass(_:).
        return try sweeping.withLock { _ in try liveness.pass { try sweepOnce(container) } }
    }

    /// ``sweep()``, holding its lock, within one pass of ``OwnerLiveness``.
    private func sweepOnce(_ container: PersistentContainer) throws -> Int {
        let context = container.newBackgroundContext(name: "sweeper")
        context[CatalogRuntime.self] = self
        context[RemovalPlan.Sweeper.self] = self
        context.mergePolicy = .overwrite  // another process may have given up an import already
        return try context.performAndWait {
            // Hidden files of exports whose process is gone.
            var firstError = try removeAbandonedTemporaries(in: context)
            // Journals of imports whose process is gone (or that gave up) become plans first.
            for pending in try context.fetch(FetchRequest<PendingImport>())
            where pending.owner.isEmpty || !liveness.isAlive(pending.owner) {
                pending.giveUp()
                do {
                    try context.save()
                } catch {
                    context.rollback()
                    firstError = firstError ?? error
                }
            }
            // Plans by row ID, 10,000 to a transaction (a failed import of a million files
            // leaves a million), each synced once: a removal of 10,000 files syncs once, as
            // `rm -rf` + `sync` does. A page that fails is carried out again one plan at a
            // time, so a plan that cannot be (an I/O error) stays pending without holding
            // up the others — and is not met again by this sweep.
            var done = 0
            var last: Int64 = 0
            while true {
                // Read first: a sweep with nothing to do (every open runs one) writes nothing.
                let page = try context.fetchObjectIDs(
                    FetchRequest<RemovalPlan>(
                        predicate: .objectIDs(after: last), sortBy: [.objectID(ascending: true)], limit: 10_000))
                guard let end = page.last?.rowID else { break }
                last = end
                if let carried = try? carryOut(page, in: context) {
                    done += carried
                    continue
                }
                for plan in page {
                    do {
                        done += try carryOut([plan], in: context)
                    } catch {
                        firstError = firstError ?? error
                    }
                }
            }
            if let firstError { throw firstError }
            return done
        }
    }

    /// Carries out the removal plans `plans`, in one transaction: the file of each content
    /// that no asset uses is unlinked, and the plans are deleted. Returns how many plans it
    /// deleted (another sweep may have carried some out first).
    ///
    /// The count and the unlink run under the content lock (exclusive: ``contentLock``), where
    /// no save can start using the content; the folders are synced before the plans'
    /// deletion commits. A crash before the commit leaves the plans, which the next sweep
    /// carries out again (a file already unlinked is not missed).
    func carryOut(_ plans: [ManagedObjectID], in context: ManagedObjectContext) throws -> Int {
        try context.write { transaction in
            // 1. The plans, and their rows deleted in this transaction.
            let request = FetchRequest<RemovalPlan>(predicate: .objectIDs(plans))
            let digests = Set(try transaction.fetch(request).compactMap { $0.value(for: \RemovalPlan.sha256) })
            let carried = try transaction.delete(request)
            // 2. No save certifies content until this transaction ends. Taken after the plans'
            //    deletion, and the count below is a statement of its own: it sees what every
            //    certifying save that held the lock committed.
            try Self.lockContent(transaction.reader, shared: false, faults: content.faults)
            // 3. What no asset uses.
            let unused = try unused(digests.sorted(), transaction)
            // 4. Unlinked, the folders synced once.
            let watches = unlinkWatches.withLock { $0 }
            try content.removeObjects(unused, beforeEach: { content.faults.reach(.beforeUnlink) }) { digest in
                for watch in watches { watch.saw(digest) }
            }
            return carried
        }  // 5. Committed: the plans are gone with their files.
    }

    /// Those of `digests` that no asset uses, as managed content or as a thumbnail, in
    /// `transaction`: two counts answer for all of them when none is in use (the usual case);
    /// else each is counted.
    private func unused(_ digests: [String], _ transaction: StoreTransaction) throws -> [String] {
        func isUsed(_ digests: [String]) throws -> Bool {
            let (managed, thumbnails) = ContentUse.users(of: digests)
            return try transaction.count(for: managed) > 0 || transaction.count(for: thumbnails) > 0
        }
        guard !digests.isEmpty else { return [] }
        guard try isUsed(digests) else { return digests }
        return try digests.filter { try !isUsed([$0]) }
    }
}

/// The content a removal watches while its deletion commits and the sweep runs: which
/// of it a sweep of this process unlinks — the files the removal reports as removed,
/// without looking at `objects/` before and after.
final class UnlinkWatch: Sendable {
    private let state = Locked((watched: Set<String>(), unlinked: Set<String>()))

    /// Adds content to watch.
    func watch(_ digests: some Sequence<String>) {
        state.withLock { $0.watched.formUnion(digests) }
    }

    /// A sweep unlinked the file of `digest`.
    func saw(_ digest: String) {
        state.withLock { state in
            if state.watched.contains(digest) { state.unlinked.insert(digest) }
        }
    }

    /// The watched content whose file was unlinked.
    var unlinked: Set<String> { state.withLock { $0.unlinked } }
}

/// A catalog of file resources: a directory holding the store
/// (`catalog.sqlite`), the managed files (`objects/`), work in progress
/// (`staging/`) and unusable stores set aside (`quarantine/`).
///
/// ```swift
/// let catalog = try Catalog.open(at: URL(fileURLWithPath: "photos.assetcat"), options: .init(createIfMissing: true))
/// let result = try await catalog.add(["/srv/incoming"], options: .init(tags: ["incoming"], recursive: true))
/// for asset in try catalog.assets(.init(tag: "incoming")) { print(asset.id, asset.name, asset.sha256) }
/// try catalog.remove(["42"])   // the file goes once the deletion has committed
/// ```
///
/// A `Catalog` is `Sendable`: share one between tasks. For direct work on
/// the object graph, use ``performBackgroundTask(_:)`` or ``newContext(name:)``
/// (contexts made elsewhere cannot delete managed content safely).
public final class Catalog: Sendable {
    /// Options for opening a catalog.
    public struct OpenOptions: Sendable {
        /// Create the catalog when the directory holds none.
        public var createIfMissing: Bool
        /// Whether the catalog is opened to change it, or only to read it.
        public var access: Access
        /// What to do with an unusable store; by default opening fails (a
        /// catalog is a source of truth, not a cache) after moving it aside.
        public var onUnreadableStore: PersistentContainer.UnreadableStorePolicy
        /// Where the catalog logs; silent by default.
        public var logger: Logger
        /// A program's own entities, kept in the catalog's store beside its assets: their
        /// objects are inserted, changed and deleted in the catalog's contexts
        /// (``Catalog/newContext(name:)``) and saved in the same transaction as assets,
        /// with their lifecycle hooks. Their tables are created the first time the catalog
        /// is opened with them. A to-one relationship to ``Asset`` must say what removing
        /// the asset does to its objects (`@ToOne(onDestinationDelete:)`). See
        /// <doc:PipelineEntities>.
        public var entities: [ManagedObject.Type]
        /// Test instrumentation: fault points, the job queue's pacing and hooks (none by default).
        @_spi(Testing) public var testing = CatalogTesting()

        /// Options for ``Catalog/open(at:options:)`` and ``Catalog/create(at:options:)``.
        public init(
            createIfMissing: Bool = false, access: Access = .readWrite,
            onUnreadableStore: PersistentContainer.UnreadableStorePolicy = .fail,
            logger: Logger = Logger(label: "AssetCatalog", factory: { _ in SwiftLogNoOpLogHandler() }),
            entities: [ManagedObject.Type] = []
        ) {
            self.createIfMissing = createIfMissing
            self.access = access
            self.onUnreadableStore = onUnreadableStore
            self.logger = logger
            self.entities = entities
        }
    }

    /// Whether an open may change the catalog.
    public enum Access: Sendable {
        /// Read and write. Opening finishes work an earlier process left (pending removals,
        /// staging of processes that are gone) and fails with ``CatalogError/Code/readOnly``
        /// where the catalog cannot be written (a read-only mount, a folder this user may not
        /// write).
        case readWrite
        /// Read only: nothing in the catalog's directory is created, migrated, repaired or
        /// written, and every change fails with ``CatalogError/Code/readOnly``. Works on a
        /// read-only file system. Removals left pending stay pending
        /// (``Catalog/pendingRemovalCount()``).
        case readOnly
        /// ``readWrite`` where the catalog can be written, else ``readOnly`` (a read-only
        /// mount or folder, or a full disk: ``Catalog/openedReadOnlyOnAFullDisk``): for
        /// commands that only read, so that they still finish an earlier process's work where
        /// they can.
        case readWriteIfPossible
    }

    /// The catalog's directory.
    public let root: URL
    let container: PersistentContainer
    let runtime: CatalogRuntime
    var content: ContentStore { runtime.content }

    static let storeName = "catalog.sqlite"
    static let entities: [ManagedObject.Type] = [
        Asset.self, RemovalPlan.self, PendingImport.self, Job.self, PendingTemporary.self, AssetTag.self,
        AddMark.self, CatalogInfo.self,
    ]

    /// Describes the catalog's entities on a thread of its own: finding each entity's
    /// properties by reflection is about 2 ms of a process's first open, which a command can
    /// overlap with parsing its arguments by calling this first. An open that comes before it
    /// is done describes what is not described yet itself (each entity is kept once).
    public static func describeEntitiesInBackground() {
        Thread.detachNewThread { _ = try? schema(with: []) }
    }

    /// What brings a catalog of an earlier release to this one's schema, in order.
    static let migrations: [Migration] = [
        AssetTag.dropTagTextIndex, AssetTag.fromTagText(), Asset.managedDigestIndex,
        PendingTemporary.hostOfEarlierRows(),
    ]

    /// The catalog's schema: its own entities, then a program's (``OpenOptions/entities``).
    ///
    /// - Throws: ``CatalogError/Code/invalidArgument`` when a program's entity takes the
    ///   name of one of the catalog's (in any case), or has a to-one relationship to one of the catalog's
    ///   entities with no `onDestinationDelete` rule, or the schema is refused.
    static func schema(with extra: [ManagedObject.Type], catalogInfo: Bool = true) throws -> Schema {
        let reserved = Set(entities.map(\.entityName))
        // The stores' names ignore case: `asset` would be the catalog's `Asset` table.
        let folded = Set(reserved.map { $0.lowercased() })
        let own = Set(entities.map(ObjectIdentifier.init))
        for type in extra where !own.contains(ObjectIdentifier(type)) {
            let name = type.entityName
            guard !folded.contains(name.lowercased()) else {
                throw CatalogError(
                    .invalidArgument,
                    "The entity \(type) cannot be added to the catalog: its name \(name) is taken by the catalog's own "
                        + "entity (reserved: \(reserved.sorted().joined(separator: ", "))); give it another "
                        + "`entityName`")
            }
            for link in type.toOneRelationships
            where reserved.contains(link.destination) && link.onDestinationDelete == nil {
                throw CatalogError(
                    .invalidArgument,
                    "\(name).\(link.name) points at \(link.destination) without saying what removing it does: "
                        + "declare it @ToOne(onDestinationDelete: .nullify), .cascade or .deny")
            }
        }
        do {
            let catalogEntities = catalogInfo ? entities : entities.filter { $0 != CatalogInfo.self }
            return try Schema(
                catalogEntities + extra.filter { !own.contains(ObjectIdentifier($0)) }, migrations: migrations)
        } catch let error as PersistenceError {
            throw CatalogError(.invalidArgument, error.message, cause: error)
        }
    }

    /// The catalog's job provider: register processors, run the queue.
    public let jobs: JobQueue

    /// Whether `directory` holds a catalog (its `catalog.json` or its store).
    public static func exists(at directory: URL) -> Bool {
        CatalogIdentity.exists(in: directory) || FileManager.default.fileExists(atPath: storeURL(in: directory).path)
    }

    static func storeURL(in root: URL) -> URL { root.appending(path: storeName) }

    /// Creates a new, empty catalog in `directory` (made if missing).
    ///
    /// - Throws: ``CatalogError/Code/exists`` when it already holds one, or holds the
    ///   content of one whose store is lost.
    public static func create(at directory: URL, options: OpenOptions = OpenOptions()) throws -> Catalog {
        guard !exists(at: directory) else {
            throw CatalogError(.exists, "A catalog already exists at \(directory.path)", path: directory.path)
        }
        var options = options
        options.createIfMissing = true
        options.access = .readWrite
        return try open(at: directory, options: options)
    }

    /// Opens the catalog in `directory`, finishing any removal a crash left
    /// pending and clearing staging work of processes that are gone.
    ///
    /// Only ``create(at:options:)`` (or `createIfMissing` in a directory that holds no
    /// catalog) makes a store. A catalog whose store is missing, emptied, or without its
    /// tables is refused and nothing in it is touched: the store is moved to
    /// `quarantine/` and this open, and every later one, fails saying where it went.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when there is no catalog
    ///   (and `createIfMissing` is false); ``CatalogError/Code/store`` when
    ///   its store is unusable or lost (the message says where it was moved and
    ///   what to do), or was written by a newer version of assetcat (nothing is changed:
    ///   upgrade to open it); ``CatalogError/Code/readOnly`` when it cannot be written and
    ///   `access` is ``Access/readWrite``.
    public static func open(at directory: URL, options: OpenOptions = OpenOptions()) throws -> Catalog {
        let root = directory.standardizedFileURL
        // A catalog.json that cannot be read is left to the SQLite path, as before stores were
        // named: a catalog in PostgreSQL then meets its stub, which says what to do.
        if let identity = try? CatalogIdentity.read(in: root),
            let store = try CatalogStoreLocation.resolve(
                for: identity, environment: ProcessInfo.processInfo.environment)
        {
            return try Catalog(root: root, options: options, creating: false, store: (store, identity))
        }
        if !exists(at: root) {
            if let lost = lostStore(root) { throw lost }
            guard options.createIfMissing else {
                throw CatalogError(
                    .notFound, "No catalog at \(root.path); create one with `assetcat init`", path: root.path)
            }
            return try Catalog(root: root, options: options, creating: true)
        }
        return try Catalog(root: root, options: options, creating: false)
    }

    /// Starts a new store for a catalog whose store is lost (missing, or moved to
    /// `quarantine/` as unusable) and records every file of `objects/` in it as an asset
    /// named `recovered-<digest>` and tagged `recovered`: the last resort when there is no
    /// backup of the store. Names, tags, metadata, references and archive members are not
    /// recoverable from content alone; a quarantined store stays where it is.
    ///
    /// - Throws: ``CatalogError/Code/exists`` when the catalog's store opens (nothing to
    ///   recover), ``CatalogError/Code/notFound`` when `directory` holds no catalog.
    public static func recover(at directory: URL, options: OpenOptions = OpenOptions())
        throws -> (catalog: Catalog, report: GarbageReport)
    {
        let root = directory.standardizedFileURL
        if let identity = try? CatalogIdentity.read(in: root),
            let store = try CatalogStoreLocation.resolve(
                for: identity, environment: ProcessInfo.processInfo.environment)
        {
            return try recover(root, store: store, identity: identity, options: options)
        }
        if FileManager.default.fileExists(atPath: storeURL(in: root).path) {
            do {
                try open(at: root, options: options).close()
                throw CatalogError(
                    .exists,
                    "The catalog at \(root.path) opens: it has nothing to recover (`assetcat gc --adopt` records "
                        + "content no asset uses)", path: root.path)
            } catch let error as CatalogError where error.code == .store {
                // Unusable, and now in quarantine, is recovered below; a store that could not
                // be opened for another reason (busy, I/O) is still there, and not lost.
                guard !FileManager.default.fileExists(atPath: storeURL(in: root).path) else { throw error }
            }
        }
        guard exists(at: root) || lostStore(root) != nil else {
            throw CatalogError(.notFound, "No catalog at \(root.path): nothing to recover", path: root.path)
        }
        var options = options
        options.access = .readWrite
        options.onUnreadableStore = .recreate  // past the quarantined store: a new one, on purpose
        let catalog = try Catalog(root: root, options: options, creating: true)
        do {
            return (catalog, try catalog.collectGarbage(.adopt))
        } catch {
            catalog.close()
            throw error
        }
    }

    /// The error for a directory that has no store and no `catalog.json` but still shows a
    /// catalog was there: a store moved to `quarantine/`, or content in `objects/`.
    private static func lostStore(_ root: URL) -> CatalogError? {
        if let folder = PersistentContainer.quarantinedStore(of: storeURL(in: root)) {
            return quarantined(root, folder: folder, reason: nil)
        }
        let objects = root.appending(path: "objects").path
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: objects), !entries.isEmpty else {
            return nil
        }
        return CatalogError(
            .store,
            "The catalog at \(root.path) has lost its store: \(storeName) is missing but objects/ holds content. "
                + "Nothing was changed; restore \(storeName) from a backup, or run `assetcat recover` to start a new "
                + "store that lists the content of objects/",
            path: storeURL(in: root).path)
    }

    /// The error for a catalog whose store is in `quarantine/`.
    static func quarantined(_ root: URL, folder: URL, reason: String?) -> CatalogError {
        let why =
            reason.map { "is unusable (\($0)); it was moved to \(folder.path)" }
            ?? "was found unusable and moved to \(folder.path)"
        return CatalogError(
            .store,
            "The catalog at \(root.path) cannot be opened: its store \(storeName) \(why). Nothing in objects/ was "
                + "touched. Restore \(storeName) from a backup into \(root.path), or run `assetcat recover` to start "
                + "a new store that lists the content of objects/",
            path: storeURL(in: root).path)
    }

    /// Whether the catalog at `root` can be written by this process (its folder, and its
    /// `catalog.sqlite` unless its records are elsewhere).
    private static func isWritable(_ root: URL, sqlite: Bool) -> Bool {
        guard access(root.path, W_OK) == 0 else { return false }
        guard sqlite else { return true }
        let store = storeURL(in: root).path
        return access(store, F_OK) != 0 || access(store, W_OK) == 0
    }

    /// Opens (or, `creating`, makes) the catalog at `root`: on `catalog.sqlite` when `store`
    /// is `nil`, else on the PostgreSQL store it names, for the catalog `identity` says.
    init(
        root: URL, options: OpenOptions, creating: Bool,
        store: (location: CatalogStoreLocation, identity: CatalogIdentity)? = nil
    ) throws {
        self.root = root
        var schema = try Self.schema(with: options.entities)  // refused before anything is made
        var readOnly: Bool
        switch options.access {
        case .readOnly: readOnly = true
        case .readWrite, .readWriteIfPossible:
            if !creating, !Self.isWritable(root, sqlite: store == nil) {
                guard options.access == .readWriteIfPossible else {
                    throw CatalogError(
                        .readOnly,
                        "The catalog at \(root.path) is read-only (\(ContentStore.errnoText())): this command "
                            + "changes it. Commands that only read it (ls, show, cat, verify, stats) still work",
                        path: root.path)
                }
                readOnly = true
            } else {
                readOnly = false
            }
        }
        // A read-only open of a SQLite catalog made before CatalogInfo could not make its table.
        if store == nil && readOnly { schema = try Self.schema(with: options.entities, catalogInfo: false) }
        var diskIsFull = false
        if let store {
            container = try Self.openStore(
                store.location, identity: store.identity, root: root, schema: schema, options: options,
                creating: creating, readOnly: readOnly)
        } else {
            if !readOnly { try ContentStore.makeDirectory(root.path) }
            do {
                container = try Self.openSQLite(
                    root: root, schema: schema, options: options, creating: creating, readOnly: readOnly)
            } catch let error as CatalogError where error.code == .diskFull && options.access == .readWriteIfPossible {
                // SQLite's log cannot start on a full disk; a read-only open writes nothing.
                readOnly = true
                diskIsFull = true
                schema = try Self.schema(with: options.entities, catalogInfo: false)
                container = try Self.openSQLite(
                    root: root, schema: schema, options: options, creating: creating, readOnly: true)
            }
        }
        self.openedReadOnlyOnAFullDisk = diskIsFull
        let content: ContentStore
        do {
            if let store {
                if !readOnly { try ContentStore.makeDirectory(root.path) }
                // Staging by session when the store keeps sessions (opened, its row committed,
                // by openStore), else by file lock.
                content =
                    readOnly
                    ? try ContentStore(readingAt: root.path, faults: options.testing.faults)
                    : try ContentStore(
                        root: root.path, session: container.session.map { SessionLiveness.owner(of: $0.id) },
                        faults: options.testing.faults)
                if creating {
                    do {
                        try store.identity.write(in: root)
                        try StoreStub.write(in: root)  // last: see StoreStub
                    } catch {
                        content.release()
                        throw error
                    }
                }
            } else {
                content =
                    readOnly
                    ? try ContentStore(readingAt: root.path, faults: options.testing.faults)
                    : try ContentStore(root: root.path, faults: options.testing.faults)
                if !readOnly {
                    do {
                        try Self.recordIdentity(container, root: root)
                    } catch {
                        content.release()
                        throw error
                    }
                }
            }
        } catch {
            container.close()
            throw error
        }
        let liveness: any OwnerLiveness =
            if let session = container.session, !readOnly {
                SessionLiveness(content: content, session: session, host: HostIdentity.current(), container: container)
            } else {
                FileLockLiveness(content: content)
            }
        jobs = JobQueue(
            owner: content.owner, concurrency: ProcessInfo.processInfo.activeProcessorCount, logger: options.logger,
            tuning: options.testing.jobs, hooks: options.testing.jobHooks)
        runtime = CatalogRuntime(
            content: content, liveness: liveness, container: container, jobs: jobs, logger: options.logger)
        container.viewContext[CatalogRuntime.self] = runtime
        let runtime = runtime
        container.viewContext.discardedDeletionsHandler = { runtime.deletionsDiscarded($0) }
        jobs.attach(self)
        if let sessions = liveness as? SessionLiveness {
            // A session lost or reaped: another host runs its jobs now, not this process.
            let queue = jobs
            sessions.session.onEnd { [weak queue] ending in queue?.sessionEnded(ending) }
        }
        BuiltInProcessors.register(on: jobs)
        options.logger.debug("opened the catalog \(root.path) \(readOnly ? "read-only" : "to read and write")")
        guard !readOnly else { return }
        if let sessions = liveness as? SessionLiveness {
            runtime.reapDeadSessions(sessions)
        } else {
            jobs.recoverAbandoned()  // a dead worker's jobs show as queued, not running
            content.removeAbandonedStaging()  // after: a dead worker's lock file says which of its jobs ran
        }
        do {
            let finished = try runtime.sweep()
            if finished > 0 { options.logger.info("finished \(finished) removals left pending by an earlier process") }
        } catch {
            // The catalog is usable: the plans stay pending (stats and gc report them).
            options.logger.warning("some removals stay pending: \(error)")
        }
    }

    /// Whether the catalog was opened read-only (``Access/readOnly``, or
    /// ``Access/readWriteIfPossible`` where it cannot be written).
    public var isReadOnly: Bool { container.isReadOnly }

    /// Whether an open with ``Access/readWriteIfPossible`` found the catalog's file system
    /// full, and opened it read-only: SQLite cannot start its log on a full disk, a read-only
    /// open writes nothing. Removals left pending stay pending.
    public let openedReadOnlyOnAFullDisk: Bool

    /// The file system holding the catalog, as messages name it: where it is mounted, its
    /// type and the space left (`the file system mounted at /srv (ext4, 0 bytes free)`).
    public var fileSystemDescription: String { FileSystemSpace(of: root.path).description }

    /// How many committed removals are still to be carried out (a crash, a failed sweep,
    /// or a read-only open that could not finish them).
    public func pendingRemovalCount() throws -> Int {
        try storeErrors { try withContext { try $0.count(for: FetchRequest<RemovalPlan>()) } }
    }

    /// Whether opening found the store unusable and started an empty one.
    public var storeWasResetOnLoad: Bool { container.storeWasResetOnLoad }

    /// A new context on the catalog's store, with its own queue.
    public func newContext(name: String? = nil) -> ManagedObjectContext {
        let context = container.newBackgroundContext(name: name)
        context[CatalogRuntime.self] = runtime
        let runtime = runtime
        context.discardedDeletionsHandler = { runtime.deletionsDiscarded($0) }
        return context
    }

    /// Runs `body` on a new context of this catalog, on that context's queue.
    public func performBackgroundTask<T: Sendable>(_ body: @escaping (ManagedObjectContext) throws -> T) async throws
        -> T
    {
        let context = newContext()
        let box = ContextBox(context)
        return try await context.perform { try body(box.context) }
    }

    /// Runs `body` on a new context of this catalog and waits for it.
    func withContext<T>(_ body: (ManagedObjectContext) throws -> T) throws -> T {
        let context = newContext()
        return try context.performAndWait { try body(context) }
    }

    /// Runs a read-modify-write in a fresh context, and runs it again from
    /// the store's new state when another context or process committed a
    /// change to the same rows in between (a job's result, typically): the
    /// caller's edit is then made on top of it, neither refused nor lost.
    func withRetriedContext<T>(_ body: (ManagedObjectContext) throws -> T) throws -> T {
        var attempt = 1
        while true {
            do {
                return try withContext(body)
            } catch let error as PersistenceError where error.code == .conflict && attempt < 5 {
                attempt += 1
            }
        }
    }

    /// The notifications of every save to the catalog's store.
    public func saveNotifications() -> AsyncStream<SaveNotification> {
        container.saveNotifications()
    }

    /// Carries out removals journaled by committed deletions that are still
    /// pending (a crash, a failed sweep). Returns how many were processed.
    @discardableResult
    public func finishPendingRemovals() throws -> Int {
        try storeErrors { try runtime.sweep() }
    }

    /// Closes the store. The catalog must not be used afterwards.
    public func close() {
        jobs.stopAndWait()  // running jobs are queued again and leave the store alone before it closes
        container.viewContext[CatalogRuntime.self] = nil
        if runtime.liveness is SessionLiveness {
            runtime.liveness.end()  // the staging folder, then the session: see SessionLiveness.end()
            container.close()
        } else {
            container.close()
            content.release()
        }
    }

    /// Runs `body`, turning persistence errors into catalog errors.
    func storeErrors<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as CatalogError {
            throw error
        } catch let error as PersistenceError {
            if let inner = error.cause as? CatalogError { throw inner }
            if error.code == .readOnly { throw CatalogError.readOnlyCatalog(root.path) }
            if error.code == .diskFull { throw CatalogError.diskFull(root.path, cause: error) }
            if error.code == .storeDamaged {
                throw CatalogError.damagedStore(error, message: error.message, store: Self.storeURL(in: root).path)
            }
            throw CatalogError(.store, error.message, cause: error)
        }
    }
}

/// Lends a context to a closure on its own queue.
struct ContextBox: @unchecked Sendable {
    let context: ManagedObjectContext
    init(_ context: ManagedObjectContext) { self.context = context }
}
