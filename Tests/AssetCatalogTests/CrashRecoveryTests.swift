import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// A crash anywhere loses nothing and leaves no debris: the `assetcat`
/// process is made to die (`ASSETCAT_FAULT`) at each point of interest, then
/// the catalog is reopened.
@Suite struct CrashRecoveryTests {
    @Test func killedBetweenCommitAndUnlinkTheNextOpenFinishesTheRemoval() async throws {
        let t = try TestCatalog()
        let record: AssetRecord
        do {
            let catalog = try t.create()
            record = try #require(try await catalog.add([try t.file("a.txt", "doomed")]).added.first)
            catalog.close()
        }
        let run = try await t.run(["rm", "\(record.id)"], environment: ["ASSETCAT_FAULT": "after-commit"])
        #expect(run.status == 86)  // died at the fault point
        #expect(t.hasObject(record.sha256))  // the deletion committed, the file is still there…
        let catalog = try t.open()  // …until the next open finishes the journaled removal
        #expect(!t.hasObject(record.sha256))
        #expect(try catalog.assets().isEmpty)
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    @Test func killedInsideTheSweepBeforeUnlinkingNothingIsLost() async throws {
        let t = try TestCatalog()
        let (kept, doomed): (AssetRecord, AssetRecord)
        do {
            let catalog = try t.create()
            let added = try await catalog.add([try t.file("keep.txt", "keep"), try t.file("go.txt", "go")]).added
            (kept, doomed) = (added[0], added[1])
            catalog.close()
        }
        let run = try await t.run(["rm", "\(doomed.id)"], environment: ["ASSETCAT_FAULT": "before-unlink"])
        #expect(run.status == 86)
        #expect(t.hasObject(doomed.sha256))
        let catalog = try t.open()
        #expect(!t.hasObject(doomed.sha256))
        #expect(t.hasObject(kept.sha256))
        #expect(try catalog.assets().map(\.id) == [kept.id])
    }

    @Test func killedInTheMiddleOfASweepPageTheNextOpenFinishesIt() async throws {
        let t = try TestCatalog()
        let (kept, shared, doomed): (AssetRecord, AssetRecord, [AssetRecord])
        do {
            let catalog = try t.create()
            let added = try await catalog.add(
                [try t.file("keep.txt", "shared"), try t.file("copy.txt", "shared")]
                    + (0..<4).map { try t.file("go\($0).txt", "go \($0)") }
            ).added
            (kept, shared, doomed) = (added[0], added[1], Array(added[2...]))
            catalog.close()
        }
        // One page of five plans (one for content still in use): the process dies before the
        // third unlink, after two, inside the page's transaction.
        let run = try await t.run(
            ["rm", "\(shared.id)"] + doomed.map { "\($0.id)" },
            environment: ["ASSETCAT_FAULT": "before-unlink", "ASSETCAT_FAULT_AT": "3"])
        #expect(run.status == 86)
        #expect(doomed.filter { t.hasObject($0.sha256) }.count == 2)
        let catalog = try t.open()  // the plans stayed: the open finishes the page
        #expect(doomed.allSatisfy { !t.hasObject($0.sha256) })
        #expect(t.hasObject(kept.sha256))  // still used by keep.txt
        #expect(try catalog.assets().map(\.id) == [kept.id])
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    @Test func killedBetweenStagingAndCommitTheNextOpenClearsStaging() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let source = try t.file("new.txt", "staged but never committed")
        let run = try await t.run(["add", source], environment: ["ASSETCAT_FAULT": "after-stage"])
        #expect(run.status == 86)
        #expect(t.stagingEntries().count == 2)  // the dead process's folder and lock, with its staged copy
        let catalog = try t.open()
        #expect(try catalog.assets().isEmpty)
        // Only the new process's own folder and lock remain; nothing reached objects/.
        #expect(t.stagingEntries().count == 2)
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
        catalog.close()
        #expect(t.stagingEntries().isEmpty)  // a clean close leaves staging empty
    }

    @Test func aLiveProcessStagingIsNeverTouchedByAnotherOpen() throws {
        let t = try TestCatalog()
        let first = try t.create()
        let staged = first.content.ownStaging + "/in-progress"
        try Data("mine".utf8).write(to: URL(fileURLWithPath: staged))
        let second = try t.open()  // clears abandoned staging only
        #expect(FileManager.default.fileExists(atPath: staged))
        second.close()
        first.close()
    }
}
