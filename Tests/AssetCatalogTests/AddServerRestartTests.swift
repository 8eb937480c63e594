import AssetCatalogTestSupport
import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

@testable import AssetCatalog

/// `assetcat add` on a catalog in PostgreSQL whose server crashes under it (issue 36): a
/// server restarted a second later (`pg_ctl stop -m immediate`, then start) is waited for —
/// the add records everything, or, when the restart caught a transaction in flight, stops
/// with one line and the same add run again records the rest; a server down for longer
/// than the store URL's `reconnect_timeout` stops the add at its first store error with
/// one line naming the server. Either way nothing is lost and nothing is left behind. Each
/// test has a server of its own (``PrivatePostgreSQLServer``).
@Suite struct AddServerRestartTests {
    static let fileCount = 300

    /// A catalog in a schema of `server`, made by `assetcat init --store`, and the files to add.
    struct Setup {
        let t: TestCatalog
        let server: PrivatePostgreSQLServer
        let url: URL
        let folder: String
        let environment: [String: String]

        init() async throws {
            server = try PrivatePostgreSQLServer()
            t = try TestCatalog()
            url = URL(string: server.url.absoluteString + "?schema=cat")!
            environment = ["XDG_CONFIG_HOME": t.directory.appending(path: "config").path, "ASSETCAT_HOST_ID": "h1"]
            let made = try await t.run(["init", "--store", url.absoluteString, t.root.path], environment: environment)
            try #require(made.status == 0, "\(made.stderr)")
            for i in 0..<AddServerRestartTests.fileCount {
                _ = try t.file("batch/f\(i).bin", "file \(i) of the batch\n")
            }
            folder = t.sources.appending(path: "batch").path
        }

        /// The store, read-only, as the test looks at it.
        func store() throws -> PersistentContainer {
            var options = PersistentContainer.Options()
            options.readOnly = true
            return try PersistentContainer.open(url: url, schema: try Catalog.schema(with: []), options: options)
        }

        /// Every file was recorded once, with its content in `objects/` and nothing else there;
        /// no journal, removal plan or staging left, and no session once the next command ran.
        func expectEverythingRecordedOnceAndNoDebris(_ log: String) async throws {
            let store = try store()
            defer { store.close() }
            let context = store.newBackgroundContext()
            let (assets, pending, plans) = try context.performAndWait {
                (
                    try context.fetch(FetchRequest<Asset>()).map(AssetRecord.init),
                    try context.count(for: FetchRequest<PendingImport>()),
                    try context.count(for: FetchRequest<RemovalPlan>())
                )
            }
            #expect(assets.count == AddServerRestartTests.fileCount, "\(log)")
            #expect(
                Set(assets.map(\.name)) == Set((0..<AddServerRestartTests.fileCount).map { "f\($0).bin" }), "\(log)")
            #expect(pending == 0, "\(log)")
            #expect(plans == 0, "\(log)")
            #expect(t.stagingEntries() == [], "\(log)")
            let objects = t.root.appending(path: "objects").path
            let files = (FileManager.default.subpaths(atPath: objects) ?? []).filter { $0.utf8.count > 3 }
            #expect(files.count == Set(assets.map(\.sha256)).count, "\(log)")
            #expect(assets.allSatisfy { t.hasObject($0.sha256) }, "\(log)")
            let verify = try await t.run(["verify"], environment: environment)
            #expect(verify.status == 0, "verify: \(verify.stdout)\(verify.stderr)\n\(log)")
            // A session row an add left as the server went away (it may end while its session
            // is being taken up again) is a dead host's: the next command reaps it.
            #expect(try store.sessions() == [], "\(log)")
        }
    }

    @Test func anAddWhoseServerRestartsRecordsEverythingOrStopsWithOneLineAndResumes() async throws {
        let setup = try await Setup()
        defer { setup.server.remove() }
        let t = setup.t
        // 20 ms a file: the add lasts long enough for the restart to come in its middle.
        var environment: [String: String?] = ["ASSETCAT_CATALOG": nil, "ASSETCAT_FAULT": "slow-ingest"]
        for (key, value) in setup.environment { environment[key] = value }
        let add = try ChildProcess(
            TestCatalog.executable().path, ["add", "--recursive", setup.folder, "--catalog", t.root.path],
            environment: environment, workingDirectory: t.directory.path)
        // Once some files are recorded: crashed, and started again a second later.
        let store = try setup.store()
        let recorded = try await waitUntil {
            let context = store.newBackgroundContext()
            return try context.performAndWait { try context.count(for: FetchRequest<Asset>()) } > 0
        }
        store.close()
        try #require(recorded)
        let server = setup.server
        try await offThePool {
            try server.stop()
            Thread.sleep(forTimeInterval: 1)
            try server.start()
        }
        let first = try await add.finish()
        var log = "first add: \(first.termination)\n\(first.stdoutText)\(first.stderrText)"
        if first.status == 0 {
            #expect(first.stdoutText == "added \(Self.fileCount) files\n", "\(log)")
        } else {
            // Stopped: one line, saying how far it got and what to do.
            #expect(first.status == 1, "\(log)")
            let lines = first.stderrText.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.count == 2 && lines[1].isEmpty, "\(log)")
            #expect(first.stderrText.hasPrefix("assetcat: The add stopped after recording "), "\(log)")
            #expect(first.stderrText.hasSuffix(" Run the same `assetcat add` again to record the rest\n"), "\(log)")
            #expect(!first.stderrText.contains("connectionError"), "\(log)")
            let again = try await t.run(["add", "--recursive", setup.folder], environment: setup.environment)
            log += "\nagain: \(again.status)\n\(again.stdout)\(again.stderr)"
            #expect(again.status == 0, "\(log)")
            #expect(again.stdout.hasPrefix("resumed an interrupted add of the same paths: skipped "), "\(log)")
            #expect(again.stderr == "", "\(log)")
        }
        try await setup.expectEverythingRecordedOnceAndNoDebris(log)
    }

    @Test func anAddWhoseServerStaysDownStopsAtTheFirstStoreErrorWithOneLine() async throws {
        let setup = try await Setup()
        defer { setup.server.remove() }
        let t = setup.t
        // This host's store: the same, tried again for a second only.
        var environment = setup.environment
        environment["ASSETCAT_STORE"] = setup.url.absoluteString + "&reconnect_timeout=1"
        // Paused once its first batch's content is journaled, nothing of it recorded.
        let add = try await t.startPaused(
            ["add", "--recursive", setup.folder], at: "after-add-journal", environment: environment)
        try setup.server.stop()
        // Past its reconnect timeout (1 s), with room for a busy machine: the add's session
        // is over, and its connections try once more each.
        try await Task.sleep(for: .seconds(4))
        add.resume()
        let outcome = try await add.process.finish()
        let port = setup.server.port
        #expect(outcome.status == 1)
        #expect(outcome.stdoutText == "")
        #expect(
            outcome.stderrText
                == "assetcat: The add stopped after recording 0 of \(Self.fileCount) files: The connection to PostgreSQL "
                + "at 127.0.0.1:\(port) (database postgres, user assetcat) was lost and could not be made again within "
                + "1 s (the store URL's reconnect_timeout): connection refused. Run the same `assetcat add` again to "
                + "record the rest\n")
        // Back: the same add records everything; the first one's journal and staging are gone.
        try setup.server.start()
        let again = try await t.run(["add", "--recursive", setup.folder], environment: environment)
        let log = "again: \(again.status)\n\(again.stdout)\(again.stderr)"
        #expect(again.status == 0, "\(log)")
        try await setup.expectEverythingRecordedOnceAndNoDebris(log)
    }
}
