import AssetCatalogTestSupport
import Foundation
@_spi(Testing) import Persistence
import Synchronization
import TestScratch
import Testing

@testable import AssetCatalog

/// A managed file is removed only when the deletion of the last record that
/// uses it has been committed (the removal rule, AssetRules). Each test would fail with the
/// naive design: unlinking in prepareForDeletion, or before the commit.
@Suite struct RemovalLifecycleTests {
    struct DiskFull: Error, CustomStringConvertible {
        var description: String { "disk full" }
    }

    /// A catalog with one managed asset; returns it, the asset, and its object path.
    func catalogWithOneFile(_ text: String = "payload") async throws -> (TestCatalog, Catalog, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add([try t.file("a.txt", text)]).added
        let asset = try #require(added.first)
        #expect(t.hasObject(asset.sha256))
        return (t, catalog, asset)
    }

    func asset(_ record: AssetRecord, in context: ManagedObjectContext) throws -> Asset {
        try context.existingObject(with: record.objectID, as: Asset.self)
    }

    @Test func deleteThenRollbackKeepsTheFile() async throws {
        let (t, catalog, record) = try await catalogWithOneFile()
        let context = catalog.newContext()
        try context.performAndWait {
            context.delete(try asset(record, in: context))
            #expect(t.hasObject(record.sha256))  // not at delete
            context.rollback()
        }
        #expect(t.hasObject(record.sha256))
        #expect(try catalog.assets().map(\.id) == [record.id])
    }

    @Test func deleteThenAFailedSaveKeepsTheFile() async throws {
        let (t, catalog, record) = try await catalogWithOneFile()
        let context = catalog.newContext()
        try context.performAndWait {
            context.delete(try asset(record, in: context))
            // Validation: another asset of the same save is invalid.
            let broken = Asset(context: context)
            broken.storage = .referenced
            broken.path = "relative/path"
            #expect(throws: PersistenceError.self) { try context.save() }
            #expect(t.hasObject(record.sha256))
            context.delete(broken)
            // An I/O error at commit.
            catalog.container.failNextCommit(with: DiskFull())
            #expect(throws: PersistenceError.self) { try context.save() }
            #expect(t.hasObject(record.sha256))
        }
        #expect(try catalog.stats().pendingRemovals == 0)
        #expect(try catalog.assets().count == 1)
        // The same deletion, saved for real this time, removes the file.
        try context.performAndWait { try context.save() }
        #expect(!t.hasObject(record.sha256))
    }

    @Test func aBeforeCommitCheckThatFailsKeepsTheFile() async throws {
        let (t, catalog, record) = try await catalogWithOneFile()
        let context = catalog.newContext()
        try context.performAndWait {
            context.delete(try asset(record, in: context))
            // A new record for content that is not in objects/: refused under the write lock.
            let ghost = Asset(context: context)
            ghost.name = "ghost.bin"
            ghost.sha256 = String(repeating: "e", count: 64)
            let error = #expect(throws: PersistenceError.self) { try context.save() }
            #expect(
                (error?.cause as? CatalogError)?.message
                    == "The content of ghost.bin (eeeeeeeeeeee…) is missing from objects/; add the file again")
        }
        #expect(t.hasObject(record.sha256))
    }

    /// The check opens the object and looks at what it opened: a folder, or a FIFO (whose
    /// open does not wait for a writer), at the object's name is not its content.
    @Test(arguments: ["folder", "fifo"])
    func anObjectNameThatIsNotAFileIsNotContent(kind: String) async throws {
        let (t, catalog, _) = try await catalogWithOneFile()
        let digest = String(repeating: "e", count: 64)
        let path = t.objectPath(digest)
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        if kind == "folder" {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        } else {
            #expect(mkfifo(path, 0o644) == 0)
        }
        let context = catalog.newContext()
        context.performAndWait {
            let ghost = Asset(context: context)
            ghost.name = "ghost.bin"
            ghost.sha256 = digest
            let error = #expect(throws: PersistenceError.self) { try context.save() }
            #expect(
                (error?.cause as? CatalogError)?.message
                    == "The content of ghost.bin (eeeeeeeeeeee…) is missing from objects/; add the file again")
        }
        #expect(try catalog.assets().count == 1)
    }

    @Test func deleteInAChildSavedIntoItsParentThenRolledBackKeepsTheFile() async throws {
        let (t, catalog, record) = try await catalogWithOneFile()
        let parent = catalog.newContext()
        try parent.performAndWait {
            let child = parent.newChildContext()
            try child.performAndWait {
                child.delete(try asset(record, in: child))
                try child.save()
            }
            #expect(t.hasObject(record.sha256))  // a child's save commits nothing
            parent.rollback()
            try parent.save()
        }
        #expect(t.hasObject(record.sha256))
        #expect(try catalog.assets().count == 1)
    }

    @Test func aCommittedDeleteRemovesTheFileAfterTheCommit() async throws {
        let (t, catalog, record) = try await catalogWithOneFile()
        let context = catalog.newContext()
        var presentAtPrepareForDeletion = false
        try context.performAndWait {
            context.delete(try asset(record, in: context))
            presentAtPrepareForDeletion = t.hasObject(record.sha256)
            try context.save()
        }
        #expect(presentAtPrepareForDeletion)
        #expect(!t.hasObject(record.sha256))
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    @Test func sharedContentGoesOnlyWithItsLastUser() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add([try t.file("a.txt", "same"), try t.file("b.txt", "same")]).added
        #expect(added.count == 2 && added[0].sha256 == added[1].sha256)
        let digest = added[0].sha256
        try catalog.remove(added[0].id)
        #expect(t.hasObject(digest))
        try catalog.remove(added[1].id)
        #expect(!t.hasObject(digest))
    }

    @Test func aReferencedFileIsNeverRemoved() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let source = try t.file("kept.txt", "mine")
        let record = try #require(try await catalog.add([source], options: .init(mode: .reference)).added.first)
        #expect(record.storage == .referenced && record.path == source)
        #expect(!t.hasObject(record.sha256))  // never copied
        try catalog.remove(record.id)
        #expect(FileManager.default.fileExists(atPath: source))
        #expect(try String(contentsOfFile: source, encoding: .utf8) == "mine")
    }

    /// A save that deletes many assets does their after-commit work once: one sweep removes
    /// every file, and every deleted asset's queued jobs are cancelled.
    @Test func aSaveThatDeletesManyAssetsSweepsOnce() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add(try (0..<300).map { try t.file("f\($0).txt", "content \($0)\n") }).added
        catalog.jobs.register(Parked(), as: "parked")
        let jobs = try added.prefix(3).map { try catalog.jobs.submit("parked", for: $0.id) }
        let before = catalog.runtime.sweepsRun.load(ordering: .relaxed)
        let removed = try catalog.remove(added.map(\.id))
        #expect(removed.filesRemoved.count == 300)  // more plans than the sweep takes at once
        #expect(catalog.runtime.sweepsRun.load(ordering: .relaxed) == before + 1)
        #expect(added.allSatisfy { !t.hasObject($0.sha256) })
        let cancelled = try catalog.jobs.list().filter { jobs.contains($0.id) }
        #expect(cancelled.count == 3 && cancelled.allSatisfy { $0.state == .cancelled })
        #expect(cancelled.allSatisfy { $0.error == "its asset was deleted" })
    }

    /// A removal that fails (its file cannot be unlinked) fails its batch of plans; the batch
    /// is then carried out a plan at a time: every other file goes, and that one plan stays
    /// pending for the next sweep.
    @Test func aPlanThatCannotBeCarriedOutHoldsUpNoOther() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add(try (0..<300).map { try t.file("f\($0).txt", "content \($0)\n") }).added
        // Asset 100's object is now a folder that is not empty: unlink fails (EISDIR).
        let stuck = t.objectPath(added[100].sha256)
        try FileManager.default.removeItem(atPath: stuck)
        try FileManager.default.createDirectory(atPath: stuck, withIntermediateDirectories: false)
        try Data("x".utf8).write(to: URL(fileURLWithPath: stuck + "/inside"))

        _ = try catalog.remove(added.map(\.id))  // the sweep's failure is logged, not thrown
        #expect(try catalog.assets().isEmpty)
        #expect(added.enumerated().allSatisfy { $0.offset == 100 || !t.hasObject($0.element.sha256) })
        #expect(try catalog.stats().pendingRemovals == 1)

        try FileManager.default.removeItem(atPath: stuck)
        #expect(try catalog.runtime.sweep() == 1)
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    /// A batch delete of scattered assets cancels each one's jobs (in lists of IDs, more
    /// than one statement's worth), and no other asset's.
    @Test func aBatchDeleteCancelsTheJobsOfScatteredAssets() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let files = try (0..<1_100).map { try t.file("f\($0).txt", "content \($0)\n") }
        let added = try await catalog.add(files).added
        let doomed = added.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
        _ = try catalog.tag(doomed.map(\.id), adding: ["doomed"])
        catalog.jobs.register(Parked(), as: "parked")
        let jobs = try catalog.jobs.submit(["parked"], for: added.map(\.id))
        #expect(try catalog.removeAll(AssetQuery(tag: "doomed")) == 550)
        let states = Dictionary(uniqueKeysWithValues: try catalog.jobs.list().map { ($0.asset, $0) })
        #expect(jobs.count == 1_100)
        #expect(
            doomed.allSatisfy { states[$0.id]?.state == .cancelled && states[$0.id]?.error == "its asset was deleted" })
        let kept = Set(added.map(\.id)).subtracting(doomed.map(\.id))
        #expect(kept.allSatisfy { states[$0]?.state == .queued })
    }

    @Test func batchDeleteRemovesFilesAfterItsCommit() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add(
            [try t.file("a.txt", "A"), try t.file("b.txt", "B")], options: .init(tags: ["x"])
        )
        .added
        _ = try await catalog.add([try t.file("c.txt", "C")])
        #expect(try catalog.removeAll(AssetQuery(tag: "x")) == 2)
        for record in added { #expect(!t.hasObject(record.sha256)) }
        #expect(try catalog.assets().map(\.name) == ["c.txt"])
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    @Test func anArchivesFileGoesWithTheArchiveAndItsMembersByCascade() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let archive = try testArchive(in: t)
        let added = try await catalog.addAndRunJobs([archive])
        let archiveRecord = try #require(added.first { $0.storage == .managed })
        let members = added.filter { $0.storage == .member }
        #expect(members.map(\.name) == ["docs/readme.txt", "photo.jpg"])
        // Deleting a member keeps the archive's file.
        try catalog.remove(members[0].id)
        #expect(t.hasObject(archiveRecord.sha256))
        // Deleting the archive deletes its members, then its file goes.
        let result = try catalog.remove(archiveRecord.id)
        #expect(result.removed.map(\.id).sorted() == [archiveRecord.id, members[1].id])
        #expect(!t.hasObject(archiveRecord.sha256))
        #expect(try catalog.assets().isEmpty)
    }
}

/// A small tar with two members, written with bsdtar.
func testArchive(in t: TestCatalog) throws -> String {
    try t.file("pack/docs/readme.txt", "read me\n")
    try t.file("pack/photo.jpg", Data([0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3]))
    let archive = t.sources.appending(path: "pack.tar").path
    _ = try ChildProcess(
        "/usr/bin/bsdtar",
        ["-cf", archive, "-C", t.sources.appending(path: "pack").path, "docs/readme.txt", "photo.jpg"],
        stdout: .inherit, stderr: .inherit
    ).wait()
    return archive
}
