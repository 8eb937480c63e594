public import Foundation
import Locking
public import Logging
import Synchronization

/// What a committed save changed, by object ID.
///
/// Published by ``PersistentContainer/saveNotifications()`` after every save
/// to the store and every batch operation; pass it to
/// ``ManagedObjectContext/mergeChanges(from:)`` to bring another context up
/// to date.
public struct SaveNotification: Sendable, Hashable {
    /// The objects the save inserted, the rows of
    /// ``ManagedObjectContext/insertRows(_:count:_:)`` and the rows its hooks planned
    /// through ``SaveEffects/insert(_:_:)``.
    public var insertedObjectIDs: Set<ManagedObjectID>
    /// The objects the save updated, and rows whose relationship a delete rule cleared.
    public var updatedObjectIDs: Set<ManagedObjectID>
    /// The objects the save deleted, and the members its delete rules removed.
    public var deletedObjectIDs: Set<ManagedObjectID>
    /// The name of the context that saved, if it has one.
    public var contextName: String?
    /// Rows inserted by ``ManagedObjectContext/insertRows(_:count:batchSize:streaming:)``,
    /// and rows that ``ManagedObject/willBatchDelete(_:effects:)`` hooks planned (for a batch
    /// delete, or the rows a save deletes without objects), as ranges of row IDs by entity
    /// name (row `id` of entity `name` is `ManagedObjectID(entityName: name, rowID: id)`).
    /// They are not in ``insertedObjectIDs``: a notification stays small however many rows
    /// a save wrote.
    public var insertedRowRanges: [String: [Range<Int64>]]
    /// Rows deleted by ``ManagedObjectContext/deleteRows(_:pages:)`` (and what their delete
    /// rules cascaded to), as ascending ranges of row IDs by entity name. They are not in
    /// ``deletedObjectIDs``; ``ManagedObjectContext/mergeChanges(from:)`` takes both.
    public var deletedRowRanges: [String: [Range<Int64>]]

    /// A notification of these changes, for ``ManagedObjectContext/mergeChanges(from:)``
    /// (of a save made elsewhere, say in another process).
    public init(
        inserted: some Sequence<ManagedObjectID>, updated: some Sequence<ManagedObjectID>,
        deleted: some Sequence<ManagedObjectID>, contextName: String? = nil,
        insertedRowRanges: [String: [Range<Int64>]] = [:], deletedRowRanges: [String: [Range<Int64>]] = [:]
    ) {
        insertedObjectIDs = Set(inserted)
        updatedObjectIDs = Set(updated)
        deletedObjectIDs = Set(deleted)
        self.contextName = contextName
        self.insertedRowRanges = insertedRowRanges
        self.deletedRowRanges = deletedRowRanges
    }
}

/// The store, its schema and its contexts: the front door of the
/// persistence layer (Core Data's `NSPersistentContainer`).
///
/// ```swift
/// let container = try PersistentContainer(
///     storeURL: directory.appending(path: "store.sqlite"),
///     schema: Schema([Folder.self, Note.self]))
/// try await container.performBackgroundTask { context in
///     let note = Note(context: context)
///     note.title = "Groceries"
///     try context.save()
/// }
/// ```
///
/// The store is SQLite in WAL mode with `synchronous=FULL`. Opening it checks
/// it (`PRAGMA quick_check`) and migrates it. A file that is not a database,
/// fails the check or cannot be migrated is never deleted: with
/// ``UnreadableStorePolicy/recreate`` it is moved with its `-wal` and `-shm`
/// into `quarantine/` beside it and an empty store takes its place
/// (``storeWasResetOnLoad``, ``quarantinedStoreURL``); with
/// ``UnreadableStorePolicy/fail`` it is moved there too and opening fails
/// with instructions, and later opens keep failing until the caller chooses.
/// A program whose store must already exist opens with
/// ``Options/createsStore`` `false`: then an emptied file is unusable too,
/// never taken for a new store. ``Options/readOnly`` reads a store without
/// writing anything, on a read-only file system too.
public final class PersistentContainer: Sendable {
    /// What to do when the store file is unreadable or cannot be migrated.
    public enum UnreadableStorePolicy: Sendable {
        /// Quarantine the file and fail, saying where it went (the default: a
        /// store is a source of truth, not a cache).
        case fail
        /// Quarantine the file and start with an empty store.
        case recreate
    }

    /// Options for opening a store.
    public struct Options: Sendable {
        /// What to do with a store that cannot be read or migrated (default: quarantine, fail).
        public var onUnreadableStore: UnreadableStorePolicy = .fail
        /// How long a write waits for another process's transaction, in seconds.
        public var busyTimeout: TimeInterval = 30
        /// Whether every open runs `PRAGMA quick_check` over the whole store, whatever its
        /// size (linear in it). By default (`false`) an open does work independent of the
        /// store's size: it reads the header and the schema (a file that is not a database,
        /// or whose header or schema is damaged, is quarantined), and runs the full check
        /// only on a store of at most ``smallStoreCheckLimit`` bytes, or after an unclean
        /// shutdown (a `-wal` with commits left by a process that is gone). Damage elsewhere
        /// is found by ``PersistentContainer/checkIntegrity()``, or by the read that
        /// reaches it (``PersistenceError/Code/storeDamaged``).
        public var checksIntegrityOnOpen = false
        /// Whether opening may create the store. When `false`, a missing file fails the
        /// open (``PersistenceError/Code/notFound``), and a database that holds no schema —
        /// an emptied file, a file whose tables were dropped — is unusable like a damaged
        /// one (quarantined, ``PersistenceError/Code/storeUnreadable``) instead of being
        /// given a fresh schema. A program whose store is a source of truth opens with
        /// `false` every time but the first.
        public var createsStore = true
        /// Whether the store is opened for reading only: nothing is created, migrated,
        /// quarantined or written, and every save fails with
        /// ``PersistenceError/Code/readOnly``. A store on a read-only file system can be
        /// read this way. A store that needs a migration fails the open.
        public var readOnly = false
        /// Whether the program opens a session (``PersistentContainer/openSession(label:)``)
        /// once the store is open. A store whose sessions hold a connection of their own
        /// (PostgreSQL) then makes that connection at the same time as its own, so that the
        /// session does not wait for one; a session never opened closes it with the store.
        /// Nothing changes on SQLite, which has no sessions.
        public var expectsSession = false
        /// Called by a writable SQLite open whose schema needs its upkeep, after the store's
        /// check and before the upkeep takes the write lock: tests change the store there as
        /// another process would (`@_spi(Testing) import Persistence` reaches it).
        @_spi(Testing) public var beforeUpkeep: (@Sendable () -> Void)?
        /// Where the container logs; silent by default.
        public var logger = Logger(label: "Persistence", factory: { _ in SwiftLogNoOpLogHandler() })
        /// The defaults.
        public init() {}

        /// The size, in bytes, up to which every open runs the full check: its cost is
        /// bounded by this, not by the store's size.
        public static let smallStoreCheckLimit = 1 << 20
    }

    /// The store's file.
    public let storeURL: URL
    /// Whether the store was opened for reading only (``Options/readOnly``).
    public let isReadOnly: Bool
    /// The entities of the store.
    public let schema: Schema
    /// Whether opening found an unreadable store and replaced it with an empty one.
    public let storeWasResetOnLoad: Bool
    /// Where an unreadable store was moved, if it was.
    public let quarantinedStoreURL: URL?
    /// The context for reading and small edits, shared by the program. Use it
    /// through ``ManagedObjectContext/perform(_:)`` or
    /// ``ManagedObjectContext/performAndWait(_:)`` from any thread.
    public nonisolated(unsafe) let viewContext: ManagedObjectContext

    let core: ContainerCore

    /// Opens (or creates) the store at `storeURL` for `schema`.
    ///
    /// - Throws: ``PersistenceError`` with code `storeUnreadable` or
    ///   `migration` (the file was quarantined, unless read-only; the message
    ///   says where and what to do), `notFound` (no file, and
    ///   ``Options/createsStore`` is `false`), or `io`.
    public init(storeURL: URL, schema: Schema, options: Options = Options()) throws {
        self.storeURL = storeURL
        self.schema = schema
        isReadOnly = options.readOnly
        let directory = storeURL.deletingLastPathComponent()
        if options.createsStore && !options.readOnly {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        let quarantine = directory.appending(path: "quarantine")
        let fileName = storeURL.lastPathComponent
        let mayCreate = options.createsStore && !options.readOnly
        if options.onUnreadableStore == .fail || !mayCreate, !FileManager.default.fileExists(atPath: storeURL.path),
            let earlier = Self.quarantined(fileName, in: quarantine)
        {
            var error = PersistenceError(
                .storeUnreadable,
                "The store \(storeURL.path) was quarantined to \(earlier.path) by an earlier open; restore it from a "
                    + "backup, or open with onUnreadableStore: .recreate to start with an empty store")
            error.quarantine = .init(folder: earlier, reason: nil)
            throw error
        }
        // The one place that names the engine: everything after the open goes through
        // the PersistentStore protocol.
        let store: any PersistentStore
        var reset = false
        var moved: URL?
        do {
            store = try SQLiteStore(
                url: storeURL, schema: schema, busyTimeout: options.busyTimeout,
                checksIntegrity: options.checksIntegrityOnOpen,
                mode: StoreOpenMode(createsSchema: mayCreate, readOnly: options.readOnly), logger: options.logger,
                beforeUpkeep: options.beforeUpkeep)
        } catch {
            let (code, reason, cause): (PersistenceError.Code, String, any Error)
            switch error {
            case .unreadable(let r, let c): (code, reason, cause) = (.storeUnreadable, r, c)
            case .migration(let r, let c): (code, reason, cause) = (.migration, r, c)
            case .unavailable(let r, let c):
                let causeCode = (c as? PersistenceError)?.code
                let code: PersistenceError.Code =
                    causeCode == .newerStore
                    ? .newerStore
                    : options.readOnly && causeCode == .migration
                        ? .migration : SQLiteStore.isDiskFull(c, in: directory) ? .diskFull : .io
                throw PersistenceError(code, "Could not open the store \(storeURL.path): \(r)", cause: c)
            case .missing:
                throw PersistenceError(.notFound, "There is no store at \(storeURL.path)")
            }
            guard !options.readOnly else {
                // Nothing is moved by a read-only open: it says what it found.
                throw PersistenceError(code, "The store \(storeURL.path) is unusable (\(reason))", cause: cause)
            }
            let target = try Self.moveToQuarantine(storeURL, quarantine: quarantine)
            options.logger.error("store \(storeURL.path) is unusable (\(reason)); moved to \(target.path)")
            guard options.onUnreadableStore == .recreate else {
                var error = PersistenceError(
                    code,
                    "The store \(storeURL.path) is unusable (\(reason)); it was moved to \(target.path). Restore it "
                        + "from a backup, or open with onUnreadableStore: .recreate to start with an empty store",
                    cause: cause)
                error.quarantine = .init(folder: target, reason: reason)
                throw error
            }
            do {
                store = try SQLiteStore(
                    url: storeURL, schema: schema, busyTimeout: options.busyTimeout, checksIntegrity: false,
                    logger: options.logger)
            } catch {
                throw PersistenceError(.io, "Could not create a new store at \(storeURL.path): \(error)", cause: error)
            }
            reset = true
            moved = target
        }
        storeWasResetOnLoad = reset
        quarantinedStoreURL = moved
        core = ContainerCore(store: store, schema: schema, logger: options.logger)
        viewContext = ManagedObjectContext(core: core, parent: nil, name: "view")
    }

    /// A container on a store that another module of the package opened (a second engine:
    /// `PersistencePostgreSQL`). `storeURL` names the store in messages; it holds no
    /// secret. Nothing is quarantined: the engine reports its own open failures.
    package init(store: any PersistentStore, storeURL: URL, schema: Schema, options: Options = Options()) {
        self.storeURL = storeURL
        self.schema = schema
        isReadOnly = options.readOnly
        storeWasResetOnLoad = false
        quarantinedStoreURL = nil
        core = ContainerCore(store: store, schema: schema, logger: options.logger)
        viewContext = ManagedObjectContext(core: core, parent: nil, name: "view")
    }

    /// The folder of `quarantine/` (beside the store) that holds the store most recently
    /// moved there, if any.
    public static func quarantinedStore(of storeURL: URL) -> URL? {
        quarantined(
            storeURL.lastPathComponent, in: storeURL.deletingLastPathComponent().appending(path: "quarantine"))
    }

    private static func quarantined(_ fileName: String, in quarantine: URL) -> URL? {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: quarantine.path)) ?? []
        return entries.filter { $0.hasSuffix("-" + fileName) }.sorted().last.map { quarantine.appending(path: $0) }
    }

    /// Moves the store and its `-wal`/`-shm` into a new folder of `quarantine`.
    private static func moveToQuarantine(_ storeURL: URL, quarantine: URL) throws -> URL {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss"
        var target = quarantine.appending(path: "\(formatter.string(from: Date()))-\(storeURL.lastPathComponent)")
        var n = 1
        while FileManager.default.fileExists(atPath: target.path) {
            n += 1
            target = quarantine.appending(
                path: "\(formatter.string(from: Date()))_\(n)-\(storeURL.lastPathComponent)")
        }
        do {
            try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
            for suffix in ["", "-wal", "-shm"] {
                let source = URL(fileURLWithPath: storeURL.path + suffix)
                guard FileManager.default.fileExists(atPath: source.path) else { continue }
                try FileManager.default.moveItem(at: source, to: target.appending(path: source.lastPathComponent))
            }
        } catch {
            throw PersistenceError(
                .io, "The store \(storeURL.path) is unusable and could not be moved to \(target.path): \(error)",
                cause: error)
        }
        return target
    }

    /// Runs the store's full integrity check and returns what it found, one finding a line;
    /// empty when the store is sound. On SQLite it is `PRAGMA integrity_check` over the whole
    /// store — every page, every index against its table. On PostgreSQL, whose server keeps
    /// its own pages, it checks that the store is the one this version makes (see
    /// `PersistencePostgreSQL`'s `PersistentContainer.open(url:schema:options:)`). Linear in
    /// the store's size: it is what an open no longer does (``Options/checksIntegrityOnOpen``).
    /// Changes and moves nothing; works on a read-only store too.
    ///
    /// - Throws: ``PersistenceError`` with code `io` when the store cannot be read at all
    ///   (busy, closed, permissions); damage is reported, not thrown.
    public func checkIntegrity() throws -> [String] {
        try core.store.checkIntegrity()
    }

    /// The counts of the tally `name` that `entity` declares (``ManagedObject/tallies``), by
    /// key, as the store last committed them: one lookup per key, whatever the number of
    /// rows. Unsaved changes of contexts are not in them. Empty when no row counts.
    public func tally<T: ManagedObject>(_ name: String, of entity: T.Type) throws -> [TallyCount] {
        try core.store.tally(entity: T.entityDescription, name: name)
    }

    /// Counts every ``Tally`` again from the rows — SQL aggregates, in the store's own
    /// memory and temporary files, linear in the rows — and returns the counts that did not
    /// match; with `fix` (on a store opened for writing), replaces them in one transaction.
    public func recountTallies(fix: Bool = true) throws -> [TallyDiscrepancy] {
        try core.store.recountTallies(fix: fix)
    }

    /// Compares every ``SearchIndex`` with the rows it indexes — that it is the one declared,
    /// that each row's entry holds what the row holds now and that no row lacks one (a walk
    /// by ID: memory stays flat), and that the index itself reads back whole — and returns
    /// what was wrong; with `fix` (on a store opened for writing), makes a wrong index again
    /// from the rows, in one transaction.
    public func checkSearchIndex(fix: Bool = true) throws -> [SearchIndexDiscrepancy] {
        try core.store.checkSearchIndex(fix: fix)
    }

    /// A new context on the store with its own queue, for work off the view context.
    public func newBackgroundContext(name: String? = nil) -> ManagedObjectContext {
        ManagedObjectContext(core: core, parent: nil, name: name ?? "background")
    }

    /// Runs `body` on a new background context, on that context's queue.
    /// The context is lent to `body` and must not escape it.
    public func performBackgroundTask<T: Sendable>(_ body: @escaping (ManagedObjectContext) throws -> T) async throws
        -> T
    {
        let context = newBackgroundContext()
        let box = UncheckedBox(context)
        return try await context.perform { try body(box.value) }
    }

    /// A stream of the notifications of every save to the store (and of
    /// batch operations), from any context of this container. The stream
    /// buffers without limit: iterate it, or drop it.
    public func saveNotifications() -> AsyncStream<SaveNotification> {
        core.subscribe()
    }

    /// A stream of the announcements of committed saves (``SaveEffects/announce(_:payload:)``)
    /// of every container on the store — this one, other processes', other hosts' — and of
    /// the re-read marker (``Announcement/reread``) when announcements may have been missed.
    /// The stream buffers without limit: iterate it, or drop it. It ends when the container
    /// closes.
    ///
    /// Every announcement of a save that commits after this returns is delivered, at most
    /// once, after its commit — or, if the store lost the means to hear it, a re-read marker
    /// follows once it has them again: a receiver that re-reads the store then misses
    /// nothing. Announcements of saves that committed before it returned are not delivered.
    ///
    /// - SQLite: another process's (or container's) commit — any commit, announcing or
    ///   not — wakes the stream with the re-read marker, through inotify on the store's
    ///   `-wal`; this container's own announcements arrive as sent. Where the `-wal` cannot
    ///   be watched (not Linux, no inotify instance left), or the watch fails later (its
    ///   `poll(2)` fails: logged, and the interruption marker delivered), only this
    ///   container's own arrive: poll as well. A commit whose `-wal` write is seen well before the commit is visible
    ///   (a disk that takes more than half a second to sync) can go unannounced: keep a slow
    ///   poll as the fallback.
    /// - PostgreSQL: `LISTEN` on a connection of the container's own (opened by the first
    ///   call, `application_name` `persistence listen SCHEMA`), on the channel `persistence_`
    ///   followed by 8 hex digits of the schema's name. When that connection is lost, it is
    ///   made again (after 50 ms, then up to a second apart while the server is away), and the
    ///   re-read marker is delivered once it listens again. Connection poolers in transaction
    ///   mode (pgbouncer) break `LISTEN`: connect directly or in session mode.
    ///
    /// While the store cannot hear other containers' announcements, the stream says so: the
    /// interruption marker (``Announcement/interruption``) comes first, and the re-read marker
    /// ends the interruption — announcements are delivered again from then on. A stream asked
    /// for during an interruption begins with the interruption marker. A receiver that relies
    /// on announcements polls the store only in between:
    ///
    /// ```swift
    /// for await announcement in container.announcements() {
    ///     if announcement.isInterruption { startPolling() }   // the LISTEN connection is lost
    ///     else if announcement.isReread { stopPolling(); lookAtTheStore() }
    ///     else { handle(announcement) }
    /// }
    /// ```
    ///
    /// - SQLite: interrupted from the start, for good, where the `-wal` cannot be watched;
    ///   from the moment it fails, for good, when its watch fails.
    /// - PostgreSQL: interrupted when the `LISTEN` connection is lost (or its first attempt
    ///   fails) until it listens again.
    public func announcements() -> AsyncStream<Announcement> {
        core.subscribeAnnouncements()
    }

    /// Called with the error and the context whenever a save fails (the
    /// seeds' `handleSaveError:`), before the error is thrown to the caller.
    public var saveErrorHandler: (@Sendable (any Error, ManagedObjectContext) -> Void)? {
        get { core.hooks.withLock { $0.saveError } }
        set { core.hooks.withLock { $0.saveError = newValue } }
    }

    /// Called on a root context after each of its successful saves (the
    /// seeds' `cleanUpOldObjects:`). If it leaves changes, the context saves
    /// them at once (without calling it again).
    public var postSaveCleanUp: (@Sendable (ManagedObjectContext) throws -> Void)? {
        get { core.hooks.withLock { $0.cleanUp } }
        set { core.hooks.withLock { $0.cleanUp = newValue } }
    }

    /// Makes the next store commit fail with `error` after all its statements
    /// ran and before `COMMIT`, so nothing is written. For testing failure
    /// paths (an I/O error at commit): not part of the API a program uses
    /// (`@_spi(Testing) import Persistence` reaches it).
    @_spi(Testing) public func failNextCommit(with error: any Error & Sendable) {
        core.store.failNextCommit(with: error)
    }

    /// Whether another process committed to the store since the last call
    /// (cheap: `PRAGMA data_version`).
    public func storeChangedExternally() throws -> Bool {
        let token = try core.store.externalChangeToken()
        return core.lastExternalToken.withLock { last in
            defer { last = token }
            return last != nil && last != token
        }
    }

    /// Gives back unused reserved IDs and closes the store. The container
    /// must not be used afterwards.
    public func close() {
        core.ids.releaseAll(to: core.store)
        core.store.close()
        core.finish()
    }
}

/// What every context of a container shares.
final class ContainerCore: Sendable {
    let store: any PersistentStore
    let schema: Schema
    let logger: Logger
    let ids: IDAllocator
    let hooks = Locked<Hooks>(Hooks())
    let lastExternalToken = Locked<Int64?>(nil)
    private let subscribers = Locked<[UUID: AsyncStream<SaveNotification>.Continuation]>([:])
    private let announcementSubscribers = Locked(AnnouncementSubscribers())
    /// Held while an announcement is delivered, and while a stream is added: every stream
    /// sees the announcements in the order the store sent them. Not the lock of
    /// ``announcementSubscribers``, which a stream's end takes: the end of a stream can come
    /// from its task's cancellation, under the task's own lock, which a delivery to that task
    /// waits for (with one lock for both, the two waited for each other).
    private let announcementDelivery = NSLock()
    /// Held while the store's announcements start (once): a second caller waits for them.
    private let announcementsStart = NSLock()
    private let announcementsStarted = Locked(false)
    /// Whether the container has closed: a stream asked for after ends at once.
    private let isFinished = Locked(false)
    private let contexts = Locked<[WeakContextBox]>([])

    /// The streams of ``subscribeAnnouncements()``, and whether the store's announcements
    /// are interrupted (an interruption marker, not yet followed by a re-read marker): a
    /// stream asked for meanwhile begins with the interruption marker.
    struct AnnouncementSubscribers {
        var continuations: [UUID: AsyncStream<Announcement>.Continuation] = [:]
        var isInterrupted = false
    }

    struct Hooks {
        var saveError: (@Sendable (any Error, ManagedObjectContext) -> Void)?
        var cleanUp: (@Sendable (ManagedObjectContext) throws -> Void)?
    }

    init(store: any PersistentStore, schema: Schema, logger: Logger) {
        self.store = store
        self.schema = schema
        self.logger = logger
        ids = IDAllocator(store: store, schema: schema)
    }

    var saveErrorHandler: (@Sendable (any Error, ManagedObjectContext) -> Void)? { hooks.withLock { $0.saveError } }
    var postSaveCleanUp: (@Sendable (ManagedObjectContext) throws -> Void)? { hooks.withLock { $0.cleanUp } }

    func register(_ context: ManagedObjectContext) {
        let box = WeakContextBox(context)
        contexts.withLock { list in
            list.removeAll { $0.isGone }
            list.append(box)
        }
    }

    func subscribe() -> AsyncStream<SaveNotification> {
        let (stream, continuation) = AsyncStream.makeStream(of: SaveNotification.self)
        let key = UUID()
        subscribers.withLock { $0[key] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: key) }
        }
        return stream
    }

    func subscribeAnnouncements() -> AsyncStream<Announcement> {
        let (stream, continuation) = AsyncStream.makeStream(of: Announcement.self)
        guard !isFinished.withLock({ $0 }) else {
            continuation.finish()
            return stream
        }
        let key = UUID()
        announcementDelivery.lock()
        let isInterrupted = announcementSubscribers.withLock { s in
            s.continuations[key] = continuation
            return s.isInterrupted
        }
        if isInterrupted { continuation.yield(.interruption) }
        announcementDelivery.unlock()
        continuation.onTermination = { [weak self] _ in
            _ = self?.announcementSubscribers.withLock { $0.continuations.removeValue(forKey: key) }
        }
        announcementsStart.lock()
        defer { announcementsStart.unlock() }
        if !announcementsStarted.withLock({ $0 }) {
            store.startAnnouncements { [weak self] announcement in self?.announce(announcement) }
            announcementsStarted.withLock { $0 = true }
        }
        return stream
    }

    /// Delivers an announcement to every stream of ``subscribeAnnouncements()``; an
    /// interruption marker only when announcements were not interrupted already. Delivered
    /// under the lock that a new stream's subscription takes (``announcementDelivery``): every
    /// stream sees the markers in the order the store sent them, the interruption that came
    /// before it included.
    private func announce(_ announcement: Announcement) {
        announcementDelivery.lock()
        defer { announcementDelivery.unlock() }
        let continuations = announcementSubscribers.withLock { s -> [AsyncStream<Announcement>.Continuation] in
            if announcement.isInterruption {
                guard !s.isInterrupted else { return [] }
                s.isInterrupted = true
            } else if announcement.isReread {
                s.isInterrupted = false
            }
            return Array(s.continuations.values)
        }
        for continuation in continuations { continuation.yield(announcement) }
    }

    /// Publishes a committed save and merges it into auto-merging contexts.
    func broadcast(_ note: SaveNotification, from source: ManagedObjectContext?) {
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield(note) }
        let targets = contexts.withLock { $0 }
        for box in targets { box.mergeIfWanted(note, except: source) }
    }

    func finish() {
        isFinished.withLock { $0 = true }
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.finish() }
        for continuation in announcementSubscribers.withLock({ Array($0.continuations.values) }) {
            continuation.finish()
        }
    }
}

/// A weak reference to a root context, safe to keep in shared state: the
/// context is only ever touched on its own queue.
private final class WeakContextBox: @unchecked Sendable {
    private weak var context: ManagedObjectContext?
    init(_ context: ManagedObjectContext) { self.context = context }
    var isGone: Bool { context == nil }

    func mergeIfWanted(_ note: SaveNotification, except source: ManagedObjectContext?) {
        guard let context, context !== source else { return }
        let box = UncheckedBox(context)
        context.async {
            let context = box.value
            if context.automaticallyMergesChangesFromParent { context.mergeChanges(from: note) }
        }
    }
}

/// Reserves row IDs from the store in growing blocks (1, 4, 16 … 16,384 per
/// entity), so that a short-lived process leaves no gaps and a bulk insert
/// does few reservations.
final class IDAllocator: Sendable {
    private struct Block {
        var next: Int64
        var last: Int64
        var size: Int
    }
    private let store: any PersistentStore
    private let schema: Schema
    private let blocks = Locked<[String: Block]>([:])
    private let provisionalIDs = Atomic<Int64>(0)

    init(store: any PersistentStore, schema: Schema) {
        self.store = store
        self.schema = schema
    }

    func next(for entity: EntityDescription) throws -> Int64 {
        try blocks.withLock { blocks in
            if var block = blocks[entity.name], block.next <= block.last {
                defer {
                    block.next += 1
                    blocks[entity.name] = block
                }
                return block.next
            }
            let size = min((blocks[entity.name]?.size ?? 0) * 4, 16_384)
            let count = max(size, 1)
            let range = try store.reserveIDs(entity: entity, count: count)
            blocks[entity.name] = Block(next: range.lowerBound + 1, last: range.upperBound, size: count)
            return range.lowerBound
        }
    }

    /// A negative, process-unique ID for an object whose ID could not be
    /// reserved; such an object cannot be saved.
    func provisional() -> Int64 {
        -provisionalIDs.wrappingAdd(1, ordering: .relaxed).newValue
    }

    func releaseAll(to store: any PersistentStore) {
        let all = blocks.withLock { blocks in
            defer { blocks = [:] }
            return blocks
        }
        for (name, block) in all where block.next <= block.last {
            if let entity = schema.entity(named: name) {
                store.releaseIDs(entity: entity, unused: block.next...block.last)
            }
        }
    }
}
