import AssetCatalogTestSupport
import Foundation
import Persistence
import Testing

@testable import AssetCatalog

/// The sweep that every open runs carries out the records of hidden files and folders
/// that dead exports left beside their targets (``PendingTemporary``).
@Suite struct PendingTemporarySweepTests {
    func record(_ catalog: Catalog, _ path: String, owner: String) throws {
        try catalog.withContext { context in
            let row = PendingTemporary(context: context)
            row.owner = owner
            row.path = path
            try context.save()
        }
    }

    func rows(_ catalog: Catalog) throws -> [String] {
        try catalog.withContext { context in try context.fetch(FetchRequest<PendingTemporary>()).map(\.path).sorted() }
    }

    @Test func theNextOpenRemovesWhatADeadExportLeftAndPutsBackAReplacedBundle() throws {
        let t = try TestCatalog()
        let out = t.directory.appending(path: "out").path
        let manager = FileManager.default
        try manager.createDirectory(atPath: out + "/.bag.partial-12/data", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: out + "/.bag.partial-12/data/a.txt"))
        try Data("x".utf8).write(to: URL(fileURLWithPath: out + "/.b.zip.partial-34"))
        // Killed between moving the old bundle aside and renaming the new one into its place.
        try Data("old bundle".utf8).write(to: URL(fileURLWithPath: out + "/.c.tar.replaced-56"))
        // Killed after the new one took its place, before the old one was removed.
        try Data("old bundle".utf8).write(to: URL(fileURLWithPath: out + "/.d.replaced-78"))
        try Data("new bundle".utf8).write(to: URL(fileURLWithPath: out + "/d"))
        // Not a name a writer makes: never removed, whatever the row says.
        try Data("mine".utf8).write(to: URL(fileURLWithPath: out + "/notes.txt"))
        try Data("live".utf8).write(to: URL(fileURLWithPath: out + "/.e.tar.partial-90"))
        let catalog = try t.create()
        let dead = "999999-deadbeef"  // no lock file in staging/: its process is gone
        for name in [".bag.partial-12", ".b.zip.partial-34", ".c.tar.replaced-56", ".d.replaced-78", "notes.txt"] {
            try record(catalog, out + "/" + name, owner: dead)
        }
        try record(catalog, out + "/.e.tar.partial-90", owner: catalog.content.owner)  // this live process's
        #expect(try catalog.finishPendingRemovals() == 0)
        #expect(
            try manager.contentsOfDirectory(atPath: out).sorted() == [".e.tar.partial-90", "c.tar", "d", "notes.txt"])
        #expect(try String(contentsOfFile: out + "/c.tar", encoding: .utf8) == "old bundle")
        #expect(try String(contentsOfFile: out + "/d", encoding: .utf8) == "new bundle")
        #expect(try rows(catalog) == [out + "/.e.tar.partial-90"])
        catalog.close()
    }
}
