import ArchiveIO
import Foundation
import Testing

@Suite struct ReaderTests {
    /// Every sample fixture, in every format and compression libarchive reads that the
    /// fixture script can produce.
    static let samples = [
        "sample.tar", "sample-gnu.tar", "sample.tar.gz", "sample.tar.bz2", "sample.tar.xz", "sample.tar.zst",
        "sample.zip", "sample.7z", "sample.cpio", "sample.iso.gz",
    ]

    @Test func testSHA256Helper() {
        #expect(
            SHA256Digest.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    /// Fixtures whose names libarchive returns byte for byte. The others store names as UTF-8
    /// pax records (Python's tarfile) or UTF-16 (7z, Joliet), which libarchive converts with
    /// an NFC normalisation on Linux: there the NFD name comes back precomposed (PLATFORM.md
    /// trap 10). ArchiveWriter writes pax names as raw bytes to avoid it (see RoundTripTests).
    static let byteExact: Set<String> = ["sample-gnu.tar", "sample.zip", "sample.cpio", "sample.iso.gz"]

    @Test(arguments: samples)
    func readsEveryFormatWithUnicodeNames(fixture: String) throws {
        var paths: [[UInt8]] = []
        var members: [[UInt8]: Member] = [:]
        try withArchiveReader(at: Fixtures.path(fixture)) { reader in
            while let entry = try reader.nextEntry() {
                var path = entry.path
                while path.hasSuffix("/") { path.removeLast() }
                paths.append(bytes(path))
                members[bytes(path)] = Member(
                    kind: entry.kind, data: try reader.readContents(), linkTarget: entry.linkTarget)
            }
        }
        let nfc = bytes("sample/r\u{e9}sum\u{e9}.txt")
        let nfd = bytes("sample/re\u{301}sume\u{301}.txt")
        for (path, data) in Fixtures.sampleFiles where bytes(path) != nfd {
            if bytes(path) == nfc && !Self.byteExact.contains(fixture) { continue }
            let member = try #require(members[bytes(path)], "\(fixture) lacks \(path)")
            #expect(member.kind == .file)
            #expect(member.data == data, "\(fixture): \(path)")
        }
        if Self.byteExact.contains(fixture) {
            #expect(members[nfd]?.data == Array("NFD name\n".utf8), "\(fixture): NFD name")
            #expect(members[nfc]?.data == Array("NFC name\n".utf8), "\(fixture): NFC name")
        } else {
            #expect(paths.filter { $0 == nfc }.count == 2 && !paths.contains(nfd), "\(fixture): normalised")
        }
        for directory in Fixtures.sampleDirectories {
            #expect(members[bytes(directory)]?.kind == .directory, "\(fixture): \(directory)")
        }
        let link = try #require(members[bytes("sample/link-to-hello")])
        #expect(link.kind == .symlink)
        #expect(link.linkTarget == "hello.txt")
    }

    @Test func reportsFormatAndFilters() throws {
        let reader = try ArchiveReader(path: Fixtures.path("sample.tar.zst"))
        _ = try reader.findEntry(path: "sample/emoji \u{1F3A8}.txt")  // a member with a pax header
        #expect(reader.filterNames == ["zstd"])
        #expect(reader.formatName == "POSIX pax interchange format")
    }

    @Test func exposesMetadata() throws {
        let reader = try ArchiveReader(path: Fixtures.path("sample.tar"))
        let hello = try #require(try reader.findEntry(path: "sample/hello.txt"))
        #expect(hello.kind == .file)
        #expect(hello.size == 13)
        #expect(hello.permissions == 0o644)
        #expect(hello.modificationDate == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(hello.linkTarget == nil)
        #expect(try reader.readContents() == Array("hello, world\n".utf8))
        let link = try #require(try reader.findEntry(path: "sample/link-to-hello"))
        #expect(link.kind == .symlink && link.linkTarget == "hello.txt")
    }

    @Test func zipNamesAreNeverMatchedToTheWrongMember() throws {
        // The central directory lists the members in reverse: the exact (NFD) name cannot be
        // matched safely, so libarchive's NFC names are kept, each with its own data.
        let reader = try ArchiveReader(path: Fixtures.path("reordered-central-directory.zip"))
        var seen: [([UInt8], [UInt8])] = []
        while let entry = try reader.nextEntry() { seen.append((bytes(entry.path), try reader.readContents())) }
        #expect(seen.count == 2)
        for (path, data) in seen {
            #expect(path == bytes("r\u{e9}sum\u{e9}.txt"))
            #expect(data == Array("NFC\n".utf8) || data == Array("NFD\n".utf8))
        }
    }

    @Test func readsFromAChunkStream() throws {
        let data = try Array(Data(contentsOf: URL(fileURLWithPath: Fixtures.path("sample.tar.gz"))))
        var offset = 0
        var calls = 0
        // 7-byte chunks, with an empty chunk now and then: both must be handled.
        let reader = try ArchiveReader(name: "sample.tar.gz (stream)") { () -> [UInt8]? in
            calls += 1
            guard offset < data.count else { return nil }
            if calls % 5 == 0 { return [] }
            let end = min(offset + 7, data.count)
            defer { offset = end }
            return Array(data[offset..<end])
        }
        let members = try readAll(reader)
        #expect(members[bytes(Fixtures.cjkFile)]?.data == Fixtures.cjkData)
        #expect(members.count == 8)  // 9 members; pax UTF-8 names: NFD read as NFC (see above)
    }

    @Test func streamedZipIsReadInStreamingMode() throws {
        let data = try Array(Data(contentsOf: URL(fileURLWithPath: Fixtures.path("sample.zip"))))
        var chunks = [data].makeIterator()
        let reader = try ArchiveReader(name: "sample.zip (stream)") { chunks.next() }
        let members = try readAll(reader)
        #expect(members[bytes("sample/hello.txt")]?.data == Array("hello, world\n".utf8))
    }

    @Test func chunkSourceErrorsCarryTheCause() throws {
        struct Boom: Error, CustomStringConvertible { var description: String { "network down" } }
        var first = true
        let data = try Array(Data(contentsOf: URL(fileURLWithPath: Fixtures.path("sample.tar"))))
        let error = #expect(throws: ArchiveError.self) {
            let reader = try ArchiveReader(name: "download.tar") { () -> [UInt8]? in
                if first {
                    first = false
                    return Array(data[0..<1024])
                }
                throw Boom()
            }
            _ = try readAll(reader)
        }
        #expect(error?.code == .callbackFailed)
        #expect(error?.cause is Boom)
        #expect(error?.message.hasSuffix("the chunk source threw: network down") == true)
    }

    @Test func chunkedReadsAreBoundedAndComplete() throws {
        let reader = try ArchiveReader(path: Fixtures.path("sample.tar.xz"))
        _ = try #require(try reader.findEntry(path: Fixtures.cjkFile))
        var collected: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 100, alignment: 1)
        defer { buffer.deallocate() }
        var reads = 0
        while case let count = try reader.read(into: buffer), count > 0 {
            #expect(count <= 100)
            collected += buffer[0..<count]
            reads += 1
        }
        #expect(collected.count == 4096 && reads >= 41)
        #expect(collected == Fixtures.cjkData)
        #expect(try reader.read(into: buffer) == 0)
    }

    @Test func skipsDataAndFindsMembers() throws {
        let reader = try ArchiveReader(path: Fixtures.path("sample.zip"))
        let entry = try #require(try reader.findEntry(path: "./sample/emoji \u{1F3A8}.txt"))
        #expect(entry.hasPath("sample/emoji \u{1F3A8}.txt"))
        try reader.skipData()
        #expect(try reader.readContents() == [])  // skipped data reads as empty
        #expect(try reader.findEntry(path: "no/such/member") == nil)
        #expect(try reader.nextEntry() == nil)
    }

    @Test func findEntryComparesBytesNotCanonicalEquivalence() throws {
        let reader = try ArchiveReader(path: Fixtures.path("sample.zip"))
        // Swift's `==` treats these as equal; the archive holds both, and the NFD one is wanted.
        let nfd = try #require(try reader.findEntry(path: "sample/re\u{301}sume\u{301}.txt"))
        #expect(try reader.readContents() == Array("NFD name\n".utf8))
        #expect(nfd.path.utf8.count == "sample/re\u{301}sume\u{301}.txt".utf8.count)
    }

    @Test func readingBeforeTheFirstEntryIsMisuse() throws {
        let reader = try ArchiveReader(path: Fixtures.path("sample.tar"))
        let error = #expect(throws: ArchiveError.self) { try reader.readContents() }
        #expect(error?.code == .misuse)
        #expect(
            error?.message == "Cannot read data from '\(Fixtures.path("sample.tar"))': there is no current member "
                + "(call nextEntry() first)")
    }

    @Test func missingFileFailsToOpen() throws {
        let path = Fixtures.path("does-not-exist.tar")
        let error = #expect(throws: ArchiveError.self) { try ArchiveReader(path: path) }
        #expect(error?.code == .openFailed)
        #expect(error?.operation == "open")
        #expect(error?.errno == ENOENT)
        #expect(error?.message == "Cannot open '\(path)': open failed: No such file or directory")
    }

    @Test func unrecognizedFormat() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("notes.txt")
        try Data(String(repeating: "just some text, not an archive\n", count: 1000).utf8)
            .write(to: URL(fileURLWithPath: path))
        // Format detection happens when the archive is opened.
        let error = #expect(throws: ArchiveError.self) { try ArchiveReader(path: path) }
        #expect(error?.code == .unrecognizedFormat)
        #expect(
            error?.message == "Cannot open '\(path)': archive_read_open_fd failed: Unrecognized archive format")
    }

    @Test func unrecognizedStreamFailsOnOpen() throws {
        var chunks = [Array("plain text".utf8)].makeIterator()
        let error = #expect(throws: ArchiveError.self) { try ArchiveReader(name: "text") { chunks.next() } }
        #expect(error?.code == .unrecognizedFormat)
        #expect(error?.message == "Cannot open 'text': archive_read_open failed: Unrecognized archive format")
    }

    @Test func truncatedTarIsAnErrorNotAShortRead() throws {
        let path = Fixtures.path("truncated.tar")
        let error = #expect(throws: ArchiveError.self) {
            try withArchiveReader(at: path) { _ = try readAll($0) }
        }
        #expect(error?.code == .truncatedArchive)
        #expect(error?.member == "big.bin")
        #expect(
            error?.message == "Cannot read '\(path)', member 'big.bin': archive_read_data_block failed: "
                + "Truncated tar archive")
    }

    @Test func tarCutBetweenMembersIsAnError() throws {
        // libarchive itself reports a plain EOF here ("some writers omit the block of nulls").
        let path = Fixtures.path("truncated-at-boundary.tar")
        let reader = try ArchiveReader(path: path)
        #expect(try reader.nextEntry()?.path == "ok.txt")
        #expect(try reader.readContents() == Array("fine\n".utf8))
        let error = #expect(throws: ArchiveError.self) { try reader.nextEntry() }
        #expect(error?.code == .truncatedArchive)
        #expect(
            error?.message == "Cannot read '\(path)' after member 'ok.txt': the archive ends without its "
                + "end-of-archive marker (it is probably truncated)")
    }

    /// However much of each member is read, a complete tar ends without error.
    @Test(arguments: ["nothing", "skip", "one byte", "all"])
    func completeTarEndsCleanly(howMuch: String) throws {
        for fixture in ["sample.tar", "sample-gnu.tar", "sample.tar.gz", "warning-malformed-pax.tar"] {
            let reader = try ArchiveReader(path: Fixtures.path(fixture))
            var count = 0
            var byte = [UInt8](repeating: 0, count: 1)
            while try reader.nextEntry() != nil {
                count += 1
                switch howMuch {
                case "skip": try reader.skipData()
                case "one byte": _ = try byte.withUnsafeMutableBytes { try reader.read(into: $0) }
                case "all": try reader.readData { _ in }
                default: break
                }
            }
            #expect(count > 0, "\(fixture)")
        }
    }

    @Test func truncatedGzipIsAnError() throws {
        let path = Fixtures.path("truncated.tar.gz")
        let error = #expect(throws: ArchiveError.self) {
            try withArchiveReader(at: path) { _ = try readAll($0) }
        }
        #expect(error?.code == .truncatedArchive)
        #expect(error?.message == "Cannot open '\(path)': archive_read_open_fd failed: truncated gzip input")
    }

    @Test func truncatedZipIsAnError() throws {
        let path = Fixtures.path("truncated.zip")
        let error = #expect(throws: ArchiveError.self) {
            try withArchiveReader(at: path) { _ = try readAll($0) }
        }
        #expect(error?.code == .truncatedArchive)
        #expect(error?.member == "big.bin")
        #expect(
            error?.message == "Cannot read '\(path)', member 'big.bin': archive_read_data_block failed: "
                + "Truncated ZIP file data")
    }

    @Test func truncatedStreamIsAnError() throws {
        let data = try Array(Data(contentsOf: URL(fileURLWithPath: Fixtures.path("truncated.tar"))))
        var chunks = stride(from: 0, to: data.count, by: 1000).map { Array(data[$0..<min($0 + 1000, data.count)]) }
            .makeIterator()
        let reader = try ArchiveReader(name: "upload") { chunks.next() }
        let error = #expect(throws: ArchiveError.self) { _ = try readAll(reader) }
        #expect(error?.code == .truncatedArchive)
        #expect(
            error?.message
                == "Cannot read 'upload', member 'big.bin': archive_read_data_block failed: Truncated tar archive")
    }

    @Test func corruptHeaderIsAnErrorNotASkippedMember() throws {
        let path = Fixtures.path("corrupt-header.tar")
        let reader = try ArchiveReader(path: path)
        #expect(try reader.nextEntry()?.path == "first.txt")
        let error = #expect(throws: ArchiveError.self) { try reader.nextEntry() }
        #expect(error?.code == .corruptArchive)
        #expect(error?.operation == "archive_read_next_header")
        #expect(
            error?.message == "Cannot read '\(path)' after member 'first.txt': archive_read_next_header failed: "
                + "Damaged tar archive")
    }

    @Test func corruptZipMemberIsAnError() throws {
        let path = Fixtures.path("corrupt-data.zip")
        let reader = try ArchiveReader(path: path)
        _ = try reader.nextEntry()
        let error = #expect(throws: ArchiveError.self) { try reader.readData { _ in } }
        #expect(error?.code == .corruptArchive)
        #expect(
            error?.message == "Cannot read '\(path)', member 'data.bin': archive_read_data_block failed: "
                + "ZIP bad CRC: 0xa55d0e04 should be 0x51a02e01")
    }

    @Test func sparseMembersReadWithTheirHolesAsZeros() throws {
        var expected = [UInt8](repeating: 0, count: 4 << 20)
        for i in 0..<5000 { expected[(1 << 20) + i] = UInt8(ascii: "A") }
        for i in 0..<100 { expected[(3 << 20) + i] = UInt8(ascii: "B") }
        let reader = try ArchiveReader(path: Fixtures.path("sparse.tar"))
        let entry = try #require(try reader.nextEntry())
        #expect(entry.path == "sparse.bin" && entry.size == 4 << 20)
        var data: [UInt8] = []
        var largest = 0
        var holes = 0
        try reader.readData { chunk in
            largest = max(largest, chunk.count)
            data.append(contentsOf: chunk)
            if reader.lastChunkIsHole { holes += chunk.count }
        }
        #expect(data == expected)  // holes, including the one at the end, read as zeros
        #expect(holes > (4 << 20) - (64 << 10) && holes <= (4 << 20) - 5100, "\(holes) bytes of holes")
        #expect(largest <= 64 << 10)
        #expect(try reader.nextEntry() == nil)
    }

    @Test func encryptedMembersAreReportedNotCrashedOn() throws {
        let path = Fixtures.path("encrypted.zip")
        let reader = try ArchiveReader(path: path)
        let entry = try #require(try reader.nextEntry())
        #expect(entry.path == "secret.txt" && entry.isEncrypted)
        let error = #expect(throws: ArchiveError.self) { try reader.readContents() }
        #expect(error?.code == .unsupportedEntry)
        #expect(error?.member == "secret.txt")
        #expect(
            error?.message == "Cannot read '\(path)', member 'secret.txt': archive_read_data_block failed: "
                + "Passphrase required for this entry")
        // Only that member failed: the archive goes on (to its end here).
        #expect(try reader.nextEntry() == nil)

        let directory = try TemporaryDirectory()
        let extraction = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: path, to: directory.sub("root"))
        }
        #expect(extraction?.code == .unsupportedEntry)
        #expect(snapshotTree(directory.sub("root")).isEmpty)
    }

    @Test func readContentsIsBounded() throws {
        let path = Fixtures.path("sample.zip")
        let reader = try ArchiveReader(path: path)
        _ = try #require(try reader.findEntry(path: Fixtures.cjkFile))
        let error = #expect(throws: ArchiveError.self) { try reader.readContents(maxBytes: 1000) }
        #expect(error?.code == .sizeLimitExceeded)
        #expect(
            error?.message == "Cannot read member '\(Fixtures.cjkFile)' of '\(path)' into memory: it is larger than "
                + "1000 bytes")
        var names: [String] = []
        try reader.forEachEntry { names.append($0.path) }  // the reader goes on
        #expect(!names.isEmpty)
    }

    @Test func warningsAreSurfaced() throws {
        let path = Fixtures.path("warning-malformed-pax.tar")
        let reader = try ArchiveReader(path: path)
        var seen: [ArchiveWarning] = []
        reader.onWarning = { seen.append($0) }
        let entry = try #require(try reader.nextEntry())
        #expect(entry.path == "warned.txt")
        #expect(try reader.readContents() == Array("data\n".utf8))
        let expected = ArchiveWarning(
            archivePath: path, member: "warned.txt", operation: "archive_read_next_header",
            message: "Ignoring malformed pax extended attribute")
        #expect(reader.warnings == [expected])
        #expect(seen == [expected])
        #expect(
            expected.description
                == "Warning for member 'warned.txt' of '\(path)': archive_read_next_header: Ignoring malformed pax "
                + "extended attribute")
    }

    @Test func nulInAPaxPathIsCutByLibarchive() throws {
        // libarchive keeps the bytes before a NUL; nothing after it can reach a file name.
        let reader = try ArchiveReader(path: Fixtures.path("hostile-nul-name.tar"))
        #expect(try reader.nextEntry()?.path == "evil")
    }
}
