import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// `assetcat validate` (and a refused `assetcat import`), run as a user would.
@Suite struct ValidateCLITests {
    /// A catalog with three text assets (18 bytes), exported as a directory bag at `bundles/NAME`.
    func exportedBag(_ t: TestCatalog, _ name: String = "bag") async throws -> String {
        let catalog = try t.create()
        defer { catalog.close() }
        let files = try [("a.txt", "alpha\n"), ("b.txt", "bravo\n"), ("c.txt", "gamma\n")].map { try t.file($0, $1) }
        _ = try await catalog.add(files)
        let bundles = t.directory.appending(path: "bundles").path
        try FileManager.default.createDirectory(atPath: bundles, withIntermediateDirectories: true)
        let bag = bundles + "/" + name
        _ = try await catalog.export(to: bag)
        return bag
    }

    func sha256(_ path: String) throws -> String { try ContentStore.digest(ofFileAt: path).digest }

    @Test func aValidBagExitsZero() async throws {
        let t = try TestCatalog()
        let bag = try await exportedBag(t)
        let run = try await t.run(["validate", bag], namesCatalog: false)
        #expect(run.status == 0)
        #expect(run.stdout == "\(bag) is valid: BagIt 1.0, 3 payload files, 18 B\n")
        #expect(run.stderr == "")
    }

    @Test func aValidArchiveExitsZero() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "alpha\n")])
        let archive = t.directory.appending(path: "bag.tar.zst").path
        _ = try await catalog.export(to: archive)
        let run = try await t.run(["validate", archive], namesCatalog: false)
        #expect(run.status == 0)
        #expect(run.stdout == "\(archive) is valid: BagIt 1.0, 1 payload file, 6 B\n")
    }

    @Test func everyProblemIsPrintedOnItsOwnLineAndTheExitIsOne() async throws {
        let t = try TestCatalog()
        let bag = try await exportedBag(t)
        let listed = try sha256(bag + "/data/b.txt")
        try Data("BRAVO\n".utf8).write(to: URL(fileURLWithPath: bag + "/data/b.txt"))  // same size, other bytes
        let actual = try sha256(bag + "/data/b.txt")
        let run = try await t.run(["validate", bag], namesCatalog: false)
        #expect(run.status == 1)
        #expect(
            run.stdout == """
                data/b.txt: sha256 checksum mismatch: manifest-sha256.txt says \(listed), the file has \(actual)
                assetcat-records.json: contradicts the payload: data/b.txt hashes to \(actual.prefix(12))…, the records say \(listed.prefix(12))…

                """)
        #expect(run.stderr == "\(bag) is not a valid bag: 2 problems\n")

        let json = try await t.run(["validate", bag, "--json"], namesCatalog: false)
        #expect(json.status == 1)
        let report = try #require(
            try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(report["isValid"] as? Bool == false)
        #expect(report["hasRecords"] as? Bool == true)
        #expect((report["problems"] as? [String])?.count == 2)
    }

    @Test func warningsComeFirstOneALineAndTheBagIsValid() async throws {
        let t = try TestCatalog()
        let bag = t.sources.appending(path: "md5sum-bag").path
        for (path, text) in [
            "bagit.txt": "BagIt-Version: 0.97\nTag-File-Character-Encoding: UTF-8\n", "data/hello.txt": "hello\n",
            "manifest-md5.txt": "b1946ac92492d2347c6235b4d2611184 *data/hello.txt\n",
        ] {
            try FileManager.default.createDirectory(
                atPath: ((bag + "/" + path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: bag + "/" + path))
        }
        let run = try await t.run(["validate", bag], namesCatalog: false)
        #expect(run.status == 0)
        #expect(
            run.stdout == """
                warning: manifest-md5.txt: 1 line marks its file with md5sum's binary-mode '*' (read as the name after it)
                \(bag) is valid: BagIt 0.97, 1 payload file, 6 B

                """)
        let json = try await t.run(["validate", bag, "--json"], namesCatalog: false)
        #expect(json.status == 0)
        let report = try #require(
            try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(report["isValid"] as? Bool == true)
        #expect(report["warningCount"] as? Int == 1)
        #expect((report["warnings"] as? [String])?.first?.hasPrefix("manifest-md5.txt: 1 line marks") == true)
    }

    @Test func anIncompleteBagValidatesButIsNotImported() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let bag = t.sources.appending(path: "holey").path
        for (path, text) in [
            "bagit.txt": "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n", "data/hello.txt": "hello\n",
            "manifest-md5.txt": "b1946ac92492d2347c6235b4d2611184  data/hello.txt\n"
                + "b1946ac92492d2347c6235b4d2611184  data/there.txt\n",
            "fetch.txt": "https://example.org/there.txt 6 data/there.txt\n",
        ] {
            try FileManager.default.createDirectory(
                atPath: ((bag + "/" + path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: bag + "/" + path))
        }
        let validate = try await t.run(["validate", bag], namesCatalog: false)
        #expect(validate.status == 0)
        #expect(
            validate.stdout == """
                warning: fetch.txt: lists 1 file to fetch from elsewhere, 1 of them not in the bag: it is incomplete until they are fetched (fetching is not supported)
                \(bag) is valid: BagIt 1.0, 1 payload file, 6 B

                """)
        let run = try await t.run(["import", bag])
        #expect(run.status == 1)
        #expect(
            run.stderr
                == "assetcat: \(bag) is incomplete, nothing was imported: fetch.txt: lists 1 file the bag lacks: "
                + "fetch them into the bag, then import it (fetching is not supported)\n")
        #expect(try await t.run(["ls", "--json"]).stdout == "[]\n")
    }

    @Test func aSymlinkLeavingTheBagIsOneLine() async throws {
        let t = try TestCatalog()
        let bag = try await exportedBag(t)
        try FileManager.default.createSymbolicLink(atPath: bag + "/data/passwd", withDestinationPath: "/etc/passwd")
        let run = try await t.run(["validate", bag], namesCatalog: false)
        #expect(run.status == 1)
        #expect(run.stdout == "data/passwd: is a symbolic link to /etc/passwd, outside the bag\n")
        #expect(run.stderr == "\(bag) is not a valid bag: 1 problem\n")
    }

    @Test func aFolderThatIsNotABag() async throws {
        let t = try TestCatalog()
        let run = try await t.run(["validate", t.sources.path], namesCatalog: false)
        #expect(run.status == 1)
        #expect(run.stdout == "\(t.sources.path): holds no bagit.txt: it is not a BagIt bag\n")
    }

    @Test func aMissingBundle() async throws {
        let t = try TestCatalog()
        let missing = t.directory.appending(path: "nowhere.tar").path
        let run = try await t.run(["validate", missing], namesCatalog: false)
        #expect(run.status == 1)
        #expect(run.stdout == "")
        #expect(run.stderr == "assetcat: No such file or directory: \(missing)\n")
    }

    @Test func importOfAnInvalidBagChangesNothing() async throws {
        let t = try TestCatalog()
        let bag = try await exportedBag(t, "other")
        // Another catalog, empty, imports the broken bag.
        let u = try TestCatalog()
        #expect(try await u.run(["init", u.root.path]).status == 0)
        try FileManager.default.removeItem(atPath: bag + "/data/c.txt")
        let run = try await u.run(["import", bag])
        #expect(run.status == 1)
        #expect(run.stdout == "")
        // Into an empty catalog the import stops at the first manifest line naming a file the
        // bag lacks (BagReader's `stopsAtMaxProblems`); `validate` lists every problem.
        #expect(
            run.stderr
                == "assetcat: \(bag) is not a valid bag, nothing was imported: data/c.txt: is listed in "
                + "manifest-sha256.txt but is not in the bag (there may be more; `assetcat validate` lists them)\n")
        #expect(try await u.run(["ls", "--json"]).stdout == "[]\n")
    }

    /// A manifest of 2,500 files the bag lacks: the first 1,000 problems, then how many more.
    @Test func aBagWithManyProblemsPrintsTheFirstAndACount() async throws {
        let t = try TestCatalog()
        let bag = try await exportedBag(t)
        var manifest = try String(contentsOfFile: bag + "/manifest-sha256.txt", encoding: .utf8)
        let listed = try sha256(bag + "/data/a.txt")
        for i in 0..<2_500 { manifest += "\(listed)  data/missing-\(10_000 + i).txt\n" }
        try Data(manifest.utf8).write(to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        try Data("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8).write(
            to: URL(fileURLWithPath: bag + "/bagit.txt"))
        for tagManifest in try FileManager.default.contentsOfDirectory(atPath: bag)
        where tagManifest.hasPrefix("tagmanifest-") {
            try FileManager.default.removeItem(atPath: bag + "/" + tagManifest)
        }
        let run = try await t.run(["validate", bag], namesCatalog: false)
        #expect(run.status == 1)
        let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 1_002)
        #expect(lines.first == "data/missing-10000.txt: is listed in manifest-sha256.txt but is not in the bag")
        #expect(lines[999] == "data/missing-10999.txt: is listed in manifest-sha256.txt but is not in the bag")
        #expect(lines[1_000] == "… and 1500 more problems")
        #expect(run.stderr == "\(bag) is not a valid bag: 2500 problems\n")
    }

    /// A manifest line whose path is not UTF-8: import says so, not that the manifest's
    /// algorithm is unsupported; validate lists that alone.
    @Test func aManifestPathThatIsNotUTF8IsTheReasonGiven() async throws {
        let t = try TestCatalog()
        let bag = try await exportedBag(t)
        var manifest = Array(try Data(contentsOf: URL(fileURLWithPath: bag + "/manifest-sha256.txt")))
        manifest += Array("\(try sha256(bag + "/data/a.txt"))  data/a".utf8) + [0xFF] + Array(".txt\n".utf8)
        try Data(manifest).write(to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        for tagManifest in try FileManager.default.contentsOfDirectory(atPath: bag)
        where tagManifest.hasPrefix("tagmanifest-") {
            try FileManager.default.removeItem(atPath: bag + "/" + tagManifest)
        }
        let validate = try await t.run(["validate", bag], namesCatalog: false)
        #expect(validate.status == 1)
        #expect(validate.stdout == "manifest-sha256.txt: line 4 is not valid UTF-8\n")
        let u = try TestCatalog()
        try u.create().close()
        let run = try await u.run(["import", bag])
        #expect(run.status != 0)
        #expect(
            run.stderr
                == "assetcat: \(bag) is not a valid bag, nothing was imported: manifest-sha256.txt: line 4 is not "
                + "valid UTF-8\n")
        #expect(try await u.run(["ls", "--json"]).stdout == "[]\n")
    }
}
