import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Points where a test can make the process die, to prove that a crash there loses nothing,
/// or pause it, or slow it down: chosen for one open catalog by ``FaultPoints``.
enum FaultPoint: String {
    /// Content is in staging (and about to be linked), nothing committed.
    case afterStage = "after-stage"
    /// A deletion committed, its files not removed yet.
    case afterCommit = "after-commit"
    /// A removal plan is about to unlink its file, inside the sweep's transaction.
    case beforeUnlink = "before-unlink"
    /// A thumbnail job stored its file and set it on the asset it read, before the save that
    /// records it.
    case beforeThumbnailCommit = "before-thumbnail-commit"
    /// An import's content is journaled, not linked into objects/ yet.
    case afterImportJournal = "after-import-journal"
    /// An import's content is linked into objects/, its records not committed.
    case beforeImportCommit = "before-import-commit"
    /// An import's records committed, its journal not deleted yet.
    case afterImportCommit = "after-import-commit"
    /// Not a crash: an import's records fail to commit (``FaultPoints/isActive(_:)``), its content
    /// linked into objects/.
    case failImportCommit = "fail-import-commit"
    /// An add's batch has its content journaled, none of it linked into objects/ yet.
    case afterAddJournal = "after-add-journal"
    /// An add's batch has its content linked into objects/, its records not committed.
    case beforeAddCommit = "before-add-commit"
    /// Where ``JobQueue/runUntilIdle(jobs:progress:)`` starts (an add's jobs, after its files).
    case beforeRunningJobs = "before-running-jobs"
    /// An export has created the missing folders above its bundle's path, nothing else yet.
    case afterExportFolders = "after-export-folders"
    /// An export has written a payload file into its bundle, not published yet.
    case afterExportPayload = "after-export-payload"
    /// An export has written its whole bundle, not published yet.
    case beforeExportPublish = "before-export-publish"
    /// Not a crash: an export writes its archive to a hidden named file beside the target,
    /// as on a file system without unnamed files (`O_TMPFILE`).
    case namedExportFile = "named-export-file"
    /// Not a crash: each file added takes 20 ms longer, so a test can
    /// interrupt an add while it runs.
    case slowIngest = "slow-ingest"
    /// Not a crash: jobs take 20 ms longer per chunk they read, so a test
    /// can act while one runs.
    case slowJobs = "slow-jobs"

    /// A group of jobs' results committed, the runs not counted in their summaries yet.
    case beforeCountingResults = "before-counting-results"
    /// Not a crash: an export takes 20 ms longer per payload file, so a test can interrupt it.
    case slowExport = "slow-export"
    /// A save's content check passed (``ContentStore/requireObject(_:for:pin:)``, under the
    /// shared content lock), its transaction not committed: where a test pauses an add
    /// while another process sweeps.
    case afterContentCheck = "after-content-check"
    /// Not a crash: saves do not take the content lock (``CatalogRuntime/contentLock``), so
    /// a test can show the removal it keeps from racing an add.
    case skipContentLock = "skip-content-lock"
    /// `migrate-store` has copied every row into the new store, not committed yet.
    case beforeStoreCommit = "before-store-commit"
    /// `migrate-store`'s copy committed; catalog.json does not name the new store yet.
    case afterStoreCommit = "after-store-commit"
    /// `migrate-store` to SQLite: the copy is `catalog.sqlite`; catalog.json still names the store.
    /// To PostgreSQL: the old `catalog.sqlite` is moved aside, the stub not written yet.
    case afterStoreMoved = "after-store-moved"
    /// `migrate-store`: catalog.json names the new store; the old one is not let go of yet.
    case afterStoreSwitch = "after-store-switch"
}

/// The fault points (``FaultPoint``) a test chose for one open catalog
/// (``CatalogTesting/faults``): where its process dies (`_exit(86)`, as `SIGKILL` would: no
/// handler, no clean-up), where it pauses, and what it slows down. A catalog opened without
/// them reaches every point for nothing.
///
/// The shipped `assetcat` never makes them: a debug build of it reads them from its
/// environment, for the crash tests and `make demo` (see `TestSwitches.swift` there).
@_spi(Testing) public final class FaultPoints: Sendable {
    /// The points chosen, by name (`after-commit`): a crash point makes the process die, the
    /// others (`slow-jobs`, `skip-content-lock` …) change what it does.
    private let active: Set<String>
    /// How many more times a crash point is reached before the process dies there.
    private let reachesLeft: Atomic<Int>
    /// The points where the process pauses, each with its barrier file.
    private let pauses: [String: String]

    /// None chosen: every point is passed.
    public convenience init() { self.init(names: []) }

    /// - Parameters:
    ///   - names: The points chosen, by name (`after-commit`, `slow-jobs`).
    ///   - reachingAt: A crash point makes the process die the n-th time it is reached (the
    ///     first by default): a test can kill a long command at many points.
    ///   - pauses: Points where the process stops, each with a path: it creates
    ///     `path.reached`, then waits until `path` exists (five minutes at most), so that a
    ///     test can act at that instant (another process's removal) and then let the command
    ///     go on.
    public init(names: Set<String>, reachingAt: Int = 1, pauses: [String: String] = [:]) {
        active = names
        reachesLeft = Atomic(reachingAt)
        self.pauses = pauses
    }

    /// Whether a test chose `point` (for the points that are not a crash).
    func isActive(_ point: FaultPoint) -> Bool { active.contains(point.rawValue) }

    /// Passes `point`: pauses there if a test asked, dies there the chosen time, sleeps 20 ms
    /// at a slow point; else nothing.
    func reach(_ point: FaultPoint) {
        if let file = pauses[point.rawValue] {
            let reached = open(file + ".reached", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            if reached >= 0 { close(reached) }
            for _ in 0..<30_000 where access(file, F_OK) != 0 { usleep(10_000) }
        }
        guard isActive(point) else { return }
        if point == .slowIngest || point == .slowJobs || point == .slowExport {
            usleep(20_000)
        } else if reachesLeft.subtract(1, ordering: .relaxed).newValue == 0 {
            _exit(86)
        }
    }
}
