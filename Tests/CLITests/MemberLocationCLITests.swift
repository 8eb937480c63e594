import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `ls` and `show` name a member by where it lives, `ARCHIVE-NAME:member/path`, so that two
/// archives' members of one path are told apart; `--json` keeps its fields. `ls --sort`.
@Suite struct MemberLocationCLITests {
    /// A catalog with two archives that each hold `sample/hello.txt`, with other content,
    /// and a plain file: 1 a.zip, 2 its member, 3 b.zip, 4 its member, then notes.txt.
    func twoArchives() async throws -> TestCatalog {
        let t = try TestCatalog()
        try t.create().close()
        for (archive, text) in [("a.zip", "hello from a\n"), ("b.zip", "hi from b\n")] {
            let folder = archive.replacingOccurrences(of: ".zip", with: "")
            try t.file("\(folder)/sample/hello.txt", text)
            _ = try await ChildProcess.run(
                "/usr/bin/bsdtar",
                [
                    "-a", "-cf", t.sources.appending(path: archive).path, "-C", t.sources.appending(path: folder).path,
                    "sample/hello.txt",
                ],
                stdout: .inherit, stderr: .inherit)
        }
        let catalog = try t.open()
        defer { catalog.close() }
        for archive in ["a.zip", "b.zip"] {  // one after the other: a.zip's member first
            _ = try await catalog.add([t.sources.appending(path: archive).path])
            _ = try await catalog.jobs.runUntilIdle()
        }
        _ = try await catalog.add([try t.file("notes.txt", "notes\n")])
        return t
    }

    @Test func lsAndShowSayWhichArchiveAMemberLivesIn() async throws {
        let t = try await twoArchives()
        let ls = try await t.run(["ls"])
        #expect(ls.status == 0, "\(ls.stderr)")
        let rows = ls.stdout.split(separator: "\n").map { $0.split(separator: " ").last.map(String.init) ?? "" }
        #expect(rows == ["NAME", "a.zip", "a.zip:sample/hello.txt", "b.zip", "b.zip:sample/hello.txt", "notes.txt"])

        let show = try await t.run(["show", "4"])
        #expect(show.status == 0, "\(show.stderr)")
        let lines = show.stdout.split(separator: "\n")
        #expect(lines.contains("name:     sample/hello.txt"))
        #expect(lines.contains("archive:  3"))
        #expect(lines.contains("member:   b.zip:sample/hello.txt"))

        // The JSON forms keep their fields: the name, the archive's ID and the member path.
        let json = try await t.run(["ls", "--jsonl", "--fields", "id,name,archive,member"])
        let objects = json.stdout.split(separator: "\n").map(String.init)
        #expect(
            objects.prefix(4) == [
                #"{"archive":null,"id":1,"member":null,"name":"a.zip"}"#,
                #"{"archive":1,"id":2,"member":"sample/hello.txt","name":"sample/hello.txt"}"#,
                #"{"archive":null,"id":3,"member":null,"name":"b.zip"}"#,
                #"{"archive":3,"id":4,"member":"sample/hello.txt","name":"sample/hello.txt"}"#,
            ])
        #expect(objects.count == 5 && objects[4].hasSuffix(#""member":null,"name":"notes.txt"}"#))
        let shown = try await t.run(["show", "2", "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
        #expect(object["name"] as? String == "sample/hello.txt" && object["member"] as? String == "sample/hello.txt")
    }

    /// The IDs `ls` lists, in its order.
    func listedIDs(_ t: TestCatalog, _ arguments: [String]) async throws -> [Int] {
        let ls = try await t.run(["ls"] + arguments)
        #expect(ls.status == 0, "\(ls.stderr)")
        return ls.stdout.split(separator: "\n").dropFirst().compactMap { Int($0.split(separator: " ")[0]) }
    }

    @Test func lsSortsByIDUnlessToldAndBreaksTiesByID() async throws {
        let t = try TestCatalog()
        try t.create().close()
        // Names and sizes with ties; one add gives its files one `created` date.
        let catalog = try t.open()
        _ = try await catalog.add([try t.file("m.txt", "12345"), try t.file("b.txt", "1")])
        _ = try await catalog.add([try t.file("x/b.txt", "123"), try t.file("a.txt", "1")])
        catalog.close()
        #expect(try await listedIDs(t, []) == [1, 2, 3, 4])
        #expect(try await listedIDs(t, ["--sort", "id"]) == [1, 2, 3, 4])
        #expect(try await listedIDs(t, ["--sort", "name"]) == [4, 2, 3, 1])
        #expect(try await listedIDs(t, ["--sort", "size"]) == [2, 4, 3, 1])
        #expect(try await listedIDs(t, ["--sort", "added"]) == [1, 2, 3, 4])
        #expect(try await listedIDs(t, ["--sort", "name", "--tag", "none"]) == [])
        let json = try await t.run(["ls", "--jsonl", "--fields", "id", "--sort", "size"])
        #expect(json.stdout == "{\"id\":2}\n{\"id\":4}\n{\"id\":3}\n{\"id\":1}\n")
    }

    @Test func aBadSortIsRefusedNamingTheValidOnes() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let ls = try await t.run(["ls", "--sort", "date"])
        #expect(ls.status == 64)
        #expect(ls.stdout == "")
        #expect(
            ls.stderr.hasPrefix(
                "Error: The value 'date' is invalid for '--sort <sort>'. Please provide one of 'id', 'name', 'size' "
                    + "or 'added'.\n"), "\(ls.stderr)")
    }
}
