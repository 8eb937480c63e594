import Foundation
import Testing

@testable import AssetCatalog

/// Inputs the fuzz target `fuzz-records` (Fuzz/) found, fed to the records parser.
struct RecordsParserFuzzFindingsTests {
    static let head = Array(#"{"format":"assetcat-records","version":1,"assets":["#.utf8)

    /// A byte that cannot be UTF-8 (0xC8 before an ASCII digit) in place of `@`.
    static func notUTF8(_ text: String) -> [UInt8] {
        Array(text.utf8).map { $0 == 0x40 ? 0xC8 : $0 }
    }

    /// The bytes of a fuzzer's input kept in TestAssets/fuzz/.
    static func finding(_ name: String) throws -> [UInt8] {
        try [UInt8](Data(contentsOf: URL(fileURLWithPath: testAsset("fuzz/" + name))))
    }

    static func failure(_ bytes: [UInt8], piece: Int) -> String? {
        do {
            var parser = RecordsParser { _ in }
            for start in stride(from: 0, to: bytes.count, by: piece) {
                try bytes[start..<min(start + piece, bytes.count)].withUnsafeBytes { try parser.feed($0) }
            }
            try parser.finish()
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// Found by fuzz-records: a byte that is not UTF-8 in an entry's string (the fuzzer's was
    /// in a `sha256`) was decoded as U+FFFD and the entry read, so an import would have named
    /// an asset other than its exporter did. JSON is UTF-8 (RFC 8259): such a file is refused,
    /// naming the entry, whatever the pieces.
    @Test(arguments: [1, 5, 1 << 16])
    func aStringThatIsNotUTF8IsRefused(piece: Int) {
        let entry =
            Self.head + Array(RecordsParserTests.line(1).utf8) + [0x2C]
            + Self.notUTF8(RecordsParserTests.line(2, name: "caf@0.txt")) + Array("]}".utf8)
        #expect(
            Self.failure(entry, piece: piece)
                == "assetcat-records.json: cannot be read: entry 2 is not valid UTF-8")
        let key = Self.notUTF8(#"{"form@0at":"assetcat-records","version":1,"assets":[]}"#)
        #expect(Self.failure(key, piece: piece) == "assetcat-records.json: cannot be read: a key is not valid UTF-8")
        let value = Self.notUTF8(#"{"format":"assetcat-records@0","version":1,"assets":[]}"#)
        #expect(
            Self.failure(value, piece: piece)
                == "assetcat-records.json: cannot be read: the value of \"format\" is not valid UTF-8")
        let other = Self.notUTF8(#"{"format":"assetcat-records","version":1,"note":"@0","assets":[]}"#)
        #expect(
            Self.failure(other, piece: piece)
                == "assetcat-records.json: cannot be read: the value of \"note\" is not valid UTF-8")
    }
}

extension RecordsParserFuzzFindingsTests {
    /// fuzz-records' own input: TestAssets/bundles/records-v1's records file, cut short and
    /// with a byte of entry 4's `sha256` turned into 0xC8 (not UTF-8).
    @Test(arguments: [1, 1 << 16])
    func theFuzzersInputIsRefused(piece: Int) throws {
        let bytes = try Self.finding("records-sha256-not-utf8.json")
        #expect(
            Self.failure(bytes, piece: piece)
                == "assetcat-records.json: cannot be read: entry 4 is not valid UTF-8")
    }
}

extension RecordsParserFuzzFindingsTests {
    /// Found by fuzz-records: control characters (NUL, U+000E) raw in a string of entry 5's
    /// metadata were read; JSON escapes them (RFC 8259), and such a file is refused.
    @Test(arguments: [1, 1 << 16])
    func aControlCharacterThatIsNotEscapedIsRefused(piece: Int) throws {
        let bytes = try Self.finding("records-control-character.json")
        #expect(
            Self.failure(bytes, piece: piece)
                == "assetcat-records.json: cannot be read: entry 5 holds a control character that is not escaped")
        let key = Array(#"{"form"#.utf8) + [0x01] + Array(#"at":"assetcat-records","version":1,"assets":[]}"#.utf8)
        #expect(
            Self.failure(key, piece: piece)
                == "assetcat-records.json: cannot be read: a key holds a control character that is not escaped")
    }
}

extension RecordsParserFuzzFindingsTests {
    /// Found by fuzz-records: an entry that names a key twice (`name`), the first value
    /// holding escapes JSON does not have (`\s`, `\h`), was read — `JSONDecoder` decodes only
    /// a key's last value — though no JSON parser reads the file. Escapes are checked as the
    /// bytes are scanned, in every value, whatever the pieces.
    @Test(arguments: [1, 7, 1 << 16])
    func anEscapeJSONDoesNotHaveIsRefusedEvenInAValueNoOneDecodes(piece: Int) throws {
        let bytes = try Self.finding("records-shadowed-escape.json")
        #expect(
            Self.failure(bytes, piece: piece)
                == "assetcat-records.json: cannot be read: entry 2 holds an escape that JSON does not have")
    }

    /// `\u` escapes: four hex digits, and surrogates in pairs (a high one followed at once by
    /// the escape of a low one), in a value decoded or not.
    @Test(arguments: [1, 1 << 16])
    func unicodeEscapesHaveFourHexDigitsAndSurrogatesPair(piece: Int) throws {
        let message = "assetcat-records.json: cannot be read: the value of \"note\" holds "
        for (value, problem) in [
            (#"\ud83dx"#, "an unpaired surrogate escape"), (#"\ude00"#, "an unpaired surrogate escape"),
            (#"\ud83d\n"#, "an unpaired surrogate escape"), (#"\ud83d\u0041"#, "an unpaired surrogate escape"),
            (#"\ud83d"#, "an unpaired surrogate escape"), (#"\u12g4"#, "a \\u escape without four hex digits"),
            (#"\u12"#, "a \\u escape without four hex digits"),
        ] {
            let bytes =
                Array(#"{"format":"assetcat-records","version":1,"note":""#.utf8) + Array(value.utf8)
                + Array(#"","assets":[]}"#.utf8)
            #expect(Self.failure(bytes, piece: piece) == message + problem, "\(value)")
        }
        let paired = Array(
            #"{"format":"assetcat-records","version":1,"note":"\ud83d\ude00 \/\b\f\n\r\t\"\\ \u00E9","assets":[]}"#.utf8
        )
        #expect(Self.failure(paired, piece: piece) == nil)
    }
}

extension RecordsParserFuzzFindingsTests {
    /// Found by fuzz-records: NULs before a number (`"version":\n\0\0\01`) were read, as
    /// `JSONDecoder` reads them; JSON has no control characters outside strings but blanks.
    @Test(arguments: [1, 1 << 16])
    func aControlCharacterOutsideAStringIsRefused(piece: Int) {
        let bytes =
            Array(#"{"format":"assetcat-records","version":"#.utf8) + [0x0A, 0x00, 0x00, 0x00, 0x31]
            + Array(#","assets":[]}"#.utf8)
        #expect(
            Self.failure(bytes, piece: piece)
                == "assetcat-records.json: cannot be read: the value of \"version\" holds a control character "
                + "outside a string")
        let entry = Self.head + Array(#"{"key":"#.utf8) + [0x01] + Array("1}]}".utf8)
        #expect(
            Self.failure(entry, piece: piece)
                == "assetcat-records.json: cannot be read: entry 1 holds a control character outside a string")
    }
}

extension RecordsParserFuzzFindingsTests {
    /// Found by fuzz-records: metadata with two values that are not strings (a number under
    /// `key`, an object under `metadata`) was refused naming one or the other, as the
    /// decoding's hash order fell (TestAssets/fuzz/records-metadata-two-wrong-values.json).
    /// The values are checked in the order of their keys' bytes: the same one is named at
    /// every read, whatever the pieces.
    @Test(arguments: [1, 1 << 16])
    func ofSeveralWrongMetadataValuesTheSameOneIsNamedAtEveryRead(piece: Int) throws {
        let bytes = try Self.finding("records-metadata-two-wrong-values.json")
        let entry =
            Self.head
            + Array(
                RecordsParserTests.line(1).replacingOccurrences(
                    of: #""metadata":{"a":"1"}"#, with: #""metadata":{"z":5,"m":[1],"b":{},"c":true,"a":"1"}"#
                ).utf8) + Array("]}".utf8)
        for _ in 0..<20 {
            #expect(
                Self.failure(bytes, piece: piece)
                    == "assetcat-records.json: cannot be read: entry 1 metadata.key: Expected to decode String but "
                    + "found number instead.")
            #expect(
                Self.failure(entry, piece: piece)
                    == "assetcat-records.json: cannot be read: entry 1 metadata.b: Expected to decode String but "
                    + "found a dictionary instead.")
        }
    }
}
