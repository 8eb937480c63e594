import Foundation
import Persistence
import PersistencePostgreSQL
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

/// Version 1 of a post keeps its labels in one `\n`-delimited text column…
final class PostV1: ManagedObject {
    override class var entityName: String { "Post" }
    @Attribute var labelText = "\n"
}

/// …version 2 keeps them as rows of their own entity.
final class PostV2: ManagedObject {
    override class var entityName: String { "Post" }
    @Attribute var labelText = "\n"  // left unused
}

final class PostLabel: ManagedObject {
    @Attribute var text = ""
    @ToOne(onDestinationDelete: .cascade) var post: PostV2?
    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\PostLabel.text, \PostLabel.post, unique: true)]
    }
}

/// Version 2 of a label: a column more (inferred).
final class PostLabelV2: ManagedObject {
    override class var entityName: String { "PostLabel" }
    @Attribute var text = ""
    @Attribute var color = "none"
    @ToOne(onDestinationDelete: .cascade) var post: PostV2?
}

/// Moves every post's labels into rows, a page of posts at a time (the memory it
/// takes does not grow with the store).
func labelsToRows(pageSize: Int64) -> Migration {
    Migration("labels-to-rows", phase: .afterSchema) { db in
        let last = try db.integer("SELECT MAX(id) FROM Post") ?? 0
        var start: Int64 = 0
        while start < last {
            try db.execute(
                """
                WITH RECURSIVE split(post, rest, label) AS (
                    SELECT id, substr(labelText, 2), NULL FROM Post WHERE id > \(start) AND id <= \(start + pageSize)
                    UNION ALL
                    SELECT post, substr(rest, instr(rest, char(10)) + 1), substr(rest, 1, instr(rest, char(10)) - 1)
                    FROM split WHERE instr(rest, char(10)) > 0
                )
                INSERT OR IGNORE INTO PostLabel (text, post)
                SELECT label, post FROM split WHERE label IS NOT NULL AND label != ''
                """)
            start += pageSize
        }
    }
}

@Suite struct MigrationTests {
    let rename = Migration("2026-11-rename-text") { db in
        // Quoted: the same statement on SQLite and PostgreSQL.
        try db.execute(#"ALTER TABLE "Journal" RENAME COLUMN "text" TO "body""#)
    }

    func temporaryStore(_ kind: StoreKind = .sqlite) throws -> URL {
        let directory = ScratchDirectory.path("migration")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return try kind.newStoreURL(in: directory)
    }

    @Test(arguments: StoreKind.allCases) func explicitMigrationsRunOnceThenTheSchemaIsExtended(_ kind: StoreKind) throws
    {
        let url = try temporaryStore(kind)
        do {
            let v1 = try PersistentContainer.open(url: url, schema: try Schema([JournalV1.self]))
            let context = v1.newBackgroundContext()
            JournalV1(context: context).text = "kept"
            try context.save()
            v1.close()
        }
        let v2 = try PersistentContainer.open(url: url, schema: try Schema([JournalV2.self], migrations: [rename]))
        let rows = try v2.newBackgroundContext().fetch(FetchRequest<JournalV2>())
        #expect(rows.map(\.body) == ["kept"])
        #expect(rows.map(\.stars) == [3])  // the new column got its default
        v2.close()
        // Reopening does not run the migration again (it would fail: no column 'text').
        try PersistentContainer.open(url: url, schema: try Schema([JournalV2.self], migrations: [rename])).close()
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

    @Test(arguments: [false, true])
    func aStoreWithAMigrationThisVersionDoesNotKnowIsRefusedAndLeftAlone(readOnly: Bool) throws {
        let url = try temporaryStore()
        do {
            let v2 = try PersistentContainer(
                storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename]))
            let context = v2.newBackgroundContext()
            JournalV2(context: context).body = "kept"
            try context.save()
            v2.close()
        }
        // A newer program applied a migration this one does not declare.
        let newer = Migration("2099-01-future") { _ in }
        _ = try PersistentContainer(
            storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename, newer])
        ).close()
        let before = try Data(contentsOf: url)
        var options = PersistentContainer.Options()
        options.readOnly = readOnly
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(
                storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename]), options: options)
        }
        #expect(error?.code == .newerStore)
        #expect(
            error?.message
                == "Could not open the store \(url.path): it was written by a newer version of this program (it has "
                + "applied the migration '2099-01-future', which this version does not know); nothing was changed: "
                + "upgrade to open it")
        #expect(FileManager.default.fileExists(atPath: url.path))
        #expect(PersistentContainer.quarantinedStore(of: url) == nil)
        #expect(try Data(contentsOf: url) == before)
        // The newer program still opens it, with its rows.
        let again = try PersistentContainer(
            storeURL: url, schema: try Schema([JournalV2.self], migrations: [rename, newer]))
        #expect(try again.newBackgroundContext().fetch(FetchRequest<JournalV2>()).map(\.body) == ["kept"])
    }

    @Test func aMigrationAfterTheSchemaFillsANewEntityPageByPage() throws {
        let url = try temporaryStore()
        let count = 2_500
        do {
            let v1 = try PersistentContainer(storeURL: url, schema: try Schema([PostV1.self]))
            let context = v1.newBackgroundContext()
            for i in 0..<count {
                let post = PostV1(context: context)
                post.labelText = i % 5 == 0 ? "\n" : "\nall\nmod\(i % 3)\n"
            }
            try context.save()
            v1.close()
        }
        let schema = try Schema([PostV2.self, PostLabel.self], migrations: [labelsToRows(pageSize: 97)])
        let v2 = try PersistentContainer(storeURL: url, schema: schema)
        let context = v2.newBackgroundContext()
        let labels = try context.fetch(FetchRequest<PostLabel>())
        #expect(labels.count == 2 * (count - count / 5))
        func posts(labelled text: String) -> Set<Int64> {
            Set(labels.filter { $0.text == text }.compactMap { $0.post?.objectID.rowID })
        }
        // Post i (from 0) has row ID i + 1.
        let labelled: [Int64] = (0..<Int64(count)).filter { $0 % 5 != 0 }
        #expect(posts(labelled: "all") == Set(labelled.map { $0 + 1 }))
        let mod1: [Int64] = labelled.filter { $0 % 3 == 1 }
        #expect(posts(labelled: "mod1") == Set(mod1.map { $0 + 1 }))
        // New rows take IDs after the migrated ones, and the labels go with their post.
        let label = PostLabel(context: context)
        label.text = "new"
        label.post = labels.first { $0.text == "all" }?.post
        try context.save()
        #expect(label.objectID.rowID == Int64(labels.count) + 1)
        v2.close()
        // Reopening does not run it again (it would insert nothing, but it must not run).
        let again = try PersistentContainer(storeURL: url, schema: schema)
        #expect(try again.newBackgroundContext().fetch(FetchRequest<PostLabel>()).count == labels.count + 1)
    }

    /// A migration may insert rows that link to others, and the schema's own changes to
    /// their table follow in the same open. (On PostgreSQL, links are checked at commit:
    /// rows inserted with their checks still pending made the `ALTER TABLE` that adds the
    /// column fail — "cannot ALTER TABLE because it has pending trigger events".)
    @Test(arguments: StoreKind.allCases) func aMigrationThatInsertsLinkedRowsIsFollowedByTheSchemasChanges(
        _ kind: StoreKind
    ) throws {
        let url = try temporaryStore(kind)
        let post: Int64 = try {
            let v1 = try PersistentContainer.open(url: url, schema: try Schema([PostV2.self, PostLabel.self]))
            defer { v1.close() }
            let context = v1.newBackgroundContext()
            let post = PostV2(context: context)
            try context.save()
            return post.objectID.rowID
        }()
        let labelFirst = Migration("2026-11-label-the-first-post") { db in
            try db.execute(
                #"INSERT INTO "PostLabel" ("id", "_version", "text", "post") VALUES (100, 1, 'first', \#(post))"#)
        }
        let v2 = try PersistentContainer.open(
            url: url, schema: try Schema([PostV2.self, PostLabelV2.self], migrations: [labelFirst]))
        defer { v2.close() }
        let context = v2.newBackgroundContext()
        let labels = try context.fetch(FetchRequest<PostLabelV2>())
        #expect(labels.map(\.text) == ["first"])
        #expect(labels.map(\.color) == ["none"])
        #expect(labels.map { $0.post?.objectID.rowID } == [post])
    }

    /// On PostgreSQL, a migration's rows that link to nothing fail that migration, by name,
    /// and the store is left as it was. (SQLite does not check links a migration writes.)
    @Test(arguments: [StoreKind.postgresql]) func aMigrationsDanglingLinkFailsThatMigration(_ kind: StoreKind) throws {
        let url = try temporaryStore(kind)
        try PersistentContainer.open(url: url, schema: try Schema([PostV2.self, PostLabel.self])).close()
        let dangling = Migration("2026-11-dangling-label") { db in
            try db.execute(#"INSERT INTO "PostLabel" ("id", "_version", "text", "post") VALUES (7, 1, 'lost', 42)"#)
        }
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer.open(
                url: url, schema: try Schema([PostV2.self, PostLabelV2.self], migrations: [dangling]))
        }
        #expect(error?.code == .migration)
        #expect(error?.message.contains("migration '2026-11-dangling-label' failed") == true)
        let v1 = try PersistentContainer.open(url: url, schema: try Schema([PostV2.self, PostLabel.self]))
        defer { v1.close() }
        #expect(try v1.newBackgroundContext().fetch(FetchRequest<PostLabel>()).isEmpty)
    }

    @Test func aRelationshipToAnEntityOutsideTheSchemaIsRefused() throws {
        let error = #expect(throws: PersistenceError.self) { try Schema([Note.self]) }
        #expect(error?.message == "Note.folder points at Folder, which is not in the schema")
    }
}
