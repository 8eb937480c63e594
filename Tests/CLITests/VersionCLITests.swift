import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `assetcat --version`: assetcat's own version, and the SQLite and libarchive it runs on.
@Suite struct VersionCLITests {
    @Test func versionNamesTheSQLiteAndLibarchiveItRunsOn() async throws {
        let t = try TestCatalog()
        let run = try await t.run(["--version"], namesCatalog: false)
        #expect(run.status == 0)
        #expect(run.stderr == "")
        // The versions, asked of the same system libraries another way: Python's sqlite3
        // module loads the system's libsqlite3, and bsdtar names the libarchive it runs on.
        let sqlite = try await ChildProcess.run(
            "/usr/bin/python3", ["-c", "import sqlite3; print(sqlite3.sqlite_version)"]
        ).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let bsdtar = try await ChildProcess.run("/usr/bin/bsdtar", ["--version"]).stdoutText
        let libarchive = try #require(bsdtar.firstMatch(of: /libarchive (\d+\.\d+\.\d+)/)?.output.1)
        #expect(run.stdout == "assetcat 0.1.0\nSQLite \(sqlite)\nlibarchive \(libarchive)\n")
    }

    /// libvips and the hundred libraries it needs are loaded by the first thumbnail, not by
    /// every command: the program's start does not load them (the dynamic loader lists what
    /// it would load, and stops).
    @Test func theProgramStartsWithoutLoadingLibvips() async throws {
        let t = try TestCatalog()
        let run = try await t.run(["--version"], namesCatalog: false, environment: ["LD_TRACE_LOADED_OBJECTS": "1"])
        #expect(run.status == 0)
        #expect(run.stdout.contains("libsqlite3"), "\(run.stdout)")
        for library in ["libvips", "libgobject", "libglib"] {
            #expect(!run.stdout.contains(library), "\(run.stdout)")
        }
    }

    @Test func completionScriptsAreGeneratedForEachShell() async throws {
        let t = try TestCatalog()
        let bash = try await t.run(["--generate-completion-script", "bash"], namesCatalog: false)
        #expect(bash.status == 0)
        #expect(bash.stdout.contains("complete -o filenames -F _assetcat assetcat"), "\(bash.stdout.prefix(300))")
        for command in ["init", "add", "ls", "rm", "export", "import", "validate"] {
            #expect(bash.stdout.contains(command))
        }
        let zsh = try await t.run(["--generate-completion-script", "zsh"], namesCatalog: false)
        #expect(zsh.stdout.hasPrefix("#compdef assetcat"))
        let fish = try await t.run(["--generate-completion-script", "fish"], namesCatalog: false)
        #expect(fish.stdout.contains("complete -c 'assetcat'"))
    }
}
