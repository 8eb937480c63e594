import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `stats` reads the counts the catalog keeps; `verify --store-only` and `gc` recount them,
/// name each wrong one, and fix it.
@Suite struct StatisticsCLITests {
    func tamper(_ t: TestCatalog, _ sql: String) async throws {
        let path = t.root.appending(path: "catalog.sqlite").path
        let run = try await ChildProcess.run("/usr/bin/sqlite3", [path, sql])
        #expect(run.status == 0, "\(run.stderrText)")
    }

    @Test func verifyStoreOnlyAndGcNameAWrongCountAndFixIt() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        // b.png is no picture: its thumbnail job is left queued.
        #expect(
            try await t.run(["add", "--queue-only", try t.file("a.txt", "hello\n"), try t.file("b.png", "png")]).status
                == 0)
        let right = try await t.run(["stats"]).stdout
        #expect(right.hasPrefix("assets:        2 (2 managed, 0 referenced, 0 members)\n"))

        try await tamper(t, "UPDATE _persistence_tallies SET n = 40 WHERE tally = 'storage' AND key = 'managed'")
        #expect(try await t.run(["stats"]).stdout.hasPrefix("assets:        40 (40 managed,"))  // read, not recounted
        let verify = try await t.run(["verify", "--store-only"])
        #expect(verify.status == 0)
        #expect(
            verify.stdout
                == "statistics: assets with storage 'managed' were recorded as 40 (9 bytes), counted 2 (9 bytes); "
                + "fixed\nstore: no damage found\n")
        #expect(try await t.run(["stats"]).stdout == right)

        try await tamper(t, "DELETE FROM _persistence_tallies WHERE tally = 'kind' AND key = 'image'")
        let json = try await t.run(["verify", "--store-only", "--json"])
        #expect(
            json.stdout.filter { $0 != "\n" }.replacingOccurrences(of: "  ", with: "")
                == #"{"searchIndexFixed" : [],"statisticsFixed" : ["statistics: assets of kind 'image' were "#
                + #"recorded as 0 (0 bytes), "#
                + #"counted 1 (3 bytes); fixed"],"storeProblems" : []}"#)

        try await tamper(t, "UPDATE _persistence_tallies SET total = 1 WHERE tally = 'objects'")
        let gc = try await t.run(["gc"])
        #expect(gc.status == 0)
        #expect(
            gc.stdout.contains(
                "statistics: files in objects/ were recorded as 2 (1 bytes), counted 2 (9 bytes); fixed\n"))
        #expect(try await t.run(["stats"]).stdout == right)
    }
}
