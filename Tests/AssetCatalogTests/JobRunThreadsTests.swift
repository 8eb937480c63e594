import AssetCatalogTestSupport
import Dispatch
import Foundation
import Locking
import TestScratch
import Testing

@testable import AssetCatalog

/// A processor that blocks its thread, as a blocking library call does, until its run is
/// cancelled (at most `limit` seconds: then it fails, saying it never heard).
final class BlocksItsThread: JobProcessor {
    struct NeverCancelled: Error, CustomStringConvertible {
        var description: String { "the run was never cancelled" }
    }

    let limit: Double
    /// Signalled as each run starts.
    let started = DispatchSemaphore(value: 0)
    /// The queue's threads, for each run to tell whether it runs on one.
    let threads: JobRunThreads
    /// Whether each run ran on the queue's threads, and saw its cancellation once let go.
    let runs = Locked<[(onQueueThread: Bool, sawCancellation: Bool)]>([])

    init(limit: Double, threads: JobRunThreads) {
        self.limit = limit
        self.threads = threads
    }

    func run(_ job: JobContext) async throws -> JobOutput {
        let semaphore = DispatchSemaphore(value: 0)
        let thread = threads.isCurrent
        started.signal()
        let limit = self.limit
        let letGo = await withTaskCancellationHandler {
            block(on: semaphore, limit: limit)
        } onCancel: {
            semaphore.signal()
        }
        runs.withLock { $0.append((thread, Task.isCancelled)) }
        guard letGo else { throw NeverCancelled() }
        try job.checkCancellation()
        return JobOutput(metadata: ["blocked": "yes"])
    }
}

/// Blocks the calling thread until `semaphore` is signalled or `limit` seconds pass; false then.
private func block(on semaphore: DispatchSemaphore, limit: Double) -> Bool {
    semaphore.wait(timeout: .now() + limit) == .success
}

@Suite struct JobRunThreadsTests {
    /// As many runs as the queue runs at once (as many as the cores, so as the concurrency
    /// pool's threads) block their threads: the queue still hears another opening's deletion
    /// of one's asset, cancels that run (`Task.isCancelled` in it says so), runs the next job
    /// in the freed slot and commits its result, while the other runs still block. The runs
    /// are on the queue's own threads, which all end with the runs.
    @Test func runsThatBlockTheirThreadsStarveNothingElse() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let width = catalog.jobs.concurrency
        for n in 0...width { _ = try t.file("d/a\(n).txt", "asset \(n)\n") }
        let assets = try await catalog.add(
            [t.sources.appending(path: "d").path], options: AddOptions(mode: .reference, recursive: true)
        ).added.sorted { $0.id.rawValue < $1.id.rawValue }
        try #require(assets.count == width + 1)
        // Without threads of the queue's own, the runs block the pool, this test's waits
        // included, until `limit`: then they fail, and the test with them. Generous: under
        // AddressSanitizer, with the whole suite sharing two cores, hearing the deletion
        // took longer than 20 s once; only a starved queue takes five minutes.
        let blocker = BlocksItsThread(limit: 300, threads: catalog.jobs.runThreads)
        catalog.jobs.register(blocker, as: "block")
        catalog.jobs.register(RunCounter(), as: "count")
        let blocked = try catalog.jobs.submit(["block"], for: assets.prefix(width).map(\.id))
        let counted = try catalog.jobs.submit("count", for: assets[width].id)
        let events = catalog.jobs.events()
        let run = Task { try await catalog.jobs.runUntilIdle() }
        let started = blocker.started
        let allStarted = try await offThePool { () -> Bool in
            (0..<width).allSatisfy { _ in started.wait(timeout: .now() + 300) == .success }
        }
        try #require(allStarted, "the blocking runs never all started")

        let other = try t.open()  // as another process would
        try other.remove(assets[0].id)
        for await record in events
        where record.id == counted && [.succeeded, .failed, .cancelled].contains(record.state) {
            break
        }
        #expect(try catalog.jobs.job(id: counted)?.state == .succeeded)
        #expect(try catalog.asset(assets[width].id).metadata["counted"] == "yes")
        #expect(try catalog.jobs.job(id: blocked[0])?.state == .cancelled)
        #expect(try catalog.jobs.list([.running]).map(\.id) == Array(blocked.dropFirst()))

        try other.remove(assets[1..<width].map(\.id))
        other.close()
        let summary = try await run.value
        #expect(summary.succeeded == 1 && summary.failed == 0 && summary.cancelled == width, "\(summary)")
        for id in blocked {
            let job = try #require(try catalog.jobs.job(id: id))
            #expect(job.state == .cancelled && job.error == "its asset was deleted", "\(job)")
        }
        let runs = blocker.runs.withLock { $0 }
        #expect(runs.count == width && runs.allSatisfy(\.sawCancellation), "\(runs)")
        #expect(runs.allSatisfy { $0.onQueueThread }, "\(runs)")
        #expect(catalog.jobs.runThreads.waitUntilNoThreads(timeout: 60), "the queue's threads outlived its runs")
    }
}
