import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `ls --json` of a catalog that imported a committed bundle (TestAssets/bundles/records-v1)
/// is the committed listing, byte for byte: the CLI's JSON form of an asset does not drift.
@Suite struct RecordsFixtureCLITests {
    static func fixture(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "TestAssets/bundles").appending(path: name).path
    }

    @Test func lsJSONOfAnImportedBundleIsTheCommittedListing() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let bundle = Self.fixture("records-v1")
        let imported = try await t.run(["import", bundle])
        #expect(imported.stdout == "imported 13 assets from \(bundle)\n", "\(imported.stderr)")
        let expected = try String(contentsOfFile: Self.fixture("records-v1.ls.json"), encoding: .utf8)
        #expect(try await t.run(["ls", "--json"]).stdout == expected)
    }

    /// `ls --jsonl` and `ls --json --fields` of the same catalog are what the CLI wrote through
    /// `JSONEncoder` before it had its own encoder: records of the committed listing, encoded
    /// as it did (compact; or pretty, indented one level, empty lines dropped).
    @Test func lsJSONLinesAndFieldsAreWhatJSONEncoderWrote() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        #expect(try await t.run(["import", Self.fixture("records-v1")]).status == 0)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let records = try decoder.decode(
            [AssetRecord].self, from: Data(contentsOf: URL(fileURLWithPath: Self.fixture("records-v1.ls.json"))))
        func encoded(_ value: some Encodable, pretty: Bool) throws -> String {
            let encoder = JSONEncoder()
            encoder.outputFormatting =
                pretty
                ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
            encoder.dateEncodingStrategy = .iso8601
            let text = String(decoding: try encoder.encode(value), as: UTF8.self)
            return pretty ? text.split(separator: "\n").joined(separator: "\n  ") : text
        }
        let lines = try records.map { try encoded($0, pretty: false) + "\n" }.joined()
        #expect(try await t.run(["ls", "--jsonl"]).stdout == lines)
        let chosen: [AssetRecord.Field] = [.tags, .id, .metadata, .path]
        let some = try records.map { try encoded($0.selecting(chosen), pretty: true) }
        let expected = "[\n  " + some.joined(separator: ",\n  ") + "\n]\n"
        #expect(try await t.run(["ls", "--json", "--fields", "tags,id,metadata,path"]).stdout == expected)
        let someLines = try records.map { try encoded($0.selecting(chosen), pretty: false) + "\n" }.joined()
        #expect(try await t.run(["ls", "--jsonl", "--fields", "tags,id,metadata,path"]).stdout == someLines)
        #expect(try await t.run(["ls", "--json", "--tag", "no-such-tag"]).stdout == "[]\n")
        #expect(try await t.run(["ls", "--jsonl", "--tag", "no-such-tag"]).stdout == "")
    }
}
