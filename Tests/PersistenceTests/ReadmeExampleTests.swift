import Foundation
import TestScratch
import Testing

/// The example of Persistence's documentation (the article "What the layer guarantees") is
/// ReadmeExample.swift, word for word; this runs it.
@Test func theReadmeExampleIsThisFileAndItRuns() async throws {
    let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    let example = try String(contentsOf: here.appending(path: "ReadmeExample.swift"), encoding: .utf8)
    let root = here.deletingLastPathComponent().deletingLastPathComponent()
    let article = try String(
        contentsOf: root.appending(path: "Sources/Persistence/Documentation.docc/Guarantees.md"), encoding: .utf8)
    #expect(
        article.contains("```swift\n" + example + "```\n"),
        "Sources/Persistence/Documentation.docc/Guarantees.md must show ReadmeExample.swift verbatim")

    let directory = ScratchDirectory.path("readme")
    #expect(try await bookshelfExample(in: directory) == ["Bread", "Soup"])
}
