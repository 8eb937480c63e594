import ArchiveIO
import AssetCatalogTestSupport
import Foundation
@_spi(Testing) import Persistence
import TestScratch
import Testing

@testable import AssetCatalog
@testable import PersistencePostgreSQL

/// `Catalog.search`: words in names, member paths and their archive's name, tags and
/// metadata, with filters — on SQLite (FTS5) and PostgreSQL (`tsvector`) alike; an index the
/// store writes in the transaction of the records (a failed save leaves it as it was; bulk
/// adds and removals keep it), that `verify` checks and rebuilds, and that an upgraded
/// catalog gets.
@Suite struct SearchTests {
    enum Store: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, postgresql
        var testDescription: String { rawValue }
    }

    /// A new catalog on `store` (a test on PostgreSQL is cancelled without a server).
    struct Made {
        let t: TestCatalog
        let catalog: Catalog
        let shared: JobsOnPostgreSQLTests.SharedCatalog?

        init(_ store: Store) throws {
            switch store {
            case .sqlite:
                t = try TestCatalog()
                catalog = try t.create()
                shared = nil
            case .postgresql:
                let (shared, catalog) = try JobsOnPostgreSQLTests.SharedCatalog.make()
                t = shared.t
                self.catalog = catalog
                self.shared = shared
            }
        }

        /// Runs statements (`;`-separated) on the store outside the catalog, to damage it.
        func damage(sqlite: String, postgresql: String) async throws {
            if let shared {
                let connection = try PostgreSQLConnection(
                    try PostgreSQLLocation(shared.url), logger: Catalog.OpenOptions().logger)
                defer { connection.close() }
                for statement in postgresql.split(separator: ";") {
                    _ = try connection.run(statement.replacingOccurrences(of: "SCHEMA", with: shared.schema), [])
                }
            } else {
                let store = t.root.appending(path: "catalog.sqlite").path
                let script = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2])"
                let outcome = try await ChildProcess.run("/usr/bin/python3", ["-c", script, store, sqlite])
                #expect(outcome.status == 0, "\(outcome.stderrText)")
            }
        }
    }

    /// beach_2024.png (tagged trip), notes.txt (metadata camera=Leica), and photos.tar with
    /// inner/Sunset.jpg and inner/readme.txt.
    func populated(_ store: Store) async throws -> Made {
        let made = try Made(store)
        let t = made.t
        let archive = t.sources.appending(path: "photos.tar").path
        try FileManager.default.createDirectory(atPath: t.sources.path, withIntermediateDirectories: true)
        let writer = try ArchiveWriter(path: archive, format: .tar)
        try writer.writeEntry(ArchiveEntry(path: "inner/Sunset.jpg", kind: .file), contents: Array("JFIF".utf8))
        try writer.writeEntry(ArchiveEntry(path: "inner/readme.txt", kind: .file), contents: Array("read\n".utf8))
        try writer.finish()
        let beach = try t.file("beach_2024.png", "png")
        let notes = try t.file("notes.txt", "notes\n")
        _ = try await made.catalog.addAndRunJobs([beach], options: AddOptions(tags: ["trip"]))
        let added = try await made.catalog.addAndRunJobs([notes, archive])
        let notesID = try #require(added.first { $0.name == "notes.txt" }?.id)
        _ = try made.catalog.setMetadata(notesID, ["camera": "Leica"])
        return made
    }

    func names(_ catalog: Catalog, _ query: String) throws -> [String] {
        try catalog.search(SearchQuery(parsing: query), limit: 100).assets.map(\.location)
    }

    @Test(arguments: Store.allCases) func wordsAndFiltersFindWhatTheySay(_ store: Store) async throws {
        let made = try await populated(store)
        let catalog = made.catalog
        defer { catalog.close() }
        // A name's words, whatever their case and separators; a phrase in order only.
        #expect(try names(catalog, "BEACH") == ["beach_2024.png"])
        #expect(try names(catalog, "\"beach 2024\"") == ["beach_2024.png"])
        #expect(try names(catalog, "\"2024 beach\"") == [])
        #expect(try names(catalog, "beach_2024.png") == ["beach_2024.png"])
        // A member by its path, and by its archive's name; a prefix.
        #expect(try names(catalog, "sunset") == ["photos.tar:inner/Sunset.jpg"])
        #expect(
            try Set(names(catalog, "photos")) == [
                "photos.tar", "photos.tar:inner/Sunset.jpg", "photos.tar:inner/readme.txt",
            ])
        #expect(try names(catalog, "photos sun*") == ["photos.tar:inner/Sunset.jpg"])
        // Tags and metadata.
        #expect(try names(catalog, "trip") == ["beach_2024.png"])
        #expect(try names(catalog, "leica") == ["notes.txt"])
        // Filters alone and with words.
        #expect(try Set(names(catalog, "ext:txt")) == ["notes.txt", "photos.tar:inner/readme.txt"])
        #expect(try Set(names(catalog, "ext:txt ext:jpg")).count == 3)
        #expect(try names(catalog, "ext:txt -ext:jpg storage:member") == ["photos.tar:inner/readme.txt"])
        #expect(try names(catalog, "kind:image -tag:trip") == ["photos.tar:inner/Sunset.jpg"])
        #expect(try names(catalog, "tag:trip") == ["beach_2024.png"])
        #expect(try names(catalog, "png tag:trip") == ["beach_2024.png"])
        #expect(try names(catalog, "png -tag:trip") == [])
        #expect(try names(catalog, "txt -tag:trip tag:nothing") == [])
        #expect(
            try Set(names(catalog, "archive:photos.tar")) == [
                "photos.tar:inner/Sunset.jpg", "photos.tar:inner/readme.txt",
            ])
        #expect(try names(catalog, "archive:nothing.tar") == [])
        #expect(try names(catalog, "photos -readme -sunset") == ["photos.tar"])
        #expect(try names(catalog, "size>=6 size<=6") == ["notes.txt"])
        #expect(try Set(names(catalog, "added<2000-01-01")) == [])
        #expect(try names(catalog, "added>=2000-01-01 leica") == ["notes.txt"])
        // A word no asset has.
        #expect(try names(catalog, "zebra") == [])
    }

    @Test(arguments: Store.allCases) func aNameOutranksMetadataAndManyMatchesComeInIDOrder(_ store: Store) async throws
    {
        let made = try Made(store)
        let catalog = made.catalog
        defer { catalog.close() }
        let a = try made.t.file("a.txt", "a\n")
        let b = try made.t.file("lighthouse.txt", "b\n")
        let added = try await catalog.addAndRunJobs([a, b])
        _ = try catalog.setMetadata(added[0].id, ["note": "lighthouse"])
        let ranked = try catalog.search(SearchQuery(parsing: "lighthouse"))
        #expect(ranked.isRanked && !ranked.hasMore)
        #expect(ranked.assets.map(\.record.name) == ["lighthouse.txt", "a.txt"])
        // More matches than are ranked: ID order, paged.
        let unranked = try catalog.search(SearchQuery(parsing: "lighthouse"), limit: 1, offset: 0, rankingAtMost: 1)
        #expect(!unranked.isRanked && unranked.hasMore)
        #expect(unranked.assets.map(\.record.name) == ["a.txt"])
        let second = try catalog.search(SearchQuery(parsing: "lighthouse"), limit: 1, offset: 1, rankingAtMost: 1)
        #expect(second.assets.map(\.record.name) == ["lighthouse.txt"] && !second.hasMore)
        var all: [String] = []
        try catalog.forEachSearchResult(SearchQuery(parsing: "lighthouse")) { all.append($0.record.name) }
        #expect(all == ["lighthouse.txt", "a.txt"])
    }

    /// Pages of more matches than are ranked, in ID order, whether the page is among the
    /// matches the ranking probe read (taken by ID) or past them (read from the index again):
    /// the same assets either way, with the query's filters kept, and `hasMore` right.
    @Test(arguments: Store.allCases) func pagesOfUnrankedMatchesAreTheSameFromTheProbeOrTheIndex(_ store: Store)
        async throws
    {
        let made = try Made(store)
        let catalog = made.catalog
        defer { catalog.close() }
        let paths = try (0..<9).map { try made.t.file("lighthouse-\($0).txt", "light \($0)\n") }
        let added = try await catalog.addAndRunJobs(paths)
        let odd = added.filter { $0.name.dropLast(4).last.map { Int(String($0))! % 2 == 1 } ?? false }
        _ = try catalog.tag(odd.map(\.id), adding: ["odd"])
        for (text, expected) in [
            ("lighthouse", added.sorted { $0.id < $1.id }.map(\.name)),
            ("lighthouse -tag:odd", added.filter { !odd.contains($0) }.sorted { $0.id < $1.id }.map(\.name)),
        ] {
            let query = try SearchQuery(parsing: text)
            for limit in 1...3 {
                for offset in 0...expected.count {
                    // Ranking at most 3: the probe reads 4 matches; a page of offset + limit + 1 ≤ 4
                    // comes from them.
                    let page = try catalog.search(query, limit: limit, offset: offset, rankingAtMost: 3)
                    let want = Array(expected.dropFirst(offset).prefix(limit))
                    #expect(!page.isRanked, "\(text) \(limit) \(offset)")
                    #expect(page.assets.map(\.record.name) == want, "\(text) limit \(limit) offset \(offset)")
                    #expect(page.hasMore == (offset + limit < expected.count), "\(text) \(limit) \(offset)")
                }
            }
        }
    }

    /// Whether to rank is decided by the matches the query's filters leave, up to the limit
    /// and no further: at the limit the page is ranked, one more and it is in ID order, on
    /// either store; a ranked page
    /// past its matches is empty and still says it is ranked.
    @Test(arguments: Store.allCases) func theRankingLimitCountsWhatTheFiltersLeave(_ store: Store) async throws {
        let made = try Made(store)
        let catalog = made.catalog
        defer { catalog.close() }
        // The last one's name says it twice: the best match, and last in ID order.
        let paths = try (0..<9).map {
            try made.t.file("lighthouse-\($0 == 8 ? "lighthouse-" : "")\($0).txt", "light \($0)\n")
        }
        let added = try await catalog.addAndRunJobs(paths)
        // Others, so that the word is not in every name (BM25 ranks such a word by nothing).
        _ = try await catalog.addAndRunJobs(try (0..<20).map { try made.t.file("other-\($0).txt", "\($0)\n") })
        _ = try catalog.tag(added.filter { $0.id.rawValue % 2 == 0 }.map(\.id), adding: ["even"])
        let even = added.filter { $0.id.rawValue % 2 == 0 }
        let odd = added.filter { $0.id.rawValue % 2 == 1 }
        #expect(even.contains(added[8]) != odd.contains(added[8]))
        let withLast = even.contains(added[8]) ? even : odd
        let text = even.contains(added[8]) ? "lighthouse tag:even" : "lighthouse -tag:even"
        let query = try SearchQuery(parsing: text)
        let atTheLimit = try catalog.search(query, limit: 20, offset: 0, rankingAtMost: withLast.count)
        #expect(atTheLimit.isRanked && !atTheLimit.hasMore)
        #expect(atTheLimit.assets.first?.record.id == added[8].id)
        #expect(Set(atTheLimit.assets.map(\.record.id)) == Set(withLast.map(\.id)))
        let ranked = try catalog.search(query, limit: 2, offset: 1, rankingAtMost: withLast.count)
        #expect(ranked.isRanked && ranked.hasMore == (withLast.count > 3))
        #expect(ranked.assets.map(\.record.id) == Array(atTheLimit.assets.dropFirst().prefix(2).map(\.record.id)))
        let past = try catalog.search(query, limit: 2, offset: withLast.count, rankingAtMost: withLast.count)
        #expect(past.isRanked && past.assets.isEmpty && !past.hasMore)
        let overTheLimit = try catalog.search(query, limit: 20, offset: 0, rankingAtMost: withLast.count - 1)
        #expect(!overTheLimit.isRanked && !overTheLimit.hasMore)
        #expect(overTheLimit.assets.map(\.record.id) == withLast.map(\.id).sorted())
        let unfiltered = try catalog.search(SearchQuery(parsing: "lighthouse"), limit: 20, offset: 0, rankingAtMost: 8)
        #expect(!unfiltered.isRanked && unfiltered.assets.map(\.record.id) == added.map(\.id).sorted())
    }

    /// A save that fails after every write ran (the store's test hook fails its commit) leaves
    /// the index as it was: the words of a tag it added are not found, a removal it made
    /// leaves the asset found.
    @Test(arguments: Store.allCases) func aFailedSaveLeavesTheIndexAsItWas(_ store: Store) async throws {
        let made = try await populated(store)
        let catalog = made.catalog
        defer { catalog.close() }
        let beach = try #require(try catalog.assets(named: "beach_2024.png").first)
        struct Refused: Error {}
        catalog.container.failNextCommit(with: Refused())
        #expect(throws: (any Error).self) { try catalog.tag([beach.id], adding: ["holiday"]) }
        #expect(try names(catalog, "holiday") == [])
        catalog.container.failNextCommit(with: Refused())
        #expect(throws: (any Error).self) { try catalog.remove(beach.id) }
        #expect(try names(catalog, "beach") == ["beach_2024.png"])
        // The same saves, committed.
        _ = try catalog.tag([beach.id], adding: ["holiday"])
        #expect(try names(catalog, "holiday") == ["beach_2024.png"])
        _ = try catalog.remove(beach.id)
        #expect(try names(catalog, "beach") == [])
        #expect(try catalog.repairSearchIndex() == [])
    }

    /// An add of many files (rows inserted in bulk, with the triggers off on SQLite) and a
    /// removal of many (rows deleted in pages) keep the index; so does renaming an archive,
    /// whose members are found by its name.
    @Test(arguments: Store.allCases) func bulkWritesAndARenamedArchiveKeepTheIndex(_ store: Store) async throws {
        let made = try await populated(store)
        let catalog = made.catalog
        defer { catalog.close() }
        let paths = try (0..<120).map { try made.t.file("bulk/tide\($0).txt", "tide \($0)\n") }
        let added = try await catalog.add(paths, options: AddOptions(tags: ["bulk"])).added
        #expect(added.count == 120)
        #expect(try catalog.search(SearchQuery(parsing: "tide99")).assets.map(\.record.name) == ["tide99.txt"])
        #expect(try catalog.search(SearchQuery(parsing: "tag:bulk"), limit: 500).assets.count == 120)
        _ = try catalog.remove(added.prefix(100).map(\.id))
        #expect(try catalog.search(SearchQuery(parsing: "tag:bulk ext:txt"), limit: 500).assets.count == 20)
        #expect(try names(catalog, "tide5") == [])
        try catalog.withContext { context in
            let archive = try #require(
                try context.fetch(FetchRequest<Asset>(predicate: \.name == "photos.tar")).first)
            archive.name = "albums.tar"
            try context.save()
        }
        #expect(try Set(names(catalog, "albums")).count == 3)
        #expect(try names(catalog, "photos") == [])
        #expect(try catalog.repairSearchIndex() == [])
    }

    /// An index that lost an entry, holds a stale one, or whose pages are damaged is found
    /// by `verify` (one line) and made again from the assets.
    @Test(arguments: Store.allCases) func aDamagedIndexIsFoundAndRebuilt(_ store: Store) async throws {
        let made = try await populated(store)
        let catalog = made.catalog
        defer { catalog.close() }
        try await made.damage(
            sqlite: """
                DELETE FROM _persistence_search_Asset WHERE rowid = 1;
                UPDATE _persistence_search_Asset SET name = 'zebra' WHERE rowid = 2;
                """,
            postgresql: """
                DELETE FROM "SCHEMA"."_persistence_search_Asset" WHERE id = 1;
                UPDATE "SCHEMA"."_persistence_search_Asset" SET doc = to_tsvector('simple', 'zebra') WHERE id = 2
                """)
        #expect(try names(catalog, "zebra") == ["notes.txt"])
        #expect(try names(catalog, "beach") == [])
        #expect(
            try catalog.repairSearchIndex() == [
                "search index: does not match its rows: 1 without an entry, 1 entries for rows gone or changed; rebuilt"
            ])
        #expect(try names(catalog, "zebra") == [])
        #expect(try names(catalog, "beach") == ["beach_2024.png"])
        #expect(try catalog.repairSearchIndex() == [])
        guard store == .sqlite else { return }
        try await made.damage(
            sqlite: "UPDATE _persistence_search_Asset_data SET block = x'00ff00ff' WHERE id > 1", postgresql: "")
        #expect(
            try catalog.repairSearchIndex() == [
                "search index: is damaged (database disk image is malformed); rebuilt"
            ])
        #expect(try names(catalog, "beach") == ["beach_2024.png"])
    }

    /// `ext:` is what follows the last dot of a name's last component, when that dot neither
    /// starts nor ends it, in any case — the same on both stores (SQLite's index computes it
    /// with `rtrim`, PostgreSQL's with a regular expression).
    @Test(arguments: Store.allCases) func anExtensionIsWhatFollowsTheLastDotOfTheLastComponent(_ store: Store)
        async throws
    {
        let made = try Made(store)
        let catalog = made.catalog
        defer { catalog.close() }
        let archive = made.t.sources.appending(path: "odd.tar").path
        try FileManager.default.createDirectory(atPath: made.t.sources.path, withIntermediateDirectories: true)
        let writer = try ArchiveWriter(path: archive, format: .tar)
        for path in ["dir.d/file", "x/.hidden", "trailing.", "a..b", "Photo.JPEG", "deep/er.v2/clip.Mp4"] {
            try writer.writeEntry(ArchiveEntry(path: path, kind: .file), contents: Array(path.utf8))
        }
        try writer.finish()
        _ = try await catalog.addAndRunJobs([archive])
        #expect(try names(catalog, "ext:d") == [])
        #expect(try names(catalog, "ext:hidden") == [])
        #expect(try names(catalog, "ext:b") == ["odd.tar:a..b"])
        #expect(try names(catalog, "ext:jpeg") == ["odd.tar:Photo.JPEG"])
        #expect(try names(catalog, "ext:mp4") == ["odd.tar:deep/er.v2/clip.Mp4"])
        #expect(try names(catalog, "ext:v2") == [])
        #expect(try names(catalog, "ext:tar") == ["odd.tar"])
    }

    /// A catalog of release 0.1.0 gets its index, made from its assets, when it is opened.
    @Test func anUpgradedCatalogIsSearchable() async throws {
        let t = try UpgradeTests().copyOfFixture()
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try names(catalog, "notes") == ["notes.txt"])
        #expect(try Set(names(catalog, "tag:\"2026 trip\"")) == ["blue.png", "red.png"])
        #expect(try catalog.repairSearchIndex() == [])
    }

    /// A full-text fetch reads the store as saved: in a context with unsaved assets it says so.
    @Test func aFullTextFetchRefusesUnsavedChanges() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        try catalog.withContext { context in
            let asset = Asset(context: context)
            asset.name = "ghost.txt"
            let request = FetchRequest<Asset>(predicate: .matches(TextSearch([.init("ghost")])))
            #expect {
                try context.fetch(request)
            } throws: { error in
                (error as? PersistenceError)?.message
                    == "A full-text search of Asset reads its rows as saved, and this context has unsaved changes "
                    + "of Asset: save them first, or set includesPendingChanges to false"
            }
            var saved = request
            saved.includesPendingChanges = false
            let found = try context.fetch(saved)
            #expect(found.isEmpty)
            context.rollback()
        }
    }
}
