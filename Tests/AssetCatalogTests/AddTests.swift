import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

@Suite struct AddTests {
    @Test func recursiveAddWithTagsKindsAndStableOrder() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        try t.file("tree/b/photo.PNG", "png")
        try t.file("tree/a/notes.md", "md")
        try t.file("tree/a/deeper/song.flac", "flac")
        let result = try await catalog.add(
            [t.sources.appending(path: "tree").path], options: .init(tags: ["x", "y"], recursive: true))
        #expect(result.failures.isEmpty && !result.wasCancelled)
        #expect(result.added.map(\.name) == ["song.flac", "notes.md", "photo.PNG"])
        #expect(result.added.map(\.kind) == ["audio", "text", "image"])
        #expect(result.added.allSatisfy { $0.tags == ["x", "y"] && $0.storage == .managed })
        #expect(try catalog.assets(AssetQuery(kind: "image")).map(\.name) == ["photo.PNG"])
        #expect(try catalog.assets(AssetQuery(tag: "y")).count == 3)
        #expect(try catalog.assets(AssetQuery(tag: "z")).isEmpty)
    }

    /// The digest an add records is SHA-256 in lowercase hex (the test vectors of FIPS 180-2).
    @Test func digestsAreLowercaseHexSHA256() throws {
        let t = try TestCatalog()
        let vectors = [
            "": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ]
        for (text, expected) in vectors {
            let path = try t.file("vector-\(text.count).txt", text)
            #expect(try ContentStore.digest(ofFileAt: path).digest == expected)
        }
    }

    @Test func badInputIsRefusedBeforeAnythingIsAdded() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let good = try t.file("good.txt", "fine")
        let directory = t.sources.appending(path: "dir")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let missing = t.sources.appending(path: "missing.txt").path
        await #expect(throws: CatalogError.self) {
            try await catalog.add([good, missing])
        }
        do {
            _ = try await catalog.add([good, directory.path])
        } catch let error as CatalogError {
            #expect(error.message == "\(directory.path) is a directory; add it with --recursive")
        }
        do {
            _ = try await catalog.add([good], options: .init(tags: ["two\nlines"]))
        } catch let error as CatalogError {
            #expect(error.message == "Invalid tag \"two\\nlines\": tags are non-empty, one line")
        }
        #expect(try catalog.assets().isEmpty)
    }

    @Test func anArchiveThatCannotBeIndexedFailsItsJobWithTheReason() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let good = try t.file("good.txt", "fine")
        let corrupt = testAsset("archives/corrupt-data.zip")
        let result = try await catalog.add([good, corrupt])
        #expect(result.added.map(\.name) == ["good.txt", "corrupt-data.zip"])
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.failed == 1)
        let job = try #require(try catalog.jobs.list([.failed]).first)
        #expect(job.kind == "index-archive" && job.attempts == 1)
        #expect(
            job.error
                == "Could not index the archive corrupt-data.zip: member 'data.bin': ZIP bad CRC: 0xa55d0e04 should be 0x51a02e01"
        )
        #expect(try catalog.assets().count == 2)  // no member recorded
    }

    @Test func forEachAssetPagesThroughEverything() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let files = try (0..<25).map { try t.file("p\(String(format: "%02d", $0))", "page \($0)") }
        _ = try await catalog.add(files, options: .init(tags: ["x"]))
        var seen: [String] = []
        try catalog.forEachAsset(AssetQuery(tag: "x"), pageSize: 10) { seen.append($0.name) }
        #expect(seen == files.map { ($0 as NSString).lastPathComponent })
    }

    @Test func identicalContentIsStoredOnce() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add([try t.file("a", "same bytes"), try t.file("b", "same bytes")]).added
        #expect(try catalog.stats().objectFiles == 1)
        #expect(added[0].sha256 == added[1].sha256)
    }

    @Test func archivesGetOneRecordPerMemberAndMembersCanBeRead() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let queued = try await catalog.add([try testArchive(in: t)])
        #expect(queued.added.map(\.storage) == [.managed])  // members come from the index job
        #expect(queued.queuedJobs.count == 1)
        _ = try await catalog.jobs.runUntilIdle()
        let added = try catalog.assets()
        #expect(added.map(\.storage) == [.managed, .member, .member])
        #expect(added[0].kind == "archive")
        let readme = try #require(added.first { $0.member == "docs/readme.txt" })
        #expect(readme.archive == added[0].id)
        var bytes = Data()
        try catalog.read(readme.id) { bytes.append(contentsOf: $0) }
        #expect(String(decoding: bytes, as: UTF8.self) == "read me\n")
        let source = t.sources.appending(path: "pack/docs/readme.txt").path
        #expect(readme.sha256 == (try ContentStore.digest(ofFileAt: source).digest))
        #expect(readme.size == 8)
    }

    @Test func cancellingCommitsWhatIsCompleteAndLeavesNoDebris() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let files = try (0..<300).map { try t.file("many/f\($0)", "file number \($0)") }
        let box = TaskBox()
        let task = Task {
            try await catalog.add(files, options: .init(concurrency: 2, batchSize: 16)) { progress in
                if progress.filesDone == 40 { box.cancel() }
            }
        }
        box.task = task
        let result = try await task.value
        #expect(result.wasCancelled)
        #expect(result.added.count >= 40 && result.added.count < 300)
        #expect(try catalog.assets().count == result.added.count)  // everything reported is committed
        let report = try catalog.collectGarbage()
        #expect(report.unreferenced.isEmpty)  // nothing half-done in objects/
        #expect(t.stagingEntries().count == 2)  // only this process's own (empty) folder and lock
        let own = try FileManager.default.contentsOfDirectory(atPath: catalog.content.ownStaging)
        #expect(own.isEmpty)
    }
}

/// Lets a progress callback cancel the task it runs in.
final class TaskBox: @unchecked Sendable {
    private let lock = NSLock()
    private var _task: Task<AddResult, any Error>?
    var task: Task<AddResult, any Error>? {
        get { lock.withLock { _task } }
        set { lock.withLock { _task = newValue } }
    }
    func cancel() { task?.cancel() }
}

/// A committed fixture from the top-level TestAssets folder.
func testAsset(_ path: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "TestAssets").appending(path: path).path
}

@Test func membersWhoseNamesLibarchiveReadsAsTheSameBytesAreKeptApart() async throws {
    // sample.tar.gz (Python's pax) holds "résumé.txt" spelled NFC and NFD; libarchive reads both as NFC.
    let t = try TestCatalog()
    let catalog = try t.create()
    let added = try await catalog.addAndRunJobs([testAsset("archives/sample.tar.gz")])
    let twins = added.filter { $0.member == "sample/r\u{e9}sum\u{e9}.txt" }
    #expect(twins.count == 2)
    #expect(twins.map(\.memberOrdinal) == [0, 1])
    var contents: [String] = []
    for twin in twins {
        var bytes = Data()
        try catalog.read(twin.id) { bytes.append(contentsOf: $0) }
        contents.append(String(decoding: bytes, as: UTF8.self))
    }
    #expect(contents == ["NFC name\n", "NFD name\n"])
    #expect(try await catalog.verify().issues.isEmpty)
}
