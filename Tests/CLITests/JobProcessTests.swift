import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
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

    func startWorker(_ t: TestCatalog) throws -> ChildProcess {
        try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--catalog", t.root.path],
            environment: ["ASSETCAT_FAULT": "slow-jobs"], stdout: .null, stderr: .null)
    }

    /// Waits until the worker's job runs, then does `action` at once. Both
    /// happen on a thread of their own: the job lasts about 1.3 s, and a poll
    /// on the concurrency pool, shared with the whole suite, can miss it.
    @discardableResult
    /// Calls `action` once the job's row is `running` — and, with `reading`, once its run has
    /// reported progress (a row is `running` from its claim, a little before its run starts).
    func whenRunning<T: Sendable>(
        _ catalog: Catalog, reading: Bool = false, _ action: @escaping @Sendable () throws -> T
    ) async throws -> T? {
        let result = try await offThePool { () throws -> T? in
            // Only a hang meets it: under ASan, in a busy suite, a child takes long to get there.
            let deadline = Date().addingTimeInterval(120)
            while Date() < deadline {
                let running = try catalog.jobs.list([.running])
                if running.count == 1 && (!reading || running[0].progress > 0) { return try action() }
                usleep(1000)
            }
            return nil
        }
        if result == nil { Issue.record("the job never started") }
        return result
    }

    /// Whether the running jobs come to satisfy `condition`, looked at every millisecond off
    /// the concurrency pool (at most 120 s: only a hang meets that).
    func untilRunning(_ catalog: Catalog, _ condition: @escaping @Sendable ([JobRecord]) -> Bool) async throws
        -> Bool
    {
        try await offThePool {
            let deadline = Date().addingTimeInterval(120)
            while Date() < deadline {
                if condition(try catalog.jobs.list([.running])) { return true }
                usleep(1000)
            }
            return false
        }
    }

    /// The worker's job would read for hours: the worker ends only because a deletion
    /// committed in this process reached it and stopped the job. How soon it does is a
    /// latency, for a benchmark; the test waits for the event itself.
    @Test func aDeletionCommittedByAnotherProcessCancelsTheWorkersJob() async throws {
        let (t, asset) = try await catalogWithSlowJob(endless: true)
        let worker = try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--catalog", t.root.path],
            environment: ["ASSETCAT_FAULT": "slow-jobs"], stderr: .null)
        let catalog = try t.open()
        defer { catalog.close() }
        try #require(try await whenRunning(catalog) { try catalog.remove(asset.id) } != nil)
        // The worker prints its summary as soon as its queue is empty, that is once its job
        // is cancelled. A worker that missed the deletion would read on for hours: the
        // deadline only turns that hang into a failure.
        guard let line = try await firstLine(of: worker, within: 120) else {
            Issue.record("the worker did not stop its job after the asset's deletion was committed")
            worker.signal(SIGTERM)
            _ = try await worker.finish()
            return
        }
        #expect(try await worker.finish().status == 0)
        #expect(line == "ran jobs: 0 succeeded, 0 failed, 1 cancelled\n")
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .cancelled && job.error == "its asset was deleted")
    }

    /// An archive whose one member is 8 GiB (a ustar header in front of a sparse file, the
    /// largest size a ustar header holds): its index job, and its digest job, would read for
    /// most of an hour (`slow-jobs`).
    func hugeArchive(in t: TestCatalog) throws -> String {
        let archive = try t.file("huge.tar", Data())
        let size: Int64 = 8 << 30 - 1  // the largest a ustar header holds
        var header = [UInt8](repeating: 0, count: 512)
        func put(_ text: String, at offset: Int) {
            for (i, byte) in text.utf8.enumerated() { header[offset + i] = byte }
        }
        put("zeros.bin", at: 0)
        put("0000644", at: 100)
        put("0000000", at: 108)
        put("0000000", at: 116)
        put(String(size, radix: 8), at: 124)
        put("00000000000", at: 136)
        put("        ", at: 148)  // the checksum counts itself as spaces
        put("0", at: 156)
        put("ustar\u{0}00", at: 257)
        let checksum = header.reduce(0) { $0 + Int($1) }
        put(String(format: "%06o", checksum) + "\u{0} ", at: 148)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: archive))
        try handle.write(contentsOf: header)
        try handle.truncate(atOffset: UInt64(512 + (size + 511) / 512 * 512 + 1024))
        try handle.close()
        return archive
    }

    /// The index job stops inside a member, not only between members: an archive's one
    /// member is 8 GiB (a ustar header in front of a sparse file), which its index job would
    /// hash for most of an hour (`slow-jobs`). The worker ends only because the deletion
    /// reached the run while it read that member.
    @Test func aDeletionStopsAnIndexJobInsideALargeMember() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let archive = try hugeArchive(in: t)
        let asset = try #require(
            try await catalog.add([archive], options: .init(mode: .reference, defersHashing: true)).added.first)
        // The digest job would read the 8 GiB too: cancelled, so that this checks the index
        // job's own reading (both at once: aDeletionStopsJobsThatHoldAsManyThreadsAsTheWorkerRunsJobs).
        let digest = try #require(try catalog.jobs.list().first { $0.kind == "digest" })
        _ = try catalog.jobs.cancel(digest.id)
        let worker = try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--catalog", t.root.path],
            environment: ["ASSETCAT_FAULT": "slow-jobs"], stderr: .null)
        let read = try await untilRunning(catalog) { running in
            running.contains { $0.kind == "index-archive" && $0.progress > 0 }
        }
        #expect(read, "the index job never reported reading")
        try catalog.remove(asset.id)
        guard let line = try await firstLine(of: worker, within: 120) else {
            Issue.record("the index job read on after its archive's deletion reached it")
            worker.signal(SIGTERM)
            _ = try await worker.finish()
            return
        }
        #expect(try await worker.finish().status == 0)
        #expect(line == "ran jobs: 0 succeeded, 0 failed, 1 cancelled\n")
    }

    /// A run's result is committed a moment before it is counted: `jobs run`, which ends
    /// once nothing runs, must not end in that moment with the run missing from its summary
    /// (four workers' summaries once fell short of the rows by a few hundred in 10,000).
    @Test func jobsRunCountsAResultCommittedJustBeforeTheQueueWentIdle() async throws {
        let (t, _) = try await catalogWithSlowJob()
        let paused = try await t.startPaused(["jobs", "run"], at: "before-counting-results")
        // Time for a worker loop that no longer sees the run as running to end (it would
        // print a summary without it); a correct one waits for the count.
        try await Task.sleep(for: .milliseconds(500))
        paused.resume()
        let outcome = try await paused.process.finish()
        #expect(outcome.status == 0)
        #expect(outcome.stdoutText == "ran jobs: 1 succeeded, 0 failed, 0 cancelled\n")
    }

    /// Both of the huge archive's jobs run at once (the digest and the index, each reading
    /// the 8 GiB member with a synchronous loop), as many as the worker runs at once on
    /// two cores: were they run on the concurrency pool, whose threads are as many as the
    /// cores, they would hold all of them, and the listener that hears the deletion could
    /// never run. They block threads of the queue's own instead: the deletion committed here
    /// reaches the worker, which stops both and ends.
    @Test func aDeletionStopsJobsThatHoldAsManyThreadsAsTheWorkerRunsJobs() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let archive = try hugeArchive(in: t)
        let asset = try #require(
            try await catalog.add([archive], options: .init(mode: .reference, defersHashing: true)).added.first)
        #expect(Set(try catalog.jobs.list().map(\.kind)) == ["digest", "index-archive"])
        let worker = try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--catalog", t.root.path],
            environment: ["ASSETCAT_FAULT": "slow-jobs"], stderr: .null)
        let reading = try await untilRunning(catalog) { running in
            running.count == 2 && running.allSatisfy { $0.progress > 0 }
        }
        try #require(reading, "the two jobs never both reported reading")
        try catalog.remove(asset.id)
        // A worker that never heard the deletion would read on for most of an hour: the
        // deadline only turns that hang into a failure.
        guard let line = try await firstLine(of: worker, within: 120) else {
            Issue.record("the worker's two jobs read on after their archive's deletion reached it")
            worker.signal(SIGTERM)
            _ = try await worker.finish()
            return
        }
        #expect(try await worker.finish().status == 0)
        #expect(line == "ran jobs: 0 succeeded, 0 failed, 2 cancelled\n")
    }

    @Test func ctrlCDuringJobsRunQueuesTheRunningJobAgainWithoutCountingIt() async throws {
        let (t, _) = try await catalogWithSlowJob()
        let worker = try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--catalog", t.root.path],
            environment: ["ASSETCAT_FAULT": "slow-jobs"])
        let catalog = try t.open()
        try await whenRunning(catalog) { worker.signal(SIGINT) }
        let run = try await worker.finish()
        let (stdout, stderr) = (run.stdoutText, run.stderrText)
        #expect(run.termination == .exited(130))
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
        try await whenRunning(catalog, reading: true) { worker.signal(SIGKILL) }
        _ = try await worker.finish()
        #expect(try catalog.jobs.list().first?.state == .running)  // as the dead worker left it
        let summary = try await catalog.jobs.runUntilIdle()  // queues it again, and runs it
        #expect(summary.succeeded == 1)
        let job = try #require(try catalog.jobs.list().first)
        #expect(job.state == .succeeded && job.attempts == 2 && job.error == nil)
        #expect(try catalog.asset(asset.id).sha256.count == 64)
        catalog.close()
    }
}

/// The first line the worker writes to its standard output (with its newline, or all it wrote
/// if it ended without one); `nil` if none came within `seconds`. Waits off the concurrency pool.
private func firstLine(of worker: ChildProcess, within seconds: Double) async throws -> String? {
    try await offThePool {
        worker.stdout(within: seconds) { $0.contains(0x0A) }.map { bytes in
            let end = bytes.firstIndex(of: 0x0A).map { bytes.index(after: $0) } ?? bytes.endIndex
            return String(decoding: bytes[..<end], as: UTF8.self)
        }
    }
}
