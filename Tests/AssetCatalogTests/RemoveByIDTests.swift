import AssetCatalogTestSupport
import Foundation
import Persistence
import Testing

@testable import AssetCatalog

/// ``Catalog/removeRows(_:)`` deletes by ID as rows (a batch deletion, no objects): one
/// transaction, archive members with their archives, each content's file once no asset uses
/// it — and says what went as ``Catalog/remove(_:dryRun:)`` does.
@Suite struct RemoveByIDTests {
    @Test func theAssetsGoAsRowsAndTheResultListsThemWithTheirMembersAndFiles() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let archive = try #require(try await catalog.addAndRunJobs([try testArchive(in: t)]).first)
        let members = try catalog.assets().filter { $0.archive == archive.id }
        #expect(members.count == 2)
        let added = try await catalog.add([
            t.file("a.txt", "hello\n"), t.file("b.txt", "bye\n"), t.file("copy.txt", "hello\n"),
            t.file("c.txt", "sea\n"),
        ]).added
        let notifications = catalog.saveNotifications()

        // b twice, and a member of the archive that goes anyway: each goes once.
        let result = try catalog.removeRows([added[1].id, archive.id, added[0].id, added[1].id, members[0].id])
        #expect(!result.wasDryRun)
        #expect(result.removed.map(\.id) == ([archive.id] + members.map(\.id) + [added[0].id, added[1].id]).sorted())
        #expect(
            result.removed.map(\.name)
                == result.removed.map { r in
                    ([archive] + members + added).first { $0.id == r.id }!.name
                })
        // hello stays (copy.txt uses it); the archive's file and bye's go.
        #expect(result.filesRemoved == [archive.sha256, added[1].sha256].sorted().map(t.objectPath))
        #expect(!t.hasObject(archive.sha256) && !t.hasObject(added[1].sha256) && t.hasObject(added[0].sha256))
        #expect(try catalog.assets().map(\.name) == ["copy.txt", "c.txt"])

        // One save, naming the deleted rows by range rather than by object.
        // (The sweep after the commit saves too, and may be announced first.)
        var iterator = notifications.makeAsyncIterator()
        var note = try #require(await iterator.next())
        func namesAssets(_ note: SaveNotification) -> Bool {
            note.deletedRowRanges[Asset.entityName] != nil
                || note.deletedObjectIDs.contains { $0.entityName == Asset.entityName }
        }
        for _ in 0..<3 where !namesAssets(note) { note = try #require(await iterator.next()) }
        #expect(!note.deletedObjectIDs.contains { $0.entityName == Asset.entityName })
        #expect(RowIDSet(note.deletedRowRanges[Asset.entityName] ?? []).count == 5)
    }

    @Test func anIDNoAssetHasRemovesNothing() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([t.file("a.txt", "hello\n"), t.file("b.txt", "bye\n")]).added
        let before = try catalog.assets()
        for ids in [[added[0].id, AssetID(99), added[1].id], [AssetID(99)]] {
            let error = #expect(throws: CatalogError.self) { try catalog.removeRows(ids) }
            #expect(error?.code == .notFound)
            #expect(error?.message == "No asset with ID 99; list assets with `assetcat ls`")
            #expect(try catalog.assets() == before)
            for record in added { #expect(t.hasObject(record.sha256)) }
        }
    }
}
