import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// The README's five-minute tour, run as a reader would run it: its set-up, then each
/// `$ assetcat …` line of its console blocks on a fresh catalog, each output compared with
/// the lines the README shows under it.
///
/// Normalised, because they must vary: the tour's directory (the README's `/tmp/tour` is a
/// scratch directory here) and dates and times (`2026-11-26 06:50:01`-style stamps and ISO 8601
/// dates read `<date>` on both sides). Nothing else: a changed message, column, count or
/// command fails the test.
@Suite struct ReadmeTourTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    /// What the tour's set-up block must say, word for word: this test does the same below.
    static let setUp = """
        export PATH="$PWD/.build/debug:$PATH"
        mkdir /tmp/tour && cp -r TestAssets/demo /tmp/tour/files && cp TestAssets/archives/sample.zip /tmp/tour/
        cd /tmp/tour

        """
    static let tourDirectory = "/tmp/tour"

    /// One `$ assetcat …` line of the tour and the output the README shows for it.
    struct Step: CustomStringConvertible {
        var command: String
        var arguments: [String]
        var output: String
        var description: String { command }
    }

    /// What the README holds that the test cannot run.
    struct TourError: Error, CustomStringConvertible {
        var description: String
    }
    static func required<T>(_ value: T?, _ message: String) throws -> T {
        guard let value else { throw TourError(description: message) }
        return value
    }
    static func check(_ condition: Bool, _ message: String) throws {
        if !condition { throw TourError(description: message) }
    }

    /// The tour section of a README: its set-up block and its steps.
    static func tour(in readme: String) throws -> (setUp: String, steps: [Step]) {
        let heading = "\n## A five-minute tour\n"
        let start = try required(readme.range(of: heading), "README.md has no '## A five-minute tour' section")
        let rest = readme[start.upperBound...]
        let section = rest.range(of: "\n## ").map { rest[..<$0.lowerBound] } ?? rest
        let setUp = try required(block("sh", in: section)?.text, "the tour has no ```sh set-up block")
        var consoles: [String] = []
        var unread = section
        while let console = block("console", in: unread) {
            consoles.append(console.text)
            unread = unread[console.end...]
        }
        try check(!consoles.isEmpty, "the tour has no ```console block")
        var steps: [Step] = []
        for line in consoles.joined().split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            if line.hasPrefix("$ ") {
                let command = String(line.dropFirst(2))
                let words = try split(command)
                try check(words.first == "assetcat", "the tour's console block runs only assetcat, not: \(line)")
                steps.append(Step(command: command, arguments: Array(words.dropFirst()), output: ""))
            } else {
                let step = try required(steps.indices.last, "the tour's console block starts with output: \(line)")
                steps[step].output += line + "\n"
            }
        }
        return (setUp, steps)
    }

    /// The contents of the first fenced block of `language` in `text`, and where it ends.
    static func block(_ language: String, in text: Substring) -> (text: String, end: String.Index)? {
        guard let open = text.range(of: "```\(language)\n"),
            let close = text[open.upperBound...].range(of: "\n```\n")
        else { return nil }
        return (String(text[open.upperBound..<close.lowerBound]) + "\n", close.upperBound)
    }

    /// A command line's words, as a shell splits them (spaces, single and double quotes).
    static func split(_ line: String) throws -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        for c in line {
            if let q = quote {
                if c == q { quote = nil } else { word.append(c) }
            } else if c == "'" || c == "\"" {
                quote = c
                inWord = true
            } else if c == " " {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                try check(!"|<>;&$`*?\\".contains(c), "the tour's commands use no shell syntax: \(line)")
                word.append(c)
                inWord = true
            }
        }
        try check(quote == nil, "unbalanced quote in \(line)")
        if inWord { words.append(word) }
        return words
    }

    /// Dates and times, which differ from run to run.
    static func normalised(_ text: String) -> String {
        text.replacing(
            /\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?/, with: "<date>")
    }

    @Test func theTourPrintsWhatTheReadmeShows() async throws {
        let readme = try String(contentsOf: Self.root.appending(path: "README.md"), encoding: .utf8)
        let (setUp, steps) = try Self.tour(in: readme)
        #expect(setUp == Self.setUp, "the tour's set-up changed: change this test's set-up to match")
        // The commands a reader must see work, so that a shortened tour cannot pass unnoticed.
        let commands = Set(steps.compactMap(\.arguments.first))
        for command in ["init", "add", "jobs", "ls", "show", "cat", "rm", "verify", "export", "validate"] {
            #expect(commands.contains(command), "the tour no longer shows `assetcat \(command)`")
        }

        // The set-up: a fresh directory holding a copy of TestAssets/demo as files/, and sample.zip.
        let t = try TestCatalog()
        let tour = t.directory.appending(path: "tour")
        try FileManager.default.createDirectory(at: tour, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            at: Self.root.appending(path: "TestAssets/demo"), to: tour.appending(path: "files"))
        try FileManager.default.copyItem(
            at: Self.root.appending(path: "TestAssets/archives/sample.zip"), to: tour.appending(path: "sample.zip"))

        for step in steps {
            let run = try await t.run(step.arguments, namesCatalog: false, in: tour)
            let printed = (run.stdout + run.stderr).replacingOccurrences(of: tour.path, with: Self.tourDirectory)
            #expect(run.status == 0, "`\(step.command)` exited \(run.status): \(run.stderr)")
            #expect(
                Self.normalised(printed) == Self.normalised(step.output),
                "`\(step.command)` printed:\n\(printed)\nbut the README shows:\n\(step.output)")
        }
    }

    /// The parser the test relies on: it finds the steps, and refuses what it cannot run.
    @Test func theTourParserRefusesWhatItCannotRun() throws {
        let readme = """
            x
            ## A five-minute tour

            ```sh
            cd /tmp/tour
            ```

            ```console
            $ assetcat ls --tag 'a b'
            one
            two
            ```

            Then:

            ```console
            $ assetcat stats
            ```

            ## Next
            """
        let (setUp, steps) = try Self.tour(in: "\n" + readme + "\n")
        #expect(setUp == "cd /tmp/tour\n")
        #expect(steps.map(\.arguments) == [["ls", "--tag", "a b"], ["stats"]])
        #expect(steps.map(\.output) == ["one\ntwo\n", ""])
        #expect(throws: (any Error).self) { try Self.split("assetcat ls | head") }
        #expect(Self.normalised("created:  2026-11-26T06:50:01Z\n") == "created:  <date>\n")
    }
}
