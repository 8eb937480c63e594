import ArchiveIO
import Foundation
import Testing

/// Every writable format: write a tree with unicode names (NFC and NFD, CJK, emoji), an empty
/// file, directories, a symbolic link and streamed members; read it back byte for byte with
/// our reader, our extractor, bsdtar and Python.
@Suite struct RoundTripTests {
    static let random = pseudoRandomBytes(count: 300_000, seed: 42)
    static let streamed = pseudoRandomBytes(count: 1_000_003, seed: 7)

    /// The tree on disk, added with `addTree(at:as:)` under "tree".
    static let tree: [(String, TreeItem)] = [
        ("tree", .directory),
        ("tree/hello.txt", .file(Array("hello\n".utf8))),
        ("tree/empty", .file([])),
        ("tree/r\u{e9}sum\u{e9}.txt", .file(Array("NFC\n".utf8))),
        ("tree/re\u{301}sume\u{301}.txt", .file(Array("NFD\n".utf8))),
        ("tree/\u{65e5}\u{672c}\u{8a9e}", .directory),
        ("tree/\u{65e5}\u{672c}\u{8a9e}/\u{4e2d}\u{6587} \u{76ee}\u{5f55}.bin", .file(random)),
        ("tree/emoji \u{1F3A8}\u{1F469}\u{200D}\u{1F4BB}.txt", .file(Array("art\n".utf8))),
        ("tree/\u{39a}\u{3b1}\u{3bb}\u{3b7}\u{3bc}\u{3ad}\u{3c1}\u{3b1}", .symlink("r\u{e9}sum\u{e9}.txt")),
        ("tree/deep", .directory),
        ("tree/deep/a", .directory),
        ("tree/deep/a/\u{41f}\u{440}\u{438}\u{432}\u{435}\u{442}.txt", .file(Array("deep\n".utf8))),
    ]
    /// Members written from memory and from a chunk stream.
    static let memoryMember = "memory/cafe\u{301} \u{2014} NFD.txt"
    static let streamedMember = "streamed/\u{ff46}\u{ff55}\u{ff4c}\u{ff4c}\u{ff57}\u{ff49}\u{ff44}\u{ff54}\u{ff48}.bin"

    static var expected: [[UInt8]: TreeItem] {
        var result: [[UInt8]: TreeItem] = [:]
        for (path, item) in tree { result[bytes(path)] = item }
        result[bytes(memoryMember)] = .file(Array("from memory\n".utf8))
        result[bytes(streamedMember)] = .file(streamed)
        return result
    }

    static func writeArchive(format: ArchiveFormat, in directory: borrowing TemporaryDirectory) throws -> String {
        let source = directory.sub("source")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: false)
        try makeTree(tree, at: source)
        let path = directory.sub("out" + format.fileExtension)
        try withArchiveWriter(at: path, format: format) { writer in
            try writer.addTree(at: source + "/tree", as: "tree")
            let date = Date(timeIntervalSince1970: 1_700_000_000)
            try writer.writeEntry(
                ArchiveEntry(path: memoryMember, kind: .file, modificationDate: date),
                contents: Array("from memory\n".utf8))
            var offset = 0
            try writer.writeEntry(
                ArchiveEntry(path: streamedMember, kind: .file, size: Int64(streamed.count), modificationDate: date)
            ) { () -> [UInt8]? in
                guard offset < streamed.count else { return nil }
                let end = min(offset + 65_537, streamed.count)
                defer { offset = end }
                return Array(streamed[offset..<end])
            }
            #expect(writer.warnings.isEmpty)
        }
        return path
    }

    @Test(arguments: ArchiveFormat.allCases)
    func ourReaderReadsBackEveryByte(format: ArchiveFormat) throws {
        let directory = try TemporaryDirectory()
        let path = try Self.writeArchive(format: format, in: directory)
        var found: [[UInt8]: TreeItem] = [:]
        var digests: [[UInt8]: String] = [:]
        try withArchiveReader(at: path) { reader in
            while let entry = try reader.nextEntry() {
                var name = entry.path
                while name.hasSuffix("/") { name.removeLast() }
                switch entry.kind {
                case .directory: found[bytes(name)] = .directory
                case .symlink: found[bytes(name)] = .symlink(entry.linkTarget ?? "")
                default:
                    var digest = SHA256Digest()
                    var data: [UInt8] = []
                    try reader.readData { chunk in
                        digest.update(chunk)
                        data.append(contentsOf: chunk)
                    }
                    digests[bytes(name)] = digest.finalize()
                    found[bytes(name)] = .file(data)
                }
            }
        }
        #expect(found == Self.expected)
        // SHA-256 of what came back equals SHA-256 of the source.
        for (path, item) in Self.expected {
            if case .file(let data) = item { #expect(digests[path] == SHA256Digest.hex(data)) }
        }
    }

    @Test(arguments: ArchiveFormat.allCases)
    func extractionRecreatesTheTree(format: ArchiveFormat) throws {
        let directory = try TemporaryDirectory()
        let path = try Self.writeArchive(format: format, in: directory)
        let root = directory.sub("extracted")
        let summary = try ArchiveReader.extract(archiveAt: path, to: root)
        var expected = Self.expected
        expected[bytes("memory")] = .directory  // created as parents
        expected[bytes("streamed")] = .directory
        #expect(snapshotTree(root) == expected)
        #expect(summary.fileCount == 9 && summary.symlinkCount == 1 && summary.directoryCount == 4)
        let smallFiles = 6 + 4 + 4 + 4 + 5 + 12
        #expect(summary.totalBytes == Int64(Self.random.count + Self.streamed.count + smallFiles))
        var info = stat()
        #expect(lstat(root + "/tree/hello.txt", &info) == 0)
        #expect(info.st_mode & 0o777 == 0o644 && info.st_mtim.tv_sec == 1_700_000_000)
    }

    @Test(arguments: ArchiveFormat.allCases)
    func bsdtarListsEveryMember(format: ArchiveFormat) throws {
        let directory = try TemporaryDirectory()
        let path = try Self.writeArchive(format: format, in: directory)
        let result = try run("bsdtar", ["-tf", path], environment: ["LC_ALL": "C.UTF-8"])
        #expect(result.status == 0, "\(result.stderr)")
        // bsdtar itself normalises UTF-8 zip names to NFC (PLATFORM.md trap 10), so compare
        // canonical forms here; Python below compares bytes.
        let lines = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n")
        let listed: [String] = lines.map { line -> String in
            let name = line.hasSuffix("/") ? String(line.dropLast()) : String(line)
            return name.precomposedStringWithCanonicalMapping
        }
        let expected: [String] = Self.expected.keys.map { key -> String in
            String(decoding: key, as: UTF8.self).precomposedStringWithCanonicalMapping
        }
        #expect(
            listed.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
                == expected.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
    }

    static let pythonLister = """
        import hashlib, io, json, subprocess, sys, tarfile, zipfile
        path, out = sys.argv[1], []
        if path.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                for i in z.infolist():
                    mode = i.external_attr >> 16
                    data = z.read(i)
                    kind = "d" if i.is_dir() else ("l" if mode & 0o170000 == 0o120000 else "f")
                    out.append([i.filename.rstrip("/").encode("utf-8", "surrogateescape").hex(), kind,
                                hashlib.sha256(data).hexdigest() if kind == "f" else data.hex()])
        else:
            if path.endswith(".zst"):
                raw = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
                t = tarfile.open(fileobj=io.BytesIO(raw), mode="r:", encoding="utf-8")
            else:
                t = tarfile.open(path, encoding="utf-8")
            for m in t.getmembers():
                kind = "d" if m.isdir() else ("l" if m.issym() else "f")
                extra = hashlib.sha256(t.extractfile(m).read()).hexdigest() if kind == "f" else (
                    m.linkname.encode("utf-8", "surrogateescape").hex() if kind == "l" else "")
                out.append([m.name.encode("utf-8", "surrogateescape").hex(), kind, extra])
        print(json.dumps(sorted(out)))
        """

    @Test(arguments: ArchiveFormat.allCases)
    func pythonReadsNamesAndContentByteForByte(format: ArchiveFormat) throws {
        let directory = try TemporaryDirectory()
        let path = try Self.writeArchive(format: format, in: directory)
        let output = try python(Self.pythonLister, [path])
        let listed = try JSONDecoder().decode([[String]].self, from: Data(output.utf8))
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        let expected = Self.expected.map { path, item -> [String] in
            switch item {
            case .directory: [hex(path), "d", ""]
            case .file(let data): [hex(path), "f", SHA256Digest.hex(data)]
            case .symlink(let target): [hex(path), "l", hex(bytes(target))]
            }
        }
        #expect(listed == expected.sorted { $0.lexicographicallyPrecedes($1) })
    }

    @Test func streamedOutputIsTheSameArchive() throws {
        // Written through the chunk callback, .tar.zst must be complete and unpadded
        // (PLATFORM.md trap 2): readable by zstd itself and by our stream reader.
        let directory = try TemporaryDirectory()
        var output: [UInt8] = []
        let writer = try ArchiveWriter(format: .tarZstd, name: "memory") { output.append(contentsOf: $0) }
        try writer.writeEntry(ArchiveEntry(path: "a.bin", kind: .file), contents: Self.random)
        try writer.finish()
        let file = directory.sub("stream.tar.zst")
        try Data(output).write(to: URL(fileURLWithPath: file))
        #expect(try run("zstd", ["-t", "-q", file]).status == 0)
        var chunks = [output].makeIterator()
        let reader = try ArchiveReader(name: "memory") { chunks.next() }
        #expect(try reader.nextEntry()?.path == "a.bin")
        #expect(try reader.readContents() == Self.random)
        #expect(try reader.nextEntry() == nil)
    }
}
