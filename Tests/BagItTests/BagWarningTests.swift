import Foundation
import TestScratch
import Testing

@testable import BagIt

/// What other tools write and accept, read as they read it: a valid bag, with a warning
/// naming what it does (``BagContents/warnings``); and the limits of that leniency.
@Suite struct BagWarningTests {
    static let hello = Array("hello\n".utf8)
    static let helloMD5 = "b1946ac92492d2347c6235b4d2611184"
    static let helloSHA256 = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

    /// A directory bag of `files`, declared as `version`.
    func bag(version: String = "0.97", _ files: [String: String]) throws -> String {
        let bag = try ScratchDirectory.make("bag-warnings").path
        var all = ["bagit.txt": "BagIt-Version: \(version)\nTag-File-Character-Encoding: UTF-8\n"]
        all.merge(files) { $1 }
        for (path, text) in all {
            let full = bag + "/" + path
            try FileManager.default.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: full))
        }
        return bag
    }

    /// What a validator finds in `bag`. A reader that stops at its first problems (an
    /// importer's) agrees: it finds the same, or stops at a listed file the bag lacks that
    /// the validator names too — never at one that a twin, `fetch.txt` or the operating
    /// system excuses.
    func read(_ bag: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> (
        problems: [String], warnings: [String]
    ) {
        let contents = try BagReader.read(at: bag)
        #expect(
            contents.problemCount == contents.problems.count && contents.warningCount == contents.warnings.count,
            sourceLocation: sourceLocation)
        let found = (contents.problems.map(\.description), contents.warnings.map(\.description))
        do {
            let stopping = try BagReader.read(at: bag, options: BagReadOptions(stopsAtMaxProblems: true))
            #expect(stopping.problems.map(\.description) == found.0, sourceLocation: sourceLocation)
            #expect(stopping.warnings.map(\.description) == found.1, sourceLocation: sourceLocation)
        } catch let error as BagError where error.code == .missingFile {
            #expect(found.0.contains(error.description), sourceLocation: sourceLocation)
        }
        return found
    }

    @Test func md5sumsBinaryMarkerNamesTheFileAfterIt() throws {
        let bag = try bag([
            "data/hello.txt": "hello\n", "manifest-md5.txt": "\(Self.helloMD5) *data/hello.txt\n",
        ])
        let (problems, warnings) = try read(bag)
        #expect(problems == [])
        #expect(
            warnings == [
                "manifest-md5.txt: 1 line marks its file with md5sum's binary-mode '*' (read as the name after it)"
            ])
    }

    @Test func aStarAfterTwoSpacesIsPartOfTheName() throws {
        let parsed = try TagFile.parseManifest(
            Array("\(Self.helloMD5)  *star.txt\n\(Self.helloMD5) *data/a.txt\n".utf8), file: "manifest-md5.txt",
            algorithm: .md5, version: "1.0")
        #expect(parsed == ["*star.txt": Self.helloMD5, "data/a.txt": Self.helloMD5])
    }

    @Test func aSpaceBeforeTheColonOfTheDeclarationIsRefused() throws {
        let error = #expect(throws: BagError.self) {
            try TagFile.parseDeclaration(Array("BagIt-Version : 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8))
        }
        #expect(
            error?.description
                == "bagit.txt: line 1 has a space before its colon; bagit.txt must hold 'BagIt-Version: M.N' and "
                + "'Tag-File-Character-Encoding: ENCODING' exactly")
    }

    @Test func aBagAtTheTopHoldsABagitTxtInItsPayload() throws {
        let bag = try bag([
            "data/bagit.txt": "hello\n",
            "manifest-md5.txt": "\(Self.helloMD5)  data/bagit.txt\n",
        ])
        #expect(try read(bag) == ([], []))
    }

    @Test(arguments: [("0.97", true), ("1.0", false)])
    func theSameLineTwiceIsAWarningBeforeBagIt1(version: String, isWarning: Bool) throws {
        let line = "\(Self.helloSHA256)  data/hello.txt\n"
        let bag = try bag(
            version: version, ["data/hello.txt": "hello\n", "manifest-sha256.txt": line + line + line])
        let (problems, warnings) = try read(bag)
        if isWarning {
            #expect(problems == [])
            #expect(
                warnings == [
                    "manifest-sha256.txt: line 2 lists data/hello.txt again, with the same checksum "
                        + "(and 1 more lines like it)"
                ])
        } else {
            #expect(problems == ["manifest-sha256.txt: line 2 lists data/hello.txt a second time"])
            #expect(warnings == [])
        }
    }

    @Test func aPathListedInNFCAndNFDWithTheSameChecksumIsAWarning() throws {
        let nfc = "data/caf\u{E9}"
        let nfd = "data/cafe\u{301}"
        let bag = try bag([
            nfc: "hello\n", "manifest-sha256.txt": "\(Self.helloSHA256)  \(nfc)\n\(Self.helloSHA256)  \(nfd)\n",
        ])
        let (problems, warnings) = try read(bag)
        #expect(problems == [])
        #expect(
            warnings == [
                "manifest-sha256.txt: line 2 lists \(nfd) again in another Unicode normalisation, with the same checksum"
            ])
    }

    @Test func aPathListedTwiceWithAnotherChecksumIsAProblem() throws {
        let other = String(repeating: "0", count: 64)
        let bag = try bag([
            "data/hello.txt": "hello\n",
            "manifest-sha256.txt": "\(Self.helloSHA256)  data/hello.txt\n\(other)  data/hello.txt\n",
        ])
        #expect(try read(bag).problems == ["manifest-sha256.txt: line 2 lists data/hello.txt a second time"])
    }

    @Test func aFileListedAgainInAnotherCaseIsAWarningOnlyWithTheSameChecksum() throws {
        let other = String(repeating: "0", count: 64)
        let same = try bag([
            "data/hello.txt": "hello\n",
            "manifest-sha256.txt": "\(Self.helloSHA256)  data/hello.txt\n\(Self.helloSHA256)  data/HELLO.txt\n",
        ])
        #expect(
            try read(same) == (
                [],
                [
                    "data/HELLO.txt: is listed in manifest-sha256.txt but is not in the bag, which holds "
                        + "data/hello.txt with the same checksum: the two names differ only by case, one file on a "
                        + "case-insensitive file system"
                ]
            ))
        let differs = try bag([
            "data/hello.txt": "hello\n",
            "manifest-sha256.txt": "\(Self.helloSHA256)  data/hello.txt\n\(other)  data/HELLO.txt\n",
        ])
        #expect(
            try read(differs) == (["data/HELLO.txt: is listed in manifest-sha256.txt but is not in the bag"], []))
    }

    /// Of the files the bag holds whose names differ from the absent one's only by case, the
    /// first in byte order is named, as when the look-up was SQLite's.
    @Test func theTwinNamedIsTheFirstByNameOfThoseTheBagHolds() throws {
        let twins = try bag([
            "data/hello.txt": "hello\n", "data/Hello.txt": "hello\n",
            "manifest-sha256.txt": "\(Self.helloSHA256)  data/hello.txt\n\(Self.helloSHA256)  data/HELLO.txt\n"
                + "\(Self.helloSHA256)  data/Hello.txt\n",
        ])
        #expect(
            try read(twins) == (
                [],
                [
                    "data/HELLO.txt: is listed in manifest-sha256.txt but is not in the bag, which holds "
                        + "data/Hello.txt with the same checksum: the two names differ only by case, one file on a "
                        + "case-insensitive file system"
                ]
            ))
    }

    @Test func aMissingDSStoreIsAWarningAndExplainsTheOxum() throws {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        let system = try bag([
            "data/hello.txt": "hello\n", "bag-info.txt": "Payload-Oxum: 6.2\n",
            "manifest-sha256.txt": "\(empty)  data/.DS_Store\n\(Self.helloSHA256)  data/hello.txt\n",
        ])
        #expect(
            try read(system) == (
                [],
                [
                    "bag-info.txt: Payload-Oxum is 6.2 but the payload is 6 bytes in 1 files: the files it lacks are "
                        + "ones the operating system makes",
                    "data/.DS_Store: is listed in manifest-sha256.txt but is not in the bag: a file the operating "
                        + "system makes, which copies often leave out",
                ]
            ))
        // Any other file missing is a problem, and so is an Oxum the system files do not explain.
        let other = try bag([
            "data/hello.txt": "hello\n", "bag-info.txt": "Payload-Oxum: 6.3\n",
            "manifest-sha256.txt": "\(empty)  data/.DS_Store\n\(empty)  data/empty.txt\n"
                + "\(Self.helloSHA256)  data/hello.txt\n",
        ])
        #expect(
            try read(other).problems == [
                "bag-info.txt: Payload-Oxum is 6.3 but the payload is 6 bytes in 1 files",
                "data/empty.txt: is listed in manifest-sha256.txt but is not in the bag",
            ])
    }

    @Test func sha224AndSHA384AreHashedByTheSystemsLibraries() {
        var hasher = MultiHasher([.sha224, .sha384, .md5])
        Array("hel".utf8).withUnsafeBytes { hasher.update($0) }
        let copy = hasher  // a value: what one hashes next, the other does not see
        Array("lo".utf8).withUnsafeBytes { hasher.update($0) }
        let digests = hasher.finalize()
        #expect(digests[.sha224] == "ea09ae9cc6768c50fcee903ed054556e5bfc8347907f12598aa24193")
        #expect(
            digests[.sha384]
                == "59e1748777448c69de6b800d7a33bbfb9ff1b463e44354c3553bcdb9c666fa90125a3c79f90397bdf5f6a13de828684f")
        #expect(digests[.md5] == "5d41402abc4b2a76b9719d911017c592")
        #expect(hasher.finalize() == digests, "finalize() leaves the hasher as it was")
        var other = copy
        Array("p!".utf8).withUnsafeBytes { other.update($0) }
        #expect(copy.finalize()[.sha224] == "a90315588379a20bb4c8eeca536557987df00fa4a5a58d409d17f1b2")  // "hel"
        #expect(other.finalize()[.sha224] == "f058b466579f6ddea6682ca5c5a308d995da14c364b2ae46377f940c")  // "help!"
    }

    @Test func filesFetchTxtListsAreToFetchNotMissing() throws {
        let manifest = "\(Self.helloMD5)  data/hello.txt\n\(Self.helloMD5)  data/there.txt\n"
        let fetch = "https://example.org/hello.txt 6 data/hello.txt\nhttps://example.org/there.txt - data/there.txt\n"
        let holey = try BagReader.read(
            at: try bag(["data/hello.txt": "hello\n", "manifest-md5.txt": manifest, "fetch.txt": fetch]))
        #expect(holey.problems.isEmpty)
        #expect(holey.filesToFetch == 1)
        #expect(
            holey.warnings.map(\.description) == [
                "fetch.txt: lists 2 files to fetch from elsewhere, 1 of them not in the bag: it is incomplete until "
                    + "they are fetched (fetching is not supported)"
            ])
        let whole = try BagReader.read(
            at: try bag([
                "data/hello.txt": "hello\n", "data/there.txt": "hello\n", "manifest-md5.txt": manifest,
                "fetch.txt": fetch,
            ]))
        #expect(whole.problems.isEmpty && whole.filesToFetch == 0)
        #expect(
            whole.warnings.map(\.description) == [
                "fetch.txt: lists 2 files to fetch from elsewhere, all of them in the bag already"
            ])
        // A file missing that fetch.txt does not list is still missing.
        let missing = try BagReader.read(
            at: try bag([
                "data/hello.txt": "hello\n", "manifest-md5.txt": manifest,
                "fetch.txt": "https://example.org/hello.txt 6 data/hello.txt\n",
            ]))
        #expect(
            missing.problems.map(\.description) == [
                "data/there.txt: is listed in manifest-md5.txt but is not in the bag"
            ])
    }

    @Test(arguments: [
        ("https://example.org/a", "fetch.txt: line 1 is not 'url length path'"),
        ("https://example.org/a 12x data/a.txt", "fetch.txt: line 1: '12x' is not a length (bytes, or -)"),
        ("https://example.org/a -5 data/a.txt", "fetch.txt: line 1: '-5' is not a length (bytes, or -)"),
        ("https://example.org/a +5 data/a.txt", "fetch.txt: line 1: '+5' is not a length (bytes, or -)"),
        (
            "https://example.org/a 99999999999999999999 data/a.txt",
            "fetch.txt: line 1: '99999999999999999999' is not a length (bytes, or -)"
        ),
        ("https://example.org/a 1 /etc/passwd", "fetch.txt: line 1 names an absolute path, /etc/passwd"),
        ("https://example.org/a 1 data/../../x", "fetch.txt: line 1 names a path with '..', data/../../x"),
        ("https://example.org/a 1 ~/x", "fetch.txt: line 1 lists ~/x, which is not under data/"),
    ])
    func aFetchLineThatCannotBeReadIsAProblem(line: String, problem: String) throws {
        let bag = try bag([
            "data/hello.txt": "hello\n", "manifest-md5.txt": "\(Self.helloMD5)  data/hello.txt\n",
            "fetch.txt": line + "\n",
        ])
        #expect(try read(bag).problems == [problem])
    }

    // MARK: Encodings

    @Test func tagFilesAreDecodedInTheirDeclaredEncoding() throws {
        let text = "Caf\u{E9} \u{10A}\n"
        let utf16BE: [UInt8] = [0xFE, 0xFF] + text.utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
        let utf16LE: [UInt8] = [0xFF, 0xFE] + text.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        let bare = Array(utf16BE.dropFirst(2))
        for bytes in [utf16BE, utf16LE, bare] {
            #expect(try TagFile.decode(bytes, file: "bag-info.txt", encoding: .utf16) == text)
        }
        #expect(try TagFile.decode([0x43, 0xE9], file: "bag-info.txt", encoding: .latin1) == "C\u{E9}")
        let odd = #expect(throws: BagError.self) {
            try TagFile.decode(utf16BE + [0x00], file: "bag-info.txt", encoding: .utf16)
        }
        #expect(odd?.description == "bag-info.txt: is not valid UTF-16")
        let declared = #expect(throws: BagError.self) {
            try TagFile.parseDeclaration(Array("BagIt-Version: 0.97\nTag-File-Character-Encoding: UTF-32\n".utf8))
        }
        #expect(
            declared?.description
                == "bagit.txt: tag files in UTF-32 are not supported (only UTF-8, ISO-8859-1 and UTF-16)")
    }

    /// A bag whose tag files are in UTF-16 (little-endian here), a payload name among them
    /// whose UTF-16 holds the byte of a line feed (U+010A is 01 0A): its manifest streams as
    /// UTF-8, a code unit at a time, never cut at that byte.
    @Test func aManifestInUTF16IsReadAsItStreams() throws {
        let name = "data/\u{10A}caf\u{E9}.txt"
        let line = "\(Self.helloMD5)  \(name)\n"
        let bag = try ScratchDirectory.make("bag-utf16").path
        let bytes: [String: [UInt8]] = [
            "bagit.txt": Array("BagIt-Version: 0.97\nTag-File-Character-Encoding: UTF-16\n".utf8),
            name: Array("hello\n".utf8),
            "manifest-md5.txt": [0xFF, 0xFE] + line.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] },
            "bag-info.txt": [0xFE, 0xFF]
                + "Source-Organization: Caf\u{E9}\n".utf16.flatMap {
                    [UInt8($0 >> 8), UInt8($0 & 0xFF)]
                },
        ]
        for (path, content) in bytes {
            try FileManager.default.createDirectory(
                atPath: ((bag + "/" + path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(content).write(to: URL(fileURLWithPath: bag + "/" + path))
        }
        let contents = try BagReader.read(at: bag)
        #expect(contents.problems.map(\.description) == [])
        #expect(contents.info.map(\.value) == ["Caf\u{E9}"])
        // The same manifest in a bag that declares UTF-8 is refused, naming why.
        try Data("BagIt-Version: 0.97\nTag-File-Character-Encoding: UTF-8\n".utf8).write(
            to: URL(fileURLWithPath: bag + "/bagit.txt"))
        try FileManager.default.removeItem(atPath: bag + "/bag-info.txt")
        #expect(
            try read(bag).problems.contains("manifest-md5.txt: is in UTF-16, but bagit.txt declares UTF-8"))
    }

    /// A payload manifest in UTF-16 that is not valid UTF-16 is refused as the whole-file
    /// reading of a tag file refuses it, never read with U+FFFD in place of the bad units.
    @Test(arguments: [
        ("a lone high surrogate", [0xD800, 0x0061] as [UInt16], [] as [UInt8]),
        ("a lone low surrogate", [0xDC00], []),
        ("a high surrogate at the end", [0xD83D], []),
        ("an odd byte at the end", [], [0x61]),
    ])
    func aStreamedManifestThatIsNotUTF16IsRefused(what: String, units: [UInt16], tail: [UInt8]) throws {
        let bag = try bag(["data/hello.txt": "hello\n"])
        try Data("BagIt-Version: 0.97\nTag-File-Character-Encoding: UTF-16\n".utf8).write(
            to: URL(fileURLWithPath: bag + "/bagit.txt"))
        let text = Array("\(Self.helloMD5)  data/hello.txt\n".utf16) + units
        let bytes: [UInt8] = [0xFE, 0xFF] + text.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } + tail
        try Data(bytes).write(to: URL(fileURLWithPath: bag + "/manifest-md5.txt"))
        #expect(try read(bag).problems == ["manifest-md5.txt: is not valid UTF-16"], "\(what)")
    }

    @Test func aManifestInISO88591NamesItsFilesByTheirCharacters() throws {
        let bag = try bag(["data/caf\u{E9}.txt": "hello\n"])
        try Data("BagIt-Version: 0.97\nTag-File-Character-Encoding: ISO-8859-1\n".utf8).write(
            to: URL(fileURLWithPath: bag + "/bagit.txt"))
        try Data(Array("\(Self.helloMD5)  data/caf".utf8) + [0xE9] + Array(".txt\n".utf8)).write(
            to: URL(fileURLWithPath: bag + "/manifest-md5.txt"))
        #expect(try read(bag) == ([], []))
    }
}
