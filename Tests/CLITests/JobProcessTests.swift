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

    /// Waits until the worker's job runs, then does `action` at once. Both
    /// happen on a thread of their own: the job lasts about 1.3 s, and a poll
    /// on the concurrency pool, shared with the whole suite, can miss it.
    @discardableResult
    func whenRunning<T: Sendable>(_ catalog: Catalog, _ action: @escaping @Sendable () throws -> T) async throws -> T? {
        let result = try await offThePool { () throws -> T? in
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                if try catalog.jobs.list([.running]).count == 1 { return try action() }
                usleep(1000)
            }
            return nil
        }
        if result == nil { Issue.record("the job never started") }
        return result
    }

    @Test func aDeletionCommittedByAnotherProcessCancelsTheWorkersJobWithinASecond() async throws {
        let (t, asset) = try await catalogWithSlowJob()
        let worker = Process()
        worker.executableURL = TestCatalog.executable()
        worker.arguments = ["jobs", "run", "--catalog", t.root.path]
        worker.environment = ProcessInfo.processInfo.environment.merging(["ASSETCAT_FAULT": "slow-jobs"]) { $1 }
        let out = Pipe()
        worker.standardOutput = out
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        let summary = FirstLine(of: out)
        let catalog = try t.open()
        let deleted = try #require(
            try await whenRunning(catalog) {
                try catalog.remove(asset.id)  // committed here, in this process
                return ContinuousClock.now  // from the commit (a referenced file: nothing to unlink after it)
            })
        // The worker prints its summary as soon as its queue is empty, that is once its job
        // is cancelled — before it closes the store, whose last checkpoint syncs the disk
        // (1–10 s when the rest of the suite keeps the disk busy). The line is timed by a
        // thread that was waiting for it since the worker started: this task, and any thread
        // it would start now, may run much later under load.
        let (line, stopped) = try await summary.value()
        let elapsed = stopped - deleted
        try await worker.finish()
        #expect(worker.terminationStatus == 0)
        #expect(line == "ran jobs: 0 succeeded, 0 failed, 1 cancelled\n")
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
        let pid = worker.processIdentifier
        try await whenRunning(catalog) { kill(pid, SIGINT) }
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
        let pid = worker.processIdentifier
        try await whenRunning(catalog) { kill(pid, SIGKILL) }
        try await worker.finish()
        #expect(try catalog.jobs.list().first?.state == .running)  // as the dead worker left it
        let summary = try await catalog.jobs.runUntilIdle()  // queues it again, and runs it
        #expect(summary.succeeded == 1)
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .succeeded && job.attempts == 2 && job.error == nil)
        #expect(try catalog.asset(asset.id).sha256.count == 64)
        catalog.close()
    }
}

/// The first line written to a pipe, and when it came: read by a thread of its own,
/// started at once.
private final class FirstLine: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var line = ""
    private var time = ContinuousClock.now

    init(of pipe: Pipe) {
        Thread { [self] in
            var bytes = Data()
            while !bytes.contains(0x0A), let byte = try? pipe.fileHandleForReading.read(upToCount: 1), !byte.isEmpty {
                bytes += byte
            }
            (line, time) = (String(decoding: bytes, as: UTF8.self), ContinuousClock.now)
            done.signal()
        }.start()
    }

    /// The line (with its newline), and the instant it was read.
    func value() async throws -> (String, ContinuousClock.Instant) {
        try await offThePool {
            self.done.wait()
            return (self.line, self.time)
        }
    }
}
