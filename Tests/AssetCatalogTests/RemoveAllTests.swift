import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// ``Catalog/removeAll(_:dryRun:)``: the counts of a removal by query — the assets selected,
/// the archive members that go with them, and (for a dry run) the files of `objects/` that
/// would go — with nothing changed by a dry run.
@Suite struct RemoveAllTests {
    @Test func aDryRunCountsAssetsMembersAndFilesAndChangesNothing() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let archive = try #require(try await catalog.addAndRunJobs([try testArchive(in: t)]).first)
        #expect(try catalog.assets().filter { $0.archive == archive.id }.count == 2)
        let go = AddOptions(tags: ["go"])
        let selected = try await catalog.add(
            [t.file("a.txt", "hello\n"), t.file("b.txt", "bye\n"), t.file("b2.txt", "bye\n")], options: go
        ).added
        _ = try await catalog.add([t.file("copy.txt", "hello\n"), t.file("c.txt", "sea\n")])
        try catalog.tag([archive.id], adding: ["go"])
        let before = try catalog.assets()
        #expect(before.count == 8)

        let dry = try catalog.removeAll(AssetQuery(tag: "go"), dryRun: true)
        // The archive, a, b and b2; the archive's two members; the archive's file and bye's
        // (hello stays: copy.txt uses it; b and b2 share one file).
        #expect(dry == QueryRemovalResult(assets: 4, members: 2, files: 2, wasDryRun: true))
        #expect(try catalog.assets() == before)
        for record in selected + [archive] { #expect(t.hasObject(record.sha256)) }

        let done = try catalog.removeAll(AssetQuery(tag: "go"), dryRun: false)
        #expect(done == QueryRemovalResult(assets: 4, members: 2, files: nil, wasDryRun: false))
        #expect(try catalog.assets().map(\.name) == ["copy.txt", "c.txt"])
        #expect(!t.hasObject(archive.sha256) && !t.hasObject(selected[1].sha256))
        #expect(t.hasObject(selected[0].sha256))

        #expect(
            try catalog.removeAll(AssetQuery(tag: "go"), dryRun: true)
                == QueryRemovalResult(assets: 0, members: 0, files: 0, wasDryRun: true))
    }

    /// Over more assets and contents than a page holds (500): a dry run counts each content
    /// once; the removal, one transaction deleting a page of rows at a time, removes every
    /// content no asset left uses and keeps the one that is.
    @Test func selectionsOfSeveralPagesAreCountedAndRemoved() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        // 1,200 assets with 600 contents, each content twice.
        let paths = try (0..<1_200).map { try t.file("f/\($0).txt", "content \($0 / 2)\n") }
        _ = try await catalog.add(paths, options: AddOptions(tags: ["many"]))
        _ = try await catalog.add([t.file("keep.txt", "content 7\n")])  // keeps one content
        #expect(
            try catalog.removeAll(AssetQuery(tag: "many"), dryRun: true)
                == QueryRemovalResult(assets: 1_200, members: 0, files: 599, wasDryRun: true))
        let digests = try catalog.assets(AssetQuery(tag: "many")).map(\.sha256)
        #expect(Set(digests).count == 600)
        #expect(
            try catalog.removeAll(AssetQuery(tag: "many"), dryRun: false)
                == QueryRemovalResult(assets: 1_200, members: 0, files: nil, wasDryRun: false))
        let kept = try #require(try catalog.assets().first)
        #expect(try catalog.assets().map(\.name) == ["keep.txt"])
        #expect(Set(digests).filter { t.hasObject($0) } == [kept.sha256])
        #expect(try catalog.stats().pendingRemovals == 0)
    }
}
