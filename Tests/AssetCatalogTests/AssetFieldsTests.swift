import AssetCatalogTestSupport
import Foundation
import Persistence
import Testing

@testable import AssetCatalog

/// ``AssetFields`` is the one copy of an asset's fields: what ``AssetFields/write(to:)`` puts
/// in a row, ``AssetFields/init(_:)`` reads back, every field of it.
struct AssetFieldsTests {
    /// Fields none of which has its default value.
    static let unusual = AssetFields(
        name: "caf\u{65}\u{301} \"q\".txt", kind: "document", storage: .referenced, size: 1_234_567,
        sha256: String(repeating: "ab", count: 32), path: "/elsewhere/caf\u{65}\u{301} \"q\".txt",
        member: "inner/x.txt", memberOrdinal: 3, tags: ["zeta", "alpha", "zeta"],
        metadata: ["rating": "5", "caption": "a\nb"], created: Date(timeIntervalSince1970: 1_795_268_346.5),
        modified: Date(timeIntervalSince1970: 1_795_271_946.625))

    @Test func fieldsWrittenToARowReadBackTheSame() throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let context = catalog.newContext()
        let read = try context.performAndWait {
            let ids = try context.insertRows(Asset.self, count: 1) { _, row in Self.unusual.write(to: &row) }
            try context.save()
            let asset = try context.existingObject(with: try #require(ids.first), as: Asset.self)
            return (AssetFields(asset), AssetRecord(asset))
        }
        #expect(read.0 == Self.unusual)
        #expect(read.1.fields == Self.unusual && read.1.archive == nil)
    }

    @Test func tagsAndMetadataReadAsTheCatalogStoresThem() {
        var fields = Self.unusual
        #expect(fields.tags == ["alpha", "zeta"])  // sorted, once each
        #expect(fields.metadata == ["rating": "5", "caption": "a\nb"])
        fields.tags = []
        fields.metadata = [:]
        #expect(fields.tagText == Asset.tagText([]) && fields.metadataJSON == "{}")
        var record = AssetRecord(id: 1, archive: nil, fields: fields)
        record.tags = ["b", "a"]  // through the record, as a library user writes it
        #expect(record.fields.tags == ["a", "b"] && record.tags == ["a", "b"])
    }

    /// The CLI's JSON form reads back into the same records, and writes the same bytes again.
    @Test func theJSONOfRecordsReadsBackIntoTheSameRecords() throws {
        let listing = try Data(contentsOf: URL(fileURLWithPath: testAsset("bundles/records-v1.ls.json")))
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let records = try decoder.decode([AssetRecord].self, from: listing)
        #expect(records.count == 13)
        #expect(records[0].name == "plain.txt" && records[0].tags == ["a", "b", "demo"])
        #expect(records[7].archive == 7 && records[7].member == "sample/hello.txt" && records[7].path == nil)
        // The same JSON again (the CLI lays its array out line by line, so not the same bytes).
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let again = try encoder.encode(records)
        let parsed = try #require(try JSONSerialization.jsonObject(with: listing) as? NSArray)
        #expect(parsed.isEqual(try JSONSerialization.jsonObject(with: again)))
        #expect(try decoder.decode([AssetRecord].self, from: again) == records)
    }
}

/// `AssetRecord.Field`: the names `ls --fields` accepts, and a record encoded with some of them.
@Suite struct AssetRecordFieldTests {
    @Test func listParsesNamesInOrderWithoutRepeats() throws {
        #expect(try AssetRecord.Field.list("name, id,name") == [.name, .id])
        #expect(AssetRecord.Field.allCases.count == 13)
        #expect(throws: CatalogError.self) { try AssetRecord.Field.list("") }
        do {
            _ = try AssetRecord.Field.list("id,Size")
            Issue.record("accepted a wrong case")
        } catch let error as CatalogError {
            #expect(error.code == .invalidArgument)
            #expect(
                error.message
                    == "Unknown field 'Size' in --fields; valid fields: id, name, kind, size, sha256, storage, path, "
                    + "archive, member, tags, created, modified, metadata")
        }
    }
}
