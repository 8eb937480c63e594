import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

@testable import AssetCatalog

/// A catalog made by release 0.1.0 (TestAssets/catalogs/release-0.1.0, made by
/// Scripts/make-upgrade-fixture.sh) opens in this one with every asset, tag,
/// metadata value, archive member and job intact, and its pending removal finished.
///
/// The fixture was left as a crash leaves it: `rm doomed.txt` died after its
/// deletion committed and before the file was removed.
@Suite struct UpgradeTests {
    /// A copy of the fixture, to open (an open changes the catalog).
    func copyOfFixture() throws -> TestCatalog {
        let t = try TestCatalog()
        try FileManager.default.copyItem(atPath: testAsset("catalogs/release-0.1.0"), toPath: t.root.path)
        return t
    }

    @Test func aCatalogOfTheLastReleaseOpensWithEverythingIntact() async throws {
        let t = try copyOfFixture()
        let doomed = "5847d49aac1f0b6bb51750e4804ef1ad282d8f6b9f7ae73f6121b193bef08ae3"
        #expect(t.hasObject(doomed))

        let catalog = try t.open()
        defer { catalog.close() }

        // The removal committed before the crash is finished; nothing else is.
        #expect(!t.hasObject(doomed))
        #expect(try catalog.pendingRemovalCount() == 0)

        let assets = try catalog.assets()
        #expect(assets.count == 14)
        #expect(!assets.contains { $0.name == "doomed.txt" })
        let byName = Dictionary(grouping: assets, by: \.name)

        let notes = try #require(byName["notes.txt"]?.first)
        #expect(notes.tags.sorted() == ["docs", "important", "unicode-\u{e9}"])
        #expect(notes.storage == .managed)
        #expect(notes.sha256 == "800523724878da3569e71590368f35a369eda6797b901dfd2b7a3a11722072ae")
        #expect(try catalog.assets(AssetQuery(tag: "2026 trip")).map(\.name).sorted() == ["blue.png", "red.png"])
        // The tags became rows (the migration): queries by tag are answered from them.
        #expect(try AssetTagTests.tagRows(catalog).count == assets.map(\.tags.count).reduce(0, +))
        #expect(try catalog.assets(AssetQuery(tags: ["docs", "important"])).map(\.name) == ["notes.txt"])
        #expect(
            try catalog.assets(AssetQuery(tags: ["docs"], excludingTags: ["important"])).map(\.name)
                == ["copy-a.txt", "copy-b.txt"])

        let blue = try #require(byName["blue.png"]?.first)
        #expect(blue.kind == "image")
        #expect(blue.metadata["mediaType"] == "image/png")
        #expect(blue.metadata["width"] != nil)

        let zip = try #require(byName["sample.zip"]?.first)
        let members = assets.filter { $0.archive == zip.id }
        #expect(members.count == 6)
        #expect(members.allSatisfy { $0.storage == .member })
        let japanese = "sample/\u{65e5}\u{672c}\u{8a9e}/\u{30c7}\u{30fc}\u{30bf}.bin"
        #expect(members.contains { $0.member == japanese })

        let gone = try #require(byName["gone.txt"]?.first)
        #expect(gone.storage == .referenced)
        #expect(gone.sha256 == "")

        // Four jobs ran (three succeeded, the digest of a file that went missing failed);
        // the index job of sample.tar.gz is still queued.
        let jobs = try catalog.jobs.list(asset: nil, state: nil).sorted { $0.id < $1.id }
        #expect(jobs.map(\.kind) == ["metadata", "metadata", "index-archive", "digest", "index-archive"])
        #expect(jobs.map(\.state) == [.succeeded, .succeeded, .succeeded, .failed, .queued])
        #expect(jobs[3].error?.hasPrefix("Cannot read ") == true)

        // The content is whole: every file matches its digest, but for gone.txt, which has no
        // digest to compare and whose file is missing.
        let report = try await catalog.verify()
        #expect(report.issues.map(\.id) == [gone.id])
        #expect(report.issues.map(\.problem) == [.missing])
        #expect(report.unreferencedObjects == 0)
    }

    /// A catalog a newer assetcat migrated (its store records a migration this version
    /// does not know) is refused, and nothing in it changes: not its store, not the
    /// removal left pending.
    @Test func aCatalogOfANewerVersionIsRefusedAndLeftAsItIs() throws {
        let t = try copyOfFixture()
        let store = t.root.appending(path: "catalog.sqlite")
        let outcome = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "c.execute(\"INSERT INTO _persistence_migrations (id, applied) VALUES ('2099-01-future', 0)\"); "
                    + "c.commit(); c.close()",
                store.path,
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        let before = try Data(contentsOf: store)
        let doomed = "5847d49aac1f0b6bb51750e4804ef1ad282d8f6b9f7ae73f6121b193bef08ae3"

        let error = #expect(throws: CatalogError.self) { try t.open() }
        #expect(error?.code == .store)
        #expect(
            error?.message
                == "The catalog at \(t.root.path) was written by a newer version of assetcat; upgrade to open it. "
                + "Nothing was changed")
        #expect(try Data(contentsOf: store) == before)
        #expect(t.hasObject(doomed))  // the pending removal was not finished by this version
        #expect(!FileManager.default.fileExists(atPath: t.root.appending(path: "quarantine").path))
    }

    /// `ls --tag` on the upgraded catalog lists what the tags of release 0.1.0 said.
    @Test func lsByTagWorksOnAnUpgradedCatalog() async throws {
        let t = try copyOfFixture()
        let run = try await t.run(["ls", "--tag", "2026 trip", "--jsonl", "--fields", "name"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.split(separator: "\n").sorted() == ["{\"name\":\"blue.png\"}", "{\"name\":\"red.png\"}"])
        let notes = try await t.run(["ls", "--tag", "docs", "--tag", "important", "--jsonl", "--fields", "name"])
        #expect(notes.stdout == "{\"name\":\"notes.txt\"}\n")
        let copies = try await t.run(["ls", "--tag", "docs", "--not-tag", "important", "--jsonl", "--fields", "name"])
        #expect(copies.stdout == "{\"name\":\"copy-a.txt\"}\n{\"name\":\"copy-b.txt\"}\n")
    }

    @Test func theQueuedJobOfTheLastReleaseRuns() async throws {
        let t = try copyOfFixture()
        let catalog = try t.open()
        defer { catalog.close() }
        let summary = try await catalog.jobs.runUntilIdle()
        #expect(summary.succeeded == 1)
        let tarMembers = try catalog.assets().filter { $0.storage == .member && $0.archive != nil }
        #expect(tarMembers.count == 12)
        // The job recorded the archive's six members with its tags, rows and all.
        let queued = try catalog.assets(AssetQuery(tag: "queued"))
        #expect(queued.count == 7)
        #expect(queued.filter { $0.storage == .member }.count == 6)
        #expect(try AssetTagTests.tagRows(catalog).filter { $0.tag == "queued" }.count == 7)
    }
}
