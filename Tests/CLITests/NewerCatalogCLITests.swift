import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// An older assetcat on a catalog a newer one migrated: every command refuses it,
/// says what to do, and changes nothing.
@Suite struct NewerCatalogCLITests {
    @Test func anOlderAssetcatRefusesACatalogANewerOneMigrated() async throws {
        let t = try TestCatalog()
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "TestAssets/catalogs/release-0.1.0").path
        try FileManager.default.copyItem(atPath: fixture, toPath: t.root.path)
        let store = t.root.appending(path: "catalog.sqlite")
        let python = try await ChildProcess.run(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "c.execute(\"INSERT INTO _persistence_migrations (id, applied) VALUES ('2099-01-future', 0)\"); "
                    + "c.commit(); c.close()",
                store.path,
            ])
        #expect(python.termination == .exited(0), "\(python.stderrText)")
        let before = try Data(contentsOf: store)
        // recover too: the store is not lost, it is newer.
        for command in [["ls"], ["ls", "--tag", "docs"], ["gc"], ["recover"]] {
            let run = try await t.run(command)
            #expect(run.status == 1, "\(command)")
            #expect(
                run.stderr
                    == "assetcat: The catalog at \(t.root.path) was written by a newer version of assetcat; upgrade to "
                    + "open it. Nothing was changed\n", "\(command)")
            #expect(run.stdout == "", "\(command)")
        }
        #expect(try Data(contentsOf: store) == before)
    }
}
