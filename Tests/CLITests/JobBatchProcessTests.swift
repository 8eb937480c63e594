import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A worker process killed while it holds a claimed batch of jobs.
@Suite struct JobBatchProcessTests {
    /// An `assetcat jobs run` worker (digest jobs slowed to 20 ms a chunk) claims jobs ahead
    /// of its free slots once it has seen them end quickly: it is killed while it holds more
    /// `running` rows than it runs at once. Every job it held, started or only claimed, runs
    /// again to completion in the next run, and every asset gets its digest; only the jobs
    /// that had started spent an attempt (a job allowed one attempt is not failed by a crash
    /// it never ran in).
    @Test func aWorkerKilledHoldingAClaimedBatchLosesNoJob() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let paths = try (0..<200).map { try t.file("d/f\($0).bin", "file \($0)\n") }
        let added = try await catalog.add(paths, options: .init(mode: .reference, defersHashing: true)).added
        try #require(added.count == 200)
        let worker = try JobProcessTests().startWorker(t)
        let concurrency = ProcessInfo.processInfo.activeProcessorCount
        // The event, not a time: more rows running than the worker runs at once.
        let held = try await offThePool { () throws -> Int? in
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                let running = try catalog.jobs.list([.running]).count
                if running > concurrency {
                    worker.signal(SIGKILL)
                    return running
                }
                usleep(500)
            }
            return nil
        }
        #expect(try await worker.finish().termination == .signalled(SIGKILL))
        try #require(held != nil, "the worker never held more jobs than it runs at once")
        let left = Set(try catalog.jobs.list([.running]).map(\.id))
        #expect(left.count > concurrency)  // as the dead worker left them
        let queued = try catalog.jobs.list([.queued]).count
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == left.count + queued)
        let jobs = try catalog.jobs.list()
        #expect(jobs.count == 200 && jobs.allSatisfy { $0.state == .succeeded })
        // The crash counts as an attempt for the jobs that had started (at most one a slot),
        // not for those only claimed ahead: those ran once.
        let attempts = jobs.filter { left.contains($0.id) }.map(\.attempts)
        #expect(attempts.allSatisfy { $0 == 1 || $0 == 2 })
        #expect(attempts.filter { $0 == 2 }.count <= concurrency)
        #expect(attempts.filter { $0 == 1 }.count >= left.count - concurrency)
        #expect(try catalog.assets().allSatisfy { $0.sha256.count == 64 })
    }
}
