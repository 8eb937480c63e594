import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// Output and arguments a file name can subvert: human output quotes a
/// name that holds control characters, as git quotes paths, so a name cannot forge a row;
/// `--json` keeps it exact. An unknown option is an error that names it; a name that begins
/// with `-` goes after `--`.
@Suite struct NamesAndOptionsTests {
    /// A catalog holding `a\nb.txt` (1, referenced) and `x.txt` (2).
    func catalogWithANewlineName() async throws -> (TestCatalog, String) {
        let t = try TestCatalog()
        try t.create().close()
        let odd = try t.file("a\nb.txt", "odd\n")
        #expect(try await t.run(["add", "--reference", odd]).status == 0)
        #expect(try await t.run(["add", try t.file("x.txt", "x\n")]).status == 0)
        return (t, odd)
    }

    @Test func lsQuotesANameWithANewlineAndJSONKeepsIt() async throws {
        let (t, _) = try await catalogWithANewlineName()
        let ls = try await t.run(["ls"])
        #expect(
            ls.stdout == """
                     ID  KIND      STORAGE             SIZE  SHA256        NAME
                      1  text      referenced             4  80a3ef2f5539  "a\\nb.txt"
                      2  text      managed                2  73cb3858a687  x.txt

                """)
        let data = Data(try await t.run(["ls", "--json"]).stdout.utf8)
        let array = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
        #expect(array.map { $0["name"] as? String } == ["a\nb.txt", "x.txt"])
    }

    @Test func showRmAndVerifyQuoteNamesAndPaths() async throws {
        let (t, odd) = try await catalogWithANewlineName()
        let quotedPath = "\"" + odd.replacing("\n", with: "\\n") + "\""
        let show = try await t.run(["show", "1"]).stdout.split(separator: "\n")
        #expect(show[1] == #"name:     "a\nb.txt""#)
        #expect(show[6] == "path:     \(quotedPath)")
        try FileManager.default.removeItem(atPath: odd)
        let verify = try await t.run(["verify"])
        #expect(verify.status == 1)
        #expect(
            verify.stdout == "missing  1  \"a\\nb.txt\"  \(quotedPath)\nchecked 2 assets: 1 missing, 0 damaged\n")
        #expect(
            try await t.run(["rm", "1"]).stdout
                == "removed 1  \"a\\nb.txt\"\nremoved 1 asset and 0 files from objects/\n")
    }

    @Test func aTagWithAnEscapeSequenceIsQuotedWhereverItIsShown() async throws {
        let t = try TestCatalog()
        try t.create().close()
        #expect(try await t.run(["add", try t.file("x.txt", "x\n"), "--tag", "red\u{1B}[31m"]).status == 0)
        let stats = try await t.run(["stats"]).stdout.split(separator: "\n")
        #expect(stats.last == #"tags:          "red\033[31m" 1"#)
        #expect(try await t.run(["show", "1"]).stdout.contains("\ntags:     \"red\\033[31m\"\n"))
        #expect(try await t.run(["tag", "1", "--add", "blue"]).stdout == #"1  x.txt  [blue, "red\033[31m"]"# + "\n")
    }

    @Test func anErrorNamingAFileStaysOneLine() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let missing = t.sources.appending(path: "no\nsuch.txt").path
        let add = try await t.run(["add", missing])
        #expect(add.status == 1)
        #expect(add.stderr == "assetcat: No such file or directory: \(missing.replacing("\n", with: "\\n"))\n")
        let show = try await t.run(["show", "a\u{1B}[2Jb"])
        #expect(show.stderr == "assetcat: No asset named a\\033[2Jb; list assets with `assetcat ls`\n")
    }

    /// A catalog holding assets named `-h` (1) and `-dash.txt` (2).
    func catalogWithDashNames() async throws -> TestCatalog {
        let t = try TestCatalog()
        try t.create().close()
        try t.file("-h", "h\n")
        try t.file("-dash.txt", "dash\n")
        let add = try await t.run(["add", "--catalog", t.root.path, "--", "-h", "-dash.txt"], in: t.sources)
        #expect(add.stdout == "added 2 files\n")
        return t
    }

    @Test func anUnknownOptionIsAnErrorThatNamesIt() async throws {
        let t = try await catalogWithDashNames()
        for (arguments, command) in [
            (["rm", "-dash.txt"], "rm"), (["show", "-dash.txt"], "show"), (["cat", "-dash.txt"], "cat"),
            (["tag", "-dash.txt", "--add", "t"], "tag"), (["verify", "-dash.txt"], "verify"),
            (["add", "-dash.txt"], "add"), (["export", "out", "-dash.txt"], "export"),
            (["jobs", "cancel", "-dash.txt"], "jobs cancel"),
        ] {
            let run = try await t.run(arguments, in: t.sources)
            #expect(run.status == 64, "\(arguments)")
            #expect(run.stdout == "", "\(arguments)")
            #expect(
                run.stderr
                    == "assetcat: unknown option '-dash.txt'; a name that begins with '-' goes after '--': "
                    + "assetcat \(command) -- -dash.txt\n")
        }
        let long = try await t.run(["rm", "--foo"])
        #expect(long.status == 64)
        #expect(
            long.stderr
                == "assetcat: unknown option '--foo'; a name that begins with '-' goes after '--': assetcat rm -- --foo\n"
        )
        #expect(try await t.run(["ls", "--json"]).stdout.contains("\"-dash.txt\""))  // nothing was removed
        // An option of the command that follows: said to go after the command's name.
        for (arguments, message) in [
            (["-q", "ls"], "'-q' is an option of 'assetcat ls': it goes after the command's name: assetcat ls -q"),
            (
                ["--verbose", "jobs", "ls"],
                "'--verbose' is an option of 'assetcat jobs ls': it goes after the command's name: "
                    + "assetcat jobs ls --verbose"
            ),
        ] {
            let early = try await t.run(arguments)
            #expect(early.status == 64, "\(arguments)")
            #expect(early.stderr == "assetcat: \(message)\n", "\(arguments)")
        }
    }

    @Test func aNameThatBeginsWithADashGoesAfterDoubleDash() async throws {
        let t = try await catalogWithDashNames()
        let catalog = ["--catalog", t.root.path]
        // -h alone is the help flag, as in every command-line tool.
        let help = try await t.run(["rm", "-h"])
        #expect(help.status == 0)
        #expect(help.stdout.hasPrefix("OVERVIEW: Delete assets"))
        #expect(try await t.run(["cat"] + catalog + ["--", "-dash.txt"]).stdout == "dash\n")
        #expect(try await t.run(["show"] + catalog + ["--", "-h"]).stdout.hasPrefix("id:       1\nname:     -h\n"))
        #expect(try await t.run(["tag"] + catalog + ["--add", "t", "--", "-h"]).stdout == "1  -h  [t]\n")
        #expect(
            try await t.run(["verify"] + catalog + ["--", "-h"]).stdout == "checked 1 asset: 0 missing, 0 damaged\n")
        let rm = try await t.run(["rm"] + catalog + ["--", "-h"])
        #expect(rm.status == 0)
        #expect(rm.stdout == "removed 1  -h\nremoved 1 asset and 1 file from objects/\n")
    }

    /// The short options `cp -r`, `rm -n` and `mv -f` users type first, alone and typed
    /// together with `-q`; a group holding a letter no flag has is still refused.
    @Test func theShortOptionsPeopleTypeFirstAreTaken() async throws {
        let t = try TestCatalog()
        try t.create().close()
        try t.file("photos/a.txt", "a\n")
        try t.file("photos/deep/b.txt", "b\n")
        let add = try await t.run(["add", "-r", "photos"], in: t.sources)
        #expect(add.status == 0)
        #expect(add.stdout == "added 2 files\n")
        try t.file("more/c.txt", "c\n")
        let grouped = try await t.run(["add", "-rq", "more"], in: t.sources)
        #expect(grouped.status == 0)
        #expect(grouped.stdout == "")
        #expect(try await t.run(["ls", "--jsonl", "--fields", "id"]).stdout == "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n")
        let dryRun = try await t.run(["rm", "-n", "1"])
        #expect(dryRun.stdout == "would remove 1  a.txt\nwould remove 1 asset and 1 file from objects/\n")
        #expect(try await t.run(["show", "1"]).status == 0)  // the dry run changed nothing
        let bundle = t.sources.appending(path: "out.tar").path
        #expect(try await t.run(["export", bundle]).status == 0)
        let again = try await t.run(["export", bundle])
        #expect(again.status != 0)
        let forced = try await t.run(["export", "-f", bundle])
        #expect(forced.status == 0, "\(forced.stderr)")
        let unknown = try await t.run(["add", "-rx", "photos"], in: t.sources)
        #expect(unknown.status == 64)
        #expect(
            unknown.stderr
                == "assetcat: unknown option '-rx'; a name that begins with '-' goes after '--': assetcat add -- -rx\n")
    }
}
