import ArchiveIO
import AssetCatalogTestSupport
import BagIt
import Foundation
import Testing

@testable import AssetCatalog

#if canImport(Glibc)
    import Glibc
#endif

/// Our records name archive members; an import checks each against its archive in the
/// payload (the member there, at its ordinal, with its size and SHA-256) before anything
/// commits, and refuses the bag naming the first wrong record. The bags here are exported,
/// then changed as a mutation fuzzer changed them: the records, with the tag manifest made
/// anew, so that only the records are wrong.
@Suite struct BundleMemberRecordTests {
    /// A bag exported from a catalog holding `pack.tar` (members `f1.txt` and `f2.txt`,
    /// indexed), and an empty catalog to import it into.
    struct Fixture {
        let source: TestCatalog
        let target: TestCatalog
        let catalog: Catalog
        let bag: String

        init() async throws {
            source = try TestCatalog()
            let other = try source.create()
            defer { other.close() }
            let archive = source.sources.appending(path: "pack.tar").path
            try FileManager.default.createDirectory(
                atPath: source.sources.path, withIntermediateDirectories: true)
            let writer = try ArchiveWriter(path: archive, format: .tar)
            try writer.writeEntry(ArchiveEntry(path: "f1.txt", kind: .file), contents: Array("one\n".utf8))
            try writer.writeEntry(ArchiveEntry(path: "f2.txt", kind: .file), contents: Array("two two\n".utf8))
            try writer.finish()
            let added = try await other.addAndRunJobs([archive])
            #expect(added.count == 3)  // the archive, then its members
            #expect(try other.assets().map(\.name).sorted() == ["f1.txt", "f2.txt", "pack.tar"])
            bag = source.directory.appending(path: "bag").path
            _ = try await other.export(to: bag)
            target = try TestCatalog()
            catalog = try target.create()
        }

        var recordsPath: String { bag + "/" + BundleRecords.fileName }

        /// The records, one line per asset.
        func records() throws -> [String] {
            try String(contentsOfFile: recordsPath, encoding: .utf8).components(separatedBy: "\n")
        }

        /// Rewrites the records' line of member `f1.txt` with `change`, and the tag manifest.
        func changeF1(_ change: (String) -> String) throws {
            var lines = try records()
            let index = try #require(lines.firstIndex { $0.contains("\"member\":\"f1.txt\"") })
            let changed = change(lines[index])
            #expect(changed != lines[index])
            lines[index] = changed
            try Data(lines.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: recordsPath))
            try resealTagManifest()
        }

        /// The payload path of member `f1.txt`, from the records.
        func f1Payload() throws -> String {
            let line = try #require(try records().first { $0.contains("\"member\":\"f1.txt\"") })
            let start = try #require(line.range(of: "\"payload\":\""))
            return String(line[start.upperBound...].prefix { $0 != "\"" })
        }

        /// Gives member `f1.txt`'s own payload file `bytes`, with the manifest, the oxum and
        /// the records made to agree: only its archive says otherwise.
        func replaceF1Payload(with bytes: [UInt8]) throws {
            let payload = try f1Payload()
            let old = try ContentStore.digest(ofFileAt: bag + "/" + payload).digest
            try Data(bytes).write(to: URL(fileURLWithPath: bag + "/" + payload))
            let new = try ContentStore.digest(ofFileAt: bag + "/" + payload).digest
            let manifest = try String(contentsOfFile: bag + "/manifest-sha256.txt", encoding: .utf8)
            try Data(manifest.replacing(old, with: new).utf8).write(
                to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
            let info = try String(contentsOfFile: bag + "/bag-info.txt", encoding: .utf8)
            let oxum = try #require(info.firstMatch(of: /Payload-Oxum: (\d+)\.(\d+)/))
            let octets = Int(oxum.1)! - 4 + bytes.count
            try Data(info.replacing(oxum.0, with: "Payload-Oxum: \(octets).\(oxum.2)").utf8).write(
                to: URL(fileURLWithPath: bag + "/bag-info.txt"))
            try changeF1 { line in
                line.replacing(old, with: new).replacing("\"size\":4,", with: "\"size\":\(bytes.count),")
            }
        }

        /// Rewrites `tagmanifest-sha256.txt` for the tag files as they are now.
        func resealTagManifest() throws {
            var text = ""
            for name in try FileManager.default.contentsOfDirectory(atPath: bag).sorted()
            where name != "data" && !name.hasPrefix("tagmanifest-") {
                text += "\(try ContentStore.digest(ofFileAt: bag + "/" + name).digest)  \(name)\n"
            }
            try Data(text.utf8).write(to: URL(fileURLWithPath: bag + "/tagmanifest-sha256.txt"))
        }

        /// Imports the bag, which must be refused; the catalog stays empty, nothing is left
        /// in staging or `objects/`. Returns the message.
        func refusal(
            options: ImportOptions = ImportOptions(), sourceLocation: SourceLocation = #_sourceLocation
        ) async throws -> String {
            let error = try await #require(throws: CatalogError.self, sourceLocation: sourceLocation) {
                try await catalog.importBundle(from: bag, options: options)
            }
            #expect(try catalog.assets().isEmpty, sourceLocation: sourceLocation)
            let objects = target.root.appending(path: "objects").path
            let left = (FileManager.default.enumerator(atPath: objects)?.allObjects as? [String]) ?? []
            #expect(left.filter { !$0.hasSuffix("/") && $0.count > 3 }.isEmpty, sourceLocation: sourceLocation)
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: catalog.content.ownStaging).isEmpty,
                sourceLocation: sourceLocation)
            return error.message
        }

        func invalid(_ problem: String) -> String {
            "\(bag) is not a valid bag, nothing was imported: assetcat-records.json: \(problem)"
        }
    }

    @Test func theUnchangedBagImportsAndVerifies() async throws {
        let f = try await Fixture()
        let result = try await f.catalog.importBundle(from: f.bag)
        #expect(result.importedCount == 3)
        let report = try await f.catalog.verify()
        #expect(report.checked == 3 && report.issues.isEmpty)
        var bytes = Data()
        let f1 = try #require(try f.catalog.assets().first { $0.name == "f1.txt" })
        try f.catalog.read(f1.id) { bytes.append(contentsOf: $0) }
        #expect(bytes == Data("one\n".utf8))
    }

    /// `f1.txt` → `f!.txt`: one bit of the member path.
    @Test func aMemberPathTheArchiveLacksIsRefused() async throws {
        let f = try await Fixture()
        try f.changeF1 { $0.replacing("\"member\":\"f1.txt\"", with: "\"member\":\"f!.txt\"") }
        #expect(
            try await f.refusal()
                == f.invalid("says f1.txt is member f!.txt of data/pack.tar, which that archive does not hold"))
    }

    @Test func aMemberOrdinalTheArchiveLacksIsRefused() async throws {
        let f = try await Fixture()
        try f.changeF1 { $0.replacing("\"memberOrdinal\":0", with: "\"memberOrdinal\":1099511627776") }
        #expect(
            try await f.refusal()
                == f.invalid(
                    "says f1.txt is member f1.txt (ordinal 1099511627776) of data/pack.tar, which that archive does "
                        + "not hold"))
    }

    /// The member's own payload file, manifest and record agree; the archive does not.
    @Test func aMemberSizeTheArchiveContradictsIsRefused() async throws {
        let f = try await Fixture()
        try f.replaceF1Payload(with: Array("one more\n".utf8))
        #expect(try await f.refusal() == f.invalid("says member f1.txt of data/pack.tar has 9 bytes; it has 4"))
    }

    @Test func aMemberDigestTheArchiveContradictsIsRefused() async throws {
        let f = try await Fixture()
        try f.replaceF1Payload(with: Array("ONE\n".utf8))
        let recorded = try ContentStore.digest(ofFileAt: f.bag + "/" + f.f1Payload()).digest
        var hasher = DigestAccumulator()
        Array("one\n".utf8).withUnsafeBytes { hasher.add($0) }
        #expect(
            try await f.refusal()
                == f.invalid(
                    "says member f1.txt of data/pack.tar hashes to \(recorded.prefix(12))…; it hashes to "
                        + "\(hasher.hex.prefix(12))…"))
    }

    /// The archive is read within the import's size limit (a directory bag's own files are
    /// not archive members: only the archive read for its members counts here).
    @Test func anArchiveLargerThanTheImportsLimitIsRefused() async throws {
        let f = try await Fixture()
        #expect(
            try await f.refusal(options: ImportOptions(policy: ExtractionPolicy(maxTotalBytes: 10)))
                == f.invalid("lists members of data/pack.tar, which expands to more than 10 bytes, the import's limit"))
        // Within it, the same bag imports.
        let result = try await f.catalog.importBundle(
            from: f.bag, options: ImportOptions(policy: ExtractionPolicy(maxTotalBytes: 12)))
        #expect(result.importedCount == 3)
    }

    /// `validate` checks the members as import does, in a directory bag and in an archive.
    @Test func validationListsAMemberTheArchiveLacks() async throws {
        let f = try await Fixture()
        let tar = f.source.directory.appending(path: "bag.tar").path
        func archived() throws -> String {
            try? FileManager.default.removeItem(atPath: tar)
            let writer = try ArchiveWriter(path: tar, format: .tar)
            try writer.addTree(at: f.bag, as: "bag")
            try writer.finish()
            return tar
        }
        for bundle in [f.bag, try archived()] {
            let valid = try Catalog.validateBundle(at: bundle)
            #expect(valid.problems == [] && valid.problemCount == 0 && valid.isValid)
        }
        try f.changeF1 { $0.replacing("\"member\":\"f1.txt\"", with: "\"member\":\"f!.txt\"") }
        for bundle in [f.bag, try archived()] {
            let report = try Catalog.validateBundle(at: bundle)
            #expect(!report.isValid && report.problemCount == 1)
            #expect(
                report.problems == [
                    "assetcat-records.json: says f1.txt is member f!.txt of data/pack.tar, which that archive does not hold"
                ])
        }
    }

    /// Several wrong records: the first is named, the others counted.
    @Test func theFirstWrongRecordIsNamedAndTheOthersCounted() async throws {
        let f = try await Fixture()
        var lines = try f.records()
        for i in lines.indices where lines[i].contains("\"storage\":\"member\"") {
            lines[i] = lines[i].replacing(/"member":"f(\d)\.txt"/) { "\"member\":\"g\($0.1).txt\"" }
        }
        try Data(lines.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: f.recordsPath))
        try f.resealTagManifest()
        #expect(
            try await f.refusal()
                == f.invalid("says f1.txt is member g1.txt of data/pack.tar, which that archive does not hold")
                + " (and 1 more)")
    }
}
