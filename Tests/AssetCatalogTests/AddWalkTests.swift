import AssetCatalogTestSupport
import Foundation
import Locking
import Synchronization
import Testing

@testable import AssetCatalog

/// An add walks its directories a directory at a time (never holding the list of its files)
/// and commits batches while it reads: what it records, in which order, and what it reports
/// stay those of an add that listed everything first.
@Suite struct AddWalkTests {
    /// Names whose full paths sort differently from a walk that sorts each directory's names
    /// alone: `a.txt` and `a-b/` come before the files of `a/` (`.` and `-` sort before `/`).
    static let tricky = [
        "tree/a/x.txt", "tree/a/b/c.txt", "tree/a/b-c.txt", "tree/a.txt", "tree/a-b/y.txt", "tree/a b/z.txt",
        "tree/.hidden", "tree/B.txt", "tree/caf\u{E9}.txt", "tree/cafe\u{301}-nfd.txt", "tree/z/deep/er/est.txt",
    ]

    @Test(arguments: [AddOptions.Mode.copy, .reference])
    func filesAreRecordedInTheSortedOrderOfTheirFullPaths(mode: AddOptions.Mode) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let paths = try Self.tricky.map { try t.file($0, "content of \($0)\n") }
        let result = try await catalog.add(
            [t.sources.appending(path: "tree").path], options: AddOptions(mode: mode, recursive: true, batchSize: 3))
        #expect(result.failures.isEmpty && !result.wasCancelled)
        let expected = paths.sorted()
        #expect(result.added.map(\.path) == expected)
        #expect(result.filesFound == expected.count && result.addedCount == expected.count)
        // IDs follow that order across the batches.
        #expect(try catalog.assets().sorted { $0.id < $1.id }.map(\.path) == expected)
    }

    @Test func namedPathsKeepTheirOrderAndEachDirectoryIsSortedWithin() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let later = try t.file("z-first.txt", "named first\n")
        for name in ["two/b.txt", "two/a/c.txt", "one/x.txt"] { try t.file(name, name) }
        let two = t.sources.appending(path: "two").path
        let one = t.sources.appending(path: "one").path
        let result = try await catalog.add([later, two, one], options: AddOptions(recursive: true))
        #expect(result.added.map(\.path) == [later, two + "/a/c.txt", two + "/b.txt", one + "/x.txt"])
    }

    /// Without records kept, the result counts what was added and queued, and lists nothing.
    @Test func anAddThatKeepsNoRecordsCountsWhatItAddedAndQueued() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        for i in 0..<40 { try t.file("many/f\(String(format: "%02d", i)).txt", "file \(i)\n") }
        try t.file("many/photo.jpg", "JFIF")
        let result = try await catalog.add(
            [t.sources.appending(path: "many").path],
            options: AddOptions(recursive: true, batchSize: 7, keepsRecords: false))
        #expect(result.added.isEmpty && result.queuedJobs.isEmpty)
        #expect(result.addedCount == 41 && result.filesFound == 41)
        #expect(result.queuedJobCount == 2)  // the photo's metadata and thumbnail
        #expect(try catalog.assets().count == 41)
        #expect(try catalog.jobs.list().count == 2)
        // With records kept (the default), the counts are there too.
        let kept = try await catalog.add([t.sources.appending(path: "many").path], options: AddOptions(recursive: true))
        #expect(kept.added.count == 41 && kept.addedCount == 41 && kept.queuedJobCount == 2)
    }

    /// Progress: the totals before the first file, then every file once, to the totals.
    @Test func progressCountsEveryFileFromTheTotals() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        var bytes: Int64 = 0
        for i in 0..<150 {
            let text = String(repeating: "x", count: i)
            try t.file("p/\(i % 3)/f\(i)", text)
            bytes += Int64(text.utf8.count)
        }
        let seen = Mutex<[AddProgress]>([])
        let result = try await catalog.add(
            [t.sources.appending(path: "p").path], options: AddOptions(recursive: true, batchSize: 16)
        ) { progress in seen.withLock { $0.append(progress) } }
        #expect(result.addedCount == 150)
        let reports = seen.withLock { $0 }
        #expect(reports.count == 151)
        #expect(reports.first == AddProgress(filesDone: 0, filesTotal: 150, bytesDone: 0, bytesTotal: bytes))
        #expect(reports.last == AddProgress(filesDone: 150, filesTotal: 150, bytesDone: bytes, bytesTotal: bytes))
        #expect(reports.map(\.filesDone) == Array(0...150))
    }

    /// A file made after the count is added too, and the progress total grows to cover it.
    @Test func aFileMadeAfterTheCountIsAddedAndCounted() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        for i in 0..<5 { try t.file("grow/f\(i)", "file \(i)\n") }
        let grow = t.sources.appending(path: "grow").path
        let seen = Mutex<[AddProgress]>([])
        let result = try await Catalog.$afterCounting.withValue({
            _ = FileManager.default.createFile(atPath: grow + "/late", contents: Data("late\n".utf8))
        }) {
            try await catalog.add([grow], options: AddOptions(recursive: true)) { p in seen.withLock { $0.append(p) } }
        }
        #expect(result.addedCount == 6 && result.filesFound == 6)
        #expect(result.added.last?.name == "late")
        #expect(seen.withLock { $0.last }?.filesTotal == 6)
    }

    /// A tree that holds the catalog itself: the catalog's folder is not walked.
    @Test func theCatalogsOwnFolderIsNotWalked() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let a = try t.file("a.txt", "a\n")
        let both = t.root.deletingLastPathComponent().path  // holds catalog/ and sources/
        let result = try await catalog.add([both], options: AddOptions(recursive: true))
        #expect(result.added.map(\.path) == [a])
        #expect(result.failures.isEmpty)
    }

    /// The first walk reads each file's size only for the progress's byte total: an add with
    /// no `progress` (the CLI without a terminal, or with `--quiet`) is spared a look-up a file
    /// (a million `fstatat`s), and still counts every file.
    @Test func theCountReadsSizesOnlyForTheProgress() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        for name in Self.tricky { try t.file(name, "content of \(name)\n") }
        let bytes = Self.tricky.reduce(Int64(0)) { $0 + Int64("content of \($1)\n".utf8.count) }
        let tree = t.sources.appending(path: "tree").path
        let named = try Catalog.namedSources([tree], recursive: true, excluding: catalog.root.path)
        for needsSizes in [true, false] {
            let counted = SourceWalk.count(
                named, excluding: catalog.root.path, needsSizes: needsSizes, workers: 2, stopped: Locked(false))
            #expect(counted?.files == Self.tricky.count)
            #expect(counted?.bytes == (needsSizes ? bytes : 0))
        }
        let totals = Locked<[Int64]>([])
        let result = try await catalog.add([tree], options: AddOptions(mode: .reference, recursive: true)) { p in
            totals.withLock { $0.append(p.bytesTotal) }
        }
        #expect(result.filesFound == Self.tricky.count && result.addedCount == Self.tricky.count)
        #expect(totals.withLock { $0.first } == bytes)
    }
}
