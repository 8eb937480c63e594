import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `assetcat export`, `import` and `validate`, run as a user would, their output compared
/// exactly.
@Suite struct BundleCLITests {
    /// A catalog made through the CLI: a.txt (6 bytes) and b.txt (8), tagged `demo`, then
    /// photo.jpg (4; not a picture: its jobs are left queued, its thumbnail's would fail).
    func populated() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let add = try await t.run([
            "add", try t.file("a.txt", "hello\n"), try t.file("b.txt", "bonjour\n"), "--tag", "demo",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(try await t.run(["add", "--queue-only", try t.file("photo.jpg", "JFIF")]).status == 0)
        return t
    }

    @Test func exportPrintsASummaryAndSelects() async throws {
        let t = try await populated()
        let path = t.directory.appending(path: "out.tar.zst").path
        let run = try await t.run(["export", "out.tar.zst", "--json"])  // relative to the working directory
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr == "")
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(Set(summary.keys) == ["path", "format", "assets", "files", "bytes", "skipped", "apartByCase"])
        #expect(summary["path"] as? String == path)
        #expect(summary["format"] as? String == "tar.zst")
        #expect((summary["assets"] as? NSNumber)?.intValue == 3)
        #expect((summary["files"] as? NSNumber)?.intValue == 3)
        #expect((summary["bytes"] as? NSNumber)?.intValue == 18)
        #expect((summary["skipped"] as? [Any])?.isEmpty == true)
        #expect((summary["apartByCase"] as? [String: Any])?["count"] as? Int == 0)

        let validate = try await t.run(["validate", path], namesCatalog: false)
        #expect(validate.status == 0)
        #expect(validate.stdout == "\(path) is valid: BagIt 1.0, 3 payload files, 18 B\n")

        // By tag (no extension: a directory), by kind, by IDs and names, and a format by name.
        let directory = t.directory.path
        #expect(
            try await t.run(["export", "tagged", "--tag", "demo"]).stdout
                == "exported 2 assets (14 B) to \(directory)/tagged\n")
        #expect(
            try await t.run(["export", "images.tar", "--kind", "image"]).stdout
                == "exported 1 asset (4 B) to \(directory)/images.tar\n")
        #expect(
            try await t.run(["export", "picked.tar.gz", "1", "photo.jpg"]).stdout
                == "exported 2 assets (10 B) to \(directory)/picked.tar.gz\n")
        let zip = try await t.run(["export", "out.bag", "--format", "zip", "--json"])
        #expect(zip.stdout.contains(#""format" : "zip (deflate)""#), "\(zip.stdout)")
        #expect(try await t.run(["validate", directory + "/out.bag"], namesCatalog: false).status == 0)
    }

    @Test func importReportsWhatItDidWithConflicts() async throws {
        let source = try await populated()
        let bundle = source.directory.appending(path: "bundle.tar").path
        #expect(try await source.run(["export", bundle]).status == 0)

        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        #expect(try await t.run(["add", try t.file("a.txt", "mine\n")]).status == 0)

        let skip = try await t.run(["import", bundle])  // skip is the default
        #expect(skip.status == 0)
        #expect(skip.stdout == "imported 2 assets from \(bundle); 1 skipped (name conflicts)\n")
        #expect(skip.stderr == "skipped a.txt: the catalog has an asset with this name (ID 1)\n")

        let keep = try await t.run(["import", bundle, "--on-conflict", "keep-both"])
        #expect(keep.status == 0)
        #expect(keep.stdout == "imported 1 asset from \(bundle); 2 already present; 1 renamed\n")
        #expect(keep.stderr == "renamed a.txt -> a (2).txt\n")
        #expect(try await t.run(["cat", "a (2).txt"]).stdout == "hello\n")
        #expect(try await t.run(["cat", "a.txt"]).stdout == "mine\n")

        // A bundle whose a.txt is the catalog's own: already present, nothing to do.
        let mine = t.directory.appending(path: "mine.tar.gz").path
        #expect(try await t.run(["export", mine, "a.txt"]).status == 0)
        let again = try await t.run(["import", mine, "--on-conflict", "replace"])
        #expect(again.stdout == "imported 0 assets from \(mine); 1 already present\n")

        let replace = try await t.run(["import", bundle, "--on-conflict", "replace", "--json"])
        #expect(replace.status == 0)
        let result = try #require(try JSONSerialization.jsonObject(with: Data(replace.stdout.utf8)) as? [String: Any])
        let replaced = try #require(result["replaced"] as? [String: Any])  // a count and the first IDs
        #expect((replaced["count"] as? NSNumber)?.intValue == 1)
        #expect((replaced["items"] as? [NSNumber])?.map(\.intValue) == [1])
        #expect((result["importedCount"] as? NSNumber)?.intValue == 1)
        let ids = try #require((result["importedIDs"] as? [[NSNumber]])?.map { $0.map(\.int64Value) })
        #expect(ids.count == 1 && ids[0].count == 2 && ids[0][0] == ids[0][1])
        let listed = try await t.run(["ls", "--json"])
        let assets = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(assets.first { ($0["id"] as? NSNumber)?.int64Value == ids[0][0] }?["name"] as? String == "a.txt")
        #expect(try await t.run(["cat", "a.txt"]).stdout == "hello\n")
    }

    /// `source` exported as a directory bag from another tool would make: ours without our
    /// records (and their tag manifest); its path.
    func foreignBag(from source: TestCatalog) async throws -> String {
        let bag = source.directory.appending(path: "foreign").path
        #expect(try await source.run(["export", bag]).status == 0)
        for tag in ["assetcat-records.json", "tagmanifest-sha256.txt"] {
            try FileManager.default.removeItem(atPath: bag + "/" + tag)
        }
        return bag
    }

    /// A bag from another tool (here ours, without our records) has its images read and its
    /// archives indexed, as an add would: import runs those jobs before it returns (the
    /// archive's members are listed), or with `--queue-only` leaves them queued and says so.
    @Test(arguments: [false, true])
    func importOfAForeignBagRunsTheJobsItQueued(queueOnly: Bool) async throws {
        let source = try await populated()
        try source.file("pack/inner/doc.txt", "inside the archive\n")
        let zip = source.sources.appending(path: "pack.zip").path
        _ = try await ChildProcess.run(
            "/usr/bin/bsdtar", ["-a", "-cf", zip, "-C", source.sources.appending(path: "pack").path, "inner/doc.txt"],
            stdout: .inherit, stderr: .inherit)
        #expect(try await source.run(["add", "--queue-only", zip]).status == 0)
        let bag = try await foreignBag(from: source)
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let run = try await t.run(["import", bag] + (queueOnly ? ["--queue-only"] : []))
        #expect(run.status == 0, "\(run.stderr)")
        let queued = queueOnly ? "queued 2 jobs; run them with `assetcat jobs run`\n" : ""
        #expect(run.stdout == "imported 4 assets from \(bag)\n" + queued)
        #expect(run.stderr == "")
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.jobs.list().map(\.state) == (queueOnly ? [.queued, .queued] : [.succeeded, .succeeded]))
        #expect(try catalog.assets().contains { $0.member == "inner/doc.txt" } == !queueOnly)
    }

    /// `import --json` of a bag from another tool whose archive cannot be indexed: the JSON on
    /// stdout as ever, the failed job named on stderr, exit 1.
    @Test func importJSONNamesAFailedJobOnStderrAndExitsOne() async throws {
        let source = try TestCatalog()
        #expect(try await source.run(["init", source.root.path]).status == 0)
        #expect(try await source.run(["add", "--queue-only", try source.file("broken.zip", "not a zip")]).status == 0)
        let bag = try await foreignBag(from: source)
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let run = try await t.run(["import", bag, "--json"])
        #expect(run.status == 1)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        #expect(json["importedCount"] as? Int == 1, "\(run.stdout)")
        #expect(
            run.stderr
                == "assetcat: asset 1 broken.zip: index-archive job 1 failed: Could not index the archive broken.zip: "
                + "Unrecognized archive format (`assetcat jobs retry 1` runs it again)\n")
    }

    /// A thousand conflicts are noted one per line; beyond, one line says how many more.
    @Test func importNotesTheFirstThousandConflictsAndCountsTheRest() async throws {
        let count = 1_002
        var bundle = ""
        for (side, text) in [("theirs", "the bundle's"), ("mine", "the catalog's")] {
            let t = try TestCatalog()
            #expect(try await t.run(["init", t.root.path]).status == 0)
            for i in 0..<count { try t.file("many/f\(i).txt", "\(text) \(i)\n") }
            let add = try await t.run(["add", "--recursive", t.sources.appending(path: "many").path])
            #expect(add.status == 0, "\(add.stderr)")
            guard side == "mine" else {
                bundle = t.directory.appending(path: "many.tar").path
                #expect(try await t.run(["export", bundle]).status == 0)
                continue
            }
            let skip = try await t.run(["import", bundle])
            #expect(skip.status == 0)
            #expect(skip.stdout == "imported 0 assets from \(bundle); \(count) skipped (name conflicts)\n")
            let lines = skip.stderr.split(separator: "\n")
            #expect(lines.count == 1_001)
            #expect(lines.dropLast().allSatisfy { $0.hasPrefix("skipped ") })
            #expect(lines.last == "and 2 more skipped")
        }
    }

    @Test func exportTakesACompressionLevelTheFormatAllows() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
        let text = (0..<60_000).map { words[($0 * 7_919 + $0 / 3) % words.count] }.joined(separator: " ")
        #expect(try await t.run(["add", try t.file("words.txt", text)]).status == 0)
        let directory = t.directory.path
        for level in ["1", "9"] {
            let run = try await t.run(["export", "level\(level).tar.gz", "--compression-level", level])
            #expect(run.status == 0, "\(run.stderr)")
        }
        let size = { (name: String) in
            (try? FileManager.default.attributesOfItem(atPath: "\(directory)/\(name)")[.size] as? Int) ?? 0
        }
        #expect(size("level9.tar.gz") > 0 && size("level9.tar.gz") < size("level1.tar.gz"))

        let zstd = try await t.run(["export", "bad.tar.zst", "--compression-level", "30"])
        #expect(zstd.status == 1)
        #expect(zstd.stderr.contains("compression level 30 is not valid for tar.zst (use 1–22)"), "\(zstd.stderr)")
        let tar = try await t.run(["export", "plain.tar", "--compression-level", "3"])
        #expect(tar.stderr.contains("compression level 3 is not valid for tar (it has no compression level)"))
        let bag = try await t.run(["export", "bag", "--compression-level", "3"])
        #expect(bag.status == 1)
        #expect(
            bag.stderr == "assetcat: \(directory)/bag: is a directory bag: it has no compression level (3 was given)\n")
        for name in ["bad.tar.zst", "plain.tar", "bag"] {
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/\(name)"))
        }
    }

    @Test func anUnknownFormatOrConflictPolicyIsAClearError() async throws {
        let t = try await populated()
        let format = try await t.run(["export", "out.rar", "--format", "rar"])
        #expect(format.status == 64)  // a usage error
        #expect(format.stderr.contains("Unknown format 'rar': use tar, tar.gz, tar.zst, tar.xz, zip or dir"))
        #expect(format.stdout == "")
        #expect(!FileManager.default.fileExists(atPath: t.directory.appending(path: "out.rar").path))

        let policy = try await t.run(["import", "out.tar", "--on-conflict", "merge"])
        #expect(policy.status == 64)
        #expect(policy.stderr.contains("Unknown --on-conflict 'merge': use skip, replace or keep-both"))

        let missing = try await t.run(["import", "nowhere.tar"])
        #expect(missing.status == 1)
        #expect(missing.stderr.hasPrefix("assetcat: "))
        #expect(missing.stderr.contains("nowhere.tar"))
        #expect(try await t.run(["ls", "--json"]).stdout.components(separatedBy: "\"id\"").count == 4)  // unchanged
    }

    @Test func aDamagedAssetStopsTheExportUnlessSkipped() async throws {
        let t = try await populated()
        let catalog = try t.open()
        let b = try catalog.asset(named: "b.txt")
        catalog.close()
        let object = t.objectPath(b.sha256)
        #expect(chmod(object, 0o644) == 0)
        try Data("damaged\n".utf8).write(to: URL(fileURLWithPath: object))

        let path = t.directory.appending(path: "out.tar").path
        let failed = try await t.run(["export", path])
        #expect(failed.status == 1)
        #expect(failed.stdout == "")
        #expect(
            failed.stderr.hasPrefix("assetcat: Cannot export asset 2 (b.txt): it is damaged — "), "\(failed.stderr)")
        #expect(failed.stderr.hasSuffix("; run `assetcat verify`, or export with --skip-damaged\n"))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: t.directory.path).sorted() == ["catalog", "sources"])

        let skipped = try await t.run(["export", path, "--skip-damaged"])
        #expect(skipped.status == 0)
        #expect(skipped.stdout == "exported 2 assets (10 B) to \(path); left out 1 missing or damaged\n")
        #expect(skipped.stderr.hasPrefix("left out 2 b.txt: its content is damaged"), "\(skipped.stderr)")
    }

    @Test func anInvalidBagIsRefusedWhole() async throws {
        let source = try await populated()
        let bundle = source.directory.appending(path: "bag").path
        #expect(try await source.run(["export", bundle]).status == 0)
        try Data("tampered\n".utf8).write(to: URL(fileURLWithPath: bundle + "/data/b.txt"))

        let validate = try await source.run(["validate", bundle], namesCatalog: false)
        #expect(validate.status == 1)
        #expect(validate.stdout.contains("data/b.txt"), "\(validate.stdout)")
        #expect(validate.stderr.hasPrefix("\(bundle) is not a valid bag: "))

        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let run = try await t.run(["import", bundle])
        #expect(run.status == 1)
        #expect(run.stderr.hasPrefix("assetcat: \(bundle) is not a valid bag, nothing was imported: "), "\(run.stderr)")
        #expect(try await t.run(["ls", "--json"]).stdout == "[]\n")
    }
}
