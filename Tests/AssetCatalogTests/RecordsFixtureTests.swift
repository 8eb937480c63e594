import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// A bundle exported by an earlier release (TestAssets/bundles/records-v1: awkward names,
/// tags, metadata, NFC and NFD spellings, an archive and its members, dates to the
/// millisecond) imports, and exporting what it imported gives its records file and its
/// manifest again, byte for byte: the records format on disk does not drift.
struct RecordsFixtureTests {
    static let bag = testAsset("bundles/records-v1")

    @Test func anImportedBundleExportsTheSameRecordsFileByteForByte() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let imported = try await catalog.importBundle(from: Self.bag)
        #expect(imported.importedCount == 13)
        let exported = t.directory.appending(path: "records-v1").path
        _ = try await catalog.export(to: exported)
        for file in [BundleRecords.fileName, "manifest-sha256.txt"] {
            let expected = try Data(contentsOf: URL(fileURLWithPath: Self.bag + "/" + file))
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
