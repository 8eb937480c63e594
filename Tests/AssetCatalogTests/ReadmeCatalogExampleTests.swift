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

/// Every Swift block of the README is a file the build compiles, so none can rot unseen: a
/// block changed in the README and not here (or a new block with no file) fails this test,
/// and the file failing to compile fails the build. A README with no Swift block fails too.
@Test func everySwiftBlockOfTheReadmeIsCompiled() throws {
    let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    let readme = try String(
        contentsOf: here.deletingLastPathComponent().deletingLastPathComponent().appending(path: "README.md"),
        encoding: .utf8)
    // The files of this target that README blocks may be.
    let compiled = try ["ReadmeCatalogExample.swift"].map {
        try String(contentsOf: here.appending(path: $0), encoding: .utf8)
    }
    var blocks: [String] = []
    var rest = readme[...]
    while let open = rest.range(of: "```swift\n") {
        let close = try #require(
            rest[open.upperBound...].range(of: "```\n"), "README.md has an unclosed ```swift block")
        blocks.append(String(rest[open.upperBound..<close.lowerBound]))
        rest = rest[close.upperBound...]
    }
    #expect(!blocks.isEmpty, "README.md has no ```swift block; this test would check nothing")
    for block in blocks {
        #expect(
            compiled.contains(block),
            "this ```swift block of README.md is not a compiled file of Tests/AssetCatalogTests:\n\(block)")
    }
}
