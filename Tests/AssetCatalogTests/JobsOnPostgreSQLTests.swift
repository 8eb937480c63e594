import AssetCatalogTestSupport
import Dispatch
import Foundation
import Locking
import Persistence
import PostgresNIO
import Synchronization
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog
@testable import PersistencePostgreSQL

/// A save parked inside its transaction: it has written everything and waits, before its
/// commit, until the test lets it go.
final class SaveParking: Sendable {
    private let parked = Locked(false)
    private let release = DispatchSemaphore(value: 0)

    /// Whether a save is parked (or was, and has been let go).
    var isParked: Bool { parked.withLock { $0 } }

    /// Called by the save's `beforeCommit`: waits until ``letGo()``.
    func park() {
        parked.withLock { $0 = true }
        release.wait()
    }

    func letGo() { release.signal() }
}

/// A row whose save parks (``SaveParking``) before its commit. `late` registers the parking
/// after the `beforeCommit` checks of the save's other objects (an observed change in its
/// first `willSave` pass brings it back for a second one): the save parks after those checks.
final class ParkedSaveRow: ManagedObject {
    @Attribute var passes = 0
    /// Not persistent: where the save parks, and when.
    var parking: SaveParking?
    var late = false
    private var registered = false

    override func willSave() {
        guard let parking, !registered, let effects = saveEffects else { return }
        if late && passes == 0 {
            passes += 1  // observed: willSave runs again, in the next pass
            return
        }
        registered = true
        effects.beforeCommit { _ in parking.park() }
    }
}

/// A processor whose one run waits until the test lets it end, then returns `output`.
final class HeldJob: JobProcessor {
    let output: JobOutput
    private let started = Locked(false)
    /// Finished by ``letEnd()``: the run waits for it, not on a clock.
    private let end = AsyncStream<Never>.makeStream()
    init(_ output: JobOutput = JobOutput()) { self.output = output }

    var hasStarted: Bool { started.withLock { $0 } }
    func letEnd() { end.continuation.finish() }

    func run(_ job: JobContext) async throws -> JobOutput {
        started.withLock { $0 = true }
        for await _ in end.stream {}
        try Task.checkCancellation()  // a cancelled run ends the stream's wait too
        return output
    }
}

/// A processor that does nothing but note which job it ran.
final class NotedJob: JobProcessor {
    let ran = Locked<[Int64]>([])
    func run(_ job: JobContext) async throws -> JobOutput {
        ran.withLock { $0.append(job.jobID) }
        return JobOutput()
    }
}

/// A processor that runs until it is cancelled, and notes that it saw its cancellation.
final class EndlessJob: JobProcessor {
    private let started = Locked(false)
    private let cancelled = Locked(false)
    var hasStarted: Bool { started.withLock { $0 } }
    var sawCancellation: Bool { cancelled.withLock { $0 } }

    func run(_ job: JobContext) async throws -> JobOutput {
        started.withLock { $0 = true }
        do {
            while true { try await Task.sleep(for: .milliseconds(5)) }
        } catch {
            cancelled.withLock { $0 = true }
            throw error
        }
    }
}

/// Jobs of a catalog in PostgreSQL, with the catalog opened twice in this process (as two
/// processes of one host open it): each opening has its own connections, so a save of one
/// runs while a transaction of the other is open — what another host's save does.
///
/// One test at a time: a parked save, and a save waiting for it, each hold a thread of the
/// concurrency pool (the queue commits results on it), which a test running beside it may need.
@Suite(.serialized) struct JobsOnPostgreSQLTests {
    /// A catalog made in a new schema of the test server, and what opens it again.
    struct SharedCatalog {
        let t: TestCatalog
        let location: CatalogStoreLocation
        let identity: CatalogIdentity
        let schema: String
        let url: URL

        /// Makes the catalog (cancels the test when there is no server); returns it open.
        /// `reconnectTimeout` is the store URL's `reconnect_timeout` (0: a host cut off from
        /// the server, whose lost connection is not made again).
        static func make(
            entities: [ManagedObject.Type] = [], reconnectTimeout: Int? = nil,
            testing: CatalogTesting = CatalogTesting()
        ) throws -> (SharedCatalog, Catalog) {
            var components = try PostgreSQLTestServer.newSchema()
            if let reconnectTimeout {
                components.queryItems =
                    (components.queryItems ?? []) + [
                        URLQueryItem(name: "reconnect_timeout", value: "\(reconnectTimeout)")
                    ]
            }
            let url = components.url!
            let location = try CatalogStoreLocation(components.string!)
            let identity = CatalogIdentity(
                id: UUID(), created: Date(), store: try location.withoutPassword.redacted.absoluteString)
            let shared = SharedCatalog(
                t: try TestCatalog(), location: location, identity: identity, schema: location.schema, url: url)
            var options = Catalog.OpenOptions(createIfMissing: true, entities: entities)
            options.testing = testing
            let catalog = try Catalog(
                root: shared.t.root, options: options, creating: true, store: (location, identity))
            return (shared, catalog)
        }

        /// Another opening of the catalog, with connections of its own.
        func open(entities: [ManagedObject.Type] = []) throws -> Catalog {
            try Catalog(
                root: t.root, options: .init(entities: entities), creating: false, store: (location, identity))
        }

        /// A connection to the server outside the catalog, to see what its connections wait for.
        func admin() throws -> PostgreSQLConnection {
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)!
            components.queryItems = components.queryItems?.filter { $0.name != "schema" }
            return try PostgreSQLConnection(
                try PostgreSQLLocation(components.url!), logger: Catalog.OpenOptions().logger)
        }

        /// Whether a connection that has this catalog's `Asset` table in use waits for a lock
        /// (a row lock another transaction holds on an asset).
        func someoneWaitsOnAnAsset(_ admin: PostgreSQLConnection) throws -> Bool {
            try admin.run(
                """
                SELECT 1 FROM pg_stat_activity a WHERE a.wait_event_type = 'Lock' \
                AND a.pid IN (SELECT l.pid FROM pg_locks l WHERE l.relation = to_regclass($1))
                """, [.text("\"\(schema)\".\"Asset\"")]
            ).rows.count > 0
        }
    }

    /// A referenced asset (its deletion removes no file) of kind `data` (an add queues no job for it).
    static func asset(_ shared: SharedCatalog, in catalog: Catalog) async throws -> AssetRecord {
        let file = try shared.t.file("a.dat", "the asset")
        return try #require(try await catalog.add([file], options: AddOptions(mode: .reference)).added.first)
    }

    /// Deletes `asset` in a context of `catalog`, in a save that parks before its commit: its
    /// `DELETE` has run, and holds the asset's row until `parking` lets it go.
    static func parkedDeletion(
        of asset: AssetRecord, in catalog: Catalog, parking: SaveParking
    ) -> Task<Void, any Error> {
        Task {
            try await offThePool {
                let context = catalog.newContext()
                try context.performAndWait {
                    context.delete(try context.existingObject(with: asset.objectID))
                    let row = ParkedSaveRow(context: context)
                    row.parking = parking
                    try context.save()
                }
            }
        }
    }

    /// A job's result against a deletion of its asset committing at the same time on another
    /// connection (another host's): the deletion has run its `DELETE` and is parked before
    /// its commit when the result's transaction checks the asset. The check waits for the
    /// deletion, sees the asset gone, and the job ends cancelled: no result lands. Before
    /// the check locked the asset, it counted the asset as still there and the job
    /// committed `succeeded` — and the deletion, committing after, found no unfinished job
    /// to cancel.
    @Test func aResultWaitsForADeletionUnderWayAndIsDropped() async throws {
        let (shared, a) = try SharedCatalog.make(entities: [ParkedSaveRow.self])
        defer { a.close() }
        let b = try shared.open(entities: [ParkedSaveRow.self])
        defer { b.close() }
        let asset = try await Self.asset(shared, in: a)
        let processor = HeldJob()  // its result changes nothing of the asset: only the job row is written
        a.jobs.register(processor, as: "held")
        let jobID = try a.jobs.submit("held", for: asset.id)
        let run = Task { try await a.jobs.runUntilIdle() }
        #expect(try await waitUntil { processor.hasStarted })

        let parking = SaveParking()
        let deletion = Self.parkedDeletion(of: asset, in: b, parking: parking)
        #expect(try await waitUntil { parking.isParked })
        processor.letEnd()
        let admin = try shared.admin()
        defer { admin.close() }
        // Either the result's transaction waits for the deletion, or (as before the lock) it
        // committed without waiting.
        var resultWaited = false
        #expect(
            try await waitUntil {
                resultWaited = try shared.someoneWaitsOnAnAsset(admin)
                return try resultWaited || a.jobs.job(id: jobID)?.state != .running
            })
        parking.letGo()
        try await deletion.value
        _ = try await run.value
        #expect(try await waitUntil { a.jobs.runs.tasksInFlight == 0 })

        #expect(resultWaited, "the result did not wait for the deletion under way")
        let job = try #require(try a.jobs.job(id: jobID))
        #expect(job.state == .cancelled, "the job ended \(job.state) for a deleted asset")
        #expect(job.error == "its asset was deleted")
        #expect(try a.assets().isEmpty)
    }

    /// The other order: the result's transaction has checked its asset and is parked before
    /// its commit when another connection deletes the asset. The deletion waits for the
    /// result's commit: the job ends `succeeded`, its result committed before the deletion
    /// (as it would on one host). Before the check locked the asset, the deletion committed
    /// first, and then the result — `succeeded` for an asset already deleted.
    @Test func aDeletionWaitsForAResultThatCheckedItsAsset() async throws {
        let (shared, a) = try SharedCatalog.make(entities: [ParkedSaveRow.self])
        defer { a.close() }
        let b = try shared.open(entities: [ParkedSaveRow.self])
        defer { b.close() }
        // Opened before anything is parked: an open makes sure of the schema's indexes, which
        // waits for every transaction that has written to their tables.
        let reader = try shared.open(entities: [ParkedSaveRow.self])
        defer { reader.close() }
        let asset = try await Self.asset(shared, in: a)
        let parking = SaveParking()
        var output = JobOutput()
        output.apply = { _, context in
            // The result's save parks after its check of the asset.
            let row = ParkedSaveRow(context: context)
            row.parking = parking
            row.late = true
        }
        let processor = HeldJob(output)
        a.jobs.register(processor, as: "held")
        let jobID = try a.jobs.submit("held", for: asset.id)
        let run = Task { try await a.jobs.runUntilIdle() }
        #expect(try await waitUntil { processor.hasStarted })
        processor.letEnd()
        #expect(try await waitUntil { parking.isParked })

        let deletion = Task { try await offThePool { try b.remove([asset.id]) } }
        let admin = try shared.admin()
        defer { admin.close() }
        // Either the deletion waits for the result's commit, or (as before the lock) it
        // committed meanwhile.
        var deletionWaited = false
        #expect(
            try await waitUntil {
                deletionWaited = try shared.someoneWaitsOnAnAsset(admin)
                return try deletionWaited || reader.assets().isEmpty
            })
        parking.letGo()
        _ = try await deletion.value
        _ = try await run.value
        #expect(try await waitUntil { a.jobs.runs.tasksInFlight == 0 })

        #expect(deletionWaited, "the deletion committed while the result that had checked its asset was under way")
        let job = try #require(try a.jobs.job(id: jobID))
        #expect(job.state == .succeeded, "the job ended \(job.state) (\(job.error ?? ""))")
        #expect(try a.assets().isEmpty)
    }

    /// A submit against a deletion under way on another connection: the submit's check waits
    /// for the deletion and refuses the asset, queueing nothing. Before the check locked the
    /// asset, the job was queued for an asset whose deletion was about to commit.
    @Test func aSubmitWaitsForADeletionUnderWayAndQueuesNothing() async throws {
        let (shared, a) = try SharedCatalog.make(entities: [ParkedSaveRow.self])
        defer { a.close() }
        let b = try shared.open(entities: [ParkedSaveRow.self])
        defer { b.close() }
        let asset = try await Self.asset(shared, in: a)
        a.jobs.register(HeldJob(), as: "held")

        let parking = SaveParking()
        let deletion = Self.parkedDeletion(of: asset, in: b, parking: parking)
        #expect(try await waitUntil { parking.isParked })
        let submit = Task { try await offThePool { try a.jobs.submit("held", for: asset.id) } }
        let admin = try shared.admin()
        defer { admin.close() }
        var submitWaited = false
        #expect(
            try await waitUntil {
                submitWaited = try shared.someoneWaitsOnAnAsset(admin)
                return try submitWaited || !a.jobs.list(asset: asset.id).isEmpty
            })
        parking.letGo()
        try await deletion.value
        let outcome = await submit.result

        #expect(submitWaited, "the submit did not wait for the deletion under way")
        switch outcome {
        case .success(let id):
            Issue.record("the submit queued job \(id) for an asset whose deletion was under way")
        case .failure(let error):
            #expect((error as? CatalogError)?.message == "No asset with ID \(asset.id) (no job was queued)")
        }
        #expect(try a.jobs.list(asset: asset.id).isEmpty)
    }

    /// Four workers (four openings of the catalog, each with its own connections, as four
    /// processes have) work 2,000 no-op jobs at once: each job runs once, all succeed, and no
    /// claim fails — each claim takes rows no other claim holds (`FOR UPDATE SKIP LOCKED`),
    /// where workers that fetched the same first rows and then saved them conflicted, and
    /// all but one of them claimed nothing.
    @Test func fourWorkersClaimEveryJobOnceWithoutConflicts() async throws {
        let (shared, first) = try SharedCatalog.make()
        var workers = [first]
        defer { for worker in workers { worker.close() } }
        for _ in 1..<4 { workers.append(try shared.open()) }
        for n in 0..<100 { _ = try shared.t.file("files/a\(n).dat", "asset \(n)") }
        let added = try await first.add(
            [shared.t.sources.appending(path: "files").path], options: AddOptions(mode: .reference, recursive: true))
        #expect(added.added.count == 100)
        let kinds = (0..<20).map { "noop-\($0)" }
        let processor = NotedJob()
        for worker in workers { for kind in kinds { worker.jobs.register(processor, as: kind) } }
        let jobIDs = try first.jobs.submit(kinds, for: added.added.map(\.id))
        #expect(jobIDs.count == 2_000)

        let all = workers
        try await withThrowingTaskGroup(of: JobRunSummary.self) { group in
            for worker in all { group.addTask { try await worker.jobs.runUntilIdle() } }
            try await group.waitForAll()
        }
        let ran = processor.ran.withLock { $0 }
        #expect(ran.count == jobIDs.count, "\(ran.count) runs of \(jobIDs.count) jobs")
        #expect(Set(ran) == Set(jobIDs))
        #expect(try first.jobs.list([.succeeded]).count == jobIDs.count)
        let failed = workers.map(\.jobs.metrics.failedClaims)
        #expect(failed == [0, 0, 0, 0], "claims that failed, by worker: \(failed)")
    }

    /// Another connection's deletion (another host's) of an asset whose job runs here: the
    /// deletion announces the asset as it commits (`NOTIFY`), and the run here stops on
    /// hearing it — the queue's poll of the store is set to an hour, so nothing else can
    /// stop it. The row says why, and no result lands. Before deletions were announced, the
    /// run went on until the next poll (and a PostgreSQL store had no `-wal` to watch).
    @Test func anotherHostsDeletionStopsARunningJobByItsAnnouncement() async throws {
        let (shared, a) = try SharedCatalog.make(testing: Self.pollsHourly)
        defer { a.close() }
        let b = try shared.open()
        defer { b.close() }
        try await Self.deletionElsewhereStopsTheRun(a, b, try await Self.asset(shared, in: a))
    }

    /// The same on SQLite, two openings of one catalog: another connection's commit wakes
    /// the queue (the store's re-read marker), which reads the store and stops the run.
    @Test func anotherProcessesDeletionStopsARunningJobOnSQLite() async throws {
        let t = try TestCatalog()
        let a = try t.create(testing: Self.pollsHourly)
        defer { a.close() }
        let b = try t.open()
        defer { b.close() }
        let file = try t.file("a.dat", "the asset")
        let asset = try #require(try await a.add([file], options: AddOptions(mode: .reference)).added.first)
        try await Self.deletionElsewhereStopsTheRun(a, b, asset)
    }

    /// A queue that polls the store for other processes' commits only hourly.
    static var pollsHourly: CatalogTesting {
        var tuning = JobQueue.Tuning()
        tuning.externalPollInterval = 3_600
        return CatalogTesting(jobs: tuning)
    }

    /// `a` runs an endless job for `asset`, polling the store only hourly (``pollsHourly``); `b`
    /// removes the asset.
    static func deletionElsewhereStopsTheRun(_ a: Catalog, _ b: Catalog, _ asset: AssetRecord) async throws {
        let processor = EndlessJob()
        a.jobs.register(processor, as: "endless")
        let jobID = try a.jobs.submit("endless", for: asset.id)
        a.jobs.start()
        defer { a.jobs.stop() }
        #expect(try await waitUntil { processor.hasStarted })
        _ = try await offThePool { try b.remove([asset.id]) }
        #expect(
            try await waitUntil(atMost: .seconds(120)) { processor.sawCancellation && !a.jobs.runs.isRunningAnything },
            "the run went on after its asset's deletion committed")
        let job = try #require(try a.jobs.job(id: jobID))
        #expect(job.state == .cancelled)
        #expect(job.error == "its asset was deleted")
        #expect(try a.assets().isEmpty)
    }

    /// What a deletion announces: its assets as ranges, and `*` when they would not fit in an
    /// announcement; and what a receiver reads back (nothing it can use from `*` or garbage).
    @Test func aDeletionAnnouncesItsAssetsAsRangesOrAStar() throws {
        let ids = RowIDSet([3..<4, 7..<11, 20..<21])
        #expect(JobQueue.deletionPayload(ids) == "3,7-10,20")
        #expect(JobQueue.deletedAssets(in: "3,7-10,20") == ids)
        var scattered = RowIDSet()
        for n in stride(from: Int64(1), to: 4_000, by: 2) { scattered.insert(n) }
        #expect(JobQueue.deletionPayload(scattered) == "*")
        for payload in ["*", "", "x", "7-", "-7", "9-3", "1,,2", "1-2-3"] {
            #expect(JobQueue.deletedAssets(in: payload) == nil, "\(payload)")
        }
    }
}
