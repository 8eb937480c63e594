import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Points where a test can make the process die (`ASSETCAT_FAULT=name`),
/// to prove that a crash there loses nothing.
enum FaultPoint: String {
    /// Content is in staging (and about to be linked), nothing committed.
    case afterStage = "after-stage"
    /// A deletion committed, its files not removed yet.
    case afterCommit = "after-commit"
    /// A removal plan is about to unlink its file, inside the sweep's transaction.
    case beforeUnlink = "before-unlink"
    /// An import's content is journaled, not linked into objects/ yet.
    case afterImportJournal = "after-import-journal"
    /// An import's content is linked into objects/, its records not committed.
    case beforeImportCommit = "before-import-commit"
    /// An import's records committed, its journal not deleted yet.
    case afterImportCommit = "after-import-commit"
    /// Not a crash: an import's records fail to commit (``isActive(_:)``), its content
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

    /// The points chosen: `ASSETCAT_FAULT=name` (or several, `name,name`).
    private static let active = Set(
        (ProcessInfo.processInfo.environment["ASSETCAT_FAULT"] ?? "").split(separator: ",").map(String.init))
    /// With `ASSETCAT_FAULT_AT=n`, a crash point makes the process die the n-th time it is
    /// reached (the first time by default): a test can kill a long command at many points.
    private static let reachesLeft = Atomic<Int>(
        ProcessInfo.processInfo.environment["ASSETCAT_FAULT_AT"].flatMap { Int($0) } ?? 1)

    /// With `ASSETCAT_FAULT_PAUSE=name` and `ASSETCAT_FAULT_PAUSE_FILE=path`, the process
    /// stops at that point: it creates `path.reached`, then waits until `path` exists (five
    /// minutes at most), so that a test can act at that instant (another process's removal)
    /// and then let the command go on. With several points (`name,name`), each has files
    /// of its own: `path.name.reached` and `path.name`.
    private static let pauses: [String: String] = {
        let environment = ProcessInfo.processInfo.environment
        guard let points = environment["ASSETCAT_FAULT_PAUSE"], let file = environment["ASSETCAT_FAULT_PAUSE_FILE"]
        else { return [:] }
        let names = points.split(separator: ",").map(String.init)
        return Dictionary(names.map { ($0, names.count == 1 ? file : file + "." + $0) }) { first, _ in first }
    }()

    /// Whether a test chose `point` (for the points that are not a crash).
    static func isActive(_ point: FaultPoint) -> Bool { active.contains(point.rawValue) }

    static func reach(_ point: FaultPoint) {
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
