import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `add` of a tree of several batches prints what it always printed, and records every file in
/// the order of its path.
@Suite struct AddOutputCLITests {
    @Test(arguments: [false, true])
    func addOfManyBatchesPrintsTheCountsAndRecordsInPathOrder(reference: Bool) async throws {
        let t = try TestCatalog()
        try t.create().close()
        var paths: [String] = []
        for i in 0..<1_300 {
            paths.append(try t.file("tree/\(i % 4)/f\(String(format: "%04d", i)).txt", "file \(i)\n"))
        }
        paths.append(try t.file("tree/photo.jpg", "JFIF"))
        paths.append(try t.file("tree/pack.zip", "not really a zip"))
        let tree = t.sources.appending(path: "tree").path
        // Jobs left queued: this is about the files (pack.zip's index job would fail).
        let run = try await t.run(["add", "--recursive", "--queue-only"] + (reference ? ["--reference"] : []) + [tree])
        #expect(run.status == 0)
        #expect(run.stdout == "added 1302 files\nqueued 3 jobs; run them with `assetcat jobs run`\n")
        #expect(run.stderr == "")  // no progress bar in a pipe
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.assets().sorted { $0.id < $1.id }.map(\.path) == paths.sorted())
    }

    @Test func addOfNothingNewSaysSo() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let empty = t.sources.appending(path: "empty").path
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let run = try await t.run(["add", "--recursive", empty])
        #expect(run.status == 0)
        #expect(run.stdout == "added 0 files\n")
    }
}
