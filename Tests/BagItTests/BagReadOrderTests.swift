import ArchiveIO
import Foundation
import TestScratch
import Testing

@testable import BagIt

/// A read keeps what it finds in its index as the files come, in whatever order an archive
/// holds them: a manifest before the declaration that says how to read it, payload before
/// the manifest that says which digests it needs, a tag file before its tag manifest.
@Suite struct BagReadOrderTests {
    let root: String

    init() throws {
        // Under the test process's scratch folder, removed when the process exits.
        root = try ScratchDirectory.make("bagit-order").path
    }

    func digest(_ algorithm: ChecksumAlgorithm, _ bytes: [UInt8]) -> String {
        var hasher = MultiHasher([algorithm])
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()[algorithm]!
    }

    /// A tar of `files` in this order (a `nil` content makes a hard link to the path given).
    func tar(_ files: [(path: String, bytes: [UInt8]?, link: String?)]) throws -> String {
        let path = root + "/bag-\(UUID().uuidString).tar"
        let writer = try ArchiveWriter(path: path, format: .tar)
        for file in files {
            if let bytes = file.bytes {
                try writer.writeEntry(ArchiveEntry(path: "bag/" + file.path, kind: .file), contents: bytes)
            } else {
                try writer.writeEntry(
                    ArchiveEntry(path: "bag/" + file.path, kind: .hardlink, linkTarget: "bag/" + file.link!))
            }
        }
        try writer.finish()
        return path
    }

    func file(_ path: String, _ text: String) -> (path: String, bytes: [UInt8]?, link: String?) {
        (path, Array(text.utf8), nil)
    }

    static let payload = "fifty percent\n"

    /// The manifest comes first: its lines wait for `bagit.txt`, whose version decides what
    /// `%25` means — `%` in 1.0, itself before (as bagit-python reads it).
    @Test(arguments: [("1.0", "data/50%.txt"), ("0.97", "data/50%25.txt")])
    func aManifestBeforeTheDeclarationIsReadWithTheDeclaredVersion(version: String, name: String) throws {
        let sha = digest(.sha256, Array(Self.payload.utf8))
        let bag = try tar([
            file("manifest-sha256.txt", "\(sha)  data/50%25.txt\n"),
            file("bagit.txt", "BagIt-Version: \(version)\nTag-File-Character-Encoding: UTF-8\n"),
            file(name, Self.payload),
        ])
        let read = try BagReader.read(at: bag)
        #expect(read.problems.map(\.description) == [])
        #expect(try read.payload.file(name)?.listed[.sha256] == sha)
        #expect(read.payload.count == 1)
    }

    /// A bad line of a manifest read before the declaration is reported, with its number,
    /// once the declaration has been read; the manifest's other lines are not used.
    @Test func aBadLineOfAManifestBeforeTheDeclarationIsReportedWithItsNumber() throws {
        let sha = digest(.sha256, Array(Self.payload.utf8))
        let bag = try tar([
            file("manifest-sha256.txt", "\(sha)  data/a.txt\r\nnot-a-line\r\n"),
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("data/a.txt", Self.payload),
        ])
        let read = try BagReader.read(at: bag)
        #expect(
            read.problems.map(\.description) == ["manifest-sha256.txt: line 2 is not 'checksum path'"])
        #expect(read.payload.manifestAlgorithms == [])
    }

    /// Payload read before an MD5 manifest was hashed without MD5: a second pass over the
    /// archive hashes it, and a hard link to it gets the digest too.
    @Test(arguments: [true, false])
    func payloadReadBeforeItsManifestIsHashedInASecondPass(rightDigest: Bool) throws {
        let bytes = Array(Self.payload.utf8)
        let md5 = rightDigest ? digest(.md5, bytes) : String(repeating: "0", count: 32)
        let bag = try tar([
            file("data/a.txt", Self.payload),
            ("data/b.txt", nil, "data/a.txt"),
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("manifest-md5.txt", "\(md5)  data/a.txt\n\(md5)  data/b.txt\n"),
        ])
        let read = try BagReader.read(at: bag)
        if rightDigest {
            #expect(read.problems.map(\.description) == [])
        } else {
            let actual = digest(.md5, bytes)
            #expect(
                read.problems.map(\.description) == [
                    "data/a.txt: md5 checksum mismatch: manifest-md5.txt says \(md5), the file has \(actual)",
                    "data/b.txt: md5 checksum mismatch: manifest-md5.txt says \(md5), the file has \(actual)",
                ])
        }
        #expect(try read.payload.file("data/b.txt")?.linkTarget == "data/a.txt")
    }

    /// A tag file read while only a SHA-256 tag manifest had been seen is hashed again when a
    /// later tag manifest lists it in MD5.
    @Test(arguments: [true, false])
    func aTagFileReadBeforeATagManifestInANewAlgorithmIsHashedInASecondPass(rightDigest: Bool) throws {
        let notes = "read me\n"
        let md5 = rightDigest ? digest(.md5, Array(notes.utf8)) : String(repeating: "0", count: 32)
        let bag = try tar([
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("tagmanifest-sha256.txt", "\(digest(.sha256, Array(notes.utf8)))  notes.txt\n"),
            file("notes.txt", notes),
            file("tagmanifest-md5.txt", "\(md5)  notes.txt\n"),
            file("manifest-sha256.txt", "\(digest(.sha256, Array(Self.payload.utf8)))  data/a.txt\n"),
            file("data/a.txt", Self.payload),
        ])
        let read = try BagReader.read(at: bag)
        #expect(
            read.problems.map(\.description)
                == (rightDigest
                    ? []
                    : [
                        "notes.txt: md5 checksum mismatch: tagmanifest-md5.txt says \(md5), the file has "
                            + digest(.md5, Array(notes.utf8))
                    ]))
    }

    /// A manifest that lists a path twice with another checksum — also in another Unicode
    /// normalisation — is reported at the first line that does, whether it was read before or
    /// after the declaration, and whichever comes first of that and a line that cannot be
    /// read. With the same checksum, the other normalisation names the same file: a warning.
    @Test(arguments: [true, false])
    func aPathListedTwiceIsReportedAtItsFirstRepeat(declarationFirst: Bool) throws {
        let sha = digest(.sha256, Array(Self.payload.utf8))
        let declaration = file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
        func contents(_ lines: [String]) throws -> BagContents {
            let manifest = file("manifest-sha256.txt", lines.map { $0 + "\n" }.joined())
            let bag = try tar(
                (declarationFirst ? [declaration, manifest] : [manifest, declaration])
                    + [file("data/\u{E9}.txt", Self.payload)])
            return try BagReader.read(at: bag)
        }
        func read(_ lines: [String]) throws -> [String] { try contents(lines).problems.map(\.description) }
        let composed = "\(sha)  data/\u{E9}.txt"
        let decomposed = "\(String(repeating: "0", count: 64))  data/e\u{301}.txt"
        #expect(
            try read([composed, decomposed, "not-a-line"]) == [
                "manifest-sha256.txt: line 2 lists data/e\u{301}.txt a second time"
            ])
        let same = try contents([composed, "\(sha)  data/e\u{301}.txt"])
        #expect(same.problems.isEmpty)
        #expect(
            same.warnings.map(\.description) == [
                "manifest-sha256.txt: line 2 lists data/e\u{301}.txt again in another Unicode normalisation, "
                    + "with the same checksum"
            ])
        #expect(
            try read([composed, "not-a-line", decomposed]) == [
                "manifest-sha256.txt: line 2 is not 'checksum path'"
            ])
    }

    /// More files than the index writes at once, and than a walk of the payload takes at once:
    /// every one is checked, and the walk gives them all, in order.
    @Test func aBagOfManyFilesIsReadWhole() throws {
        let names = (0..<1_234).map { String(format: "data/%04d.txt", $0) }
        let sha = digest(.sha256, Array(Self.payload.utf8))
        let bag = try tar(
            [
                file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
                file("manifest-sha256.txt", names.dropLast().map { "\(sha)  \($0)\n" }.joined()),
            ] + names.map { file($0, Self.payload) })
        let read = try BagReader.read(at: bag)
        #expect(
            read.problems.map(\.description) == ["data/1233.txt: is in the bag but not listed in manifest-sha256.txt"])
        var walked: [String] = []
        try read.payload.forEach {
            walked.append($0.path)
            #expect($0.listed[.sha256] == ($0.path == "data/1233.txt" ? nil : sha))
        }
        #expect(walked == names)
        #expect(read.payload.count == 1_234)
    }

    /// A payload hard link to a tag file read before a manifest in a new algorithm: the tag
    /// file is hashed in that algorithm in the second pass, and the link gets the digest.
    @Test func aPayloadLinkToATagFileIsHashedInTheSecondPass() throws {
        let notes = "read me\n"
        let sha = digest(.sha256, Array(notes.utf8))
        let bag = try tar([
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("tagmanifest-sha256.txt", "\(sha)  notes.txt\n"),
            file("notes.txt", notes),
            file("manifest-md5.txt", "\(digest(.md5, Array(notes.utf8)))  data/n.txt\n"),
            ("data/n.txt", nil, "notes.txt"),
        ])
        #expect(try BagReader.read(at: bag).problems.map(\.description) == [])
    }

    /// A path with a NUL byte in a manifest is refused: no file has one, and a look-up would
    /// stop at it and find another file.
    @Test(arguments: ["manifest-sha256.txt", "tagmanifest-sha256.txt"])
    func aManifestPathWithANulIsRefused(manifest: String) throws {
        let notes = "read me\n"
        let tagged = "\(digest(.sha256, Array(notes.utf8)))  notes.txt\u{0}junk\n"
        let payload =
            "\(digest(.sha256, Array(Self.payload.utf8)))  data/a.txt\(manifest.hasPrefix("tag") ? "" : "\u{0}b")\n"
        let bag = try tar([
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("notes.txt", notes),
            file("tagmanifest-sha256.txt", manifest.hasPrefix("tag") ? tagged : ""),
            file("manifest-sha256.txt", payload),
            file("data/a.txt", Self.payload),
        ])
        #expect(
            try BagReader.read(at: bag).problems.map(\.description).contains(
                "\(manifest): line 1 names a path with a NUL byte"))
    }

    /// A manifest line is held whole until it ends, so it has a bound: a longer one is a
    /// problem of the manifest, not memory without end.
    @Test func anOverlongManifestLineIsRefused() throws {
        let bag = try tar([
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("manifest-sha256.txt", String(repeating: "a", count: Scan.maxManifestLineBytes + 1)),
            file("data/a.txt", Self.payload),
        ])
        #expect(
            try BagReader.read(at: bag).problems.map(\.description).first
                == "manifest-sha256.txt: line 1 is longer than 1048576 bytes")
    }

    /// Lines end with LF, CR or CR LF, also when a chunk ends between the CR and the LF.
    @Test func linesAreSplitAcrossChunks() {
        var splitter = LineSplitter()
        var lines: [String] = []
        for chunk in ["a\r", "\nb\n", "\nc", "c\rd", "\r\n", "e"] {
            Array(chunk.utf8).withUnsafeBytes { bytes in
                splitter.split(bytes) { lines.append(String(decoding: $0, as: UTF8.self)) }
            }
        }
        splitter.finish { lines.append(String(decoding: $0, as: UTF8.self)) }
        #expect(lines == ["a", "b", "", "cc", "d", "e"])
    }

    /// A tag file given to a `tagSink` is streamed to it, not kept, and still checked against
    /// the tag manifest; the sink is offered the names relative to a root whose `bagit.txt`
    /// came first.
    @Test func aStreamedTagFileIsCheckedLikeAnyOther() throws {
        final class Collect: BagPayloadSink {
            var bytes: [UInt8] = []
            var finished = false
            func write(_ chunk: UnsafeRawBufferPointer) throws { bytes += chunk }
            func finish(digests: [ChecksumAlgorithm: String]) throws { finished = true }
        }
        let notes = String(repeating: "a long tag file\n", count: 10_000)
        let payloadSHA = digest(.sha256, Array(Self.payload.utf8))
        for (listed, problems) in [
            (digest(.sha256, Array(notes.utf8)), [String]()),
            (String(repeating: "0", count: 64), ["notes.txt: sha256 checksum mismatch"]),
        ] {
            let bag = try tar([
                file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
                file("tagmanifest-sha256.txt", "\(listed)  notes.txt\n"),
                file("notes.txt", notes),
                file("manifest-sha256.txt", "\(payloadSHA)  data/a.txt\n"),
                file("data/a.txt", Self.payload),
            ])
            var offered: [String] = []
            let sink = Collect()
            let read = try BagReader.read(
                at: bag,
                tagSink: { name, path in
                    offered.append("\(name) \(path)")
                    return name == "notes.txt" ? sink : nil
                })
            #expect(read.problems.map { String($0.description.prefix(35)) } == problems)
            #expect(offered == ["notes.txt bag/notes.txt"])
            #expect(sink.finished && sink.bytes == Array(notes.utf8))
            #expect(read.tagFiles.isEmpty)
        }
    }

    /// A valid bag's members in a usual order, with `repeated` written a second time, with
    /// other bytes (a line longer than 100 bytes), right after the first or at the end, after
    /// more files than the index writes at once.
    func bagHolding(twice repeated: String, atTheEnd: Bool) throws -> String {
        let sha = digest(.sha256, Array(Self.payload.utf8))
        let info = "Payload-Oxum: \(Self.payload.utf8.count).1\n"
        var files = [
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("bag-info.txt", info),
            file("manifest-sha256.txt", "\(sha)  data/a.txt\n"),
            file("data/a.txt", Self.payload),
            file("tagmanifest-sha256.txt", "\(digest(.sha256, Array(info.utf8)))  bag-info.txt\n"),
        ]
        let second = file(repeated, "BagIt-Version: 0.97\n\(String(repeating: "0", count: 128))  data/b.txt\n")
        if atTheEnd {
            files += (0..<1_100).map { file("data/filler/\($0).txt", Self.payload) }
            files.append(second)
        } else {
            files.insert(second, at: files.firstIndex { $0.path == repeated }! + 1)
        }
        return try tar(files)
    }

    /// The guard of a read remembers no paths, so that its memory does not grow with the
    /// bag: the index finds a member the archive holds twice — payload or tag file, next to
    /// the first or far after it — and the read stops with the guard's own error, before a
    /// second declaration or manifest can change what the bag says.
    @Test(arguments: ["bagit.txt", "bag-info.txt", "manifest-sha256.txt", "data/a.txt", "tagmanifest-sha256.txt"])
    func aMemberHeldTwiceStopsTheReadWithTheGuardsError(repeated: String) throws {
        for atTheEnd in [false, true] {
            let bag = try bagHolding(twice: repeated, atTheEnd: atTheEnd)
            // A tag file's second copy is refused before its bytes are used (here: before they
            // make it too large).
            let error = #expect(throws: BagError.self, "\(repeated), at the end: \(atTheEnd)") {
                try BagReader.read(at: bag, options: BagReadOptions(maxTagFileBytes: 100))
            }
            #expect(error?.code == .hostileEntry)
            #expect(
                error?.description
                    == "Refusing member 'bag/\(repeated)' of '\(bag)': an earlier member has the same path")
        }
        // The same bag without the second copy is valid.
        let once = try tar([
            file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
            file("manifest-sha256.txt", "\(digest(.sha256, Array(Self.payload.utf8)))  data/a.txt\n"),
            file("data/a.txt", Self.payload),
        ])
        #expect(try BagReader.read(at: once).problems.map(\.description) == [])
    }

    /// A hard link repeats a regular file read before it, named by the same bytes, as the
    /// guard would check it: not another hard link, not a directory, not a later file, not
    /// the file's name in another Unicode normalisation.
    @Test func aHardLinkNamesOnlyARegularFileReadBeforeIt() throws {
        let nfc = "data/r\u{e9}sum\u{e9}.txt"
        let nfd = "data/re\u{301}sume\u{301}.txt"
        let declaration = file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
        let cases: [(files: [(path: String, bytes: [UInt8]?, link: String?)], link: String, target: String)] = [
            ([file("data/a.txt", "a\n"), ("data/b", nil, "data/a.txt"), ("data/c", nil, "data/b")], "c", "b"),
            ([("data/early", nil, "data/a.txt"), file("data/a.txt", "a\n")], "early", "a.txt"),
            ([file(nfc, "a\n"), ("data/copy", nil, nfd)], "copy", "re\u{301}sume\u{301}.txt"),
        ]
        for (files, link, target) in cases {
            let bag = try tar([declaration] + files)
            let error = #expect(throws: BagError.self, "\(link)") { try BagReader.read(at: bag) }
            #expect(
                error?.description
                    == "Refusing member 'bag/data/\(link)' of '\(bag)': it is a hard link to 'bag/data/\(target)', "
                    + "which is not a regular file extracted before it")
        }
        // To a directory member: no file at all.
        let directory = root + "/directory-link.tar"
        try withArchiveWriter(at: directory) { writer in
            try writer.writeEntry(ArchiveEntry(path: "bag/data/d", kind: .directory))
            try writer.writeEntry(ArchiveEntry(path: "bag/data/l", kind: .hardlink, linkTarget: "bag/data/d"))
        }
        let error = #expect(throws: BagError.self) { try BagReader.read(at: directory) }
        #expect(
            error?.description.hasSuffix(
                "it is a hard link to 'bag/data/d', which is not a regular file extracted before it") == true)
    }

    /// A directory member holds nothing a bag needs: it is skipped, even when the archive
    /// holds it twice (the read does not remember directories).
    @Test func aDirectoryMemberHeldTwiceIsSkipped() throws {
        let path = root + "/directories.tar"
        let sha = digest(.sha256, Array(Self.payload.utf8))
        try withArchiveWriter(at: path) { writer in
            for (name, text) in [
                ("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"),
                ("manifest-sha256.txt", "\(sha)  data/a.txt\n"),
            ] {
                try writer.writeEntry(ArchiveEntry(path: "bag/" + name, kind: .file), contents: Array(text.utf8))
            }
            try writer.writeEntry(ArchiveEntry(path: "bag/data/", kind: .directory))
            try writer.writeEntry(ArchiveEntry(path: "bag/data/a.txt", kind: .file), contents: Array(Self.payload.utf8))
            try writer.writeEntry(ArchiveEntry(path: "bag/./data", kind: .directory))
        }
        let read = try BagReader.read(at: path)
        #expect(read.problems.map(\.description) == [])
        #expect(read.payload.count == 1)
    }

    /// A directory bag is walked by `readdir`: a name that is not UTF-8 (which Linux allows
    /// and no manifest can list) stops the read with an error naming it.
    @Test func aDirectoryBagWithANameThatIsNotUTF8IsRefused() throws {
        let bag = root + "/bag"
        try FileManager.default.createDirectory(atPath: bag + "/data/sub", withIntermediateDirectories: true)
        try Data("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8).write(
            to: URL(fileURLWithPath: bag + "/bagit.txt"))
        let sha = digest(.sha256, Array(Self.payload.utf8))
        try Data("\(sha)  data/sub/a.txt\n".utf8).write(to: URL(fileURLWithPath: bag + "/manifest-sha256.txt"))
        try Data(Self.payload.utf8).write(to: URL(fileURLWithPath: bag + "/data/sub/a.txt"))
        #expect(try BagReader.read(at: bag).problems.map(\.description) == [])

        let raw = Array((bag + "/data/sub/caf").utf8) + [0xE9, 0x2E, 0x74, 0x78, 0x74, 0]  // Latin-1 "café.txt"
        let fd = raw.withUnsafeBufferPointer {
            $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_CREAT | O_WRONLY, 0o644) }
        }
        #expect(fd >= 0)
        close(fd)
        let error = #expect(throws: BagError.self) { try BagReader.read(at: bag) }
        #expect(error?.code == .hostileEntry)
        #expect(
            error?.description == "data/sub/caf\u{FFFD}.txt: has a name that is not UTF-8, which no manifest can list")
    }

    /// A hard link is a member like any other: one at the path of a file read before it, or
    /// a file at the path of a hard link read before it, is a member held twice.
    @Test func aHardLinkAtAnEarlierMembersPathIsAMemberHeldTwice() throws {
        let declaration = file("bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
        for files in [
            [file("data/a.txt", "a\n"), file("data/b.txt", "b\n"), ("data/a.txt", nil, "data/b.txt")],
            [file("data/b.txt", "b\n"), ("data/a.txt", nil, "data/b.txt"), file("data/a.txt", "a\n")],
        ] {
            let bag = try tar([declaration] + files)
            let error = #expect(throws: BagError.self) { try BagReader.read(at: bag) }
            #expect(
                error?.description
                    == "Refusing member 'bag/data/a.txt' of '\(bag)': an earlier member has the same path")
        }
    }
}
