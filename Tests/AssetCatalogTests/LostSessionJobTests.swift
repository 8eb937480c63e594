import AssetCatalogTestSupport
import Foundation
import Persistence
import PostgresNIO
import Synchronization
import TestScratch
import Testing

@testable import AssetCatalog
@testable import PersistencePostgreSQL

/// A processor whose runs wait until the test lets them end, then return `output`; a run
/// cancelled meanwhile ends at once, and is counted.
final class HeldUntilLetGo: JobProcessor {
    let output: JobOutput
    let runs = Mutex(0)
    let cancellations = Mutex(0)
    /// Finished by ``letGo()``: a run waits for it, or for its cancellation.
    private let end = AsyncStream<Never>.makeStream()
    init(_ output: JobOutput) { self.output = output }

    func letGo() { end.continuation.finish() }

    func run(_ job: JobContext) async throws -> JobOutput {
        runs.withLock { $0 += 1 }
        for await _ in end.stream {}
        if Task.isCancelled {
            cancellations.withLock { $0 += 1 }
            throw CancellationError()
        }
        return output
    }
}

/// A host whose session with the store is lost, and then reaped by another host, while
/// it runs a job (a catalog in PostgreSQL; the two hosts are two openings in this process,
/// each with its own connections and session). Run through Scripts/with-postgres.sh.
@Suite(.serialized) struct LostSessionJobTests {
    /// Host `a` runs a job; its session's connection ends (as when the server stops hearing
    /// from a host). `a` stops the run at once, and writes nothing of it; host `b` opens the
    /// catalog, reaps `a`'s session (the job is queued again) and runs the job to success —
    /// once. Before, `a`'s run went on, beside `b`'s run of the same job, until it ended.
    @Test func aHostWhoseSessionIsLostStopsItsRunsAndAnotherHostRunsThemOnce() async throws {
        // A host cut off from the server: its lost connection is not taken up again.
        let (shared, a) = try JobsOnPostgreSQLTests.SharedCatalog.make(reconnectTimeout: 0)
        defer { a.close() }
        let asset = try await JobsOnPostgreSQLTests.asset(shared, in: a)
        let onA = HeldUntilLetGo(JobOutput(metadata: ["ran on": "a"]))
        a.jobs.register(onA, as: "held")
        let id = try a.jobs.submit("held", for: asset.id)
        let run = Task { try await a.jobs.runUntilIdle() }
        defer { onA.letGo() }
        #expect(try await waitUntil { onA.runs.withLock { $0 } == 1 })
        let session = try #require(a.container.session)

        let admin = try shared.admin()
        defer { admin.close() }
        let ended = try admin.run(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            [.text("persistence session \(shared.schema)")]
        ).rows.count
        #expect(ended == 1)
        let stopped = try await waitUntil(atMost: .seconds(60)) { onA.cancellations.withLock { $0 } == 1 }
        #expect(stopped, "the run went on after its host's session was lost")
        if !stopped { onA.letGo() }  // for the test to end (failed) rather than wait on a's run
        #expect(try await waitUntil(atMost: .seconds(60)) { a.jobs.runs.tasksInFlight == 0 })
        #expect(session.ending?.reason == .connectionLost)
        // a's run of the queue ends, saying why: it has worked nothing.
        let error = await #expect(throws: CatalogError.self) { try await run.value }
        #expect(error?.code == .store)
        #expect(
            error?.message
                == "The jobs were not run: \(session.ending?.message ?? "?"), and another host takes over this "
                + "process's work (its running jobs were stopped). Open the catalog again")

        // Host b's open reaps a's session, once the server lists it dead: the job is queued again.
        #expect(try await waitUntil { try a.container.sessions().first { $0.id == session.id }?.isAlive == false })
        let b = try shared.open()
        defer { b.close() }
        #expect(try !b.container.sessions().contains { $0.id == session.id })
        #expect(try b.jobs.job(id: id)?.state == .queued)
        let onB = HeldUntilLetGo(JobOutput(metadata: ["ran on": "b"]))
        onB.letGo()
        b.jobs.register(onB, as: "held")
        let summary = try await b.jobs.runUntilIdle()
        #expect(summary.succeeded == 1)

        // Let go of a's run now, had it gone on: it has ended, and nothing of it lands.
        onA.letGo()
        #expect(try await waitUntil { a.jobs.runs.tasksInFlight == 0 })
        #expect(onA.runs.withLock { $0 } == 1 && onB.runs.withLock { $0 } == 1)
        let job = try #require(try b.jobs.job(id: id))
        #expect(job.state == .succeeded)
        // Stopped, not crashed: a's run is not counted as an attempt (its slot was let go of).
        #expect(job.attempts == 1)
        #expect(try b.asset(asset.id).metadata["ran on"] == "b")
    }
}
