import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// Names that Swift's String compares equal but the archive keeps apart.
@Suite struct BundleUnicodeTests {
    /// TestAssets' sample zip holds `résumé.txt` twice, precomposed (NFC) and
    /// decomposed (NFD), with different content: both members export as their own
    /// bytes (a String-keyed lookup once exported one's bytes for the other) and
    /// import back, each readable with its own digest.
    @Test func nfcAndNfdMembersOfOneArchiveExportAndImportAsThemselves() async throws {
        let t = try TestCatalog()
        let source = try t.create()
        defer { source.close() }
        let archive = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "TestAssets/archives/sample.zip").path
        _ = try await source.addAndRunJobs([archive])
        let members = try source.assets(AssetQuery(storage: .member)).filter { $0.name.hasSuffix(".txt") }
        let resumes = members.filter { $0.name.unicodeScalars.contains("\u{301}") || $0.name.contains("é") }
        #expect(Set(resumes.map(\.sha256)).count == 2, "the fixture holds two résumé members with different content")

        let bundle = t.directory.appending(path: "out.tar.zst").path
        _ = try await source.export(to: bundle)
        let other = try Catalog.create(at: t.directory.appending(path: "other"))
        defer { other.close() }
        let result = try await other.importBundle(from: bundle)
        #expect(result.importedCount == (try source.assets()).count)
        for record in try other.assets(AssetQuery(storage: .member)) {
            var bytes = Data()
            try other.read(record.id) { bytes.append(contentsOf: $0) }
            #expect(bytes.count == Int(record.size), "\(record.name)")
        }
        let before = try source.assets().map { [$0.name.utf8.map { $0 }.description, $0.sha256] }
        let after = try other.assets().map { [$0.name.utf8.map { $0 }.description, $0.sha256] }
        #expect(before.sorted { $0.joined() < $1.joined() } == after.sorted { $0.joined() < $1.joined() })
    }
}
