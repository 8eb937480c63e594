import Foundation
import TestScratch
import Testing

/// The README's example is ReadmeExample.swift, word for word; this runs it.
@Test func theReadmeExampleIsThisFileAndItRuns() async throws {
    let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    let example = try String(contentsOf: here.appending(path: "ReadmeExample.swift"), encoding: .utf8)
    let readme = try String(
        contentsOf: here.deletingLastPathComponent().deletingLastPathComponent().appending(path: "README.md"),
        encoding: .utf8)
    #expect(readme.contains("```swift\n" + example + "```\n"), "README.md must show ReadmeExample.swift verbatim")

    let directory = ScratchDirectory.path("readme")
    #expect(try await bookshelfExample(in: directory) == ["Bread", "Soup"])
}
