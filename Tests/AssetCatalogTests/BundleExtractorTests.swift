import ArchiveIO
import AssetCatalogTestSupport
import BagIt
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog

/// Bags that every extractor agrees on, and bags made elsewhere (issue 21).
///
/// Names that are one string in two Unicode normalisations (`á` as U+00E1 and as `a` +
/// U+0301), or that differ only by letter case, are two files on Linux but one after
/// bsdtar (which writes decomposed names precomposed) or on a case-insensitive file system.
/// An export gives each its own payload path, in NFC; its records keep the names byte for
/// byte, so an import restores them.
@Suite struct BundleExtractorTests {
    static let nfc = "\u{E1}"
    static let nfd = "a\u{301}"

    /// Four files and an archive of six members, named apart only by normalisation or by case.
    private func lookalikes(_ t: TestCatalog) async throws -> Catalog {
        let catalog = try t.create()
        let files = try [
            t.file("\(Self.nfc).txt", "top nfc\n"), t.file("\(Self.nfd).txt", "top nfd\n"),
            t.file("Case.txt", "top upper\n"), t.file("case.txt", "top lower\n"),
        ]
        let zip = t.sources.appending(path: "names.zip").path
        try await tool(
            "python3",
            [
                "-c",
                "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], 'w') as z:\n"
                    + "    for i, n in enumerate(sys.argv[2:]): z.writestr(n, 'member %d\\n' % i)",
                zip, "\(Self.nfc).txt", "\(Self.nfd).txt", "Case.txt", "case.txt", "Docs/x.txt", "docs/y.txt",
            ])
        _ = try await catalog.addAndRunJobs(files + [zip])
        // Eleven assets, apart byte for byte among the files and among the members.
        let names = try catalog.assets().map { [$0.storage.rawValue] + $0.name.utf8.map(String.init) }
        try #require(names.count == 11 && Set(names).count == 11, "\(names)")
        return catalog
    }

    /// What a round trip must keep, byte for byte: names, member paths, content, storage.
    private func listing(_ catalog: Catalog) throws -> Set<[String]> {
        Set(
            try catalog.assets().map {
                [
                    $0.name.utf8.map(String.init).joined(separator: ","),
                    $0.member?.utf8.map(String.init).joined(separator: ",") ?? "-", $0.sha256, $0.storage.rawValue,
                ]
            })
    }

    /// The payload paths a bag's SHA-256 manifest lists, as written.
    private func manifestPaths(_ bag: String) throws -> [String] {
        let text = try Data(contentsOf: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        return String(decoding: text, as: UTF8.self).split(separator: "\n").map { String($0.dropFirst(66)) }
    }

    @Test func lookalikeNamesGetNFCPayloadPathsOfTheirOwnAndComeBackByteForByte() async throws {
        let t = try TestCatalog()
        let catalog = try await lookalikes(t)
        defer { catalog.close() }
        let bag = t.directory.appending(path: "bag").path
        let result = try await catalog.export(to: bag)
        #expect(result.assets == 11)
        let nfc = Self.nfc
        let paths = try manifestPaths(bag)
        #expect(
            paths.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
                == [
                    "data/Case.txt", "data/case (2).txt", "data/names.zip", "data/names/Case.txt",
                    "data/names/Docs/x.txt", "data/names/Docs/y.txt", "data/names/case (2).txt",
                    "data/names/\(nfc) (2).txt", "data/names/\(nfc).txt", "data/\(nfc) (2).txt", "data/\(nfc).txt",
                ].map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
        #expect(!paths.joined().unicodeScalars.contains("\u{301}"), "a payload path is not in NFC")
        // The three moved only for case are named, in the order the export named them.
        #expect(result.apartByCase.count == 3)
        #expect(
            result.apartByCase.items.map { [$0.name, $0.payload] } == [
                ["case.txt", "data/case (2).txt"], ["case.txt", "data/names/case (2).txt"],
                ["docs/y.txt", "data/names/Docs/y.txt"],
            ])

        // Imported into an empty catalog, from the directory and from a zip: the same names,
        // members, content and storage, byte for byte.
        let zip = t.directory.appending(path: "bag.zip").path
        _ = try await catalog.export(to: zip)
        for bundle in [bag, zip] {
            let other = try Catalog.create(at: t.directory.appending(path: "other-\(bundle.hasSuffix(".zip"))"))
            defer { other.close() }
            #expect(try await other.importBundle(from: bundle).importedCount == 11)
            #expect(try listing(other) == listing(catalog), "\(bundle)")
            #expect(try await other.verify().issues.isEmpty)
        }
    }

    /// The namer alone: a file and a folder apart only by case, either way round, are apart in
    /// the bag too; a folder keeps its first spelling; the same name again is numbered without
    /// counting as a case clash.
    @Test func payloadNamesApartOnlyByCaseOrNormalisation() throws {
        let scratch = try ExportScratch()
        let claims = try scratch.batch { batch in
            let namer = PayloadNamer(names: batch)
            return try [
                "Docs", "docs/x.txt", "DOCS/y.txt", "Notes/a.txt", "NOTES", "notes/b.txt", "plain.txt", "plain.txt",
                "cafe\u{301}.txt", "CAF\u{C9}.txt", "caf\u{E9}.txt",
            ].map { try namer.claim($0) }
        }
        #expect(
            claims.map(\.path) == [
                "Docs", "docs (2)/x.txt", "docs (2)/y.txt", "Notes/a.txt", "NOTES (2)", "Notes/b.txt", "plain.txt",
                "plain (2).txt", "caf\u{E9}.txt", "CAF\u{C9} (2).txt", "caf\u{E9} (3).txt",
            ])
        #expect(claims.map(\.path).allSatisfy { !$0.unicodeScalars.contains("\u{301}") })
        #expect(claims.map(\.apartByCase) == [false, true, true, false, true, true, false, false, false, true, false])
    }

    /// Case-insensitive file systems fold case in full, and NTFS upper-cases: names apart
    /// only so are apart in the bag too, where lower-casing alone would take them for two.
    @Test func payloadNamesApartByFullCaseFolding() throws {
        let scratch = try ExportScratch()
        let names = [
            "stra\u{DF}e.txt", "STRASSE.txt", "\u{17F}ea.txt", "sea.txt", "\u{212A}elvin.txt", "kelvin.txt",
            "\u{131}d.txt", "ID.txt", "\u{3C2}.txt", "\u{3A3}.txt",
        ]
        let claims = try scratch.batch { batch in
            let namer = PayloadNamer(names: batch)
            return try names.map { try namer.claim($0) }
        }
        #expect(
            claims.map(\.path) == [
                "stra\u{DF}e.txt", "STRASSE (2).txt", "\u{17F}ea.txt", "sea (2).txt", "\u{212A}elvin.txt",
                "kelvin (2).txt", "\u{131}d.txt", "ID (2).txt", "\u{3C2}.txt", "\u{3A3} (2).txt",
            ])
        #expect(claims.map(\.apartByCase) == [false, true, false, true, false, true, false, true, false, true])
    }

    /// The CLI says when names were moved apart for case, on one line of stderr.
    @Test func theCLIWarnsWhenNamesDifferOnlyByCase() async throws {
        let t = try TestCatalog()
        try await lookalikes(t).close()
        let bundle = t.directory.appending(path: "out.tar").path
        let run = try await t.run(["export", bundle])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(
            run.stderr
                == "warning: 3 asset names differ from another only by letter case: the bag holds them at other "
                + "paths, such as case.txt at data/case (2).txt, so that it extracts on case-insensitive file "
                + "systems; its records keep the names\n")
        #expect(run.stdout.hasPrefix("exported 11 assets ("))

        // One name only, in JSON too.
        let one = try TestCatalog()
        let catalog = try one.create()
        _ = try await catalog.add([try one.file("A.txt", "upper\n"), try one.file("a.txt", "lower\n")])
        catalog.close()
        let json = try await one.run(["export", one.directory.appending(path: "one.tar").path, "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        #expect(
            json.stderr
                == "warning: 1 asset name differs from another only by letter case: the bag holds it at other paths, "
                + "such as a.txt at data/a (2).txt, so that it extracts on case-insensitive file systems; its "
                + "records keep the names\n")
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let apart = try #require(object?["apartByCase"] as? [String: Any], "\(json.stdout)")
        #expect(apart["count"] as? Int == 1)
        let items = try #require(apart["items"] as? [[String: Any]])
        #expect(items.map { [$0["name"] as? String, $0["payload"] as? String] } == [["a.txt", "data/a (2).txt"]])
    }

    /// Every format an export writes, extracted by bsdtar (and a zip by Python's zipfile and
    /// Info-ZIP's unzip too), gives a tree that bagit-python, the reference validator, finds
    /// valid, and in which no two paths are one on a case-insensitive file system.
    @Test func everyFormatExtractsToAValidBagWithEveryExtractor() async throws {
        let t = try TestCatalog()
        let catalog = try await lookalikes(t)
        defer { catalog.close() }
        let hasUnzip = FileManager.default.isExecutableFile(atPath: "/usr/bin/unzip")
        let formats: [(String, BagFormat)] = [
            ("b.tar", .archive(.tar)), ("b.tar.gz", .archive(.tarGzip)), ("b.tar.zst", .archive(.tarZstd)),
            ("b.tar.xz", .archive(.tarXz)), ("b.zip", .archive(.zip(.deflate))), ("s.zip", .archive(.zip(.store))),
        ]
        for (name, format) in formats {
            let bundle = t.directory.appending(path: name).path
            _ = try await catalog.export(to: bundle, options: ExportOptions(format: format))
            var extractors: [(String, [String])] = [("bsdtar", ["-xf", bundle, "-C"])]
            if name.hasSuffix(".zip") {
                extractors.append(
                    (
                        "python3",
                        ["-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])", bundle]
                    )
                )
                if hasUnzip {
                    extractors.append(("unzip", ["-q", bundle, "-d"]))
                } else {
                    print(
                        "skipping unzip for \(name): /usr/bin/unzip is not installed (Scripts/install-deps.sh installs it)"
                    )
                }
            }
            for (extractor, arguments) in extractors {
                let into = t.directory.appending(path: "x-\(name)-\(extractor)").path
                try FileManager.default.createDirectory(atPath: into, withIntermediateDirectories: true)
                try await tool(extractor, arguments + [into])
                let top = try FileManager.default.contentsOfDirectory(atPath: into)
                try #require(top.count == 1, "\(name) by \(extractor): \(top)")
                let bag = into + "/" + top[0]
                let validation = try await tool("python3", ["-m", "bagit", "--validate", bag], checked: false)
                #expect(validation.status == 0, "\(name) extracted by \(extractor): \(validation.stderr)")
                let files = try FileManager.default.subpathsOfDirectory(atPath: bag + "/data")
                #expect(files.count == 13, "\(name) by \(extractor): \(files)")  // 11 files, 2 folders
                #expect(
                    Set(files.map(PayloadNamer.key)).count == files.count,
                    "\(name) by \(extractor): two paths are one on a case-insensitive file system")
            }
        }
    }

    // MARK: - Bags made elsewhere

    /// Writes a BagIt 1.0 bag around the files under `bag/data`, as another tool would: its
    /// paths as the file system has them, lines ended by `eol` ("lf" or "crlf"), and with
    /// `separator` "backslash", manifest paths separated as Windows separates them.
    private func makeBag(_ bag: URL, eol: String = "lf", separator: String = "slash") async throws {
        let script = #"""
            import hashlib, os, sys
            bag = os.fsencode(sys.argv[1])
            eol = b'\r\n' if sys.argv[2] == 'crlf' else b'\n'
            def sha(p):
                with open(p, 'rb') as f: return hashlib.sha256(f.read()).hexdigest().encode()
            def write(name, data):
                with open(os.path.join(bag, name), 'wb') as f: f.write(data)
            lines, total, count = [], 0, 0
            for root, dirs, files in os.walk(os.path.join(bag, b'data')):
                for name in files:
                    p = os.path.join(root, name)
                    rel = os.path.relpath(p, bag)
                    if sys.argv[3] == 'backslash': rel = rel.replace(b'/', b'\\')
                    lines.append(sha(p) + b'  ' + rel + eol)
                    total += os.path.getsize(p)
                    count += 1
            write(b'manifest-sha256.txt', b''.join(sorted(lines)))
            write(b'bagit.txt', b'BagIt-Version: 1.0' + eol + b'Tag-File-Character-Encoding: UTF-8' + eol)
            write(b'bag-info.txt', b'Bag-Software-Agent: elsewhere' + eol + b'Payload-Oxum: %d.%d' % (total, count) + eol)
            tags = [b'bag-info.txt', b'bagit.txt', b'manifest-sha256.txt']
            write(b'tagmanifest-sha256.txt', b''.join(sha(os.path.join(bag, n)) + b'  ' + n + eol for n in tags))
            """#
        try await tool("python3", ["-c", script, bag.path, eol, separator])
    }

    /// Zips `bag` (its folder at the top) as Python's zipfile does, names as they are.
    private func zip(_ bag: URL) async throws -> String {
        let zip = bag.path + ".zip"
        try await tool(
            "python3",
            [
                "-c", "import shutil, sys; shutil.make_archive(sys.argv[1], 'zip', sys.argv[2], sys.argv[3])",
                bag.path, bag.deletingLastPathComponent().path, bag.lastPathComponent,
            ])
        return zip
    }

    /// A bag made on macOS has its names decomposed (NFD), in its payload and its manifest:
    /// it validates and imports, and the catalog lists the names as the bag has them.
    @Test(arguments: ["directory", "zip"])
    func aBagMadeOnMacOSKeepsItsDecomposedNames(_ packaging: String) async throws {
        let t = try TestCatalog()
        let names = ["cafe\u{301}.txt", "sous-dossie\u{301}/nai\u{308}ve.txt"]
        let bag = t.directory.appending(path: "from-mac")
        for (i, name) in names.enumerated() {
            let url = bag.appending(path: "data/" + name)
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("file \(i)\n".utf8).write(to: url)
        }
        try await makeBag(bag)
        let manifest = try Data(contentsOf: bag.appending(path: "manifest-sha256.txt"))
        try #require(manifest.range(of: Data("data/cafe\u{301}.txt".utf8)) != nil, "the manifest is in NFD")
        let bundle = packaging == "zip" ? try await zip(bag) : bag.path

        let catalog = try t.create()
        #expect(try Catalog.validateBundle(at: bundle).isValid)
        #expect(try await catalog.importBundle(from: bundle).importedCount == 2)
        #expect(
            try catalog.assets().map { Array($0.name.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
                == names.map { Array($0.utf8) })
        catalog.close()
        let ls = try await t.run(["ls"])
        #expect(ls.status == 0, "\(ls.stderr)")
        for name in names {
            #expect(Data(ls.stdout.utf8).range(of: Data(name.utf8)) != nil, "ls shows \(name) as the bag has it")
            let composed = name.precomposedStringWithCanonicalMapping
            #expect(Data(ls.stdout.utf8).range(of: Data(composed.utf8)) == nil, "ls shows \(composed), not the bag's")
        }
    }

    /// A bag made on Windows ends its tag files' lines with CR LF: it validates and imports.
    @Test(arguments: ["directory", "zip"])
    func aBagMadeOnWindowsWithCRLFLinesValidatesAndImports(_ packaging: String) async throws {
        let t = try TestCatalog()
        let bag = t.directory.appending(path: "from-windows")
        for (i, name) in ["report.txt", "sub/notes.txt"].enumerated() {
            let url = bag.appending(path: "data/" + name)
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("file \(i)\r\n".utf8).write(to: url)
        }
        try await makeBag(bag, eol: "crlf")
        for file in ["bagit.txt", "bag-info.txt", "manifest-sha256.txt", "tagmanifest-sha256.txt"] {
            let text = try Data(contentsOf: bag.appending(path: file))
            let lines = text.split(separator: 0x0A)
            try #require(lines.allSatisfy { $0.last == 0x0D }, "\(file) ends every line with CR LF")
        }
        let validation = try await tool("python3", ["-m", "bagit", "--validate", bag.path], checked: false)
        #expect(validation.status == 0, "bagit-python: \(validation.stderr)")
        let bundle = packaging == "zip" ? try await zip(bag) : bag.path

        let catalog = try t.create()
        let report = try Catalog.validateBundle(at: bundle)
        #expect(report.isValid && report.problems.isEmpty, "\(report.problems)")
        #expect(try await catalog.importBundle(from: bundle).importedCount == 2)
        #expect(try catalog.assets().map(\.name).sorted() == ["report.txt", "sub/notes.txt"])
        #expect(try await catalog.verify().issues.isEmpty)
        catalog.close()
    }

    /// Backslashes in a manifest's paths (a Windows tool's mistake) are refused as before.
    @Test func backslashesInManifestPathsAreRefused() async throws {
        let t = try TestCatalog()
        let bag = t.directory.appending(path: "backslashes")
        let url = bag.appending(path: "data/sub/notes.txt")
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("notes\r\n".utf8).write(to: url)
        try await makeBag(bag, eol: "crlf", separator: "backslash")
        let manifest = try Data(contentsOf: bag.appending(path: "manifest-sha256.txt"))
        try #require(manifest.range(of: Data(#"data\sub\notes.txt"#.utf8)) != nil)

        let catalog = try t.create()
        defer { catalog.close() }
        let report = try Catalog.validateBundle(at: bag.path)
        #expect(!report.isValid)
        #expect(
            report.problems == [
                "data/sub/notes.txt: is in the bag but not listed in manifest-sha256.txt",
                #"manifest-sha256.txt: lists data\sub\notes.txt, which is not under data/"#,
            ])
        do {
            _ = try await catalog.importBundle(from: bag.path)
            Issue.record("a bag with backslashes in its manifest was imported")
        } catch let error as CatalogError {
            #expect(
                error.message
                    == "\(bag.path) is not a valid bag, nothing was imported: data/sub/notes.txt: is in the bag but "
                    + "not listed in manifest-sha256.txt (and 1 more; `assetcat validate` lists them)")
        }
        #expect(try catalog.assets().isEmpty)
    }
}

private struct ToolFailed: Error, CustomStringConvertible {
    var description: String
}

/// Runs a tool in a UTF-8 locale (bsdtar rewrites names only there), off the pool.
@discardableResult
private func tool(_ name: String, _ arguments: [String], checked: Bool = true) async throws -> (
    status: Int32, stdout: String, stderr: String
) {
    let run = try await ChildProcess.run("/usr/bin/env", [name] + arguments, environment: ["LC_ALL": "C.UTF-8"])
    if checked, run.termination != .exited(0) {
        throw ToolFailed(description: "\(name) \(arguments) exited \(run.status): \(run.stderrText)")
    }
    return (run.status, run.stdoutText, run.stderrText)
}
