import AssetCatalogTestSupport
import Foundation
import Persistence
import Synchronization
import TestScratch
import Testing

@testable import AssetCatalog

/// Bundles (BagIt bags) end to end: a catalog exported in every format and imported into
/// an empty one comes back the same; bags go both ways with bagit-python, the reference
/// implementation; a killed or failed import leaves nothing behind; name conflicts,
/// damaged content and selections do what the documentation says.
@Suite struct BundleTests {
    // MARK: - Round trip

    @Test func everyFormatRoundTripsEveryAsset() async throws {
        let source = try TestCatalog()
        let catalog = try await populated(source)
        defer { catalog.close() }
        let assets = try catalog.assets()
        // Twelve names, different byte for byte (NFC and NFD included).
        try #require(Set(assets.map { Array($0.name.utf8) }).count == 12)
        #expect(Set(assets.filter { $0.storage == .member }.map(\.name)) == ["inner/doc.txt", "inner/deep/notes.md"])
        #expect(assets.filter { $0.storage == .referenced }.map(\.name) == ["ref.md"])
        #expect(try catalog.asset(named: "photo.jpg").metadata["mediaType"] != nil)  // set by the metadata job
        let expected = try await comparableListing(source)
        let sourceStats = try catalog.stats()

        for format in ["tar", "tar.gz", "tar.zst", "zip", "dir"] {
            let bundle = source.directory.appending(path: format == "dir" ? "bundle" : "bundle." + format).path
            let target = try TestCatalog()
            if format == "tar.zst" {
                // Through the CLI, as a user would.
                let export = try await source.run(["export", bundle])
                #expect(export.status == 0, "\(export.stderr)")
                #expect(export.stdout.hasPrefix("exported 12 assets ("))
                try target.create().close()
                let run = try await target.run(["import", bundle])
                #expect(run.status == 0, "\(run.stderr)")
                #expect(run.stdout == "imported 12 assets from \(bundle)\n")
                #expect(run.stderr == "")
            } else {
                let result = try await catalog.export(to: bundle)
                #expect(result.assets == 12 && result.files == 12 && result.skipped.isEmpty, "\(format)")
                #expect(result.bytes == assets.reduce(0) { $0 + $1.size })
                let imported = try target.create()
                let r = try await imported.importBundle(from: bundle)
                #expect(try r.importedCount == 12 && imported.assets(importedBy: r).count == 12, "\(format)")
                #expect(r.alreadyPresent.isEmpty && r.skipped.isEmpty && r.renamed.isEmpty && r.replaced.isEmpty)
                #expect(r.storedAsManaged.isEmpty)  // the referenced file is on this machine
                #expect(r.queuedJobCount == 0 && r.queuedJobIDs.isEmpty)  // our own records: nothing to index again
                #expect(r.bytesStored == sourceStats.objectBytes)
                imported.close()
            }
            let imported = try target.open()
            #expect(try await imported.verify().issues.isEmpty, "\(format)")
            // The import's own journal rows went with it, without waiting for a sweep.
            #expect(try imported.stats().pendingRemovals == 0, "\(format)")
            #expect(try imported.stats().objectFiles == sourceStats.objectFiles, "\(format)")
            #expect(try ownStaging(imported).isEmpty)
            imported.close()
            let listing = try await comparableListing(target)
            #expect(listing == expected, "\(format): \(String(decoding: listing, as: UTF8.self))")
        }
    }

    /// An import looks each payload file up in the manifest (to link content `objects/`
    /// already has instead of staging it again) only when `objects/` has any content.
    @Test func objectsAreKnownEmptyUntilContentIsAdded() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        #expect(!catalog.content.hasAnyObject())
        let added = try await catalog.add([try t.file("a.txt", "alpha\n")])
        #expect(catalog.content.hasAnyObject())
        _ = try catalog.remove(added.added.map(\.id))
        #expect(!catalog.content.hasAnyObject())  // its shard folder may stay, empty
    }

    // MARK: - The records file

    @Test func theRecordsFileHoldsOneAssetPerLineWithUTCDates() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "alpha\n"), try t.file("b.txt", "bravo\n")])
        let bag = t.directory.appending(path: "bag").path
        _ = try await catalog.export(to: bag)
        #expect(try ownStaging(catalog).isEmpty)  // the records went through a file there
        let text = try String(contentsOfFile: bag + "/assetcat-records.json", encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 5)
        #expect(lines.first == #"{"format":"assetcat-records","version":1,"assets":["#)
        #expect(lines[1].hasPrefix(#"{"created":""#) && lines[1].hasSuffix(#""tags":[]},"#))
        #expect(lines[1].contains(#""name":"a.txt""#) && lines[2].contains(#""name":"b.txt""#))
        #expect(lines[3] == "]}" && lines[4] == "")
        let created = try #require(lines[1].firstMatch(of: /"created":"([^"]+)"/)?.1)
        #expect(created.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/) != nil)
        let records = try BundleRecords.decode(Array(text.utf8))
        #expect(records.assets.map(\.fields.name) == ["a.txt", "b.txt"])
        #expect(
            abs(records.assets[0].fields.created.timeIntervalSince(try catalog.asset(named: "a.txt").created)) < 0.001)
    }

    /// The records list every asset by ID, members among the others, though the export
    /// names the top-level assets before the members.
    @Test func theRecordsListTheAssetsByID() async throws {
        let t = try TestCatalog()
        try t.file("packed/inner.txt", "member\n")
        let archive = t.sources.appending(path: "pack.tar").path
        try await tool("bsdtar", ["-cf", archive, "-C", t.sources.appending(path: "packed").path, "inner.txt"])
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.addAndRunJobs([archive])
        _ = try await catalog.add([try t.file("later.txt", "added after the members\n")])
        let ids = try catalog.assets().map(\.id)
        #expect(try catalog.assets().map(\.name) == ["pack.tar", "inner.txt", "later.txt"])
        let bag = t.directory.appending(path: "bag").path
        _ = try await catalog.export(to: bag)
        let records = try BundleRecords.decode(
            Array(try Data(contentsOf: URL(fileURLWithPath: bag + "/assetcat-records.json"))))
        #expect(records.assets.map(\.key) == ids.map(\.rawValue))
    }

    @Test(arguments: [
        "plain.txt", "quote \" and back\\slash", "a/b/c.txt", "tab\tnew\nline\rcr", "nul\u{0} bell\u{7} us\u{1F}",
        "caf\u{E9} cafe\u{301} 日本 🎨", "del\u{7F} and \u{2028}", "backspace\u{8} formfeed\u{C}",
    ])
    func aRecordLineIsTheJSONThatJSONEncoderWouldWrite(name: String) throws {
        let entry = BundleRecords.Entry(
            key: 7, archive: 3, payload: "data/" + name,
            fields: AssetFields(
                name: name, kind: "text", storage: .member, size: 12, sha256: String(repeating: "a", count: 64),
                path: name == "plain.txt" ? nil : "/src/" + name, member: name, memberOrdinal: 2,
                tags: ["b", name, "a"],
                metadata: ["z": name, "a": "1", name: "key", "f": "2", "e\u{301}": "3", "\u{E9}clair": "4"],
                created: Date(timeIntervalSince1970: 1_795_268_346.323), modified: Date(timeIntervalSince1970: 0)))
        var line: [UInt8] = []
        entry.appendJSON(to: &line)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.formatted(BundleRecords.dateStyle))
        }
        #expect(String(decoding: line, as: UTF8.self) == String(decoding: try encoder.encode(entry), as: UTF8.self))
        let text =
            #"{"format":"assetcat-records","version":1,"assets":["# + "\n" + String(decoding: line, as: UTF8.self)
            + "\n]}\n"
        let decoded = try BundleRecords.decode(Array(text.utf8)).assets[0]
        #expect(Array(decoded.fields.name.utf8) == Array(name.utf8) && decoded.fields.tags == entry.fields.tags)
        #expect(decoded.fields.metadata == entry.fields.metadata && decoded.fields.path == entry.fields.path)
        #expect(
            abs(decoded.fields.created.timeIntervalSince(entry.fields.created)) <= 0.001
                && decoded.fields.modified == entry.fields.modified)
    }

    @Test func recordsWithDatesWithoutAZoneReadAsUTC() throws {
        let entry = """
            {"created":"2026-11-21T13:39:06.323","key":1,"kind":"text","metadata":{},"modified":"2026-11-21T13:39:06Z",\
            "name":"a.txt","payload":"data/a.txt","sha256":"\(String(repeating: "0", count: 64))","size":6,\
            "storage":"managed","tags":[]}
            """
        let text = #"{"format":"assetcat-records","version":1,"assets":["# + "\n" + entry + "\n]}\n"
        let records = try BundleRecords.decode(Array(text.utf8))
        #expect(abs(records.assets[0].fields.created.timeIntervalSince1970 - 1_795_268_346.323) <= 0.001)
        #expect(records.assets[0].fields.modified == Date(timeIntervalSince1970: 1_795_268_346))
    }

    // MARK: - bagit-python, the reference implementation

    @Test func anExportedBagPassesBagitPythonValidation() async throws {
        let t = try TestCatalog()
        let catalog = try await populated(t, awkwardNames: false)
        defer { catalog.close() }
        let bundle = t.directory.appending(path: "interop.tar.zst").path
        #expect(try await catalog.export(to: bundle).assets == 8)
        let extracted = t.directory.appending(path: "extracted")
        try FileManager.default.createDirectory(at: extracted, withIntermediateDirectories: true)
        try await tool("bsdtar", ["-xf", bundle, "-C", extracted.path])
        let fromArchive = try await tool(
            "python3", ["-m", "bagit", "--validate", extracted.appending(path: "interop").path], checked: false)
        #expect(fromArchive.status == 0, "\(fromArchive.stderr)")

        let directory = t.directory.appending(path: "interop-dir").path
        _ = try await catalog.export(to: directory)
        let fromDirectory = try await tool("python3", ["-m", "bagit", "--validate", directory], checked: false)
        #expect(fromDirectory.status == 0, "\(fromDirectory.stderr)")
    }

    /// A bag from another tool queues the jobs an add would — the metadata of each image, the
    /// index of each archive — written as rows with the assets, each pointing at its own
    /// asset wherever it comes among the others.
    @Test func aForeignBagQueuesAJobForEachImageAndArchive() async throws {
        let t = try TestCatalog()
        let bag = t.directory.appending(path: "foreign")
        try FileManager.default.createDirectory(at: bag, withIntermediateDirectories: true)
        try Data("one\n".utf8).write(to: bag.appending(path: "a.txt"))
        try jpegBytes.write(to: bag.appending(path: "b.jpg"))
        try Data("three\n".utf8).write(to: bag.appending(path: "c.txt"))
        try t.file("pack/inner/doc.txt", "inside the archive\n")
        try await tool(
            "bsdtar",
            ["-czf", bag.appending(path: "d.tar.gz").path, "-C", t.sources.appending(path: "pack").path, "inner"])
        try jpegBytes.write(to: bag.appending(path: "e.jpg"))
        try await tool("python3", ["-m", "bagit", bag.path])

        let catalog = try t.create()
        defer { catalog.close() }
        let before = Date()
        let result = try await catalog.importBundle(from: bag.path)
        let assets = Dictionary(uniqueKeysWithValues: try catalog.assets(importedBy: result).map { ($0.name, $0.id) })
        #expect(result.queuedJobCount == 3)
        let jobs = try catalog.jobs.list()
        #expect(result.queuedJobIDs == [jobs[0].id...jobs[2].id])
        #expect(jobs.map(\.kind) == ["metadata", "index-archive", "metadata"])
        #expect(jobs.map(\.asset) == [assets["b.jpg"], assets["d.tar.gz"], assets["e.jpg"]])
        #expect(jobs.allSatisfy { $0.state == .queued && $0.attempts == 0 })
        #expect(jobs.allSatisfy { $0.created >= before.addingTimeInterval(-1) && $0.updated == $0.created })

        _ = try await catalog.jobs.runUntilIdle()
        #expect(try catalog.jobs.list().allSatisfy { $0.state == .succeeded })
        #expect(try catalog.asset(named: "e.jpg").metadata["mediaType"] == "image/jpeg")
        #expect(try catalog.asset(named: "inner/doc.txt").archive == assets["d.tar.gz"])
    }

    @Test(arguments: ["directory", "tar", "zip"])
    func aBagMadeByBagitPythonImports(_ packaging: String) async throws {
        let t = try TestCatalog()
        let contents = ["a.txt": "top\n", "sub/b.txt": "below\n", "sub/naïve.txt": "accented name\n"]
        let bag = t.directory.appending(path: "foreign")
        for (name, text) in contents {
            let url = bag.appending(path: name)
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
        }
        try t.file("pack/inner/doc.txt", "inside the archive\n")
        try await tool(
            "bsdtar",
            ["-czf", bag.appending(path: "pack.tar.gz").path, "-C", t.sources.appending(path: "pack").path, "inner"])
        try await tool("python3", ["-m", "bagit", "--sha512", "--md5", bag.path])  // no SHA-256 manifest at all
        #expect(FileManager.default.fileExists(atPath: bag.appending(path: "manifest-sha512.txt").path))

        let bundle: String
        switch packaging {
        case "tar":
            bundle = t.directory.appending(path: "foreign.tar").path
            try await tool("tar", ["cf", bundle, "-C", t.directory.path, "foreign"])
        case "zip":
            bundle = t.directory.appending(path: "foreign.zip").path
            try await tool(
                "python3",
                [
                    "-c", "import shutil, sys; shutil.make_archive(sys.argv[1], 'zip', sys.argv[2], 'foreign')",
                    t.directory.appending(path: "foreign").path, t.directory.path,
                ])
        default:
            bundle = bag.path
        }

        let catalog = try t.create()
        defer { catalog.close() }
        let result = try await catalog.importBundle(from: bundle)
        // Named by their payload paths, in byte order.
        #expect(
            try catalog.assets(importedBy: result).map(\.name) == [
                "a.txt", "pack.tar.gz", "sub/b.txt", "sub/naïve.txt",
            ])
        #expect(
            try catalog.assets(importedBy: result).allSatisfy {
                $0.storage == .managed && $0.tags.isEmpty && $0.path == nil
            })
        #expect(try catalog.assets(importedBy: result).map(\.kind) == ["text", "archive", "text", "text"])
        #expect(result.queuedJobCount == 1)  // the archive is indexed, as an add would
        for (name, text) in contents { #expect(try bytes(of: name, in: catalog) == Data(text.utf8), "\(name)") }
        _ = try await catalog.jobs.runUntilIdle()
        let member = try catalog.asset(named: "inner/doc.txt")
        #expect(try member.storage == .member && member.archive == catalog.assets(importedBy: result)[1].id)
        #expect(try bytes(of: "inner/doc.txt", in: catalog) == Data("inside the archive\n".utf8))
        #expect(try await catalog.verify().issues.isEmpty)
        #expect(try ownStaging(catalog).isEmpty)
    }

    // MARK: - Failures in the middle of an import

    /// A bundle of `kept.txt`, `new.txt` and `newer.txt`, and a catalog that has only `kept.txt`:
    /// the bundle, the digests the catalog lacks, the catalog and its asset.
    private func bundleWithNewContent() async throws -> (
        bundle: String, newContent: [String], t: TestCatalog, kept: AssetRecord
    ) {
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "bundle.tar").path
        let newContent: [String]
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            let added = try await catalog.add([
                try source.file("kept.txt", "already in the catalog\n"), try source.file("new.txt", "brand new\n"),
                try source.file("newer.txt", "newer still\n"),
            ]).added
            newContent = added.dropFirst().map(\.sha256)
            _ = try await catalog.export(to: bundle)
        }
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let kept = try #require(try await catalog.add([try t.file("kept.txt", "already in the catalog\n")]).added.first)
        return (bundle, newContent, t, kept)
    }

    /// Content the catalog holds when an import journals, removed by another process before
    /// the import links its own copy, and the import killed before it commits: the journal
    /// names that content too, so the next open removes what the import linked.
    @Test func contentRemovedByAnotherProcessWhileAnImportRunsIsNotLeftBehind() async throws {
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "b.tar").path
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            _ = try await catalog.add([try source.file("imported.txt", "the same content\n")])
            _ = try await catalog.export(to: bundle)
        }
        let t = try TestCatalog()
        let kept: AssetRecord
        do {
            let catalog = try t.create()
            defer { catalog.close() }
            kept = try #require(try await catalog.add([try t.file("local.txt", "the same content\n")]).added.first)
        }
        let importing = try await t.startPaused(
            ["import", bundle], at: "after-import-journal", environment: ["ASSETCAT_FAULT": "before-import-commit"])
        // Another process removes the one asset that used the content, and its file.
        let rm = try await t.run(["rm", "\(kept.id)"])
        #expect(rm.status == 0, "\(rm.stdout)\(rm.stderr)")
        #expect(!t.hasObject(kept.sha256))
        importing.resume()
        let killed = try await importing.process.finish()
        #expect(killed.termination == .exited(86), "\(killed.stdoutText)\(killed.stderrText)")
        #expect(t.hasObject(kept.sha256))  // linked again by the import, never recorded…
        let verify = try await t.run(["verify"])  // …until the next command's open sweeps the journal
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(!t.hasObject(kept.sha256))
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.assets().isEmpty)
        #expect(try catalog.stats().objectFiles == 0)
    }

    @Test func killedBeforeTheImportCommitsTheNextOpenRemovesTheNewContent() async throws {
        let (bundle, newContent, t, kept) = try await bundleWithNewContent()
        let run = try await t.run(["import", bundle], environment: ["ASSETCAT_FAULT": "before-import-commit"])
        #expect(run.status == 86)  // died at the fault point
        for digest in newContent { #expect(t.hasObject(digest)) }  // linked into objects/, never recorded…
        #expect(t.stagingEntries().count == 2)  // …and the dead process's staging folder and lock

        let catalog = try t.open()  // …until the next open sweeps the journaled removals
        defer { catalog.close() }
        #expect(try catalog.assets().map(\.id) == [kept.id])
        #expect(try catalog.asset(kept.id).sha256 == kept.sha256)
        for digest in newContent { #expect(!t.hasObject(digest)) }
        #expect(t.hasObject(kept.sha256))
        let stats = try catalog.stats()
        #expect(stats.objectFiles == 1)
        #expect(stats.pendingRemovals == 0)
        let own = catalog.content.owner
        #expect(t.stagingEntries() == [own, own + ".lock"])  // only this process's own folder
        #expect(try ownStaging(catalog).isEmpty)

        // The same import, run again, goes through.
        let result = try await catalog.importBundle(from: bundle)
        #expect(try catalog.assets(importedBy: result).map(\.name) == ["new.txt", "newer.txt"])
        #expect(result.alreadyPresent.items == ["kept.txt"])
        #expect(try catalog.stats().objectFiles == 3)
        #expect(try catalog.withContext { try $0.count(for: FetchRequest<PendingImport>()) } == 0)  // moot, gone
    }

    /// The journal goes once the records have committed, not with them: a crash in between
    /// leaves rows whose giving up removes nothing, since every content they list is in use.
    @Test func killedAfterTheImportCommitsTheNextOpenKeepsTheContent() async throws {
        let (bundle, newContent, t, kept) = try await bundleWithNewContent()
        let run = try await t.run(["import", bundle], environment: ["ASSETCAT_FAULT": "after-import-commit"])
        #expect(run.status == 86)  // died at the fault point
        let catalog = try t.open()  // the journal of a dead process is given up: a plan per content
        defer { catalog.close() }
        #expect(try catalog.assets().map(\.name) == ["kept.txt", "new.txt", "newer.txt"])
        for digest in newContent + [kept.sha256] { #expect(t.hasObject(digest)) }
        #expect(try catalog.withContext { try $0.count(for: FetchRequest<PendingImport>()) } == 0)
        let stats = try catalog.stats()
        #expect(stats.objectFiles == 3)
        #expect(stats.pendingRemovals == 0)
        #expect(try await catalog.verify().issues.isEmpty)
        #expect(try ownStaging(catalog).isEmpty)
    }

    /// The content is linked into objects/, then the transaction that records the assets
    /// fails: the import turns its journal into removal plans at once, and nothing is left —
    /// no asset, no journal row, no new content, nothing in staging.
    @Test func anImportWhoseRecordsFailToCommitLeavesNothingBehind() async throws {
        let (bundle, newContent, t, kept) = try await bundleWithNewContent()
        let run = try await t.run(["import", bundle], environment: ["ASSETCAT_FAULT": "fail-import-commit"])
        #expect(run.status == 1)
        #expect(run.stderr.contains("the disk is full (injected)"), "\(run.stderr)")
        for digest in newContent { #expect(!t.hasObject(digest)) }  // removed by the import itself, not the next open
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.assets().map(\.id) == [kept.id])
        for digest in newContent { #expect(!t.hasObject(digest)) }
        #expect(t.hasObject(kept.sha256))
        #expect(try catalog.withContext { try $0.count(for: FetchRequest<PendingImport>()) } == 0)
        #expect(try catalog.stats().pendingRemovals == 0)
        #expect(t.stagingEntries() == [catalog.content.owner, catalog.content.owner + ".lock"])
    }

    /// An import journals its new content in rows owned by its process's staging folder.
    /// A sweep meanwhile — from another catalog of the same process here, another process in
    /// life — leaves the content of a live import alone; once its owner is gone, the next
    /// sweep removes what no asset uses.
    @Test func aSweepLeavesTheContentOfALiveImportAlone() async throws {
        let t = try TestCatalog()
        let sweeper = try t.create()
        defer { sweeper.close() }
        let kept = try #require(try await sweeper.add([try t.file("kept.txt", "kept\n")]).added.first)
        let importer = try t.open()
        var importerOpen = true
        defer { if importerOpen { importer.close() } }
        // What an import has done just before its records commit: content linked, journaled.
        let staged = try t.file("linked.bin", "linked, not recorded yet\n")
        let (linked, _) = try ContentStore.digest(ofFileAt: staged)
        try importer.withContext { context in
            let pending = PendingImport(context: context)
            pending.owner = importer.content.owner
            pending.digests = [linked, kept.sha256].joined(separator: "\n")
            try context.save()
        }
        try importer.content.adopt(staged: staged, digest: linked)

        // A journal of the sweeping process's own import is left alone too.
        try sweeper.withContext { context in
            let own = PendingImport(context: context)
            own.owner = sweeper.content.owner
            own.digests = linked
            try context.save()
        }
        #expect(try sweeper.finishPendingRemovals() == 0)
        #expect(t.hasObject(linked))
        try sweeper.withContext { context in
            for own in try context.fetch(FetchRequest<PendingImport>(predicate: \.owner == sweeper.content.owner)) {
                context.delete(own)
            }
            try context.save()
        }
        #expect(try sweeper.withContext { try $0.count(for: FetchRequest<PendingImport>()) } == 1)

        importer.close()  // the importing process is gone: its lock is free
        importerOpen = false
        #expect(try sweeper.finishPendingRemovals() == 2)  // a plan per content of the journal
        #expect(!t.hasObject(linked))
        #expect(t.hasObject(kept.sha256))  // an asset uses it
        #expect(try sweeper.withContext { try $0.count(for: FetchRequest<PendingImport>()) } == 0)
        #expect(try sweeper.stats().pendingRemovals == 0)
    }

    /// An import records its assets as rows, without an object each: they are checked as
    /// inserted assets are — their shape, and their content in objects/ under the write lock,
    /// put back from the import's pin when a removal took it in between.
    @Test func assetRowsAreCheckedAsInsertedAssetsAre() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let pin = try t.file("pin.txt", "held by the import's pin\n")
        let (digest, size) = try ContentStore.digest(ofFileAt: pin)
        func save(name: String, sha256: String, pins: [String: String]) throws {
            try catalog.withContext { context in
                context[ContentAdoption.self] = ContentAdoption(holding: PinTable(pins: pins))
                try context.insertRows(Asset.self, count: 1) { _, row in
                    row[\.name] = name
                    row[\.sha256] = sha256
                    row[\.size] = size
                }
                try context.save()
            }
        }

        let shape = #expect(throws: CatalogError.self) { try save(name: "a.txt", sha256: "", pins: [:]) }
        #expect(shape?.message == "a.txt: a managed asset needs a SHA-256 digest")
        let missing = #expect(throws: (any Error).self) { try save(name: "a.txt", sha256: digest, pins: [:]) }
        #expect(
            "\(String(describing: missing))".contains(
                "The content of a.txt (\(digest.prefix(12))…) is missing from objects/; add the file again"))
        #expect(try catalog.assets().isEmpty)

        try save(name: "a.txt", sha256: digest, pins: [digest: pin])
        #expect(t.hasObject(digest))
        #expect(try catalog.assets().map(\.name) == ["a.txt"])
        #expect(try await catalog.verify().issues.isEmpty)
    }

    /// In process: linking the second new content into objects/ fails (its folder's name
    /// is taken by a file — an I/O error even root cannot get past), after the first was
    /// linked. The import throws, and the first content goes at once.
    @Test func anImportThatFailsAfterLinkingContentLeavesNothingBehind() async throws {
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "bundle.tar.gz").path
        let digests: [String]  // in the order the import links them
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            let added = try await catalog.add([
                try source.file("one.txt", "the first new file\n"), try source.file("two.txt", "the second new file\n"),
            ]).added
            digests = added.map(\.sha256).sorted()
            _ = try await catalog.export(to: bundle)
        }
        try #require(digests[0].prefix(2) != digests[1].prefix(2))

        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let kept = try #require(try await catalog.add([try t.file("kept.txt", "kept\n")]).added.first)
        try #require(!digests.contains { $0.prefix(2) == kept.sha256.prefix(2) })
        let blocker = t.root.appending(path: "objects").appending(path: String(digests[1].prefix(2))).path
        try #require(FileManager.default.createFile(atPath: blocker, contents: Data()))

        let error = await #expect(throws: CatalogError.self) { try await catalog.importBundle(from: bundle) }
        #expect(error?.code == .io)
        #expect(error?.message.contains("Could not store") == true, "\(String(describing: error))")
        #expect(try catalog.assets().map(\.id) == [kept.id])
        #expect(!t.hasObject(digests[0]))  // it was linked, and removed when the import failed
        #expect(t.hasObject(kept.sha256))
        #expect(try ownStaging(catalog).isEmpty)

        try FileManager.default.removeItem(atPath: blocker)
        try catalog.finishPendingRemovals()  // the blocked content's plan could not be carried out until now
        #expect(try catalog.stats().pendingRemovals == 0)
        #expect(try catalog.stats().objectFiles == 1)
        let result = try await catalog.importBundle(from: bundle)
        #expect(try catalog.assets(importedBy: result).map(\.name) == ["one.txt", "two.txt"])
        #expect(try catalog.stats().objectFiles == 3)
        #expect(try await catalog.verify().issues.isEmpty)
    }

    // MARK: - Conflicts

    /// The plan is made from our records while the payload is read. Should the catalog gain
    /// a conflicting asset meanwhile, the import plans again: here it skips the bundle's
    /// `a.txt`, as `skip` says, instead of importing a second one.
    @Test func aConflictThatAppearsDuringTheReadIsSeen() async throws {
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "bundle.tar").path
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            _ = try await catalog.add([
                try source.file("a.txt", "the bundle's\n"),
                try source.file("b.txt", String(repeating: "b", count: 1 << 20)),
            ])
            _ = try await catalog.export(to: bundle)
        }
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let theirs = try t.file("a.txt", "the catalog's own\n")
        let added = Mutex(false)
        // The plan made from our records, on another task, while the payload is read.
        let planned = DispatchSemaphore(value: 0)
        let result = try await Catalog.$afterEarlyPlan.withValue({ planned.signal() }) {
            try await catalog.importBundle(from: bundle) { progress in
                // Past half the bytes: in the payload (the big b.txt), long after our records.
                guard progress.bytesDone > progress.bytesTotal / 2, !added.withLock({ $0 }) else { return }
                // The read waits here for the plan: the conflict comes after it, never before. (The
                // plan's task needs a thread of the concurrency pool, which the suite's other tests
                // share: the guard against a hang is generous.)
                guard planned.wait(timeout: .now() + 300) == .success else {
                    Issue.record("no plan was made during the read: the test would cover nothing")
                    added.withLock { $0 = true }
                    return
                }
                try? catalog.withContext { context in
                    let asset = Asset(context: context)
                    asset.name = "a.txt"
                    asset.storage = .referenced
                    asset.path = theirs
                    asset.sha256 = String(repeating: "0", count: 64)
                    try context.save()
                }
                added.withLock { $0 = true }
            }
        }
        #expect(added.withLock { $0 })
        #expect(try catalog.assets(importedBy: result).map(\.name) == ["b.txt"])
        #expect(result.skipped.items.map(\.name) == ["a.txt"])
        #expect(try catalog.assets().filter { $0.name == "a.txt" }.count == 1)
    }

    @Test func importingTheSameBundleTwiceStoresNothingTwice() async throws {
        let source = try TestCatalog()
        let original = try await populated(source, awkwardNames: false)
        defer { original.close() }
        let bundle = source.directory.appending(path: "twice.tar.gz").path
        _ = try await original.export(to: bundle)

        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let first = try await catalog.importBundle(from: bundle)
        #expect(first.importedCount == 8)
        #expect(first.bytesStored == (try original.stats().objectBytes))
        let stats = try catalog.stats()
        #expect(stats.objectFiles == 4)  // a.txt and its copy share one file

        let second = try await catalog.importBundle(from: bundle)
        #expect(second.importedCount == 0 && second.importedIDs.isEmpty)
        #expect(
            try second.alreadyPresent.items.sorted()
                == catalog.assets(importedBy: first).filter { $0.storage != .member }.map(\.name).sorted())
        #expect(second.skipped.isEmpty && second.replaced.isEmpty && second.renamed.isEmpty)
        #expect(second.bytesStored == 0)
        #expect(try catalog.stats() == stats)
        #expect(try ownStaging(catalog).isEmpty)
    }

    @Test func aConflictSkippedKeepsTheCatalogsAsset() async throws {
        let (t, catalog, old, bundle) = try await conflict()
        defer { catalog.close() }
        let result = try await catalog.importBundle(from: bundle)  // skip is the default
        #expect(try catalog.assets(importedBy: result).map(\.name) == ["c.txt"])
        #expect(
            result.skipped.items == [.init(name: "a.txt", reason: "the catalog has an asset with this name (ID 1)")])
        #expect(try catalog.asset(named: "a.txt").id == old.id)
        #expect(try bytes(of: "a.txt", in: catalog) == Data("the catalog's version\n".utf8))
        #expect(!t.hasObject(bundleDigest))  // the skipped asset's content was not stored
        #expect(result.bytesStored == 4)
    }

    @Test func aConflictReplacedDeletesTheCatalogsAssetAndItsFile() async throws {
        let (t, catalog, old, bundle) = try await conflict()
        defer { catalog.close() }
        let result = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .replace))
        #expect(result.replaced.items == [old.id])
        #expect(try catalog.assets(importedBy: result).map(\.name) == ["a.txt", "c.txt"])
        let new = try catalog.asset(named: "a.txt")  // the only one left by that name
        #expect(new.id != old.id && new.sha256 == bundleDigest && new.tags == ["theirs"])
        #expect(!t.hasObject(old.sha256))  // gone once the import committed
        #expect(t.hasObject(bundleDigest))
        #expect(try catalog.stats().pendingRemovals == 0)
        #expect(try catalog.assets().map(\.name) == ["b.txt", "a.txt", "c.txt"])
    }

    /// Two entries of the bundle share a name: one is the catalog's asset of that name, the
    /// other is not. The first is already present, so the second's replace leaves that asset.
    @Test func aReplaceLeavesTheAssetAnotherEntryOfItsNameIsAlready() async throws {
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "twins.tar").path
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            _ = try await catalog.add([try source.file("one/a.txt", "same\n"), try source.file("two/a.txt", "other\n")])
            #expect(try catalog.assets().map(\.name) == ["a.txt", "a.txt"])
            _ = try await catalog.export(to: bundle)
        }
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let mine = try #require(try await catalog.add([try t.file("a.txt", "same\n")]).added.first)
        let result = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .replace))
        #expect(result.alreadyPresent.items == ["a.txt"])
        #expect(result.replaced.isEmpty)
        let assets = try catalog.assets()
        #expect(assets.map(\.name) == ["a.txt", "a.txt"])
        #expect(assets[0].id == mine.id)
        #expect(try bytes(of: assets[1].id, in: catalog) == Data("other\n".utf8))
        #expect(t.hasObject(mine.sha256))
    }

    /// A replaced asset goes as a row, without an object: its jobs are cancelled once the
    /// import commits, as a deleted asset's are.
    @Test func aReplacedAssetsJobsAreCancelledOnceTheImportCommits() async throws {
        let (_, catalog, old, bundle) = try await conflict()
        defer { catalog.close() }
        catalog.jobs.register(Parked(), as: "parked")
        let job = try catalog.jobs.submit("parked", for: old.id)
        let kept = try catalog.jobs.submit("parked", for: try catalog.asset(named: "b.txt").id)
        _ = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .replace))
        let jobs = try catalog.jobs.list()
        let cancelled = try #require(jobs.first { $0.id == job })
        #expect(cancelled.state == .cancelled && cancelled.error == "its asset was deleted")
        #expect(jobs.first { $0.id == kept }?.state == .queued)
    }

    /// A replacing import whose records fail to commit deletes nothing: the catalog's asset,
    /// its file and its job are as they were.
    @Test func aReplaceThatFailsToCommitKeepsTheReplacedAsset() async throws {
        let (t, catalog, old, bundle) = try await conflict()
        catalog.jobs.register(Parked(), as: "parked")
        let job = try catalog.jobs.submit("parked", for: old.id)
        let before = try catalog.assets()
        catalog.close()
        let run = try await t.run(
            ["import", bundle, "--on-conflict", "replace"], environment: ["ASSETCAT_FAULT": "fail-import-commit"])
        #expect(run.status == 1)
        #expect(run.stderr.contains("the disk is full (injected)"), "\(run.stderr)")
        let reopened = try t.open()
        defer { reopened.close() }
        #expect(try reopened.assets() == before)
        #expect(t.hasObject(old.sha256))
        #expect(try reopened.jobs.list().first { $0.id == job }?.state == .queued)
        #expect(try reopened.stats().pendingRemovals == 0)
    }

    @Test func aReplacedAssetsFileStaysWhenTheBundleBringsItsContentBack() async throws {
        let bundle = try await exportedBundle([("a.txt", "new a\n"), ("moved.txt", "old a\n")])
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let old = try #require(try await catalog.add([try t.file("a.txt", "old a\n")]).added.first)
        let result = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .replace))
        #expect(result.replaced.items == [old.id])
        #expect(result.bytesStored == 6)  // only "new a\n": the other content was there
        #expect(t.hasObject(old.sha256))  // moved.txt uses it now
        #expect(try bytes(of: "moved.txt", in: catalog) == Data("old a\n".utf8))
        #expect(try catalog.stats().objectFiles == 2)
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    @Test func aReplacedArchiveTakesItsMembersWithIt() async throws {
        func archive(_ t: TestCatalog, _ members: [String: String]) async throws -> String {
            for (name, text) in members { try t.file("pack/" + name, text) }
            let path = t.sources.appending(path: "pack.tar.gz").path
            try await tool("bsdtar", ["-czf", path, "-C", t.sources.appending(path: "pack").path, "inner"])
            return path
        }
        let source = try TestCatalog()
        let bundle = source.directory.appending(path: "new.zip").path
        do {
            let catalog = try source.create()
            defer { catalog.close() }
            let path = try await archive(source, ["inner/doc.txt": "new text\n", "inner/extra.txt": "extra\n"])
            #expect(try await catalog.addAndRunJobs([path]).count == 3)
            _ = try await catalog.export(to: bundle)
        }
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let old = try await catalog.addAndRunJobs([try await archive(t, ["inner/doc.txt": "old text\n"])])
        #expect(old.map(\.name) == ["pack.tar.gz", "inner/doc.txt"])

        let result = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .replace))
        #expect(result.replaced.items == [old[0].id])
        let assets = try catalog.assets()
        #expect(assets.first?.name == "pack.tar.gz")
        #expect(Set(assets.dropFirst().map(\.name)) == ["inner/doc.txt", "inner/extra.txt"])
        #expect(assets.allSatisfy { !old.map(\.id).contains($0.id) })
        #expect(assets.dropFirst().allSatisfy { $0.archive == assets[0].id })
        #expect(try bytes(of: "inner/doc.txt", in: catalog) == Data("new text\n".utf8))
        #expect(!t.hasObject(old[0].sha256))
        #expect(try catalog.stats().objectFiles == 1)
    }

    @Test func aConflictKeptBothImportsUnderTheNextFreeName() async throws {
        let (_, catalog, old, bundle) = try await conflict()
        defer { catalog.close() }
        let result = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .keepBoth))
        #expect(result.renamed.items == [.init(from: "a.txt", to: "a (2).txt")])
        #expect(try catalog.assets(importedBy: result).map(\.name) == ["a (2).txt", "c.txt"])
        #expect(try catalog.asset(named: "a.txt").id == old.id)
        #expect(try bytes(of: "a (2).txt", in: catalog) == Data("the bundle's version\n".utf8))

        // The same bundle again: its `a.txt` is already here, as `a (2).txt`; no third copy.
        let count = try catalog.assets().count
        let repeated = try await catalog.importBundle(from: bundle, options: ImportOptions(onConflict: .keepBoth))
        #expect(repeated.importedCount == 0 && repeated.renamed.isEmpty)
        #expect(repeated.alreadyPresent.items == ["a.txt", "c.txt"])
        #expect(try catalog.assets().count == count)

        // A third version: `a (2).txt` is taken too.
        let third = try await exportedBundle([("a.txt", "a third version\n")])
        let again = try await catalog.importBundle(from: third, options: ImportOptions(onConflict: .keepBoth))
        #expect(again.renamed.items == [.init(from: "a.txt", to: "a (3).txt")])
        #expect(try bytes(of: "a (3).txt", in: catalog) == Data("a third version\n".utf8))

        // A bundle that holds the next name itself: the renamed asset does not take it.
        let crowded = try await exportedBundle([("a.txt", "a fourth version\n"), ("a (4).txt", "its own a (4)\n")])
        let last = try await catalog.importBundle(from: crowded, options: ImportOptions(onConflict: .keepBoth))
        #expect(last.renamed.items == [.init(from: "a.txt", to: "a (5).txt")])
        #expect(try catalog.assets(importedBy: last).map(\.name) == ["a (5).txt", "a (4).txt"])
        #expect(try bytes(of: "a (4).txt", in: catalog) == Data("its own a (4)\n".utf8))
        #expect(try bytes(of: "a (5).txt", in: catalog) == Data("a fourth version\n".utf8))
    }

    /// However many conflicts a bundle brings, the result lists the first of each kind —
    /// `listLimit` of them, in the bundle's order (replaced assets by ID) — and counts them
    /// all, so that its memory does not grow with the bundle.
    @Test func theResultListsTheFirstConflictsAndCountsThemAll() async throws {
        let names = ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]
        let bundle = try await exportedBundle(names.map { ($0, "the bundle's \($0)\n") })
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let old = try await catalog.add(try names.map { try t.file($0, "the catalog's \($0)\n") }).added
        func options(_ policy: ConflictPolicy) -> ImportOptions { ImportOptions(onConflict: policy, listLimit: 2) }

        let skip = try await catalog.importBundle(from: bundle, options: options(.skip))
        #expect(skip.skipped.count == 5 && skip.skipped.omitted == 3)
        #expect(skip.skipped.items.map(\.name) == ["a.txt", "b.txt"])
        let keep = try await catalog.importBundle(from: bundle, options: options(.keepBoth))
        #expect(keep.renamed.count == 5)
        #expect(keep.renamed.items == [.init(from: "a.txt", to: "a (2).txt"), .init(from: "b.txt", to: "b (2).txt")])
        #expect(keep.importedCount == 5)
        let again = try await catalog.importBundle(from: bundle, options: options(.keepBoth))
        #expect(again.alreadyPresent.count == 5 && again.alreadyPresent.items == ["a.txt", "b.txt"])

        let replace = try await catalog.importBundle(from: bundle, options: options(.replace))
        #expect(replace.replaced.count == 5 && replace.replaced.items == old.prefix(2).map(\.id))
        #expect(try catalog.assets().filter { names.contains($0.name) }.count == 5)  // each replaced, not just two
        #expect(try catalog.assets().allSatisfy { a in !old.contains { $0.id == a.id } })
        #expect(try catalog.stats().pendingRemovals == 0)
    }

    // MARK: - Export failures

    @Test(arguments: ["out.tar.zst", "out.zip", "out"])
    func aDamagedAssetStopsTheExportAndLeavesNoBundle(_ name: String) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([
            try t.file("good.txt", "good\n"), try t.file("bad.txt", "soon damaged\n"), try t.file("last.txt", "last\n"),
        ]).added
        let bad = added[1]
        let object = t.objectPath(bad.sha256)
        #expect(chmod(object, 0o644) == 0)
        try Data("now damaged\n".utf8).write(to: URL(fileURLWithPath: object))  // same size, other bytes

        let output = t.directory.appending(path: "output")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let bundle = output.appending(path: name).path
        let error = await #expect(throws: CatalogError.self) { try await catalog.export(to: bundle) }
        #expect(error?.code == .damaged)
        #expect(error?.message.contains("asset \(bad.id) (bad.txt)") == true, "\(String(describing: error))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])  // no bundle, no .partial

        let result = try await catalog.export(to: bundle, options: ExportOptions(skipsDamaged: true))
        #expect(result.skipped.map(\.id) == [bad.id])
        #expect(result.skipped.map(\.name) == ["bad.txt"])
        #expect(result.skipped.first?.reason.contains("damaged") == true)
        #expect(result.assets == 2)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [name])
        let target = try TestCatalog()
        let imported = try target.create()
        defer { imported.close() }
        #expect(
            try imported.assets(importedBy: await imported.importBundle(from: bundle)).map(\.name) == [
                "good.txt", "last.txt",
            ])
    }

    /// An export reads the catalog a page of 1,000 assets at a time, and names, skips and
    /// writes across pages as within one; an archive past the first page still brings its
    /// members, under its own folder.
    @Test func anExportOfMoreThanAPageOfAssetsKeepsEveryAssetAndSkipsAcrossPages() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let paths = try (0..<1_002).map { try t.file("many/\($0 % 2)/f\($0 / 2).txt", "file \($0)\n") }
        _ = try await catalog.add(paths, options: AddOptions(mode: .reference))
        try t.file("packed/f0.txt", "a member named like a file\n")
        let archive = t.sources.appending(path: "pack.tar").path
        try await tool("bsdtar", ["-cf", archive, "-C", t.sources.appending(path: "packed").path, "f0.txt"])
        _ = try await catalog.addAndRunJobs([archive])
        let all = try catalog.assets()
        #expect(all.count == 1_004)
        let gone = try #require(all.first { $0.id == 1_001 })
        try FileManager.default.removeItem(atPath: try #require(gone.path))

        let bundle = t.directory.appending(path: "many.tar").path
        let result = try await catalog.export(to: bundle, options: ExportOptions(skipsDamaged: true))
        #expect(result.skipped.map(\.id) == [1_001])
        #expect(result.assets == 1_003)
        let target = try TestCatalog()
        let imported = try target.create()
        defer { imported.close() }
        let back = try imported.assets(importedBy: await imported.importBundle(from: bundle))
        let expected = all.filter { $0.id != 1_001 }
        #expect(back.map(\.name).sorted() == expected.map(\.name).sorted())
        #expect(Set(back.map(\.sha256)) == Set(expected.map(\.sha256)))
        #expect(back.first { $0.storage == .member }?.name == "f0.txt")
    }

    @Test func aMissingReferencedFileStopsTheExport() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("managed.txt", "managed\n")])
        let path = try t.file("far/away.txt", "referenced\n")
        let referenced = try #require(
            try await catalog.add([path], options: AddOptions(mode: .reference)).added.first)
        try FileManager.default.removeItem(atPath: path)

        let output = t.directory.appending(path: "output")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let bundle = output.appending(path: "out.tar").path
        let error = await #expect(throws: CatalogError.self) { try await catalog.export(to: bundle) }
        #expect(error?.code == .damaged)
        #expect(error?.message.contains("asset \(referenced.id) (away.txt)") == true, "\(String(describing: error))")
        #expect(error?.message.contains("its content is missing") == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == [])

        let result = try await catalog.export(to: bundle, options: ExportOptions(skipsDamaged: true))
        #expect(result.skipped.map(\.id) == [referenced.id])
        #expect(result.assets == 1)
    }

    // MARK: - Selection

    @Test func exportSelectsByTagKindOrIDAndAnArchiveBringsItsMembers() async throws {
        let source = try TestCatalog()
        let catalog = try await populated(source, awkwardNames: false)
        defer { catalog.close() }
        let archive = try catalog.asset(named: "pack.tar.gz")

        func exported(_ selection: ExportSelection) async throws -> [AssetRecord] {
            let bundle = source.directory.appending(path: "selection-\(UUID().uuidString).tar").path
            let result = try await catalog.export(to: bundle, selection: selection)
            let target = try TestCatalog()
            let imported = try target.create()
            defer { imported.close() }
            let assets = try imported.assets(importedBy: await imported.importBundle(from: bundle))
            #expect(result.assets == assets.count)
            return assets
        }

        let byTag = try await exported(ExportSelection(query: AssetQuery(tag: "favourite")))
        #expect(byTag.map(\.name) == ["a.txt"])
        #expect(byTag.first?.metadata["rating"] == "5")

        let byIDs = try await exported(ExportSelection(ids: [2, catalog.asset(named: "ref.md").id]))
        #expect(byIDs.map(\.name) == ["copy of a.txt", "ref.md"])
        #expect(byIDs.map(\.storage) == [.managed, .referenced])

        // An archive brings its members, linked to it in the new catalog.
        let byKind = try await exported(ExportSelection(query: AssetQuery(kind: "archive")))
        #expect(byKind.first?.name == "pack.tar.gz")
        #expect(Set(byKind.dropFirst().map(\.name)) == ["inner/doc.txt", "inner/deep/notes.md"])
        #expect(byKind.dropFirst().allSatisfy { $0.storage == .member && $0.archive == byKind[0].id })
        let doc = try #require(byKind.first { $0.name == "inner/doc.txt" })
        #expect(doc.tags == (try catalog.asset(named: "inner/doc.txt").tags) && doc.tags.contains("member"))
        #expect(doc.metadata == ["note": "a member's metadata"])
        let byName = try await exported(ExportSelection(ids: [archive.id]))
        #expect(byName.map(\.name) == byKind.map(\.name))

        // A member without its archive comes on its own, as a managed file.
        let members = try await exported(ExportSelection(query: AssetQuery(tag: "member")))
        #expect(members.map(\.name) == ["inner/doc.txt"])
        #expect(members.map(\.storage) == [.managed] && members[0].archive == nil && members[0].member == nil)

        // A tag and IDs together: the IDs that have the tag.
        let both = try await exported(
            ExportSelection(ids: [1, catalog.asset(named: "ref.md").id], query: AssetQuery(tag: "trip")))
        #expect(both.map(\.name) == ["a.txt"])
    }

    @Test func payloadNameCollisionsAreNumberedDeterministically() async throws {
        let t = try TestCatalog()
        try t.file("packed/inner/doc.txt", "member\n")
        let archive = t.sources.appending(path: "pack.tar").path
        try await tool("bsdtar", ["-cf", archive, "-C", t.sources.appending(path: "packed").path, "inner"])
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.addAndRunJobs([
            try t.file("one/a.txt", "first a\n"), try t.file("two/a.txt", "second a\n"),
            try t.file("three/a (2).txt", "a real a (2)\n"),
            try t.file("pack", "a file named like the members' folder\n"),
            archive,
        ])
        #expect(
            try catalog.assets().map(\.name) == ["a.txt", "a.txt", "a (2).txt", "pack", "pack.tar", "inner/doc.txt"])

        var manifests: [String] = []
        for n in 1...2 {
            let bundle = t.directory.appending(path: "bag\(n)").path
            _ = try await catalog.export(to: bundle)
            #expect(
                files(under: bundle + "/data") == [
                    "a (2) (2).txt", "a (2).txt", "a.txt", "pack", "pack (2)/inner/doc.txt", "pack.tar",
                ])
            #expect(try String(contentsOfFile: bundle + "/data/a.txt", encoding: .utf8) == "first a\n")
            #expect(try String(contentsOfFile: bundle + "/data/a (2).txt", encoding: .utf8) == "second a\n")
            manifests.append(try String(contentsOfFile: bundle + "/manifest-sha256.txt", encoding: .utf8))
        }
        #expect(manifests[0] == manifests[1])

        // The names, not the payload paths, come back.
        let target = try TestCatalog()
        let imported = try target.create()
        defer { imported.close() }
        _ = try await imported.importBundle(from: t.directory.appending(path: "bag1").path)
        #expect(
            try imported.assets().map(\.name) == ["a.txt", "a.txt", "a (2).txt", "pack", "pack.tar", "inner/doc.txt"])
        #expect(try bytes(of: 1, in: imported) == Data("first a\n".utf8))
        #expect(try bytes(of: 2, in: imported) == Data("second a\n".utf8))
        #expect(try bytes(of: "inner/doc.txt", in: imported) == Data("member\n".utf8))
    }
}

// MARK: - Helpers

/// The content of the bundle's `a.txt` in ``conflict()``.
private let bundleDigest = "a7c3d049feb0e6ee2e3a2f786c0bb8e4ed74eb623ba2da1dbcce5fb9615c4749"

/// A catalog with `a.txt` (ID 1, "the catalog's version", tagged `mine`) and `b.txt`, and
/// a bundle with another `a.txt` ("the bundle's version", tagged `theirs`) and `c.txt`.
private func conflict() async throws -> (TestCatalog, Catalog, AssetRecord, String) {
    let bundle = try await exportedBundle(
        [("a.txt", "the bundle's version\n"), ("c.txt", "new\n")], tags: ["theirs"])
    let t = try TestCatalog()
    let catalog = try t.create()
    let added = try await catalog.add(
        [try t.file("a.txt", "the catalog's version\n"), try t.file("b.txt", "unrelated\n")],
        options: AddOptions(tags: ["mine"])
    ).added
    return (t, catalog, added[0], bundle)
}

/// Exports a new catalog holding `files` (name, contents) and returns the bundle's path.
private func exportedBundle(_ files: [(String, String)], tags: [String] = []) async throws -> String {
    let t = try TestCatalog()
    let catalog = try t.create()
    defer { catalog.close() }
    _ = try await catalog.add(try files.map { try t.file($0.0, $0.1) }, options: AddOptions(tags: tags))
    let path = t.directory.appending(path: "bundle.tar").path
    _ = try await catalog.export(to: path)
    return path
}

/// Starts like a JPEG: the metadata job records a media type for it.
private let jpegBytes = Data([0xFF, 0xD8, 0xFF, 0xE0] + Array("not really a photo".utf8))

/// A catalog with every kind of asset: managed files (two sharing content), an accented
/// name, a photo (its metadata set by a job), a `.tar.gz` whose two members are indexed,
/// a referenced file, tags and metadata set by hand (a member's too). IDs: the files
/// 1…5, with `awkwardNames` four more, then the referenced file, then the members.
///
/// `awkwardNames` adds names that try the bag's path encoding and byte-exact names: `%`,
/// a literal `%25`, a line break, and the decomposed (NFD) twin of the accented name.
/// bagit-python does not encode `%`, and bsdtar recomposes NFD names on extraction, so
/// the interoperability tests leave them out.
private func populated(_ t: TestCatalog, awkwardNames: Bool = true) async throws -> Catalog {
    try t.file("pack/inner/doc.txt", "inside the archive\n")
    try t.file("pack/inner/deep/notes.md", "# deeper\n")
    let archive = t.sources.appending(path: "pack.tar.gz").path
    try await tool("bsdtar", ["-czf", archive, "-C", t.sources.appending(path: "pack").path, "inner"])
    var files = [
        try t.file("a.txt", "alpha\n"), try t.file("copy of a.txt", "alpha\n"),
        try t.file("caf\u{E9}.txt", "precomposed\n"), try t.file("photo.jpg", jpegBytes), archive,
    ]
    if awkwardNames {
        files += [
            try t.file("100% done.txt", "percent\n"), try t.file("50%25 off.txt", "a literal %25\n"),
            try t.file("line\nbreak.txt", "two lines\n"), try t.file("cafe\u{301}.txt", "decomposed\n"),
        ]
    }
    let catalog = try t.create()
    let added = try await catalog.add(files, options: AddOptions(tags: ["trip"]))
    #expect(added.failures.isEmpty)
    _ = try await catalog.add(
        [try t.file("elsewhere/ref.md", "# referenced\n")], options: AddOptions(mode: .reference, tags: ["ref"]))
    _ = try await catalog.jobs.runUntilIdle()
    try catalog.tag([catalog.asset(named: "a.txt").id], adding: ["favourite", "two words"])
    try catalog.setMetadata(
        catalog.asset(named: "a.txt").id, ["rating": "5", "caption": "Ünïcode, \"quotes\" & a\nline break"])
    try catalog.tag([catalog.asset(named: "inner/doc.txt").id], adding: ["member"])
    try catalog.setMetadata(catalog.asset(named: "inner/doc.txt").id, ["note": "a member's metadata"])
    return catalog
}

/// `assetcat ls --json` of a catalog, made comparable with another catalog's: without
/// `id`, and with `archive` (an ID) replaced by the archive's name. Canonical JSON bytes
/// (sorted keys), compared byte for byte: NFC and NFD names are different names.
private func comparableListing(_ t: TestCatalog) async throws -> Data {
    let run = try await t.run(["ls", "--json"])
    #expect(run.status == 0, "\(run.stderr)")
    let assets = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [[String: Any]])
    var names: [Int64: String] = [:]
    for asset in assets {
        if let id = (asset["id"] as? NSNumber)?.int64Value { names[id] = asset["name"] as? String }
    }
    let comparable = assets.map { asset -> [String: Any] in
        var asset = asset
        asset["id"] = nil
        if let archive = (asset["archive"] as? NSNumber)?.int64Value {
            asset["archive"] = "the archive named " + (names[archive] ?? "?")
        }
        return asset
    }
    return try JSONSerialization.data(
        withJSONObject: comparable, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
}

/// An asset's bytes.
private func bytes(of name: String, in catalog: Catalog) throws -> Data {
    try bytes(of: catalog.asset(named: name).id, in: catalog)
}

private func bytes(of id: AssetID, in catalog: Catalog) throws -> Data {
    var data = Data()
    try catalog.read(id) { data.append(contentsOf: $0) }
    return data
}

/// What is in this process's own staging folder.
private func ownStaging(_ catalog: Catalog) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: catalog.content.ownStaging)
}

/// The files under a directory, as sorted relative paths.
private func files(under directory: String) -> [String] {
    let enumerator = FileManager.default.enumerator(atPath: directory)
    var result: [String] = []
    while let path = enumerator?.nextObject() as? String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory + "/" + path, isDirectory: &isDirectory),
            !isDirectory.boolValue
        {
            result.append(path)
        }
    }
    return result.sorted()
}

private struct ToolFailed: Error, CustomStringConvertible {
    var description: String
}

/// Runs a tool found on PATH (bsdtar, tar, python3) in a UTF-8 locale, waiting for it off
/// the concurrency pool. Unless `checked` is false, a non-zero exit throws.
@discardableResult
private func tool(_ name: String, _ arguments: [String], checked: Bool = true) async throws -> (
    status: Int32, stdout: String, stderr: String
) {
    let run = try await ChildProcess.run("/usr/bin/env", [name] + arguments, environment: ["LC_ALL": "C.UTF-8"])
    let (stdout, stderr) = (run.stdoutText, run.stderrText)
    if checked, run.termination != .exited(0) {
        throw ToolFailed(description: "\(name) \(arguments) exited \(run.status): \(stderr)")
    }
    return (run.status, stdout, stderr)
}

extension BundleTests {
    /// An asset added with `--defer-hash` has no digest until its job runs: exporting it
    /// says so, rather than writing a manifest line without a checksum.
    @Test func anAssetWithoutADigestYetIsRefusedByName() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let file = try t.file("later.bin", "bytes")
        let asset = try #require(
            try await catalog.add([file], options: .init(mode: .reference, defersHashing: true)).added.first)
        let bundle = t.directory.appending(path: "out.tar").path
        do {
            _ = try await catalog.export(to: bundle)
            Issue.record("the export did not fail")
        } catch let error as CatalogError {
            #expect(
                error.message
                    == "Cannot export asset \(asset.id) (later.bin): its digest is not computed yet; "
                    + "run `assetcat jobs run` first")
        }
        #expect(!FileManager.default.fileExists(atPath: bundle))
    }
}
