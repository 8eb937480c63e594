import AssetCatalogTestSupport
import Foundation
@_spi(Testing) import Persistence
import TestScratch
import Testing

@testable import AssetCatalog

/// `stats` reads counts the store keeps in the transactions that change assets
/// (`Asset.tallies`): after every way of writing assets, after rollbacks, failed saves
/// and kills, they are what the assets count; a repair recounts them and says which were wrong.
@Suite struct StatisticsTests {
    /// The statistics counted from the assets themselves, as `stats` did before it kept counts.
    static func counted(_ catalog: Catalog) throws -> CatalogStats {
        let all = try catalog.assets()
        var stats = CatalogStats(
            assets: all.count, managed: 0, referenced: 0, members: 0, archives: 0, totalBytes: 0, objectFiles: 0,
            objectBytes: 0, pendingRemovals: 0, tags: [:], kinds: [:])
        var contents: [String: Int64] = [:]
        for a in all {
            switch a.storage {
            case .managed: stats.managed += 1
            case .referenced: stats.referenced += 1
            case .member: stats.members += 1
            }
            if a.kind == "archive" { stats.archives += 1 }
            stats.totalBytes += a.size
            for t in a.tags { stats.tags[t, default: 0] += 1 }
            stats.kinds[a.kind, default: 0] += 1
            if a.storage == .managed { contents[a.sha256] = a.size }
        }
        stats.objectFiles = contents.count
        stats.objectBytes = contents.values.reduce(0, +)
        stats.pendingRemovals = try catalog.withContext { try $0.count(for: FetchRequest<RemovalPlan>()) }
        return stats
    }

    /// The kept statistics are the counted ones, and a recount finds nothing wrong.
    static func expectExact(
        _ catalog: Catalog, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        #expect(try catalog.stats() == counted(catalog), comment, sourceLocation: sourceLocation)
        #expect(try catalog.container.recountTallies(fix: false) == [], comment, sourceLocation: sourceLocation)
    }

    @Test func addRemoveAndArchiveCascadeKeepThemExact() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([
            try t.file("a.txt", "same"), try t.file("b.txt", "same"), try t.file("c.png", "picture"),
        ]).added
        // A referenced file's digest job writes its size and digest: a change to counted values.
        _ = try await catalog.addAndRunJobs(
            [try t.file("ref.txt", "referenced")], options: AddOptions(mode: .reference))
        try Self.expectExact(catalog)
        var stats = try catalog.stats()
        #expect(
            (stats.assets, stats.managed, stats.referenced, stats.objectFiles, stats.objectBytes) == (4, 3, 1, 2, 11))
        #expect(stats.kinds == ["text": 3, "image": 1])

        for (name, text) in ["inner/one.txt": "one\n", "inner/two.txt": "two\n"] { try t.file("pack/" + name, text) }
        let archive = t.sources.appending(path: "pack.tar").path
        try await Self.run("/usr/bin/bsdtar", ["-cf", archive, "-C", t.sources.appending(path: "pack").path, "inner"])
        let pack = try await catalog.addAndRunJobs([archive])
        #expect(pack.count == 3)
        try Self.expectExact(catalog)
        stats = try catalog.stats()
        #expect((stats.members, stats.archives) == (2, 1))

        try catalog.remove(added[0].id)  // its content stays: b.txt has it
        try Self.expectExact(catalog)
        #expect(try catalog.stats().objectFiles == 3)
        try catalog.remove(pack[0].id)  // the archive and, by the cascade, its members
        try Self.expectExact(catalog)
        stats = try catalog.stats()
        #expect((stats.assets, stats.members, stats.archives, stats.objectFiles) == (3, 0, 0, 2))
        #expect(try catalog.removeAll(AssetQuery()) == 3)  // a batch delete
        try Self.expectExact(catalog)
        #expect(
            try catalog.stats()
                == CatalogStats(
                    assets: 0, managed: 0, referenced: 0, members: 0, archives: 0, totalBytes: 0, objectFiles: 0,
                    objectBytes: 0, pendingRemovals: 0, tags: [:], kinds: [:]))
    }

    @Test func aContentChangeARollbackAFailedSaveAndAChildContextKeepThemExact() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([try t.file("a.txt", "first"), try t.file("b.txt", "second")]).added
        let other = added[1]
        let before = try catalog.stats()

        // An asset whose content changes in place: to b.txt's, then to nothing managed.
        try catalog.withContext { context in
            let asset = try catalog.existingAsset(added[0].id, in: context)
            asset.sha256 = other.sha256
            asset.size = other.size
            asset.kind = "document"
            try context.save()
        }
        try Self.expectExact(catalog)
        #expect(try catalog.stats().objectFiles == 1)
        #expect(try catalog.stats().kinds == ["document": 1, "text": 1])

        try catalog.withContext { context in
            let asset = try catalog.existingAsset(other.id, in: context)
            context.delete(asset)
            asset.managedObjectContext?.rollback()
            let child = context.newChildContext()
            let copy = try child.existingObject(with: asset.objectID, as: Asset.self)
            copy.size = 1_000
            try child.save()  // reaches the parent only
            #expect(try catalog.stats().totalBytes == 2 * other.size)
            struct DiskFull: Error {}
            catalog.container.failNextCommit(with: DiskFull())
            #expect(throws: (any Error).self) { try context.save() }
            context.rollback()
        }
        try Self.expectExact(catalog)
        #expect(try catalog.stats().totalBytes == 2 * other.size)
        #expect(before.assets == 2)
    }

    @Test func anImportThatReplacesKeepsThemExact() async throws {
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "bundle.tar").path
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            _ = try await catalog.add([try source.file("a.txt", "new a\n"), try source.file("n.png", "png")])
            _ = try await catalog.export(to: bundle)
        }
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "old a\n")])
        let result = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .replace))
        #expect(result.replaced.items.count == 1)
        try Self.expectExact(catalog)
        #expect(try catalog.stats().objectFiles == 2)
        #expect(try catalog.stats().assets == 2)
    }

    @Test func killedBetweenTheDeletionsCommitAndItsSweepTheCountsAreRight() async throws {
        let t = try TestCatalog()
        let (doomed, kept): (AssetRecord, AssetRecord)
        do {
            let catalog = try t.create()
            let added = try await catalog.add([try t.file("a.txt", "doomed"), try t.file("b.txt", "kept")]).added
            (doomed, kept) = (added[0], added[1])
            catalog.close()
        }
        let run = try await t.run(["rm", "\(doomed.id)"], environment: ["ASSETCAT_FAULT": "after-commit"])
        #expect(run.status == 86)  // died at the fault point
        #expect(t.hasObject(doomed.sha256))
        do {  // read as the kill left it: the file waits for its removal, counted as pending
            let catalog = try Catalog.open(at: t.root, options: .init(access: .readOnly))
            defer { catalog.close() }
            let stats = try catalog.stats()
            #expect((stats.assets, stats.objectFiles, stats.objectBytes, stats.pendingRemovals) == (1, 1, kept.size, 1))
            try Self.expectExact(catalog)
        }
        let catalog = try t.open()  // the open finishes the removal
        defer { catalog.close() }
        #expect(!t.hasObject(doomed.sha256))
        let stats = try catalog.stats()
        #expect((stats.assets, stats.objectFiles, stats.objectBytes, stats.pendingRemovals) == (1, 1, kept.size, 0))
        try Self.expectExact(catalog)
    }

    @Test func killedInTheMiddleOfAnAddTheCountsAreRight() async throws {
        let t = try TestCatalog()
        do {
            let catalog = try t.create()
            _ = try await catalog.add([try t.file("first.txt", "first")])
            catalog.close()
        }
        let run = try await t.run(
            ["add", try t.file("new.txt", "linked, never recorded")],
            environment: ["ASSETCAT_FAULT": "before-add-commit"])
        #expect(run.status == 86)
        let catalog = try t.open()
        defer { catalog.close() }
        let stats = try catalog.stats()
        #expect((stats.assets, stats.objectFiles, stats.pendingRemovals) == (1, 1, 0))
        try Self.expectExact(catalog)
    }

    /// An add's batches are counted a batch at a time (not by a trigger a row): contents
    /// repeated within a batch, across batches and already in the catalog count once, and a
    /// process killed before a large batch commits leaves the counts of what did commit.
    @Test func largeAddsCountContentOnceAndAKilledOneLeavesTheCountsRight() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        _ = try await catalog.add([try t.file("old.txt", "content 0")])
        var paths: [String] = []
        for i in 0..<300 { paths.append(try t.file("many/f\(i).txt", "content \(i % 40)")) }
        let result = try await catalog.add(paths, options: AddOptions(batchSize: 64))
        #expect(result.addedCount == 300)
        try Self.expectExact(catalog)
        var stats = try catalog.stats()
        #expect((stats.assets, stats.managed, stats.objectFiles) == (301, 301, 40))
        catalog.close()

        var more: [String] = []
        for i in 0..<100 { more.append(try t.file("more/g\(i).txt", "other \(i)")) }
        let run = try await t.run(["add"] + more, environment: ["ASSETCAT_FAULT": "before-add-commit"])
        #expect(run.status == 86)
        let reopened = try t.open()
        defer { reopened.close() }
        stats = try reopened.stats()
        #expect((stats.assets, stats.objectFiles, stats.pendingRemovals) == (301, 40, 0))
        try Self.expectExact(reopened)
    }

    /// Assets per tag are kept as the other counts are (`AssetTag.tallies`): through adds
    /// with tags, archive members that take their archive's, tag changes, a rolled-back
    /// change, a deletion's cascade and a batch delete; a repair fixes a tampered one.
    @Test func tagCountsAreKeptInTheTransactionsThatChangeTags() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add(
            [try t.file("a.txt", "a"), try t.file("b.txt", "b")], options: AddOptions(tags: ["red", "blue"])
        ).added
        for (name, text) in ["inner/one.txt": "one\n", "inner/two.txt": "two\n"] { try t.file("pack/" + name, text) }
        let archive = t.sources.appending(path: "pack.tar").path
        try await Self.run("/usr/bin/bsdtar", ["-cf", archive, "-C", t.sources.appending(path: "pack").path, "inner"])
        let pack = try await catalog.addAndRunJobs([archive], options: AddOptions(tags: ["packed"]))
        try Self.expectExact(catalog)
        #expect(try catalog.stats().tags == ["red": 2, "blue": 2, "packed": 3])

        _ = try catalog.tag([added[0].id], adding: ["green"], removing: ["red"])
        try catalog.withContext { context in
            let asset = try catalog.existingAsset(added[1].id, in: context)
            asset.tags = ["gone"]
            context.rollback()
        }
        try Self.expectExact(catalog)
        #expect(try catalog.stats().tags == ["red": 1, "blue": 2, "green": 1, "packed": 3])

        try catalog.remove(pack[0].id)  // the archive and, by the cascade, its members
        try Self.expectExact(catalog)
        #expect(try catalog.stats().tags == ["red": 1, "blue": 2, "green": 1])
        #expect(try catalog.removeAll(AssetQuery(tags: ["blue"], excludingTags: ["green"])) == 1)
        try Self.expectExact(catalog)
        #expect(try catalog.stats().tags == ["blue": 1, "green": 1])
        catalog.close()

        try await Self.tamper(
            t.root.appending(path: "catalog.sqlite"),
            "UPDATE _persistence_tallies SET n = 5 WHERE tally = 'tag' AND key = 'blue';")
        let again = try t.open()
        defer { again.close() }
        #expect(try again.stats().tags == ["blue": 5, "green": 1])
        #expect(
            try again.repairStatistics() == ["statistics: assets tagged 'blue' were recorded as 5, counted 1; fixed"])
        try Self.expectExact(again)
    }

    @Test func aCatalogOfTheLastReleaseGetsItsCountsOnItsFirstOpen() throws {
        let t = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: t.root.path)
        let catalog = try t.open()
        defer { catalog.close() }
        try Self.expectExact(catalog)
        let stats = try catalog.stats()
        #expect((stats.assets, stats.members, stats.archives) == (14, 6, 2))
        #expect(!stats.tags.isEmpty)  // counted from the tag rows its upgrade made
        #expect(try catalog.repairStatistics() == [])
    }

    @Test func aRepairSaysWhichCountsWereWrongAndFixesThem() async throws {
        let t = try TestCatalog()
        do {
            let catalog = try t.create()
            _ = try await catalog.add([try t.file("a.txt", "aaaa"), try t.file("b.png", "bb")])
            catalog.close()
        }
        try await Self.tamper(
            t.root.appending(path: "catalog.sqlite"),
            """
            UPDATE _persistence_tallies SET n = 7, total = 70 WHERE tally = 'kind' AND key = 'text';
            UPDATE _persistence_tallies SET n = 9 WHERE tally = 'objects' AND key = '';
            """)
        do {  // a read-only catalog is checked, not changed
            let reader = try Catalog.open(at: t.root, options: .init(access: .readOnly))
            defer { reader.close() }
            #expect(
                try reader.repairStatistics().first
                    == "statistics: assets of kind 'text' were recorded as 7 (70 bytes), counted 1 (4 bytes); "
                    + "not fixed (the catalog is read-only)")
            #expect(try reader.stats().kinds["text"] == 7)
        }
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.stats().kinds["text"] == 7)  // stats reads the counts as kept
        #expect(
            try catalog.repairStatistics() == [
                "statistics: assets of kind 'text' were recorded as 7 (70 bytes), counted 1 (4 bytes); fixed",
                "statistics: files in objects/ were recorded as 9 (6 bytes), counted 2 (6 bytes); fixed",
            ])
        try Self.expectExact(catalog)
        #expect(try catalog.stats().kinds == ["text": 1, "image": 1])
        #expect(try catalog.repairStatistics() == [])
    }

    static func tamper(_ url: URL, _ sql: String) async throws {
        try await run("/usr/bin/sqlite3", [url.path, sql])
    }

    static func run(_ tool: String, _ arguments: [String]) async throws {
        let run = try await ChildProcess.run(tool, arguments)
        #expect(run.status == 0, "\(run.stderrText)")
    }
}
