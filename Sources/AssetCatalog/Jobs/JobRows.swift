import Foundation
import Locking
import Logging
import Persistence

/// A ``JobQueue``'s rows in its catalog, as every part of the queue reads and writes them:
/// each change a compare-and-set in a transaction of its own.
final class JobRows: Sendable {
    private let catalogBox = Locked(WeakCatalog())
    let logger: Logger

    struct WeakCatalog: @unchecked Sendable {
        weak var value: Catalog?
    }

    init(logger: Logger) { self.logger = logger }

    /// The catalog, until it is gone.
    var catalog: Catalog? { catalogBox.withLock { $0.value } }

    func attach(_ catalog: Catalog) {
        catalogBox.withLock { $0.value = catalog }
    }

    static func objectID(_ id: Int64) -> ManagedObjectID { ManagedObjectID(entityName: Job.entityName, rowID: id) }

    /// Changes one job row as a compare-and-set: the closure checks the row's
    /// state, and a concurrent change to the row (another process, another
    /// task) makes the save conflict, and the closure run again on the fresh row.
    @discardableResult
    func change(_ jobID: Int64, _ change: @escaping (Job) throws -> Void) throws -> JobRecord {
        guard let catalog else { throw JobQueue.closed }
        return try catalog.storeErrors {
            try catalog.withRetriedContext { context in
                guard let job = try? context.existingObject(with: Self.objectID(jobID), as: Job.self) else {
                    throw CatalogError(.notFound, "No job with ID \(jobID); list jobs with `assetcat jobs`")
                }
                try change(job)
                try context.save()
                return JobRecord(job)
            }
        }
    }

    /// Changes every job matching `predicate`, each as a compare-and-set.
    func update(_ predicate: FetchPredicate<Job>, _ change: @escaping (Job) -> Void) {
        guard let catalog else { return }
        do {
            let ids = try catalog.withContext { try $0.fetchObjectIDs(FetchRequest<Job>(predicate: predicate)) }
            for id in ids { _ = try? self.change(id.rowID, change) }
        } catch {
            logger.warning("could not update jobs: \(error)")
        }
    }

    /// Queues runs again (their attempt not counted), if the rows are still theirs.
    func requeue(_ runs: [Int64: String]) {
        for (jobID, token) in runs {
            _ = try? change(jobID) { job in
                guard job.state == .running, job.owner == token else { return }
                job.state = .queued
                job.owner = nil
                job.attempts = max(0, job.attempts - 1)
            }
        }
    }

    /// Whether the asset of the job `row` is no longer in the store (as `row`'s context reads it).
    static func assetIsGone(of row: Job) throws -> Bool {
        guard let context = row.managedObjectContext else { return false }
        let asset = ManagedObjectID(entityName: Asset.entityName, rowID: row.assetID)
        return try context.count(for: FetchRequest<Asset>(predicate: .objectIDs([asset]))) == 0
    }
}

/// The kinds of job a ``JobQueue`` runs (its processors, and the attempts each allows), and
/// those who follow its jobs' changes (``JobQueue/events()``).
final class JobKinds: Sendable {
    private struct State {
        var processors: [String: any JobProcessor] = [:]
        /// The attempts each registered kind allows.
        var maxAttempts: [String: Int] = [:]
        var subscribers: [UUID: AsyncStream<JobRecord>.Continuation] = [:]
    }
    private let state = Locked(State())

    func register(_ processor: any JobProcessor, as kind: String, maxAttempts: Int) {
        state.withLock {
            $0.processors[kind] = processor
            $0.maxAttempts[kind] = max(1, maxAttempts)
        }
    }

    var processors: [String: any JobProcessor] { state.withLock { $0.processors } }

    /// The attempts of each registered kind.
    var attemptLimits: [String: Int] { state.withLock { $0.maxAttempts } }

    /// The attempts a registered kind allows, else those its row recorded.
    func attemptLimit(_ kind: String, recorded: Int) -> Int {
        state.withLock { $0.maxAttempts[kind] } ?? recorded
    }

    func events() -> AsyncStream<JobRecord> {
        let (stream, continuation) = AsyncStream.makeStream(of: JobRecord.self)
        let key = UUID()
        state.withLock { $0.subscribers[key] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.subscribers[key] = nil } }
        return stream
    }

    /// Reports a job's change: to `progress` (a run's caller), then to every subscriber.
    func publish(_ record: JobRecord, progress: (@Sendable (JobRecord) -> Void)?) {
        progress?(record)
        for continuation in state.withLock({ Array($0.subscribers.values) }) { continuation.yield(record) }
    }
}
