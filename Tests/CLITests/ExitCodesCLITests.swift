import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The table of exit statuses (`assetcat exit-codes`, `assetcat help exit-codes`) is true: a
/// representative failure of each status exits with it and prints what the table says.
/// `--quiet`, `--verbose`.
@Suite struct ExitCodesCLITests {
    /// The statuses the table lists, in its order.
    static func listedStatuses(_ text: String) -> [Int32] {
        text.split(separator: "\n").compactMap { line in
            line.first?.isNumber == true ? Int32(line.prefix { $0.isNumber }) : nil
        }
    }

    @Test func theTableIsPrintedByTheCommandAndByHelp() async throws {
        let t = try TestCatalog()
        let table = try await t.run(["exit-codes"], namesCatalog: false)
        #expect(table.status == 0 && table.stderr == "")
        #expect(Self.listedStatuses(table.stdout) == [0, 1, 64, 130, 143])
        #expect(table.stdout.hasPrefix("0    Success.\n1    Failure: the command could not do what was asked."))
        let help = try await t.run(["help", "exit-codes"], namesCatalog: false)
        #expect(help.status == 0)
        let lines = table.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let helpLines = Set(help.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
        #expect(lines.allSatisfy(helpLines.contains), "\(help.stdout)")
        // The root's help lists it among the commands.
        #expect(try await t.run(["--help"], namesCatalog: false).stdout.contains("exit-codes"))
    }

    /// Each status of the table, from a representative run.
    @Test func eachStatusOfTheTableIsWhatARepresentativeRunExitsWith() async throws {
        let t = try TestCatalog()
        try t.create().close()
        var seen: Set<Int32> = []

        let ok = try await t.run(["ls"])
        #expect(ok.status == 0 && ok.stderr == "")
        seen.insert(ok.status)

        // 1: one line, `assetcat: MESSAGE`, naming the ID and what to do.
        let missing = try await t.run(["show", "99"])
        #expect(missing.status == 1)
        #expect(missing.stderr == "assetcat: No asset with ID 99; list assets with `assetcat ls`\n")
        let noCatalog = try await t.run(
            ["ls", "--catalog", t.sources.appending(path: "none").path], namesCatalog: false)
        #expect(noCatalog.status == 1 && noCatalog.stderr.hasPrefix("assetcat: "))
        #expect(noCatalog.stderr.split(separator: "\n").count == 1)
        seen.insert(missing.status)

        // 64: `Error: MESSAGE` and the usage; an unknown option by name.
        let usage = try await t.run(["rm", "--not-tag", "x"])
        #expect(usage.status == 64)
        #expect(
            usage.stderr.hasPrefix(
                "Error: --not-tag narrows --tag: give --tag TAG too (rm never selects by --not-tag alone).\nUsage: "))
        let unknown = try await t.run(["ls", "--colour"])
        #expect(unknown.status == 64)
        #expect(
            unknown.stderr
                == "assetcat: unknown option '--colour'; a name that begins with '-' goes after '--': "
                + "assetcat ls -- --colour\n")
        let noCommand = try await t.run(["frobnicate"], namesCatalog: false)
        #expect(noCommand.status == 64 && noCommand.stderr.hasPrefix("Error: "))
        seen.insert(usage.status)

        // 130 and 143: an add stopped by Ctrl-C or SIGTERM says how far it got.
        for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, 143)] {
            var paths: [String] = []
            for i in 0..<100 {
                paths.append(try t.file("s\(signal)/f\(i).bin", Data(repeating: UInt8(i), count: 16 << 10)))
            }
            let process = try ChildProcess(
                TestCatalog.executable().path, ["add", "--catalog", t.root.path] + paths,
                environment: ["ASSETCAT_FAULT": "slow-ingest"])
            let staged = try await t.signal(signal, to: process, onceStagingHolds: 5)
            #expect(staged, "the signal came before the add staged anything: it tests nothing")
            let run = try await process.finish()
            #expect(run.termination == .exited(status))
            #expect(run.stderrText.hasPrefix("interrupted: added "), "\(run.stderrText)")
            seen.insert(run.status)
        }

        let table = try await t.run(["exit-codes"], namesCatalog: false)
        #expect(Set(Self.listedStatuses(table.stdout)) == seen)
    }

    /// The one exception the table names: `jobs run --watch` runs until Ctrl-C, and stopping
    /// it so is its normal end (exit 0).
    @Test func jobsRunWatchEndsWithStatusZeroOnCtrlC() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let watch = try ChildProcess(
            TestCatalog.executable().path, ["jobs", "run", "--watch", "--catalog", t.root.path])
        // A job it ran says it is watching (its Ctrl-C handler was in place before it started).
        let catalog = try t.open()
        _ = try await catalog.add([try t.file("photo.jpg", "JFIF")])
        catalog.close()
        let printed = try await offThePool {
            watch.stdout(within: 120) { String(decoding: $0, as: UTF8.self).contains(" succeeded") }
        }
        #expect(printed.map { String(decoding: $0, as: UTF8.self) }?.contains("asset 1  succeeded") == true)
        watch.signal(SIGINT)
        let run = try await watch.finish()
        #expect(run.termination == .exited(0), "\(run.stderrText)")
    }

    @Test func quietLeavesDataAndErrorsAndDropsReports() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let a = try t.file("a.txt", "hello\n")
        let b = try t.file("b.txt", "other\n")

        let add = try await t.run(["add", a, b, "--quiet"])
        #expect(add.status == 0 && add.stdout == "" && add.stderr == "")
        let tag = try await t.run(["tag", "1", "--add", "x", "-q"])
        #expect(tag.status == 0 && tag.stdout == "")
        // Data asked for is printed whatever --quiet says.
        let ls = try await t.run(["ls", "--quiet", "--sort", "name"])
        #expect(ls.stdout.split(separator: "\n").count == 3)
        #expect(try await t.run(["ls", "-q", "--jsonl", "--fields", "id"]).stdout == "{\"id\":1}\n{\"id\":2}\n")
        #expect(try await t.run(["cat", "1", "-q"]).stdout == "hello\n")
        let healthy = try await t.run(["verify", "--quiet"])
        #expect(healthy.status == 0 && healthy.stdout == "")
        #expect(try await t.run(["verify"]).stdout == "checked 2 assets: 0 missing, 0 damaged\n")
        let rm = try await t.run(["rm", "2", "--quiet"])
        #expect(rm.status == 0 && rm.stdout == "" && rm.stderr == "")
        #expect(try t.open().assets().map(\.name) == ["a.txt"])
        // A problem is still reported, and an error still goes to stderr.
        let digest = try #require(try t.open().assets().first).sha256
        try FileManager.default.removeItem(atPath: t.objectPath(digest))
        let damaged = try await t.run(["verify", "--quiet"])
        #expect(damaged.status == 1)
        #expect(damaged.stdout.hasPrefix("missing  1  a.txt"), "\(damaged.stdout)")
        #expect(!damaged.stdout.contains("checked"))
        let error = try await t.run(["rm", "7", "--quiet"])
        #expect(error.status == 1 && error.stderr == "assetcat: No asset with ID 7; list assets with `assetcat ls`\n")
        let created = try await t.run(["init", t.sources.appending(path: "second").path, "--quiet"])
        #expect(created.status == 0 && created.stdout == "")

        let both = try await t.run(["ls", "--quiet", "--verbose"])
        #expect(both.status == 64 && both.stderr.hasPrefix("Error: Give --quiet or --verbose, not both.\n"))
    }

    @Test func verboseLogsWhatTheCatalogDoesToStderr() async throws {
        let t = try TestCatalog()
        try t.create().close()
        let quietly = try await t.run(["ls"])
        #expect(quietly.stderr == "")
        let verbose = try await t.run(["ls", "--verbose"])
        #expect(verbose.status == 0)
        #expect(verbose.stdout == quietly.stdout)
        #expect(verbose.stderr.contains("debug AssetCatalog"), "\(verbose.stderr)")
        #expect(verbose.stderr.contains("opened the catalog \(t.root.path) to read and write"), "\(verbose.stderr)")
        #expect(try await t.run(["stats", "-v"]).stderr.contains("opened the catalog"))
    }

    /// On a terminal (a pseudo-terminal from `script`), `verify` draws its progress bar;
    /// with `--quiet` it draws none. In a pipe it never does (the other tests' empty stderr).
    @Test func quietDrawsNoProgressBarOnATerminal() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        _ = try await catalog.add([try t.file("a.txt", "hello\n")])
        catalog.close()
        func onATerminal(_ arguments: String) async throws -> String {
            let command = "\(TestCatalog.executable().path) \(arguments) --catalog \(t.root.path)"
            let outcome = try await ChildProcess.run("/usr/bin/script", ["-qec", command, "/dev/null"])
            #expect(outcome.status == 0, "\(outcome.stderrText)")
            return outcome.stdoutText
        }
        let drawn = try await onATerminal("verify")
        #expect(drawn.contains("verifying [##############################] 100%"), "\(drawn)")
        let quiet = try await onATerminal("verify --quiet")
        #expect(quiet == "", "\(quiet)")
    }
}

extension ExitCodesCLITests {
    /// A warning of the catalog's (here: a file it cannot remove, so its removal stays
    /// pending) reaches stderr as a `warning:` line; `--quiet` drops it.
    @Test func theCatalogsWarningsReachStderrUnlessQuiet() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add([try t.file("a.txt", "a\n"), try t.file("b.txt", "b\n")])
        catalog.close()
        // Each object's path is a folder that is not empty: unlink(2) fails with EISDIR.
        for record in added.added {
            let object = t.root.appending(path: "objects/\(record.sha256.prefix(2))/\(record.sha256.dropFirst(2))")
            try FileManager.default.removeItem(at: object)
            try FileManager.default.createDirectory(at: object, withIntermediateDirectories: false)
            #expect(FileManager.default.createFile(atPath: object.appending(path: "in-the-way").path, contents: nil))
        }
        let removed = try await t.run(["rm", "1"])
        #expect(removed.status == 0)
        let lines = removed.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(removed.stderr)")
        #expect(lines.first?.hasPrefix("warning: removals stay pending until the next sweep: ") == true, "\(lines)")
        let quietly = try await t.run(["rm", "2", "--quiet"])
        #expect(quietly.status == 0)
        #expect(quietly.stderr == "")
    }
}
