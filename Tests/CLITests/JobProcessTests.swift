import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Jobs across processes: a worker is an `assetcat jobs run` process, slowed
/// down (`ASSETCAT_FAULT=slow-jobs`: 20 ms per chunk read) so the test can act
/// while its job runs.
@Suite struct JobProcessTests {
    /// A catalog with one referenced 64 MiB file whose digest is deferred:
    /// its digest job reads 64 chunks, about 1.3 s with the slowdown.
    func catalogWithSlowJob() async throws -> (TestCatalog, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let source = try t.file("big.bin", Data(repeating: 7, count: 64 << 20))
        let asset = try #require(
            try await catalog.add([source], options: .init(mode: .reference, defersHashing: true)).added.first)
        catalog.close()
        return (t, asset)
    }

    func startWorker(_ t: TestCatalog) throws -> Process {
        let worker = Process()
        worker.executableURL = TestCatalog.executable()
        worker.arguments = ["jobs", "run", "--catalog", t.root.path]
        worker.environment = ProcessInfo.processInfo.environment.merging(["ASSETCAT_FAULT": "slow-jobs"]) { $1 }
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        return worker
    }

    func waitUntilRunning(_ catalog: Catalog) async throws {
        for _ in 0..<5000 {
            if try catalog.jobs.list([.running]).count == 1 { return }
            try await Task.sleep(for: .milliseconds(1))
        }
        Issue.record("the job never started")
    }

    @Test func aDeletionCommittedByAnotherProcessCancelsTheWorkersJobWithinASecond() async throws {
        let (t, asset) = try await catalogWithSlowJob()
        let worker = try startWorker(t)
        let catalog = try t.open()
        try await waitUntilRunning(catalog)
        let deleted = ContinuousClock.now
        try catalog.remove([String(asset.id)])  // committed here, in this process
        // The worker's queue is empty once its job is cancelled. The exit is
        // timed on the waiting thread: this task may resume later under load.
        let exited = try await offThePool {
            worker.waitUntilExit()
            return ContinuousClock.now
        }
        let elapsed = exited - deleted
        #expect(worker.terminationStatus == 0)
        #expect(elapsed < .seconds(1), "the worker took \(elapsed) to stop")
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .cancelled && job.error == "its asset was deleted")
        catalog.close()
    }

    @Test func ctrlCDuringJobsRunQueuesTheRunningJobAgainWithoutCountingIt() async throws {
        let (t, _) = try await catalogWithSlowJob()
        let worker = Process()
        worker.executableURL = TestCatalog.executable()
        worker.arguments = ["jobs", "run", "--catalog", t.root.path]
        worker.environment = ProcessInfo.processInfo.environment.merging(["ASSETCAT_FAULT": "slow-jobs"]) { $1 }
        let out = Pipe()
        let err = Pipe()
        worker.standardOutput = out
        worker.standardError = err
        try worker.run()
        let catalog = try t.open()
        try await waitUntilRunning(catalog)
        kill(worker.processIdentifier, SIGINT)
        let (stdout, stderr) = try await worker.finish(stdout: out, stderr: err)
        #expect(worker.terminationStatus == 130)
        #expect(stdout == "ran jobs: 0 succeeded, 0 failed, 0 cancelled\n")
        #expect(stderr == "interrupted: the jobs that were running are queued again; `assetcat jobs run` resumes\n")
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .queued && job.attempts == 0)
        catalog.close()
    }

    @Test func aWorkerKilledMidJobLeavesTheJobToRunAgainToCompletion() async throws {
        let (t, asset) = try await catalogWithSlowJob()
        let worker = try startWorker(t)
        let catalog = try t.open()
        try await waitUntilRunning(catalog)
        kill(worker.processIdentifier, SIGKILL)
        try await worker.finish()
        #expect(try catalog.jobs.list().first?.state == .running)  // as the dead worker left it
        let summary = try await catalog.jobs.runUntilIdle()  // queues it again, and runs it
        #expect(summary.succeeded == 1)
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .succeeded && job.attempts == 2 && job.error == nil)
        #expect(try catalog.asset(String(asset.id)).sha256.count == 64)
        catalog.close()
    }
}
