import AssetCatalogTestSupport
import Foundation
import Persistence
import Synchronization
import TestScratch
import Testing

@testable import AssetCatalog

/// Races, odd inputs and failure paths found by a second reading of the catalog.
@Suite struct ConcurrencyAndEdgeCaseTests {
    // MARK: add racing rm / gc

    /// add links content X (already in objects/, EEXIST), then — before its
    /// batch commits — the last asset using X is removed and swept. The whole
    /// add batch then fails, including unrelated files.
    @Test func anAddRacingTheRemovalOfTheSameContentKeepsIt() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let first = try #require(try await catalog.add([try t.file("a.txt", "shared")]).added.first)
        let again = try t.file("b.txt", "shared")
        let other = try t.file("c.txt", "unrelated")
        let removed = Mutex(false)
        await #expect(throws: Never.self) {
            _ = try await catalog.add([again, other], options: .init(concurrency: 1)) { p in
                // The first file is staged and linked (EEXIST), not committed yet.
                if p.filesDone == 1, !removed.withLock({ $0 }) {
                    removed.withLock { $0 = true }
                    _ = try? catalog.remove(first.id)
                }
            }
        }
        #expect(try catalog.assets().map(\.name) == ["b.txt", "c.txt"])
    }

    /// gc --purge (another task or process) while an add has linked new content
    /// but not committed it: the add fails; with --adopt a spurious
    /// `recovered-…` asset appears beside the real one.
    @Test func anAddRacingGcPurgeKeepsItsContent() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let files = [try t.file("x.txt", "new content"), try t.file("y.txt", "more")]
        let done = Mutex(false)
        await #expect(throws: Never.self) {
            _ = try await catalog.add(files, options: .init(concurrency: 1)) { p in
                if p.filesDone == 1, !done.withLock({ $0 }) {
                    done.withLock { $0 = true }
                    _ = try? catalog.collectGarbage(.purge)
                }
            }
        }
        #expect(try catalog.assets().count == 2)
    }

    @Test func gcAdoptLeavesAnAddInProgressAlone() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let files = [try t.file("x.txt", "new content"), try t.file("y.txt", "more")]
        let done = Mutex(false)
        _ = try await catalog.add(files, options: .init(concurrency: 1)) { p in
            if p.filesDone == 1, !done.withLock({ $0 }) {
                done.withLock { $0 = true }
                _ = try? catalog.collectGarbage(.adopt)
            }
        }
        let names = try catalog.assets().map(\.name)
        #expect(names == ["x.txt", "y.txt"], "\(names)")
    }

    // MARK: referenced file inside objects/

    @Test func aFileInsideTheCatalogCannotBeReferenced() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let managed = try #require(try await catalog.add([try t.file("a.txt", "payload")]).added.first)
        let inside = t.objectPath(managed.sha256)
        do {
            _ = try await catalog.add([inside], options: .init(mode: .reference))
            Issue.record("referencing a file inside the catalog was accepted")
        } catch let error as CatalogError {
            #expect(error.message == "\(inside) is inside the catalog itself; add files from elsewhere")
        }
        try catalog.remove(managed.id)
        #expect(try catalog.assets().isEmpty)
    }

    // MARK: verify

    @Test func verifyReportsAnUnreadableReferencedFileAndGoesOn() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let path = try t.file("r.txt", "ref")
        _ = try await catalog.add([path, try t.file("ok.txt", "ok")], options: .init(mode: .reference))
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        await #expect(throws: Never.self) {
            let report = try await catalog.verify()
            #expect(report.checked == 2 && report.issues.map(\.problem) == [.unreadable])
        }
    }

    @Test func membersOfAMissingArchiveAreReportedMissing() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.addAndRunJobs([testAsset("archives/sample.tar")])
        try FileManager.default.removeItem(atPath: t.objectPath(added[0].sha256))
        let issues = try await catalog.verify().issues
        #expect(issues.allSatisfy { $0.problem == .missing }, "\(issues.map(\.problem))")
    }

    // MARK: archives

    @Test func hardLinkedMembersOfATarGetTheirOwnRecord() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        try t.file("pack/a.txt", "same inode")
        let dir = t.sources.appending(path: "pack").path
        #expect(link(dir + "/a.txt", dir + "/b.txt") == 0)
        let tar = t.directory.appending(path: "pack.tar").path
        _ = try await ChildProcess.run(
            "/usr/bin/tar", ["-cf", tar, "-C", t.sources.path, "pack"], stdout: .inherit, stderr: .inherit)
        let added = try await catalog.addAndRunJobs([tar])
        #expect(added.compactMap(\.member).sorted() == ["pack/a.txt", "pack/b.txt"])
    }

    // MARK: rm reports

    @Test func rmDoesNotCountAFileThatWasAlreadyMissing() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let a = try #require(try await catalog.add([try t.file("a.txt", "gone")]).added.first)
        try FileManager.default.removeItem(atPath: t.objectPath(a.sha256))
        let result = try catalog.remove(a.id)
        #expect(result.filesRemoved.isEmpty)
    }

    // MARK: CLI

    @Test func catToAFullDiskIsAnErrorNotACrash() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let a = try #require(
            try await catalog.add([try t.file("a.txt", String(repeating: "x", count: 100_000))]).added.first)
        catalog.close()
        let run = try await ChildProcess.run(
            TestCatalog.executable().path, ["cat", "--catalog", t.root.path, "\(a.id)"], stdout: .file("/dev/full"))
        let stderr = run.stderrText
        #expect(run.termination == .exited(1), "\(stderr)")
        #expect(stderr.hasPrefix("assetcat: "), "\(stderr)")
    }

    /// Concurrent invocations: an open that meets another process's
    /// close-time checkpoint (an EXCLUSIVE lock on the db file) fails
    /// quick_check with "database is locked" and quarantines a healthy store.
    @Test func concurrentCommandsNeverQuarantineAHealthyStore() async throws {
        let t = try TestCatalog()
        try t.create().close()
        _ = try await t.run(["add", try t.file("a.txt", "a")])
        var failures: [String] = []
        for round in 0..<10 {
            let runs = try await withThrowingTaskGroup(of: TestCatalog.Run.self) { group in
                for i in 0..<8 {
                    let f = try t.file("r\(round)-\(i).txt", "content \(round) \(i)")
                    group.addTask { try await t.run(i % 2 == 0 ? ["ls"] : ["add", f]) }
                }
                var all: [TestCatalog.Run] = []
                for try await r in group { all.append(r) }
                return all
            }
            failures += runs.filter { $0.status != 0 }.map(\.stderr)
            if !failures.isEmpty { break }
        }
        #expect(failures.isEmpty, "\(failures)")
        #expect(!FileManager.default.fileExists(atPath: t.root.appending(path: "quarantine").path))
    }
    @Test func dryRunListsTheSameAssetsAsTheRealRemoval() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.addAndRunJobs([testAsset("archives/sample.tar")])
        let dry = try catalog.remove(added[0].id, dryRun: true)
        let real = try catalog.remove(added[0].id)
        #expect(dry.removed.map(\.id) == real.removed.map(\.id))
        #expect(dry.filesRemoved == real.filesRemoved)
    }

    /// `assetcat init` makes ./.assetcat; `assetcat add --recursive .` then
    /// adds the catalog's own store, objects and staging locks as assets.
    @Test func recursiveAddOfTheWorkingDirectorySkipsTheCatalogItself() async throws {
        let t = try TestCatalog()
        let work = t.sources
        #expect(try await t.run(["init"], namesCatalog: false, in: work).status == 0)
        let red = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "TestAssets/demo/photos/red.png")
        try t.file("photo.jpg", try Data(contentsOf: red))  // a picture: its thumbnail job succeeds
        let add = try await t.run(["add", "--recursive", "."], namesCatalog: false, in: work)
        let ls = try await t.run(["ls"], namesCatalog: false, in: work)
        #expect(add.status == 0, "\(add.stderr)")
        #expect(!ls.stdout.contains("catalog.sqlite"))
        #expect(ls.stdout.split(separator: "\n").count == 2, "\(ls.stdout)")
    }
}

/// verify reports an asset "missing" when its object folder is gone; removing
/// that asset (the natural fix) commits, but the sweep throws on syncing the
/// missing folder, so the plan stays and every later open fails.
@Test func removingAnAssetWhoseObjectFolderIsGoneLeavesACatalogThatOpens() async throws {
    let t = try TestCatalog()
    let catalog = try t.create()
    let a = try #require(try await catalog.add([try t.file("lost.txt", "lost")]).added.first)
    try FileManager.default.removeItem(atPath: (t.objectPath(a.sha256) as NSString).deletingLastPathComponent)
    #expect(try await catalog.verify().issues.map(\.problem) == [.missing])
    try catalog.remove(a.id)
    #expect(try catalog.assets().isEmpty)
    #expect(try catalog.stats().pendingRemovals == 0)
    catalog.close()
    #expect(throws: Never.self) { try t.open() }
}

/// Two processes opening at once: one's removeAbandonedStaging lists
/// staging/ while the other is between mkdir(ownStaging) and flock(lock), and
/// removes the live process's folder (or its lock file).
@Test func concurrentOpensNeverRemoveALiveProcesssStaging() throws {
    let t = try TestCatalog()
    try t.create().close()
    var lost = 0
    for _ in 0..<30 {
        let catalogs = Mutex<[Catalog]>([])
        DispatchQueue.concurrentPerform(iterations: 12) { _ in
            if let c = try? t.open() { catalogs.withLock { $0.append(c) } }
        }
        let all = catalogs.withLock { $0 }
        for c in all {
            var isDir: ObjCBool = false
            if !FileManager.default.fileExists(atPath: c.content.ownStaging, isDirectory: &isDir)
                || !FileManager.default.fileExists(atPath: c.content.ownStaging + ".lock")
            {
                lost += 1
            }
        }
        for c in all { c.close() }
    }
    #expect(lost == 0)
}

/// A job that writes to its asset the moment it is cancelled: its cancellation
/// handler runs inside `delete()` (through `prepareForDeletion` and
/// `cancelAll`), so the write commits between the removal's read and its save.
final class WritesToItsAssetWhenCancelled: JobProcessor {
    let catalog: Catalog
    let started = Mutex(false)
    init(_ catalog: Catalog) { self.catalog = catalog }
    func run(_ job: JobContext) async throws -> JobOutput {
        let assetID = job.asset.id
        try await withTaskCancellationHandler {
            started.withLock { $0 = true }
            try await Task.sleep(for: .seconds(60))
        } onCancel: { [catalog] in
            _ = try? catalog.setMetadata(assetID, ["last-words": "written as the job stopped"])
        }
        return JobOutput()
    }
}

/// A job's result that lands while `remove` runs is not a reason to refuse
/// the user's removal: the removal runs again on the new row.
@Test func aRemovalRacingAJobsWriteToTheSameAssetStillRemovesIt() async throws {
    let t = try TestCatalog()
    let catalog = try t.create()
    defer { catalog.close() }
    let asset = try #require(try await catalog.add([try t.file("a.txt", "racing")]).added.first)
    let processor = WritesToItsAssetWhenCancelled(catalog)
    catalog.jobs.register(processor, as: "last-words")
    try catalog.jobs.submit("last-words", for: asset.id)
    catalog.jobs.start()
    defer { catalog.jobs.stop() }
    try #require(
        try await waitUntil { processor.started.withLock { $0 } },
        "the job never started: the removal would race nothing")

    let result = try catalog.remove(asset.id)

    #expect(result.removed.map(\.id) == [asset.id])
    #expect(result.removed.first?.metadata["last-words"] == "written as the job stopped")  // read on the retry
    #expect(try catalog.assets().isEmpty)
    #expect(!t.hasObject(asset.sha256))
}
