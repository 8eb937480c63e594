import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The README's section "Sharing a catalog between hosts", followed as a reader would: its
/// three shell blocks, word for word (a changed block fails here until this test follows it),
/// then each of their commands, host `a`'s and host `b`'s, against the test server.
///
/// What differs from a reader's run, because a test must: the server is the one
/// Scripts/with-postgres.sh started for the suite (the first line of the first block), with
/// a schema of the test's own; `/tmp/shared` and `/tmp/big.tar` are in a scratch directory,
/// as is the configuration folder that holds the password; and host `b` reads its jobs
/// 20 ms a chunk (`ASSETCAT_FAULT=slow-jobs`), so that the `rm` surely finds them running
/// (a reader's 8 GiB last seconds; this machine may be busier).
@Suite struct ReadmeSharingTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The section's three blocks: host `a` starts, host `b` joins and works, host `a` deletes.
    static let blocks = [
        """
        Scripts/with-postgres.sh bash    # a private PostgreSQL server on loopback, while this shell lasts
        export PATH="$PWD/.build/debug:$PATH" ASSETCAT_HOST_ID=a
        assetcat init --store "$ASSETCAT_TEST_POSTGRESQL_URL?schema=shared" /tmp/shared
        assetcat add --catalog /tmp/shared --recursive TestAssets/demo

        """,
        """
        export PATH="$PWD/.build/debug:$PATH" ASSETCAT_HOST_ID=b
        assetcat init --join /tmp/shared
        assetcat add --catalog /tmp/shared TestAssets/archives/sample.zip
        assetcat jobs run --watch --catalog /tmp/shared

        """,
        """
        python3 -c 'import tarfile as t; i=t.TarInfo("zeros"); i.size=8<<30; f=open("/tmp/big.tar","wb"); f.write(i.tobuf(t.GNU_FORMAT)); f.truncate(512+i.size+1024)'
        assetcat add --catalog /tmp/shared --reference --defer-hash /tmp/big.tar
        assetcat jobs ls --catalog /tmp/shared --state running
        assetcat rm --catalog /tmp/shared big.tar

        """,
    ]

    /// The `sh` blocks of the README's section.
    static func sectionBlocks() throws -> [String] {
        let readme = try String(contentsOf: root.appending(path: "README.md"), encoding: .utf8)
        let start = try #require(readme.range(of: "\n## Sharing a catalog between hosts\n"))
        var section = readme[start.upperBound...]
        if let end = section.range(of: "\n## ") { section = section[..<end.lowerBound] }
        var blocks: [String] = []
        while let open = section.range(of: "```sh\n"), let close = section[open.upperBound...].range(of: "\n```\n") {
            blocks.append(String(section[open.upperBound..<close.lowerBound]) + "\n")
            section = section[close.upperBound...]
        }
        return blocks
    }

    /// The words of an `assetcat` line of the blocks, as the shell splits them, with the
    /// reader's paths and server replaced by the test's.
    static func words(_ line: String, replacing: [String: String]) -> [String] {
        var words: [String] = []
        var word = ""
        var quote: Character?
        for c in line {
            if let q = quote {
                if c == q { quote = nil } else { word.append(c) }
            } else if c == "\"" || c == "'" {
                quote = c
            } else if c == " " {
                if !word.isEmpty { words.append(word) }
                word = ""
            } else {
                word.append(c)
            }
        }
        if !word.isEmpty { words.append(word) }
        return words.dropFirst().map { word in
            replacing.reduce(word) { $0.replacingOccurrences(of: $1.key, with: $1.value) }
        }
    }

    @Test func theSectionWorksAsWritten() async throws {
        #expect(try Self.sectionBlocks() == Self.blocks, "the section changed: make this test follow it")
        let server = try PostgreSQLTestServer.newSchema()
        let schema = try #require(server.queryItems?.first { $0.name == "schema" }?.value)
        var plain = server
        plain.queryItems = nil
        let scratch = ScratchDirectory.path("readme-sharing")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let replacing = [
            "$ASSETCAT_TEST_POSTGRESQL_URL": plain.string!, "schema=shared": "schema=\(schema)",
            "/tmp/shared": scratch.appending(path: "shared").path,
            "/tmp/big.tar": scratch.appending(path: "big.tar").path,
        ]
        let executable = TestCatalog.executable().path
        func environment(_ host: String) -> [String: String?] {
            [
                "ASSETCAT_HOST_ID": host, "XDG_CONFIG_HOME": scratch.appending(path: "config").path,
                "ASSETCAT_CATALOG": nil, "ASSETCAT_FAULT": host == "b" ? "slow-jobs" : nil,
            ]
        }
        func run(_ host: String, _ line: String) async throws -> ChildProcess.Outcome {
            let outcome = try await ChildProcess.run(
                executable, Self.words(line, replacing: replacing), environment: environment(host),
                workingDirectory: Self.root.path)
            #expect(outcome.status == 0, "\(line): \(outcome.stderrText)")
            return outcome
        }
        func lines(_ block: Int) -> [String] {
            Self.blocks[block].split(separator: "\n").map(String.init).filter { $0.hasPrefix("assetcat ") }
        }

        // Host a: init, add. Host b: join, add, then its worker.
        for line in lines(0) { _ = try await run("a", line) }
        let worker = lines(1).last!
        for line in lines(1).dropLast() { _ = try await run("b", line) }
        let watching = try ChildProcess(
            executable, Self.words(worker, replacing: replacing), environment: environment("b"),
            workingDirectory: Self.root.path)

        // Host a: the sparse archive, recorded without reading it; its two jobs, running on b.
        let python = String(Self.blocks[2].split(separator: "\n")[0])
        let made = try await ChildProcess.run(
            "/bin/sh", ["-c", replacing.reduce(python) { $0.replacingOccurrences(of: $1.key, with: $1.value) }])
        try #require(made.status == 0, "\(made.stderrText)")
        let (add, list, rm) = (lines(2)[0], lines(2)[1], lines(2)[2])
        _ = try await run("a", add)
        var running: [String] = []
        for _ in 0..<1200 where running.count < 2 {  // at most 2 minutes: a hang, not a latency
            running = try await run("a", list).stdoutText.split(separator: "\n").dropFirst().map(String.init)
            if running.count < 2 { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(running.count == 2, "b did not take both jobs: \(running)")
        #expect(running.allSatisfy { $0.contains(" running ") })

        // Host a deletes the archive: b prints both jobs cancelled.
        _ = try await run("a", rm)
        let printed = try await offThePool {
            watching.stdout(within: 120) { data in
                String(decoding: data, as: UTF8.self).components(separatedBy: "its asset was deleted").count > 2
            }
        }
        watching.signal(SIGINT)
        let outcome = try await watching.finish()
        #expect(outcome.status == 0)
        let cancelled = String(decoding: printed ?? Data(), as: UTF8.self).split(separator: "\n")
        #expect(cancelled.count == 2, "b printed: \(outcome.stdoutText)")
        for kind in ["digest", "index-archive"] {
            #expect(
                cancelled.contains { line in
                    line.wholeMatch(of: /\d+  (\S+)  asset \d+  cancelled  its asset was deleted/).map { String($0.1) }
                        == kind
                },
                "b printed: \(cancelled)")
        }
    }
}
