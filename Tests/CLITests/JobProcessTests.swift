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
    /// its digest job reads 64 chunks, about 1.3 s with the slowdown. `endless`: a sparse
    /// 1 TiB file instead, whose digest job would read for hours: it ends only when stopped.
    func catalogWithSlowJob(endless: Bool = false) async throws -> (TestCatalog, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let source = try t.file("big.bin", endless ? Data() : Data(repeating: 7, count: 64 << 20))
        if endless {
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: source))
            try handle.truncate(atOffset: 1 << 40)
            try handle.close()
        }
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

    /// The worker's job would read for hours: the worker ends only because a deletion
    /// committed in this process reached it and stopped the job. How soon it does is a
    /// latency, for a benchmark; the test waits for the event itself.
    @Test func aDeletionCommittedByAnotherProcessCancelsTheWorkersJob() async throws {
        let (t, asset) = try await catalogWithSlowJob(endless: true)
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
        defer { catalog.close() }
        try #require(try await whenRunning(catalog) { try catalog.remove(asset.id) } != nil)
        // The worker prints its summary as soon as its queue is empty, that is once its job
        // is cancelled. A worker that missed the deletion would read on for hours: the
        // deadline only turns that hang into a failure.
        guard let line = try await summary.value(within: 120) else {
            Issue.record("the worker did not stop its job after the asset's deletion was committed")
            worker.terminate()
            try await worker.finish()
            return
        }
        try await worker.finish()
        #expect(worker.terminationStatus == 0)
        #expect(line == "ran jobs: 0 succeeded, 0 failed, 1 cancelled\n")
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .cancelled && job.error == "its asset was deleted")
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

    init(of pipe: Pipe) {
        Thread { [self] in
            var bytes = Data()
            while !bytes.contains(0x0A), let byte = try? pipe.fileHandleForReading.read(upToCount: 1), !byte.isEmpty {
                bytes += byte
            }
            line = String(decoding: bytes, as: UTF8.self)
            done.signal()
        }.start()
    }

    /// The line (with its newline); `nil` if none came within `seconds`.
    func value(within seconds: Double) async throws -> String? {
        try await offThePool {
            guard self.done.wait(timeout: .now() + seconds) == .success else { return nil }
            return self.line
        }
    }
}
