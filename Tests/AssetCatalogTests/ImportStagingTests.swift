import AssetCatalogTestSupport
import BagIt
import Foundation
import Testing

@testable import AssetCatalog

/// What an import stages is noted in its scratch database, not in memory: the content it
/// adopts, the pin of each, what is new to `objects/` and the journal's rows are read from
/// there a page at a time; its staging files live in a folder of their own, removed whole.
struct ImportStagingTests {
    static func digest(_ n: Int) -> String { String(format: "%064x", n) }

    static func entry(_ key: Int64, sha256: String, size: Int64 = 10, storage: Storage = .managed)
        -> BundleRecords.Entry
    {
        BundleRecords.Entry(
            key: key, archive: nil, payload: "data/\(key).txt",
            fields: AssetFields(
                name: "file \(key).txt", kind: "text", storage: storage, size: size, sha256: sha256,
                path: storage == .referenced ? "/nowhere/\(key).txt" : nil, created: Date(), modified: Date()))
    }

    /// A scratch database with `count` managed entries of distinct content (and one more of
    /// the first content), every content staged, the first two found absent by the read.
    static func scratch(count: Int) throws -> ImportScratch {
        let scratch = try ImportScratch()
        var entries = (1...count).map { entry(Int64($0), sha256: digest($0), size: Int64($0)) }
        entries.append(entry(Int64(count + 1), sha256: digest(1), size: 1))
        try scratch.add(entries)
        try scratch.seal()
        try scratch.addStaged((1...count).map { .init(digest: digest($0), file: Int64(100 + $0), absent: $0 <= 2) })
        return scratch
    }

    @Test func eachContentIsAdoptedOnceFromItsFirstPin() throws {
        let scratch = try ImportScratch()
        try scratch.add([
            Self.entry(1, sha256: Self.digest(1)), Self.entry(2, sha256: Self.digest(1)),
            Self.entry(3, sha256: Self.digest(2), storage: .referenced),
        ])
        try scratch.seal()
        try scratch.execute("UPDATE entry SET referenced = 1 WHERE key = 3")  // the plan keeps it referenced
        // A second copy of a content: the first stays its pin; either copy finding it absent counts.
        try scratch.addStaged([.init(digest: Self.digest(1), file: 7, absent: false)])
        try scratch.addStaged([
            .init(digest: Self.digest(1), file: 8, absent: true), .init(digest: Self.digest(2), file: 9, absent: true),
        ])
        let adoption = try scratch.planAdoption(hasObject: { _ in true })
        #expect(adoption.missing == nil)
        #expect(adoption.count == 1)  // the content of an asset kept referenced is not adopted
        #expect(adoption.newCount == 1)
        #expect(adoption.newBytes == 10)
        var pins: [Int64] = []
        try scratch.forEachAdoptPage { pins += $0.map(\.file) }
        #expect(pins == [7])
        #expect(try scratch.adoptedContent(chunk: 0, size: 10) == [Self.digest(1)])
    }

    @Test func contentNoPayloadFileHadIsNamed() throws {
        let scratch = try ImportScratch()
        try scratch.add([Self.entry(1, sha256: Self.digest(5)), Self.entry(2, sha256: Self.digest(3))])
        try scratch.seal()
        try scratch.addStaged([.init(digest: Self.digest(5), file: 1, absent: true)])
        #expect(try scratch.planAdoption(hasObject: { _ in false }).missing == Self.digest(3))
    }

    /// Content the read did not find absent is looked for once, when the plan is made.
    @Test func whatObjectsLacksNowIsNewToo() throws {
        let scratch = try Self.scratch(count: 2_500)
        var looked = 0
        let adoption = try scratch.planAdoption(hasObject: { digest in
            looked += 1
            return digest != Self.digest(2_000)
        })
        #expect(looked == 2_498)
        #expect(adoption.count == 2_500)
        #expect(adoption.newCount == 3)
        #expect(adoption.newBytes == 1 + 2 + 2_000)
        // The journal takes all of it, new or not: what objects/ holds now may go before it is linked.
        #expect(try scratch.adoptedContent(chunk: 0, size: 10) == (1...10).map(Self.digest))
    }

    /// The pins come a page at a time, in digest order; the journal's rows take the content
    /// in blocks, in the same order.
    @Test func pinsAndJournalRowsArePaged() throws {
        let scratch = try Self.scratch(count: 2_500)
        _ = try scratch.planAdoption(hasObject: { _ in false })
        var pages: [Int] = []
        var files: [Int64] = []
        let folder = ContentStore.StagingFolder(parent: "/staging", number: 3)
        try ImportPins(scratch: scratch, folder: folder).forEachPin { page in
            pages.append(page.count)
            files += page.map { Int64($0.path.split(separator: "/").last!)! }
            #expect(page.allSatisfy { $0.path.hasPrefix("/staging/work-3/") })
        }
        #expect(pages == [1_000, 1_000, 500])
        #expect(files == (1...2_500).map { Int64(100 + $0) })
        let rows = (0..<3).map { try! scratch.adoptedContent(chunk: $0, size: 1_000) }
        #expect(rows.map(\.count) == [1_000, 1_000, 500])
        #expect(rows.flatMap { $0 } == (1...2_500).map(Self.digest))
    }

    /// The catalog's assets a replacing import deletes are noted in the scratch database too:
    /// each once, however many entries share its name; the commit deletes them a page at a
    /// time, and the result lists the first few and counts them all.
    @Test func replacedAssetsArePagedAndCappedInTheResult() throws {
        let scratch = try Self.scratch(count: 3)
        for id in 1...2_500 {
            try scratch.execute(
                "INSERT INTO existing(id, name, sha256, tags, metadata) VALUES (?, ?, '', '', '')",
                [.integer(Int64(id)), .text("name \(id % 1_250)")])
        }
        for n in 0..<1_250 { try scratch.replace(named: "name \(n)") }
        try scratch.replace(named: "name 7")  // a second entry of the same name
        try scratch.replace(named: "a name the catalog lacks")
        var pages: [[Int64]] = []
        while true {
            let page = try scratch.replacedPage(after: pages.last?.last ?? 0)
            guard !page.isEmpty else { break }
            pages.append(page)
        }
        #expect(pages.map(\.count) == [1_000, 1_000, 500])
        #expect(pages.flatMap { $0 } == (1...2_500).map(Int64.init))
        let listed = try scratch.replaced(limit: 3)
        #expect(listed.count == 2_500 && listed.items == [1, 2, 3] && listed.omitted == 2_497)
        try scratch.resetPlan()
        #expect(try scratch.replaced(limit: 3) == CappedList())
    }

    /// The jobs of a bag from another tool point at their assets' rows: each image and
    /// archive imported gets the ID its row takes among the imported top-level rows (left-out
    /// entries take none), a page at a time.
    @Test func jobRowsPointAtTheRowsTheirAssetsTake() throws {
        let scratch = try ImportScratch()
        let kinds = ["image", "text", "archive", "text", "image"]
        try scratch.add(
            (1...2_500).map { n in
                var entry = Self.entry(Int64(n), sha256: Self.digest(n))
                entry.fields.kind = kinds[n % kinds.count]
                return entry
            })
        try scratch.seal()
        for n in stride(from: 3, through: 2_500, by: 7) { try scratch.plan(Int64(n), outcome: .skipped) }
        try scratch.giveRowIDs(from: 100, jobs: true)
        let imported = (1...2_500).filter { $0 % 7 != 3 }
        let expected = imported.enumerated().compactMap { i, n in
            kinds[n % kinds.count] == "text" ? nil : (n: Int64(n), row: Int64(100 + i), kind: kinds[n % kinds.count])
        }
        #expect(try scratch.jobCount() == expected.count)
        let pages = RowPages { try scratch.jobPage(after: $0) }
        let rows = try (0..<expected.count).map { try pages.row($0) }
        #expect(rows.map(\.seq) == expected.map(\.n))
        #expect(rows.map(\.rowID) == expected.map(\.row))
        #expect(rows.map(\.kind) == expected.map(\.kind))
    }

    @Test func onlyAdoptedDigestsAreCovered() throws {
        let scratch = try Self.scratch(count: 3)
        _ = try scratch.planAdoption(hasObject: { _ in true })
        let asked: Set = [Self.digest(1), Self.digest(3), Self.digest(9), "not a digest", "\", \"x"]
        #expect(try scratch.adopted(among: asked) == [Self.digest(1), Self.digest(3)])
        #expect(try scratch.adopted(among: []) == [])
    }

    /// A staging folder goes whole, however many files it holds.
    @Test func aStagingFolderIsRemovedWithEveryFile() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let content = catalog.content
        let folder = try content.makeStagingFolder()
        #expect(folder.path.hasPrefix(content.ownStaging + "/"))
        for _ in 0..<3_000 {
            let (_, fd) = try content.createStagingFile(in: folder)
            close(fd)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).count == 3_000)
        content.removeStagingFolder(folder)
        #expect(!FileManager.default.fileExists(atPath: folder.path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: content.ownStaging).isEmpty)
    }
}
