import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// The README's library example is ReadmeCatalogExample.swift, word for word; this runs it.
@Test func theReadmeCatalogExampleIsThisFileAndItRuns() async throws {
    let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    let example = try String(contentsOf: here.appending(path: "ReadmeCatalogExample.swift"), encoding: .utf8)
    let readme = try String(
        contentsOf: here.deletingLastPathComponent().deletingLastPathComponent().appending(path: "README.md"),
        encoding: .utf8)
    #expect(
        readme.contains("```swift\n" + example + "```\n"), "README.md must show ReadmeCatalogExample.swift verbatim")

    let t = try TestCatalog()
    try t.file("in/small.txt", "one line\n")
    try t.file("in/big.bin", Data(repeating: 7, count: 4096))
    try t.file("in/deeper/other.bin", Data(repeating: 9, count: 2048))
    let outcome = try await ingestionExample(catalogAt: t.root, incoming: t.sources.appending(path: "in").path)
    #expect(outcome.added == 3 && outcome.counted == 1 && outcome.large == 2)
    #expect(try Catalog.open(at: t.root).assets(AssetQuery(tag: "incoming")).count == 2)
}
