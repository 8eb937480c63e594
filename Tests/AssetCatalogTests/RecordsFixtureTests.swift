import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// A bundle exported by an earlier release (TestAssets/bundles/records-v1: awkward names,
/// tags, metadata, NFC and NFD spellings, an archive and its members, dates to the
/// millisecond) imports, and exporting what it imported gives its records file and its
/// manifest again, byte for byte: the records format on disk does not drift.
///
/// Byte for byte but for one change, on purpose: payload paths are now written in NFC (issue
/// 21), and the fixture, written before, has two in NFD (`data/café.txt` and
/// `data/sample/sample/résumé (2).txt`) — the very paths bsdtar extracts precomposed, so that
/// the bag no longer validates. The fixture stays as that release wrote it (it must import);
/// its re-export is expected to differ in exactly those two manifest lines and those two
/// records' `payload`, while every name and member path keeps its NFD bytes.
struct RecordsFixtureTests {
    static let bag = testAsset("bundles/records-v1")

    /// `file` of the fixture as an export writes it today: its payload paths in NFC.
    static func reexported(_ file: String) throws -> Data {
        let data = try Data(contentsOf: URL(fileURLWithPath: bag + "/" + file))
        let text = String(decoding: data, as: UTF8.self)
        if file != BundleRecords.fileName { return Data(text.precomposedStringWithCanonicalMapping.utf8) }
        var bytes = Array(data)
        var changed = 0
        for entry in try BundleRecords.decode(bytes).assets
        where !entry.payload.utf8.elementsEqual(entry.payload.precomposedStringWithCanonicalMapping.utf8) {
            let old = Array("\"payload\":\"\(entry.payload)\"".utf8)
            let new = Array("\"payload\":\"\(entry.payload.precomposedStringWithCanonicalMapping)\"".utf8)
            let range = try #require(bytes.firstRange(of: old))
            bytes.replaceSubrange(range, with: new)
            changed += 1
        }
        #expect(changed == 2, "the fixture's payload paths in NFD")
        return Data(bytes)
    }

    @Test func anImportedBundleExportsTheSameRecordsFileByteForByte() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let imported = try await catalog.importBundle(from: Self.bag)
        #expect(imported.importedCount == 13)
        let exported = t.directory.appending(path: "records-v1").path
        _ = try await catalog.export(to: exported)
        for file in [BundleRecords.fileName, "manifest-sha256.txt"] {
            let expected = try Self.reexported(file)
            let actual = try Data(contentsOf: URL(fileURLWithPath: exported + "/" + file))
            #expect(
                actual == expected,
                "\(file) differs:\n\(String(decoding: actual, as: UTF8.self))")
        }
    }

    /// Each entry of the committed records file, encoded again, is its own line.
    @Test func eachEntryOfTheFixtureEncodesToItsOwnLine() throws {
        let text = try Data(contentsOf: URL(fileURLWithPath: Self.bag + "/" + BundleRecords.fileName))
        let records = try BundleRecords.decode(Array(text))
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n").dropFirst().dropLast()
        #expect(records.assets.count == lines.count && lines.count == 13)
        for (entry, line) in zip(records.assets, lines) {
            var encoded: [UInt8] = []
            entry.appendJSON(to: &encoded)
            #expect(String(decoding: encoded, as: UTF8.self) == String(line.dropLast(line.hasSuffix(",") ? 1 : 0)))
        }
    }
}
