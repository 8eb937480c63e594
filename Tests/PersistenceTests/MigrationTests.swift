import Foundation
import Persistence
import TestScratch
import Testing

/// Version 1 of an entity…
final class JournalV1: ManagedObject {
    override class var entityName: String { "Journal" }
    @Attribute var text = ""
}

/// …and version 2: `text` renamed to `body` (explicit), `stars` added (inferred).
final class JournalV2: ManagedObject {
    override class var entityName: String { "Journal" }
    @Attribute var body = ""
    @Attribute(.indexed) var stars = 3
}

@Suite struct MigrationTests {
    let rename = Migration("2026-11-rename-text") { db in
        try db.execute("ALTER TABLE Journal RENAME COLUMN text TO body")
    }

    func temporaryStore() throws -> URL {
        let directory = ScratchDirectory.path("migration")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appending(path: "store.sqlite")
    }

    @Test func explicitMigrationsRunOnceThenTheSchemaIsExtended() throws {
        let url = try temporaryStore()
        do {
            let v1 = try PersistentContainer(storeURL: url, schema: try Schema([JournalV1.self]))
            let context = v1.newBackgroundContext()
            JournalV1(context: context).text = "kept"
            try context.save()
            v1.close()
        }
        let v2 = try PersistentContainer(storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename]))
        let rows = try v2.newBackgroundContext().fetch(FetchRequest<JournalV2>())
        #expect(rows.map(\.body) == ["kept"])
        #expect(rows.map(\.stars) == [3])  // the new column got its default
        v2.close()
        // Reopening does not run the migration again (it would fail: no column 'text').
        _ = try PersistentContainer(storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename]))
    }

    @Test func aNewStoreRecordsMigrationsWithoutRunningThem() throws {
        let url = try temporaryStore()
        let container = try PersistentContainer(
            storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename]))
        let context = container.newBackgroundContext()
        JournalV2(context: context).body = "new"
        try context.save()
    }

    @Test func aFailingMigrationQuarantinesTheStore() throws {
        let url = try temporaryStore()
        do {
            let v1 = try PersistentContainer(storeURL: url, schema: try Schema([JournalV1.self]))
            v1.close()
        }
        let broken = Migration("broken") { db in try db.execute("ALTER TABLE Nowhere ADD COLUMN x") }
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: url, schema: try Schema([JournalV2.self], migrations: [broken]))
        }
        #expect(error?.code == .migration)
        #expect(error?.message.contains("(Migration 'broken' failed: no such table: Nowhere)") == true)
        #expect(!FileManager.default.fileExists(atPath: url.path))
    }

    @Test func aRelationshipToAnEntityOutsideTheSchemaIsRefused() throws {
        let error = #expect(throws: PersistenceError.self) { try Schema([Note.self]) }
        #expect(error?.message == "Note.folder points at Folder, which is not in the schema")
    }
}
