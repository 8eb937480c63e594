import AssetCatalogTestSupport
import Foundation
import Locking
import Testing

@testable import AssetCatalog

@Suite struct VerifyAndGarbageTests {
    @Test func verifyReportsMissingAndDamagedContentAndChangesNothing() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let managed = try await catalog.add([try t.file("m1.txt", "one"), try t.file("m2.txt", "two")]).added
        let refSource = try t.file("r1.txt", "ref one")
        let refGone = try t.file("r2.txt", "ref two")
        let referenced = try await catalog.add([refSource, refGone], options: .init(mode: .reference)).added
        _ = try await catalog.addAndRunJobs([try testArchive(in: t)])
        #expect(try await catalog.verify().issues.isEmpty)

        try FileManager.default.removeItem(atPath: t.objectPath(managed[0].sha256))  // missing managed
        let damagedPath = t.objectPath(managed[1].sha256)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: damagedPath)
        try Data("TWO".utf8).write(to: URL(fileURLWithPath: damagedPath))  // damaged managed
        try Data("changed".utf8).write(to: URL(fileURLWithPath: refSource))  // damaged referenced
        try FileManager.default.removeItem(atPath: refGone)  // missing referenced

        let report = try await catalog.verify()
        #expect(report.checked == 7)
        #expect(report.issues.map(\.id) == [managed[0].id, managed[1].id, referenced[0].id, referenced[1].id])
        #expect(report.issues.map(\.problem) == [.missing, .damaged, .damaged, .missing])
        #expect(report.issues[1].actualSHA256 == (try ContentStore.digest(ofFileAt: damagedPath).digest))
        #expect(report.issues[1].actualSHA256 != managed[1].sha256)
        #expect(report.issues[2].path == refSource)
        // Kept and reported, never dropped.
        #expect(try catalog.assets().count == 7)
        // Verifying only some assets.
        #expect(try await catalog.verify([referenced[1].id]).issues.map(\.problem) == [.missing])
    }

    /// A referenced asset added with `defersHashing` has no digest until its job runs: verify
    /// has nothing to compare, but a file that is gone is still reported missing, and one that
    /// is not a regular file unreadable.
    @Test func verifyReportsTheMissingFileOfAnAssetNotYetHashed() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let files = [try t.file("kept.txt", "kept"), try t.file("gone.txt", "gone"), try t.file("fifo", "")]
        let added = try await catalog.add(files, options: .init(mode: .reference, defersHashing: true)).added
        #expect(added.map(\.sha256) == ["", "", ""])
        try FileManager.default.removeItem(atPath: files[1])
        try FileManager.default.removeItem(atPath: files[2])
        #expect(mkfifo(files[2], 0o644) == 0)

        let report = try await catalog.verify()
        #expect(report.checked == 3)
        #expect(report.issues.map(\.id) == [added[1].id, added[2].id])
        #expect(report.issues.map(\.problem) == [.missing, .unreadable])
        #expect(report.issues[0].path == files[1])
        #expect(report.issues[1].detail == "\(files[2]) is a FIFO, not a regular file")
        #expect(try catalog.assets().count == 3)  // reported, never dropped
    }

    /// A verify of the whole catalog reads its assets a page at a time: what it finds, and its
    /// progress, are the same across pages as in one; files of `objects/` are judged a folder
    /// at a time against the store.
    @Test func aVerifyOfTheWholeCatalogReadsItsAssetsPageByPage() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add((0..<5).map { try t.file("f\($0).txt", "file \($0)") }).added
        try FileManager.default.removeItem(atPath: t.objectPath(added[1].sha256))
        let damaged = t.objectPath(added[4].sha256)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: damaged)
        try Data("other".utf8).write(to: URL(fileURLWithPath: damaged))
        try catalog.remove(added[2].id)
        let (orphan, _, pin) = try catalog.content.ingest(producing: { emit in
            try Data("orphan".utf8).withUnsafeBytes { try emit($0) }
        })
        catalog.content.unpin(pin)
        let seen = Locked<[Int]>([])
        let report = try await catalog.verify(nil, pageSize: 2) { done, total in
            #expect(total == 4)
            seen.withLock { $0.append(done) }
        }
        #expect(report.checked == 4)
        #expect(report.issues.map(\.id) == [added[1].id, added[4].id])
        #expect(report.issues.map(\.problem) == [.missing, .damaged])
        #expect(seen.withLock { $0 } == [1, 2, 3, 4])
        #expect(report.unreferencedObjects == 1)
        #expect(try catalog.collectGarbage().unreferenced.map(\.sha256) == [orphan])
    }

    @Test func gcReportsAdoptsAndPurgesUnreferencedFilesOnlyWhenAsked() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let kept = try #require(try await catalog.add([try t.file("kept.txt", "kept")]).added.first)
        // Content that reached objects/ without a record (a crash after linking, before the commit).
        let (orphan, _, pin) = try catalog.content.ingest(producing: { emit in
            try Data("orphan".utf8).withUnsafeBytes { try emit($0) }
        })
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)  // pinned by an add in progress: left alone
        catalog.content.unpin(pin)  // that add died
        let report = try catalog.collectGarbage()
        #expect(report.unreferenced.map(\.sha256) == [orphan])
        #expect(t.hasObject(orphan))  // reported, not removed

        let adopted = try catalog.collectGarbage(.adopt).adopted
        #expect(adopted.map(\.name) == ["recovered-\(orphan)"])
        #expect(adopted[0].tags == ["recovered"] && adopted[0].size == 6)
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)

        try catalog.remove(adopted[0].id)
        let (again, _, pinAgain) = try catalog.content.ingest(producing: { emit in
            try Data("orphan again".utf8).withUnsafeBytes { try emit($0) }
        })
        catalog.content.unpin(pinAgain)
        let purged = try catalog.collectGarbage(.purge).purged
        #expect(purged == [t.objectPath(again)])
        #expect(!t.hasObject(again))
        #expect(t.hasObject(kept.sha256))  // used content is never purged
    }
}

@Test func membersOfAnArchiveDamagedAfterTheAddAreReportedDamaged() async throws {
    let t = try TestCatalog()
    let catalog = try t.create()
    let added = try await catalog.addAndRunJobs([try testArchive(in: t)])
    let archive = try #require(added.first)
    let path = t.objectPath(archive.sha256)
    try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
    try Data(repeating: 0x55, count: 1024).write(to: URL(fileURLWithPath: path))  // no longer a tar
    let report = try await catalog.verify()
    #expect(report.checked == 3)
    #expect(report.issues.map(\.problem) == [.damaged, .damaged, .damaged])
}
