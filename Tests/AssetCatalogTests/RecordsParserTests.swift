import BagIt
import Foundation
import Testing

@testable import AssetCatalog

/// The records file is read as it comes, in pieces of any size, and its entries handed on a
/// batch at a time; a file this catalog cannot read gets one clear line.
struct RecordsParserTests {
    static func line(_ key: Int64, name: String? = nil) -> String {
        """
        {"created":"2026-11-21T13:39:06.323Z","key":\(key),"kind":"text","metadata":{"a":"1"},\
        "modified":"2026-11-21T13:39:06.323Z","name":"\(name ?? "file \(key).txt")","payload":"data/\(key).txt",\
        "sha256":"\(String(repeating: "0", count: 64))","size":\(key),"storage":"managed","tags":["x"]}
        """
    }

    static func file(_ count: Int) -> String {
        #"{"format":"assetcat-records","version":1,"assets":["# + "\n"
            + (1...max(count, 1)).prefix(count).map { line(Int64($0)) }.joined(separator: ",\n") + "\n]}\n"
    }

    /// Parses `text` fed `piece` bytes at a time; returns the batch sizes and the entries.
    static func parse(_ text: String, piece: Int = 1 << 16) throws -> (batches: [Int], entries: [BundleRecords.Entry]) {
        var batches: [Int] = []
        var entries: [BundleRecords.Entry] = []
        var parser = RecordsParser {
            batches.append($0.count)
            entries += $0
        }
        let bytes = Array(text.utf8)
        for start in stride(from: 0, to: bytes.count, by: piece) {
            try bytes[start..<min(start + piece, bytes.count)].withUnsafeBytes { try parser.feed($0) }
        }
        try parser.finish()
        return (batches, entries)
    }

    static func failure(_ text: String) -> String? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func piecesOfAnySizeGiveTheSameEntries() throws {
        let text = Self.file(7).replacingOccurrences(of: "file 3.txt", with: #"q\"uote, {brace} [and] \\ \u00e9"#)
        let whole = try Self.parse(text).entries
        #expect(whole.count == 7 && whole[2].fields.name == #"q"uote, {brace} [and] \ é"#)
        for piece in [1, 2, 3, 7, 64] {
            #expect(try Self.parse(text, piece: piece).entries == whole, "\(piece)")
        }
    }

    @Test func entriesComeInBatches() throws {
        let (batches, entries) = try Self.parse(Self.file(2_500))
        #expect(batches == [1_000, 1_000, 500])
        #expect(entries.map(\.key) == Array(1...2_500))
    }

    @Test func otherKeysAndWhitespaceAreAllowed() throws {
        let text = """
             { "assets" : [ \(Self.line(1)) ] , "note": {"any": [1, 2.5, true, null]},
              "version" : 1, "format" : "assetcat-records" }\t
            """
        #expect(try Self.parse(text, piece: 5).entries.map(\.key) == [1])
        #expect(try Self.parse(#"{"format":"assetcat-records","version":1,"assets":[]}"#).entries.isEmpty)
    }

    @Test(arguments: [
        ("", "it is empty"),
        ("[]", "it is not a JSON object"),
        (String(Self.file(3).dropLast(8)), "it ends too early"),
        (Self.file(1) + "{}", "there is more after the end of its JSON object"),
        (#"{"format":"assetcat-records","version":1,"assets":{}}"#, "\"assets\" is not a list"),
        (#"{"format":"assetcat-records","version":1}"#, "it has no \"assets\" list"),
        (#"{"assets":[]}"#, "it has no \"format\" and \"version\""),
        (
            #"{"format":"assetcat-records","version":"one","assets":[]}"#,
            "Expected to decode Int but found a string instead."
        ),
        (#"{"format":"assetcat-records","version":1,"note":{],"assets":[]}"#, "the value of \"note\" is not JSON"),
        (#"{"format":"assetcat-records","version":1,"assets":[] "x":1}"#, "a value is not followed by ',' or '}'"),
        (#"{"format":"assetcat-records","version":1,"assets":[],}"#, "a key is not a string"),
        (
            #"{"format":"assetcat-records","version":1,"assets":["# + line(1) + "," + line(2) + " " + line(3) + "]}",
            "entry 2 is not followed by ',' or ']'"
        ),
        (
            #"{"format":"assetcat-records","version":1,"assets":["# + line(1) + ","
                + line(2).replacingOccurrences(of: #""sha256":"\#(String(repeating: "0", count: 64))","#, with: "")
                + "]}",
            "entry 2 has no \"sha256\""
        ),
        (
            #"{"format":"assetcat-records","version":1,"assets":["#
                + line(1).replacingOccurrences(
                    of: #""size":1"#, with: #""size":"big""#) + "]}",
            "entry 1 size: Expected to decode Int64 but found a string instead."
        ),
    ])
    func aFileThatCannotBeReadSaysWhy(text: String, reason: String) {
        #expect(Self.failure(text) == "assetcat-records.json: cannot be read: \(reason)")
    }

    @Test func anotherFormatOrVersionIsNamed() {
        #expect(
            Self.failure(#"{"format":"assetcat-records","version":2,"assets":[]}"#)
                == "assetcat-records.json: is assetcat-records version 2; this assetcat reads assetcat-records version 1"
        )
        #expect(
            Self.failure(#"{"format":"other","version":1,"assets":[]}"#)
                == "assetcat-records.json: is other version 1; this assetcat reads assetcat-records version 1")
    }
}
