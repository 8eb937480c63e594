import AssetCatalogTestSupport
import Foundation
@_spi(Testing) import Persistence
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog

/// The `thumbnail` job: queued for each image an add records, it stores a WebP in `objects/`
/// and records it on the asset; the file goes as content goes — journaled in the deletion's
/// transaction, removed once that commits and no asset uses it — and a hostile image fails
/// its job with one line, in bounded memory.
@Suite struct ThumbnailTests {
    typealias Store = SearchTests.Store

    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "ThumbnailsTests/Fixtures")
    static var photo: Data { get throws { try Data(contentsOf: fixtures.appending(path: "photo.jpg")) } }

    /// A PNG made by make-png.py with `arguments` (width, height, options), at `path`.
    static func png(_ path: String, _ arguments: [String]) async throws {
        let outcome = try await ChildProcess.run(
            "/usr/bin/env",
            ["python3", fixtures.appending(path: "make-png.py").path] + [arguments[0], arguments[1], path]
                + arguments.dropFirst(2))
        #expect(outcome.status == 0, "\(outcome.stderrText)")
    }

    static func isWebP(_ path: String) -> Bool {
        guard let bytes = FileManager.default.contents(atPath: path), bytes.count > 12 else { return false }
        return bytes.prefix(4) == Data("RIFF".utf8) && bytes.dropFirst(8).prefix(4) == Data("WEBP".utf8)
    }

    /// The thumbnail job of `asset`.
    static func thumbnailJob(_ catalog: Catalog, _ asset: AssetID) throws -> JobRecord? {
        try catalog.jobs.list(asset: asset).first { $0.kind == "thumbnail" }
    }

    @Test(arguments: Store.allCases) func anImageGetsAThumbnailThatGoesWithItsLastUser(_ store: Store) async throws {
        let made = try SearchTests.Made(store)
        let catalog = made.catalog
        defer { catalog.close() }
        let beach = try made.t.file("beach.jpg", try Self.photo)
        let again = try made.t.file("again/beach-copy.jpg", try Self.photo)
        let added = try await catalog.addAndRunJobs([beach, again])
        #expect(added.count == 2)
        let first = try catalog.asset(added[0].id)
        let second = try catalog.asset(added[1].id)
        #expect(try Self.thumbnailJob(catalog, first.id)?.state == .succeeded)
        let digest = try #require(first.thumbnail)
        // The same image, the same thumbnail: one file for both.
        #expect(second.thumbnail == digest)
        let file = try #require(try catalog.thumbnailURL(of: first.id)).path
        #expect(file == made.t.objectPath(digest))
        #expect(Self.isWebP(file))
        // A file a thumbnail is is not garbage.
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)

        try catalog.remove(first.id)
        #expect(FileManager.default.fileExists(atPath: file), "still the other image's thumbnail")
        try catalog.remove(second.id)
        #expect(!FileManager.default.fileExists(atPath: file))
        #expect(try catalog.pendingRemovalCount() == 0)
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
    }

    /// A deletion that is rolled back, or whose save fails, removes no thumbnail; a row
    /// deletion (`rm ID`) removes it as an object's does.
    @Test func onlyACommittedDeletionRemovesTheThumbnail() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.addAndRunJobs([try t.file("beach.jpg", try Self.photo)])
        let file = try #require(try catalog.thumbnailURL(of: added[0].id)).path
        struct DiskFull: Error {}
        try catalog.withContext { context in
            context.delete(try context.existingObject(with: added[0].objectID, as: Asset.self))
            context.rollback()
            context.delete(try context.existingObject(with: added[0].objectID, as: Asset.self))
            catalog.container.failNextCommit(with: DiskFull())
            #expect(throws: (any Error).self) { try context.save() }
            context.rollback()
        }
        #expect(FileManager.default.fileExists(atPath: file))
        #expect(try catalog.pendingRemovalCount() == 0)
        try catalog.removeRows([added[0].id])
        #expect(!FileManager.default.fileExists(atPath: file))
    }

    /// An image whose thumbnail is made again (another run of its job) has its earlier file
    /// journaled in the save that replaces it.
    @Test func aThumbnailMadeAgainReplacesTheFileItHad() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.addAndRunJobs([try t.file("beach.jpg", try Self.photo)])
        let old = try #require(try catalog.thumbnailURL(of: added[0].id)).path
        // Another digest standing for an earlier thumbnail: a file in objects/, recorded.
        let earlier = try catalog.content.ingest { write in try Data("earlier".utf8).withUnsafeBytes { try write($0) } }
        catalog.content.unpin(earlier.pin)
        try catalog.withContext { context in
            try context.existingObject(with: added[0].objectID, as: Asset.self).thumbnail = earlier.digest
            try context.save()
        }
        #expect(!FileManager.default.fileExists(atPath: old), "the file it replaced went with the save")
        _ = try catalog.jobs.submit("thumbnail", for: added[0].id)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.asset(added[0].id).thumbnail.map(t.objectPath) == old)
        #expect(!t.hasObject(earlier.digest))
        #expect(FileManager.default.fileExists(atPath: old))
    }

    /// A bomb, a damaged image and a file that is not one fail their job with the reason in
    /// one line; the catalog is as it was.
    @Test func hostileImagesFailTheirJobWithOneLine() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let bomb = t.directory.appending(path: "bomb.png").path
        try await Self.png(bomb, ["50000", "50000", "--header-only"])
        let cut = t.directory.appending(path: "cut.png").path
        try await Self.png(cut, ["640", "480", "--truncate", "3000"])
        let text = try t.file("notes.jpg", "not a picture\n")
        let added = try await catalog.addAndRunJobs([bomb, cut, text])
        let errors = try added.map { try Self.thumbnailJob(catalog, $0.id) }
        #expect(errors.map { $0?.state } == [.failed, .failed, .failed])
        #expect(
            errors[0]?.error
                == "no thumbnail: the PNG image is 50000 × 50000 pixels, more than the 100 megapixels a thumbnail is made of"
        )
        #expect(errors[1]?.error?.hasPrefix("no thumbnail: the PNG image could not be decoded: ") == true)
        #expect(errors[2]?.error == "no thumbnail: not an image: its first bytes are those of no image format")
        #expect(try catalog.assets().allSatisfy { $0.thumbnail == nil })
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
    }

    /// An archive member's thumbnail is made from its bytes, streamed out of the archive into
    /// an unnamed file that leaves nothing behind.
    @Test func anArchiveMemberGetsAThumbnailFromItsBytes() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let photo = try t.file("album/beach.jpg", try Self.photo)
        let tar = t.directory.appending(path: "album.tar").path
        let made = try await ChildProcess.run(
            "/usr/bin/bsdtar", ["-cf", tar, "-C", (photo as NSString).deletingLastPathComponent, "beach.jpg"])
        #expect(made.status == 0)
        let added = try await catalog.addAndRunJobs([tar])
        let member = try #require(added.first { $0.storage == .member })
        _ = try catalog.jobs.submit("thumbnail", for: member.id)
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try Self.thumbnailJob(catalog, member.id)?.state == .succeeded)
        #expect(Self.isWebP(try #require(try catalog.thumbnailURL(of: member.id)).path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: catalog.content.ownStaging).isEmpty)
        // The archive's removal takes its member's thumbnail with it.
        let file = try #require(try catalog.thumbnailURL(of: member.id)).path
        try catalog.remove(added[0].id)
        #expect(!FileManager.default.fileExists(atPath: file))
    }

    /// `add` runs the thumbnail jobs it queues; `--queue-only` leaves them; a process killed
    /// after storing a thumbnail, before recording it, leaves no file once the next command
    /// has opened the catalog.
    @Test func aKillBetweenTheFileAndItsRecordLeavesNothing() async throws {
        let t = try TestCatalog()
        try await t.run(["init", t.root.path])
        let beach = try t.file("beach.jpg", try Self.photo)
        #expect(try await t.run(["add", "--queue-only", beach]).status == 0)
        let killed = try await t.run(["jobs", "run"], environment: ["ASSETCAT_FAULT": "before-thumbnail-commit"])
        #expect(killed.status == 86)  // died at the fault point, the thumbnail stored
        let files = { () -> Int in
            (FileManager.default.subpaths(atPath: t.root.appending(path: "objects").path) ?? []).filter {
                $0.count > 3
            }.count
        }
        #expect(files() == 2, "the image and its thumbnail, which no record names")
        #expect(try await t.run(["stats"]).status == 0)
        #expect(files() == 1, "the next command's sweep removed the thumbnail")
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.pendingRemovalCount() == 0)
        #expect(try catalog.assets()[0].thumbnail == nil)
        // Run again, the job makes it.
        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.assets()[0].thumbnail != nil)
        #expect(files() == 2)
    }

    /// The save that records a thumbnail can meet another save of its asset committed since
    /// it read the asset (the `metadata` job's result, a tag): it reads the asset again and
    /// sets the thumbnail over that change. The job used to fail with the conflict.
    @Test func aThumbnailRecordedAfterAnotherSaveOfItsAssetKeepsBoth() async throws {
        let t = try TestCatalog()
        let barrier = t.directory.appending(path: "thumbnail-barrier").path
        let catalog = try t.create(
            testing: CatalogTesting(faults: FaultPoints(names: [], pauses: ["before-thumbnail-commit": barrier])))
        defer { catalog.close() }
        let id = try await catalog.add([try t.file("beach.jpg", try Self.photo)]).added[0].id
        async let ran = catalog.jobs.runUntilIdle()
        #expect(
            try await waitUntil { FileManager.default.fileExists(atPath: barrier + ".reached") },
            "the thumbnail job never reached its save")
        _ = try catalog.setMetadata(id, ["note": "kept"])
        #expect(FileManager.default.createFile(atPath: barrier, contents: nil))
        _ = try await ran
        let job = try #require(try Self.thumbnailJob(catalog, id))
        #expect(job.state == .succeeded, "\(job.error ?? "")")
        let asset = try catalog.asset(id)
        #expect(asset.thumbnail != nil)
        #expect(asset.metadata["note"] == "kept")
    }

    /// A deleted asset's queued thumbnail job is cancelled, as every job of the asset is.
    @Test func aDeletionCancelsTheThumbnailJob() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([try t.file("beach.jpg", try Self.photo)]).added
        #expect(try Self.thumbnailJob(catalog, added[0].id)?.state == .queued)
        try catalog.remove(added[0].id)
        #expect(try Self.thumbnailJob(catalog, added[0].id)?.state == .cancelled)
    }

    /// A 100-megapixel PNG (the most a thumbnail is made of) is decoded a few rows at a time:
    /// `add`, which runs its thumbnail job, stays far under the 200 MB memory budget.
    @Test func aHundredMegapixelImageTakesBoundedMemory() async throws {
        let t = try TestCatalog()
        try await t.run(["init", t.root.path])
        let big = t.directory.appending(path: "big.png").path
        try await Self.png(big, ["10000", "10000", "--gray"])
        let run = try await ChildProcess.run(
            "/usr/bin/time", ["-f", "peak %M", TestCatalog.executable().path, "add", big, "--catalog", t.root.path])
        #expect(run.status == 0, "\(run.stderrText)")
        let peak = try #require(run.stderrText.split(separator: "\n").last { $0.hasPrefix("peak ") })
        let kilobytes = try #require(Int(peak.dropFirst(5)))
        #expect(kilobytes < 200 * 1024, "peak \(kilobytes) KB")
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.assets()[0].thumbnail != nil)
    }
}
