import ArchiveIO
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog

#if canImport(Glibc)
    import Glibc
#endif

/// Hostile and broken bundles, each made here from a valid bag with one thing broken.
/// Every import is refused with a message naming the file and the reason, and leaves the
/// catalog as it was: the same assets and stats, the same files under `objects/`, and
/// nothing in staging but this process's own empty folder and its lock.
@Suite struct BundleHostileTests {
    /// The payload of the bags written here. The catalog already has `shared.txt`'s
    /// content: a directory bag's import links it into staging instead of copying it.
    static let payload: [(path: String, bytes: [UInt8])] = [
        ("a.txt", Array("alpha\n".utf8)),
        ("shared.txt", Array("shared\n".utf8)),
        ("sub/b.bin", (0..<300).map { UInt8($0 % 251) }),
    ]

    /// What an import must leave as it was.
    struct Snapshot: Equatable {
        var assets: [AssetRecord]
        var stats: CatalogStats
        /// Every path under `objects/`.
        var objects: [String]
        /// The entries of `staging/`.
        var staging: [String]
        /// What this process has staged.
        var ownStaging: [String]
    }

    /// A catalog with two assets of its own, and a folder for the bundles.
    struct Fixture {
        let t: TestCatalog
        let catalog: Catalog
        let work: String

        /// - Parameter empty: Whether the catalog is left empty, rather than given two assets.
        init(empty: Bool = false) async throws {
            t = try TestCatalog()
            catalog = try t.create()
            work = t.directory.appending(path: "work").path
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            guard !empty else { return }
            let added = try await catalog.add([try t.file("mine.txt", "mine\n"), try t.file("shared.txt", "shared\n")])
            #expect(added.added.count == 2)
        }

        func snapshot() throws -> Snapshot {
            let objects = t.root.appending(path: "objects").path
            let all = (FileManager.default.enumerator(atPath: objects)?.allObjects as? [String]) ?? []
            return Snapshot(
                assets: try catalog.assets(), stats: try catalog.stats(), objects: all.sorted(),
                staging: t.stagingEntries(),
                ownStaging: ((try? FileManager.default.contentsOfDirectory(atPath: catalog.content.ownStaging)) ?? [])
                    .sorted())
        }

        /// Imports `bundle`, which must fail with a ``CatalogError``; checks that the catalog
        /// is unchanged and staging empty, and returns the error.
        func refusal(
            _ bundle: String, options: ImportOptions = ImportOptions(),
            sourceLocation: SourceLocation = #_sourceLocation
        ) async throws -> CatalogError {
            let before = try snapshot()
            #expect(before.staging.count == 2, sourceLocation: sourceLocation)  // this process's folder and lock
            let error = try await #require(throws: CatalogError.self, sourceLocation: sourceLocation) {
                try await catalog.importBundle(from: bundle, options: options)
            }
            let after = try snapshot()
            #expect(after == before, sourceLocation: sourceLocation)
            #expect(after.staging.count == 2, sourceLocation: sourceLocation)
            #expect(after.ownStaging.isEmpty, sourceLocation: sourceLocation)
            return error
        }

        /// The usual prefix of a refused import's message.
        func invalid(_ bundle: String, _ problem: String) -> String {
            "\(bundle) is not a valid bag, nothing was imported: \(problem)"
        }

        // MARK: Writing bags

        /// Writes a valid BagIt 1.0 directory bag (no tag manifest, no records) at `work/name`.
        func writeBag(_ name: String = "bag", payload: [(path: String, bytes: [UInt8])] = BundleHostileTests.payload)
            throws -> String
        {
            let bag = work + "/" + name
            var manifest = ""
            for file in payload {
                try write(bag + "/data/" + file.path, file.bytes)
                manifest += "\(try sha256(bag + "/data/" + file.path))  data/\(file.path)\n"
            }
            try write(bag + "/bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
            try write(bag + "/manifest-sha256.txt", manifest)
            let bytes = payload.reduce(0) { $0 + $1.bytes.count }
            try write(bag + "/bag-info.txt", "Bag-Software-Agent: tests\nPayload-Oxum: \(bytes).\(payload.count)\n")
            return bag
        }

        /// Exports ``payload`` (flattened names) from another catalog as a directory bag, with
        /// this catalog's records file and a tag manifest.
        func exportBag(_ name: String = "exported") async throws -> String {
            let source = try TestCatalog()
            let other = try source.create()
            defer { other.close() }
            let files = try Self.flatPayload.map { try source.file($0.path, Data($0.bytes)) }
            _ = try await other.add(files)
            let bag = work + "/" + name
            _ = try await other.export(to: bag)
            return bag
        }

        static let flatPayload = BundleHostileTests.payload.map {
            (path: $0.path.replacing("/", with: "-"), bytes: $0.bytes)
        }

        /// Writes `bag` (a directory) as an archive `work/name` holding it as `bag/`, with
        /// members written before and after it.
        func archive(
            _ bag: String, as name: String, before: (ArchiveWriter) throws -> Void = { _ in },
            after: (ArchiveWriter) throws -> Void = { _ in }
        ) throws -> String {
            let path = work + "/" + name
            let writer = try ArchiveWriter(path: path)
            try before(writer)
            try writer.addTree(at: bag, as: "bag")
            try after(writer)
            try writer.finish()
            return path
        }

        /// Sets `Payload-Oxum` to what the payload under `data/` holds now.
        func resealOxum(_ bag: String) throws {
            var bytes = 0
            var count = 0
            let data = bag + "/data"
            for case let relative as String in FileManager.default.enumerator(atPath: data)! {
                var info = stat()
                guard lstat(data + "/" + relative, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
                bytes += Int(info.st_size)
                count += 1
            }
            try write(bag + "/bag-info.txt", "Bag-Software-Agent: tests\nPayload-Oxum: \(bytes).\(count)\n")
        }

        /// Rewrites `tagmanifest-sha256.txt` for the tag files as they are now.
        func resealTagManifest(_ bag: String) throws {
            var lines: [String] = []
            for name in try FileManager.default.contentsOfDirectory(atPath: bag).sorted()
            where name != "data" && !name.hasPrefix("tagmanifest-") {
                lines.append("\(try sha256(bag + "/" + name))  \(name)\n")
            }
            try write(bag + "/tagmanifest-sha256.txt", lines.joined())
        }
    }

    // MARK: - Control: the unbroken bags import

    @Test func theUnbrokenBagsImport() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let tar = try f.archive(bag, as: "bag.tar")
        let result = try await f.catalog.importBundle(from: tar)
        #expect(try f.catalog.assets(importedBy: result).map(\.name).sorted() == ["a.txt", "sub/b.bin"])
        #expect(result.alreadyPresent.items == ["shared.txt"])  // same name and content: nothing to do
        let g = try await Fixture()
        let exported = try await g.exportBag()
        #expect(try Catalog.validateBundle(at: exported).problems == [])
        let again = try await g.catalog.importBundle(from: exported)
        #expect(try g.catalog.assets(importedBy: again).map(\.name).sorted() == ["a.txt", "sub-b.bin"])
        #expect(again.alreadyPresent.items == ["shared.txt"])
    }

    // MARK: - Hostile archive members

    @Test func anAbsolutePathMemberIsRefused() async throws {
        let f = try await Fixture()
        let outside = "/tmp/assetcat-hostile-\(UUID().uuidString)/evil.txt"
        let tar = try f.archive(try f.writeBag(), as: "absolute.tar") { writer in
            try writer.writeEntry(ArchiveEntry(path: outside, kind: .file), contents: Array("evil\n".utf8))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(tar, "Refusing member '\(outside)' of '\(tar)': its path is absolute"))
        #expect(!FileManager.default.fileExists(atPath: outside))
    }

    @Test func aDotDotMemberIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "dotdot.tar") { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/../escaped.txt", kind: .file), contents: Array("x".utf8))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar, "Refusing member 'bag/../escaped.txt' of '\(tar)': its path contains a '..' component"))
        #expect(!FileManager.default.fileExists(atPath: f.work + "/escaped.txt"))
    }

    @Test func aDotDotMemberAfterThePayloadIsRefusedToo() async throws {
        let f = try await Fixture()
        // After the payload: staged copies exist by then, and must go.
        let tar = try f.archive(try f.writeBag(), as: "dotdot-late.tar.gz") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/../../up.txt", kind: .file), contents: [1])
        }
        let error = try await f.refusal(tar)
        #expect(error.code == .invalidArgument)
        #expect(
            error.message.hasSuffix(
                "Refusing member 'bag/data/../../up.txt' of '\(tar)': its path contains a '..' component"))
    }

    @Test func aSymlinkEscapingTheBagIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "symlink-out.tar") { _ in
        } after: { writer in
            try writer.writeEntry(
                ArchiveEntry(path: "bag/data/passwd", kind: .symlink, linkTarget: "../../../etc/passwd"))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/passwd' of '\(tar)': it is a symbolic link to '../../../etc/passwd', "
                        + "which leaves the extraction root"))
    }

    @Test func anAbsoluteSymlinkIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "symlink-abs.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/etc", kind: .symlink, linkTarget: "/etc"))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar, "Refusing member 'bag/data/etc' of '\(tar)': it is a symbolic link to the absolute path '/etc'"
                ))
    }

    @Test func aSymlinkInsideTheBagIsRefusedToo() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "symlink-in.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/again.txt", kind: .symlink, linkTarget: "a.txt"))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar, "bag/data/again.txt: is a symbolic link (to a.txt); a bag holds regular files only"))
    }

    @Test func aHardlinkEscapingTheBagIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "hardlink-out.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/shadow", kind: .hardlink, linkTarget: "../etc/shadow"))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/shadow' of '\(tar)': it is a hard link to '../etc/shadow', which leaves "
                        + "the extraction root"))
    }

    @Test func anAbsoluteHardlinkIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "hardlink-abs.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/passwd", kind: .hardlink, linkTarget: "/etc/passwd"))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/passwd' of '\(tar)': it is a hard link to the absolute path '/etc/passwd'"
                ))
    }

    @Test func aHardlinkToAMemberNotYetReadIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "hardlink-ahead.tar") { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/early", kind: .hardlink, linkTarget: "bag/data/a.txt"))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/early' of '\(tar)': it is a hard link to 'bag/data/a.txt', which is not a "
                        + "regular file extracted before it"))
    }

    @Test func aCharacterDeviceIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "device.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/null", kind: .characterDevice))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/null' of '\(tar)': it is a character device; device, FIFO and socket "
                        + "entries are never extracted"))
    }

    @Test func aCharacterDeviceWrittenByPythonIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "device-base.tar")
        let hostile = f.work + "/device-python.tar"
        // Copies the bag's members and appends /dev/null's twin, with its real major and minor.
        let status = try await python(
            """
            import sys, tarfile
            with tarfile.open(sys.argv[1]) as source, tarfile.open(sys.argv[2], "w", format=tarfile.PAX_FORMAT) as out:
                for member in source.getmembers():
                    out.addfile(member, source.extractfile(member) if member.isfile() else None)
                device = tarfile.TarInfo("bag/data/zero")
                device.type = tarfile.CHRTYPE
                device.devmajor, device.devminor = 1, 5
                out.addfile(device)
            """, [tar, hostile])
        #expect(status == 0)
        let error = try await f.refusal(hostile)
        #expect(
            error.message
                == f.invalid(
                    hostile,
                    "Refusing member 'bag/data/zero' of '\(hostile)': it is a character device; device, FIFO and socket "
                        + "entries are never extracted"))
    }

    @Test func aDuplicateMemberIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "duplicate.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/a.txt", kind: .file), contents: Array("omega\n".utf8))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message
                == f.invalid(tar, "Refusing member 'bag/data/a.txt' of '\(tar)': an earlier member has the same path"))
    }

    @Test func aDuplicateSpelledDifferentlyIsRefused() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "duplicate-dot.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/./data//a.txt", kind: .file), contents: Array("omega\n".utf8))
        }
        let error = try await f.refusal(tar)
        #expect(
            error.message.hasSuffix(
                "Refusing member 'bag/./data//a.txt' of '\(tar)': an earlier member has the same path"))
    }

    /// Two names that differ only in Unicode normalisation are two files on Linux; a bag that
    /// holds both must not have one of them silently dropped.
    @Test func namesDifferingOnlyInNormalisationAreNotMerged() async throws {
        let f = try await Fixture()
        let nfc = "r\u{e9}sum\u{e9}.txt"
        let nfd = "re\u{301}sume\u{301}.txt"
        let bag = try f.writeBag(payload: BundleHostileTests.payload + [(nfc, Array("composed\n".utf8))])
        try write(bag + "/data/" + nfd, Array("decomposed, and unlisted\n".utf8))
        try f.resealOxum(bag)
        #expect(try FileManager.default.contentsOfDirectory(atPath: bag + "/data").count == 5)
        let reason =
            "is a second file with this name in another Unicode normalisation (NFC and NFD); a bag cannot hold both"
        // Read in byte order: the decomposed name first, so the composed one is refused.
        let error = try await f.refusal(bag)
        #expect(error.message == f.invalid(bag, "data/\(nfc): \(reason)"))
        #expect(error.message.unicodeScalars.elementsEqual(f.invalid(bag, "data/\(nfc): \(reason)").unicodeScalars))
        let tar = try f.archive(bag, as: "normalisation.tar")
        let archived = try await f.refusal(tar)
        #expect(archived.message == f.invalid(tar, "bag/data/\(nfc): \(reason)"))
    }

    // MARK: - Links and devices in a directory bag

    @Test func aSymlinkInADirectoryBagIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try FileManager.default.createSymbolicLink(atPath: bag + "/data/again.txt", withDestinationPath: "a.txt")
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(bag, "data/again.txt: is a symbolic link (to a.txt); a bag holds regular files only"))
    }

    @Test func aSymlinkLeavingADirectoryBagIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try FileManager.default.createSymbolicLink(atPath: bag + "/data/passwd", withDestinationPath: "/etc/passwd")
        let error = try await f.refusal(bag)
        #expect(error.message == f.invalid(bag, "data/passwd: is a symbolic link to /etc/passwd, outside the bag"))
    }

    @Test func aFIFOInADirectoryBagIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        #expect(mkfifo(bag + "/data/pipe", 0o644) == 0)
        let error = try await f.refusal(bag)
        #expect(
            error.message == f.invalid(bag, "data/pipe: is a device, FIFO or socket; a bag holds regular files only"))
    }

    // MARK: - Completeness and checksums

    @Test func aPayloadFileNotInTheManifestIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try write(bag + "/data/extra.txt", Array("stowaway\n".utf8))
        try f.resealOxum(bag)
        let error = try await f.refusal(bag)
        #expect(error.message == f.invalid(bag, "data/extra.txt: is in the bag but not listed in manifest-sha256.txt"))
        let tar = try f.archive(bag, as: "unlisted.tar.zst")
        let archived = try await f.refusal(tar)
        #expect(
            archived.message
                == f.invalid(tar, "data/extra.txt: is in the bag but not listed in manifest-sha256.txt"))
    }

    @Test func aManifestEntryWithNoFileIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try FileManager.default.removeItem(atPath: bag + "/data/a.txt")
        try f.resealOxum(bag)
        let error = try await f.refusal(bag)
        #expect(error.message == f.invalid(bag, "data/a.txt: is listed in manifest-sha256.txt but is not in the bag"))
    }

    @Test func aChecksumMismatchIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let file = bag + "/data/sub/b.bin"
        let good = try sha256(file)
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        bytes[150] ^= 0x01
        try write(file, bytes)
        let bad = try sha256(file)
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(
                    bag,
                    "data/sub/b.bin: sha256 checksum mismatch: manifest-sha256.txt says \(good), the file has \(bad)"
                ))
        // The same in an archive, where the payload comes before the manifest.
        let zip = try f.archive(bag, as: "mismatch.zip")
        let archived = try await f.refusal(zip)
        #expect(
            archived.message
                == f.invalid(
                    zip,
                    "data/sub/b.bin: sha256 checksum mismatch: manifest-sha256.txt says \(good), the file has \(bad)"
                ))
    }

    /// A mismatch in content the catalog has (linked into staging, not copied) must leave
    /// the object itself alone.
    @Test func aChecksumMismatchOnContentTheCatalogHasLeavesItsObjectAlone() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let shared = try sha256(bag + "/data/shared.txt")
        try write(bag + "/data/shared.txt", Array("sharer\n".utf8))
        let error = try await f.refusal(bag)
        #expect(error.message.hasPrefix(f.invalid(bag, "data/shared.txt: sha256 checksum mismatch: ")))
        #expect(f.t.hasObject(shared))
        #expect(try String(contentsOfFile: f.t.objectPath(shared), encoding: .utf8) == "shared\n")
    }

    // MARK: - The declaration

    @Test func aMissingBagitTxtIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try FileManager.default.removeItem(atPath: bag + "/bagit.txt")
        let error = try await f.refusal(bag)
        #expect(error.message == f.invalid(bag, "holds no bagit.txt: it is not a BagIt bag"))
    }

    @Test func aMalformedBagitTxtIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try write(bag + "/bagit.txt", "BagIt-Version 1.0\nTag-File-Character-Encoding: UTF-8\n")
        let error = try await f.refusal(bag)
        #expect(error.message == f.invalid(bag, "bagit.txt: line 1 is not 'Label: value'"))
        try write(bag + "/bagit.txt", "Tag-File-Character-Encoding: UTF-8\nBagIt-Version: 1.0\n")
        let swapped = try await f.refusal(bag)
        #expect(
            swapped.message
                == f.invalid(
                    bag,
                    "bagit.txt: must hold exactly 'BagIt-Version: M.N' and 'Tag-File-Character-Encoding: UTF-8'"))
    }

    @Test func anUnsupportedBagItVersionIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try write(bag + "/bagit.txt", "BagIt-Version: 2.0\nTag-File-Character-Encoding: UTF-8\n")
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(
                    bag, "bagit.txt: BagIt version 2.0 is not supported (only 0.93, 0.94, 0.95, 0.96, 0.97, 1.0)"))
    }

    // MARK: - Damaged archives

    @Test func aTruncatedArchiveIsRefused() async throws {
        let f = try await Fixture()
        // Bytes that do not compress, so that half the archive ends inside the payload.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let noise = (0..<(256 << 10)).map { _ in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state)
        }
        let bag = try f.writeBag(payload: BundleHostileTests.payload + [("noise.bin", noise)])
        let whole = try f.archive(bag, as: "whole.tar.gz")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: whole))
        let half = f.work + "/truncated.tar.gz"
        try bytes.prefix(bytes.count / 2).write(to: URL(fileURLWithPath: half))
        let error = try await f.refusal(half)
        #expect(error.code == .archive)
        #expect(
            error.message
                == f.invalid(
                    half,
                    "Cannot read '\(half)', member 'bag/data/noise.bin': archive_read_data_block failed: truncated "
                        + "gzip input"))
    }

    @Test func aCorruptArchiveIsRefused() async throws {
        let f = try await Fixture()
        let garbage = f.work + "/garbage.tar.zst"
        try Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) }).write(
            to: URL(fileURLWithPath: garbage))
        let error = try await f.refusal(garbage)
        #expect(error.code == .archive)
        #expect(
            error.message
                == f.invalid(
                    garbage, "Cannot open '\(garbage)': archive_read_open_fd failed: Unrecognized archive format")
        )
    }

    // MARK: - Bombs

    @Test func aSizeBombIsRefusedByThePolicysLimit() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag(payload: [("big.bin", [UInt8](repeating: 0, count: 4096))])
        let tar = try f.archive(bag, as: "big.tar.gz")
        let error = try await f.refusal(tar, options: ImportOptions(policy: ExtractionPolicy(maxTotalBytes: 2048)))
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/big.bin' of '\(tar)': extracting it would exceed the policy's limit of "
                        + "2048 uncompressed bytes"))
    }

    @Test func tooManyMembersAreRefusedByThePolicysLimit() async throws {
        let f = try await Fixture()
        // Members: bag/, bag-info.txt, bagit.txt, data/, data/a.txt, …
        let tar = try f.archive(try f.writeBag(), as: "many.tar")
        let error = try await f.refusal(tar, options: ImportOptions(policy: ExtractionPolicy(maxEntryCount: 4)))
        #expect(
            error.message
                == f.invalid(
                    tar,
                    "Refusing member 'bag/data/a.txt' of '\(tar)': the archive has more than 4 members, the "
                        + "policy's limit"))
    }

    @Test func aRatioBombIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let zeros = 64 << 20
        let tar = try f.archive(bag, as: "bomb.tar.gz") { _ in
        } after: { writer in
            let chunk = [UInt8](repeating: 0, count: 1 << 20)
            try writer.writeEntry(ArchiveEntry(path: "bag/data/zeros.bin", kind: .file, size: Int64(zeros))) {
                write in
                for _ in 0..<(zeros >> 20) { try chunk.withUnsafeBytes(write) }
            }
        }
        let size = try FileManager.default.attributesOfItem(atPath: tar)[.size] as! Int
        #expect(size < zeros / 250)
        let error = try await f.refusal(tar)
        #expect(error.message.hasPrefix(f.invalid(tar, "Refusing member 'bag/data/zeros.bin' of '\(tar)': ")))
        #expect(error.message.contains("the archive expands more than 250 times"))
    }

    /// A `.tar.gz` bag whose manifest lists thousands of files it lacks, with distinct digests, the
    /// manifest before the payload (as an export writes it). Into a catalog with content, whose
    /// import looks each payload file's digest up in the manifest as it streams (content the
    /// catalog has is not copied again), every line is indexed as it comes: the import stops
    /// checking at its first thousand problems, and says there are at least that many. Into an
    /// empty catalog nothing needs the lines before the payload is known: they wait, raw, and
    /// the import stops at the first line naming a file the bag lacks. (A million such lines
    /// took minutes: each absent line was looked at for a twin differing only by case with a
    /// scan of the whole manifest. The figures are measured by `BundleBenchmarks --hostile-only`;
    /// the lines are few here because a debug build reads a line in tens of microseconds.)
    @Test(.timeLimit(.minutes(1)), arguments: [false, true])
    func aManifestOfManyAbsentFilesIsRefusedAtItsFirstProblems(intoAnEmptyCatalog: Bool) async throws {
        let f = try await Fixture(empty: intoAnEmptyCatalog)
        let payload = Array("alpha\n".utf8)
        try write(f.work + "/a.txt", payload)
        let head = Array("\(try sha256(f.work + "/a.txt"))  data/a.txt\n".utf8)
        let tgz = f.work + "/absent.tar.gz"
        let lines = 5_000
        let template = Array((String(repeating: "0", count: 64) + "  data/missing/0000000.bin\n").utf8)
        let writer = try ArchiveWriter(path: tgz, options: ArchiveWriteOptions(compressionLevel: 1))
        try writer.writeEntry(
            ArchiveEntry(path: "bag/bagit.txt", kind: .file),
            contents: Array("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8))
        try writer.writeEntry(
            ArchiveEntry(path: "bag/manifest-sha256.txt", kind: .file, size: Int64(head.count + lines * template.count))
        ) { write in
            try head.withUnsafeBytes(write)
            let perChunk = 1_000
            var chunk = [UInt8](repeating: 0, count: perChunk * template.count)
            for start in stride(from: 0, to: lines, by: perChunk) {
                chunk.withUnsafeMutableBufferPointer { out in
                    for i in start..<start + perChunk {
                        Self.absentLine(i, template, into: out, at: (i - start) * template.count)
                    }
                }
                try chunk.withUnsafeBytes(write)
            }
        }
        try writer.writeEntry(ArchiveEntry(path: "bag/data/a.txt", kind: .file), contents: payload)
        try writer.finish()

        let error = try await f.refusal(tgz)
        let more =
            intoAnEmptyCatalog
            ? "(there may be more; `assetcat validate` lists them)"
            : "(and at least 1999 more; `assetcat validate` lists them)"
        #expect(
            error.message
                == f.invalid(
                    tgz, "data/missing/0000000.bin: is listed in manifest-sha256.txt but is not in the bag \(more)"))
    }

    /// Line `i` of a manifest of files the bag lacks, written over `template` (64 hex digits,
    /// then `  data/missing/0000000.bin` and LF) at `offset` in `out`: a digest of its own (a
    /// mixed counter, four times) and the number `i`.
    static func absentLine(
        _ i: Int, _ template: [UInt8], into out: UnsafeMutableBufferPointer<UInt8>, at offset: Int
    ) {
        let hex: StaticString = "0123456789abcdef"
        var z = UInt64(i) &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        template.withUnsafeBufferPointer { t in (out.baseAddress! + offset).update(from: t.baseAddress!, count: t.count)
        }
        hex.withUTF8Buffer { digits in
            for k in 0..<16 {
                let digit = digits[Int((z >> UInt64(60 - 4 * k)) & 0xF)]
                for copy in 0..<4 { out[offset + copy * 16 + k] = digit }
            }
        }
        var n = i
        for k in stride(from: offset + 85, through: offset + 79, by: -1) {
            out[k] = UInt8(0x30 + n % 10)
            n /= 10
        }
    }

    // MARK: - Records, fetch.txt, Payload-Oxum

    /// A tag file named like our records in a tag directory, read before `bagit.txt` (so it
    /// could have been the records of a bag rooted in that directory), is not the bag's: the
    /// entries read from it early are dropped, and the bag imports as one from another tool.
    @Test func aRecordsFileOutsideTheBagsRootIsNotItsRecords() async throws {
        let f = try await Fixture()
        let decoy = try TestCatalog()
        let other = try decoy.create()
        _ = try await other.add([try decoy.file("decoy.txt", "alpha\n")])  // a.txt's content
        let decoyBag = f.work + "/decoy"
        _ = try await other.export(to: decoyBag)
        other.close()
        let records = try Array(Data(contentsOf: URL(fileURLWithPath: decoyBag + "/assetcat-records.json")))
        let bag = try f.writeBag()
        let tar = f.work + "/rootless.tar"
        let writer = try ArchiveWriter(path: tar)
        try writer.writeEntry(ArchiveEntry(path: "X/assetcat-records.json", kind: .file), contents: records)
        try writer.addTree(at: bag, as: "")
        try writer.finish()

        let result = try await f.catalog.importBundle(from: tar)
        #expect(try f.catalog.assets(importedBy: result).map(\.name).sorted() == ["a.txt", "sub/b.bin"])
        #expect(result.alreadyPresent.items == ["shared.txt"])
        #expect(try f.snapshot().ownStaging.isEmpty)
    }

    @Test func recordsThatContradictTheManifestAreRefused() async throws {
        let f = try await Fixture()
        let bag = try await f.exportBag()
        let recordsPath = bag + "/assetcat-records.json"
        var records = try String(contentsOfFile: recordsPath, encoding: .utf8)
        let real = try sha256(bag + "/data/a.txt")
        #expect(records.contains(real))
        records = records.replacing(real, with: String(repeating: "0", count: 64))
        try write(recordsPath, Array(records.utf8))
        try f.resealTagManifest(bag)
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(
                    bag,
                    "assetcat-records.json: contradicts manifest-sha256.txt: data/a.txt is \(real.prefix(12))…, the "
                        + "records say 000000000000…"))
    }

    @Test func recordsThatLeaveOutAPayloadFileAreRefused() async throws {
        let f = try await Fixture()
        let bag = try await f.exportBag()
        let recordsPath = bag + "/assetcat-records.json"
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: recordsPath)))
        var object = try #require(json as? [String: Any])
        var assets = try #require(object["assets"] as? [[String: Any]])
        assets.removeAll { $0["payload"] as? String == "data/a.txt" }
        object["assets"] = assets
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: recordsPath))
        try f.resealTagManifest(bag)
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(bag, "assetcat-records.json: does not list data/a.txt, which the bag holds"))
    }

    /// A referenced asset whose recorded path is relative — one that happens to reach a file
    /// with its content from where the import runs — is stored from the bundle's bytes,
    /// never recorded as a reference to a relative path.
    @Test func aReferencedRecordWithARelativePathIsStoredFromTheBundle() async throws {
        let f = try await Fixture()
        let bag = try await f.exportBag()
        let copy = f.work + "/alpha-copy.txt"
        try write(copy, Array("alpha\n".utf8))
        // From any working directory, enough `../` reach the root: a relative path to the copy.
        let relative = String(repeating: "../", count: 64) + copy.dropFirst()
        let recordsPath = bag + "/assetcat-records.json"
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: recordsPath)))
        var object = try #require(json as? [String: Any])
        var assets = try #require(object["assets"] as? [[String: Any]])
        let index = try #require(assets.firstIndex { $0["payload"] as? String == "data/a.txt" })
        assets[index]["storage"] = "referenced"
        assets[index]["path"] = relative
        object["assets"] = assets
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: recordsPath))
        try f.resealTagManifest(bag)

        let result = try await f.catalog.importBundle(from: bag)
        #expect(result.storedAsManaged.items == ["a.txt"])
        let imported = try #require(try f.catalog.assets(importedBy: result).first { $0.name == "a.txt" })
        #expect(imported.storage == .managed)
        #expect(try f.catalog.asset(imported.id).storage == .managed)
    }

    /// A file to fetch that no manifest lists makes the bag invalid (RFC 8493 2.2.3); one the
    /// manifest lists makes it incomplete, which import refuses too (ValidateCLITests).
    @Test func aFetchTxtWithEntriesIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try write(bag + "/fetch.txt", "https://example.com/more.bin 1024 data/more.bin\n")
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(bag, "fetch.txt: lists data/more.bin, which manifest-sha256.txt does not list"))
    }

    @Test func aPayloadOxumMismatchIsRefused() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        try write(bag + "/bag-info.txt", "Payload-Oxum: 314.3\n")
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(bag, "bag-info.txt: Payload-Oxum is 314.3 but the payload is 313 bytes in 3 files"))
    }

    // MARK: - Validation lists every problem

    @Test func validationListsBothProblemsOneLineEach() async throws {
        let f = try await Fixture()
        let bag = try f.writeBag()
        let good = try sha256(bag + "/data/a.txt")
        try write(bag + "/data/a.txt", Array("alphA\n".utf8))
        let bad = try sha256(bag + "/data/a.txt")
        try write(bag + "/data/extra.txt", Array("stowaway\n".utf8))
        try f.resealOxum(bag)
        let report = try Catalog.validateBundle(at: bag)
        #expect(!report.isValid)
        #expect(report.version == "1.0")
        #expect(report.payloadFiles == 4)
        #expect(!report.hasRecords)
        #expect(
            report.problems == [
                "data/a.txt: sha256 checksum mismatch: manifest-sha256.txt says \(good), the file has \(bad)",
                "data/extra.txt: is in the bag but not listed in manifest-sha256.txt",
            ])
        // The import names the first and counts the rest.
        let error = try await f.refusal(bag)
        #expect(
            error.message
                == f.invalid(
                    bag,
                    "data/a.txt: sha256 checksum mismatch: manifest-sha256.txt says \(good), the file has \(bad) "
                        + "(and 1 more; `assetcat validate` lists them)"))
    }

    @Test func validationOfAHostileArchiveIsOneLineNamingTheMember() async throws {
        let f = try await Fixture()
        let tar = try f.archive(try f.writeBag(), as: "hostile.tar") { _ in
        } after: { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/passwd", kind: .symlink, linkTarget: "/etc/passwd"))
        }
        let report = try Catalog.validateBundle(at: tar)
        #expect(
            report.problems == [
                "Refusing member 'bag/data/passwd' of '\(tar)': it is a symbolic link to the absolute path '/etc/passwd'"
            ])
        #expect(try Catalog.validateBundle(at: try f.archive(try f.writeBag("clean"), as: "clean.tar")).isValid)
    }
}

// MARK: - Helpers

private func write(_ path: String, _ bytes: [UInt8]) throws {
    try FileManager.default.createDirectory(
        atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

private func write(_ path: String, _ text: String) throws { try write(path, Array(text.utf8)) }

private func sha256(_ path: String) throws -> String { try ContentStore.digest(ofFileAt: path).digest }

/// Runs a Python 3 script off the concurrency pool; returns its exit status.
private func python(_ script: String, _ arguments: [String]) async throws -> Int32 {
    try await ChildProcess.run(
        "/usr/bin/env", ["python3", "-c", script] + arguments, stdout: .inherit, stderr: .inherit
    ).status
}
