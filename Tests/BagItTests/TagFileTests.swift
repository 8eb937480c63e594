import BagIt
import Testing

/// Parsing of the tag files alone: `bagit.txt`, `Label: value` fields and manifests.
@Suite struct TagFileTests {
    static let sha = String(repeating: "ab", count: 32)
    static let otherSha = String(repeating: "cd", count: 32)

    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// The error `body` throws, described as a user reads it.
    func failure(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        do {
            try body()
            Issue.record("no error was thrown", sourceLocation: sourceLocation)
        } catch let error as BagError {
            return error.description
        } catch {
            Issue.record("\(error) is not a BagError", sourceLocation: sourceLocation)
        }
        return nil
    }

    func manifest(_ text: String, version: String = "1.0") throws(BagError) -> [String: String] {
        try TagFile.parseManifest(bytes(text), file: "manifest-sha256.txt", algorithm: .sha256, version: version)
    }

    // MARK: bagit.txt

    @Test(arguments: [
        ("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n", "1.0"),
        ("BagIt-Version: 0.97\r\nTag-File-Character-Encoding: UTF-8\r\n", "0.97"),
        ("BagIt-Version: 0.96\rTag-File-Character-Encoding: utf-8", "0.96"),
        ("BagIt-Version:   1.0  \n\nTag-File-Character-Encoding:UTF-8\n", "1.0"),
    ])
    func aDeclarationGivesItsVersion(text: String, version: String) throws {
        #expect(try TagFile.parseDeclaration(bytes(text)) == version)
    }

    @Test func theDeclarationWrittenIsReadBack() throws {
        #expect(try TagFile.parseDeclaration(TagFile.declaration) == "1.0")
    }

    @Test func aByteOrderMarkIsRefused() {
        let text = [0xEF, 0xBB, 0xBF] + bytes("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
        #expect(
            failure { _ = try TagFile.parseDeclaration(text) }
                == "bagit.txt: begins with a byte-order mark, which BagIt does not allow")
    }

    @Test func invalidUTF8IsRefused() {
        let text = bytes("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8 ") + [0xFF, 0x0A]
        #expect(failure { _ = try TagFile.parseDeclaration(text) } == "bagit.txt: is not valid UTF-8")
    }

    @Test(arguments: [
        "BagIt-Version: 1.0\n",
        "Tag-File-Character-Encoding: UTF-8\nBagIt-Version: 1.0\n",
        "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\nExtra: field\n",
        "",
    ])
    func wrongFieldsAreRefused(text: String) {
        #expect(
            failure { _ = try TagFile.parseDeclaration(bytes(text)) }
                == "bagit.txt: must hold exactly 'BagIt-Version: M.N' and 'Tag-File-Character-Encoding: UTF-8'")
    }

    @Test func aLineWithoutAColonIsRefused() {
        #expect(
            failure {
                _ = try TagFile.parseDeclaration(bytes("BagIt-Version 1.0\nTag-File-Character-Encoding: UTF-8\n"))
            }
                == "bagit.txt: line 1 is not 'Label: value'")
    }

    @Test func versionTwoIsNotSupported() {
        #expect(
            failure {
                _ = try TagFile.parseDeclaration(bytes("BagIt-Version: 2.0\nTag-File-Character-Encoding: UTF-8\n"))
            } == "bagit.txt: BagIt version 2.0 is not supported (only 0.93, 0.94, 0.95, 0.96, 0.97, 1.0)")
        do throws(BagError) {
            _ = try TagFile.parseDeclaration(bytes("BagIt-Version: 2.0\nTag-File-Character-Encoding: UTF-8\n"))
        } catch {
            #expect(error.code == .unsupportedVersion)
            #expect(error.file == "bagit.txt")
        }
    }

    @Test func anotherEncodingIsNotSupported() {
        #expect(
            failure {
                _ = try TagFile.parseDeclaration(bytes("BagIt-Version: 1.0\nTag-File-Character-Encoding: EBCDIC\n"))
            } == "bagit.txt: tag files in EBCDIC are not supported (only UTF-8, ISO-8859-1 and UTF-16)")
    }

    // MARK: Fields

    @Test func fieldsKeepTheirOrderRepeatsAndContinuations() throws {
        let fields = try TagFile.parseFields(
            bytes("Source-Organization: Example\nContact-Name: A\n  and B\n\tand C\nContact-Name: D\nEmpty:\n"),
            file: "bag-info.txt")
        #expect(fields.map(\.label) == ["Source-Organization", "Contact-Name", "Contact-Name", "Empty"])
        #expect(fields.map(\.value) == ["Example", "A and B and C", "D", ""])
    }

    @Test func aValueKeepsItsColons() throws {
        let fields = try TagFile.parseFields(bytes("External-Identifier: urn:x:1\n"), file: "bag-info.txt")
        #expect(fields.first?.value == "urn:x:1")
    }

    @Test func malformedFieldLinesNameTheFileAndLine() {
        #expect(
            failure { _ = try TagFile.parseFields(bytes(" continued\n"), file: "bag-info.txt") }
                == "bag-info.txt: line 1 continues no field")
        #expect(
            failure { _ = try TagFile.parseFields(bytes("A: 1\n\nno colon here\n"), file: "bag-info.txt") }
                == "bag-info.txt: line 3 is not 'Label: value'")
        #expect(
            failure { _ = try TagFile.parseFields(bytes(" : value\n"), file: "bag-info.txt") }
                == "bag-info.txt: line 1 continues no field")
        #expect(
            failure { _ = try TagFile.parseFields(bytes("A: 1\n: value\n"), file: "bag-info.txt") }
                == "bag-info.txt: line 2 has an empty label")
    }

    @Test func formattedFieldsStayOnOneLineEach() throws {
        let text = TagFile.formatFields([("A", "one\ntwo"), ("B", "x")])
        #expect(String(decoding: text, as: UTF8.self) == "A: one\\ntwo\nB: x\n")
        #expect(try TagFile.parseFields(text, file: "bag-info.txt").count == 2)
    }

    // MARK: Manifests

    @Test func manifestLinesAreChecksumThenPath() throws {
        let entries = try manifest(
            "\(Self.sha)  data/a.txt\n\(Self.otherSha.uppercased())\tdata/b c.txt\r\n\n  \n\(Self.sha) ./data//d.txt")
        #expect(entries == ["data/a.txt": Self.sha, "data/b c.txt": Self.otherSha, "data/d.txt": Self.sha])
    }

    @Test func lineEndsMayBeLFCRLFOrCR() throws {
        let entries = try manifest(
            "\(Self.sha)  data/a\r\(Self.sha)  data/b\r\n\(Self.sha)  data/c\n\r\(Self.sha)  data/d")
        #expect(entries.keys.sorted() == ["data/a", "data/b", "data/c", "data/d"])
    }

    @Test func pathsAreKeptAsTheyAreUnlessTheyNeedNormalizing() throws {
        let entries = try manifest(
            "\(Self.sha)  data/.../a..b/.hidden\n\(Self.sha)  data/x/./y//z/\n\(Self.sha)  data/é 日本/..c\n")
        #expect(entries.keys.sorted() == ["data/.../a..b/.hidden", "data/x/y/z", "data/é 日本/..c"])
    }

    @Test func percentEncodingInVersion1() throws {
        let entries = try manifest(
            "\(Self.sha)  data/100%25.txt\n\(Self.sha)  data/two%0Alines%0d.txt\n\(Self.sha)  data/%41%.txt%")
        #expect(entries.keys.sorted() == ["data/%41%.txt%", "data/100%.txt", "data/two\nlines\r.txt"])
    }

    @Test func percentEncodingBeforeVersion1() throws {
        // bagit-python 0.97 and earlier encode only LF and CR; `%25` is a literal name.
        let entries = try manifest(
            "\(Self.sha)  data/100%25.txt\n\(Self.sha)  data/two%0Alines.txt\n\(Self.sha)  data/50%.txt",
            version: "0.97")
        #expect(entries.keys.sorted() == ["data/100%25.txt", "data/50%.txt", "data/two\nlines.txt"])
    }

    @Test(arguments: ["data/100%.txt", "data/a\nb\r.txt", "data/%0A literal", "data/日本/é 100%25.bin"])
    func encodingThenDecodingGivesThePathBack(path: String) throws {
        #expect(TagFile.decodePath(TagFile.encodePath(path), version: "1.0") == path)
        let text = TagFile.formatManifest([(path, Self.sha)])
        #expect(try TagFile.parseManifest(text, file: "m", algorithm: .sha256, version: "1.0") == [path: Self.sha])
    }

    @Test func formattedManifestsAreSortedByBytes() {
        let text = TagFile.formatManifest([("data/b", Self.sha), ("data/B", Self.sha), ("data/a", Self.otherSha)])
        #expect(
            String(decoding: text, as: UTF8.self)
                == "\(Self.sha)  data/B\n\(Self.otherSha)  data/a\n\(Self.sha)  data/b\n")
    }

    @Test(arguments: [
        ("\(TagFileTests.sha)  data/a.txt\njunk\n", "manifest-sha256.txt: line 2 is not 'checksum path'"),
        ("abc  data/a.txt\n", "manifest-sha256.txt: line 1: 'abc' is not a sha256 checksum"),
        (
            "\(String(repeating: "g", count: 64))  data/a.txt\n",
            "manifest-sha256.txt: line 1: '\(String(repeating: "g", count: 64))' is not a sha256 checksum"
        ),
        ("\(TagFileTests.sha)  /etc/passwd\n", "manifest-sha256.txt: line 1 names an absolute path, /etc/passwd"),
        (
            "\(TagFileTests.sha)  data/../../etc/passwd\n",
            "manifest-sha256.txt: line 1 names a path with '..', data/../../etc/passwd"
        ),
        ("\(TagFileTests.sha)  ./.\n", "manifest-sha256.txt: line 1 names no file"),
        ("\(TagFileTests.sha)  \n", "manifest-sha256.txt: line 1 names no file"),
        ("\(TagFileTests.sha) \t", "manifest-sha256.txt: line 1 names no file"),
        (
            "\(TagFileTests.sha)  data/a.txt\n\(TagFileTests.otherSha)  data/./a.txt\n",
            "manifest-sha256.txt: line 2 lists data/a.txt a second time"
        ),
    ])
    func malformedManifestLinesNameTheFileAndLine(text: String, message: String) {
        #expect(failure { _ = try manifest(text) } == message)
    }

    @Test func aManifestWithTheWrongAlgorithmsLengthIsRefused() {
        #expect(
            failure {
                _ = try TagFile.parseManifest(
                    bytes("\(Self.sha)  data/a.txt\n"), file: "manifest-sha512.txt", algorithm: .sha512, version: "1.0")
            } == "manifest-sha512.txt: line 1: '\(Self.sha)' is not a sha512 checksum")
    }

    @Test func aManifestWithAByteOrderMarkIsRefused() {
        #expect(
            failure {
                _ = try TagFile.parseManifest(
                    [0xEF, 0xBB, 0xBF] + bytes("\(Self.sha)  data/a.txt\n"), file: "manifest-sha256.txt",
                    algorithm: .sha256, version: "1.0")
            } == "manifest-sha256.txt: begins with a byte-order mark, which BagIt does not allow")
    }

    @Test func manifestNamesGiveTheirAlgorithm() {
        #expect(ChecksumAlgorithm(manifestName: "manifest-sha256.txt", prefix: "manifest-") == .sha256)
        #expect(ChecksumAlgorithm(manifestName: "tagmanifest-MD5.txt", prefix: "tagmanifest-") == .md5)
        #expect(ChecksumAlgorithm(manifestName: "manifest-sha3.txt", prefix: "manifest-") == nil)
        #expect(ChecksumAlgorithm(manifestName: "manifest-sha256.txt.bak", prefix: "manifest-") == nil)
    }
}

@Suite struct PercentDecodingByScalarsTests {
    /// `%0A` right before a combining accent forms one Character with it; the escape is
    /// still decoded (it is read by Unicode scalars).
    @Test func anEscapeFollowedByACombiningMarkIsDecoded() {
        #expect(TagFile.decodePath("a%0A\u{301}b", version: "1.0") == "a\n\u{301}b")
        #expect(TagFile.decodePath("100%25\u{301}", version: "1.0") == "100%\u{301}")
        #expect(TagFile.decodePath("100%\u{301}", version: "1.0") == "100%\u{301}")
    }
}
