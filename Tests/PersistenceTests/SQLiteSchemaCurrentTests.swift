import Foundation
import PersistencePostgreSQL
import TestScratch
import Testing

import class GRDB.DatabaseQueue

@_spi(Testing) @testable import Persistence

/// Two searched entities, the name of one extending the other's (`Card`, `Card_archive`).
final class PrefixCard: ManagedObject {
    @Attribute var title = ""
    override class var entityName: String { "Card" }
    override class var searchIndex: SearchIndex? { SearchIndex(SearchField("title", .attribute(\PrefixCard.title))) }
}

final class PrefixCardArchive: ManagedObject {
    @Attribute var title = ""
    override class var entityName: String { "Card_archive" }
    override class var searchIndex: SearchIndex? {
        SearchIndex(SearchField("title", .attribute(\PrefixCardArchive.title)))
    }
}

/// The open of a SQLite store whose schema is current is only read: every object an open
/// would make (tables, columns, indexes, the links, the migrations, the sequences, the tally
/// and search triggers) is found as it would make it, so the open takes no write lock. Any
/// difference is not current, and the open makes it again, as every open did.
@Suite struct SQLiteSchemaCurrentTests {
    static let entities: [ManagedObject.Type] = [
        IndexedCard.self, IndexedOpenItem.self, IndexedNote.self, IndexedLabel.self, PartiallyIndexedItem.self,
    ]
    static let schema = try! Schema(entities, migrations: [Migration("first") { _ in }])

    /// A store of `schema`, opened, given a row of each entity, and closed.
    func made() throws -> URL {
        let url = try ScratchDirectory.make("schema-current").appending(path: "store.sqlite")
        let container = try PersistentContainer.open(url: url, schema: Self.schema)
        let context = container.newBackgroundContext()
        try context.performAndWait {
            IndexedCard(context: context).title = "gull"
            IndexedOpenItem(context: context).label = "a"
            let note = IndexedNote(context: context)
            let label = IndexedLabel(context: context)
            label.note = note
            _ = PartiallyIndexedItem(context: context)
            try context.save()
        }
        container.close()
        return url
    }

    func isCurrent(_ url: URL, _ schema: Schema = schema) throws -> Bool {
        let queue = try DatabaseQueue(path: url.path)
        defer { try? queue.close() }
        let sql = EntityMap(schema) { EntitySQL($0, dialect: .sqlite) }
        return try queue.read { try SQLiteStore.schemaIsCurrent($0, schema: schema, sql: sql) }
    }

    func execute(_ url: URL, _ statement: String) throws {
        let queue = try DatabaseQueue(path: url.path)
        defer { try? queue.close() }
        try queue.write { try $0.execute(sql: statement) }
    }

    @Test func aStoreAnOpenMadeIsCurrent() throws {
        let url = try made()
        #expect(try isCurrent(url))
        let later = try Schema(Self.entities + [AddedOpenItem.self], migrations: Self.schema.migrations)
        #expect(try !isCurrent(url, later), "a new entity's table is missing")
    }

    @Test(arguments: [
        #"DROP INDEX "IndexedLabel_text_note_unique""#,
        #"DROP INDEX "PartiallyIndexedItem_digest_where_state_index""#,
        #"DROP TRIGGER "_persistence_tally_OpenItem_insert""#,
        "DROP TABLE _persistence_tallies",
        #"DROP TRIGGER "_persistence_search_IndexedCard_insert""#,
        #"CREATE TRIGGER "_persistence_search_IndexedCard_related_0" AFTER INSERT ON "IndexedCard" BEGIN SELECT 1; END"#,
        "DELETE FROM _persistence_links",
        "UPDATE _persistence_links SET rule = 'nullify'",
        "DELETE FROM _persistence_migrations",
        #"DELETE FROM _persistence_sequence WHERE entity = 'IndexedNote'"#,
        #"UPDATE _persistence_sequence SET next = 1 WHERE entity = 'IndexedCard'"#,
    ])
    func anythingAnOpenWouldMakeAgainIsNotCurrentAndTheNextOpenMakesIt(_ damage: String) throws {
        let url = try made()
        try execute(url, damage)
        #expect(try !isCurrent(url))
        try PersistentContainer.open(url: url, schema: Self.schema).close()
        #expect(try isCurrent(url))
    }

    /// A sequence left behind its table's rows (rows given IDs by another program) is moved
    /// past them by the next open: the next object made takes a new ID.
    @Test func aSequenceBehindItsRowsIsMovedPastThem() throws {
        let url = try made()
        try execute(url, #"INSERT INTO "IndexedNote" ("id", "_version", "title") VALUES (40, 1, 'other')"#)
        #expect(try !isCurrent(url))
        let container = try PersistentContainer.open(url: url, schema: Self.schema)
        defer { container.close() }
        let context = container.newBackgroundContext()
        let id = try context.performAndWait {
            let note = IndexedNote(context: context)
            try context.save()
            return note.objectID.rowID
        }
        #expect(id == 41)
    }

    /// The open of a current store waits for no other process's write transaction (it used
    /// to take the write lock to find nothing to do): it opens within a busy timeout that
    /// the held lock outlasts.
    @Test func theOpenOfACurrentStoreTakesNoWriteLock() throws {
        let url = try made()
        let other = try DatabaseQueue(path: url.path)
        defer { try? other.close() }
        // A commit first, so that the `-wal` is not empty (GRDB makes sure of one by writing).
        try other.write { try $0.execute(sql: #"UPDATE "IndexedNote" SET "title" = 'held'"#) }
        try other.writeWithoutTransaction { db in
            try db.execute(sql: "BEGIN IMMEDIATE")
            defer { try? db.execute(sql: "ROLLBACK") }
            var options = PersistentContainer.Options()
            options.busyTimeout = 0.2
            let container = try PersistentContainer.open(url: url, schema: Self.schema, options: options)
            let context = container.newBackgroundContext()
            let titles = try context.performAndWait { try context.fetch(FetchRequest<IndexedNote>()).map(\.title) }
            #expect(titles == ["held"])
            container.close()
        }
    }

    /// Entities `Card` and `Card_archive`, both searched: a second open keeps both indexes
    /// (`Card_archive`'s triggers are not taken for `Card`'s, which made `Card` look changed at
    /// every open, and dropped `Card_archive`'s triggers without making them again).
    @Test func aSecondOpenKeepsTheSearchTriggersOfAnEntityWhoseNameExtendsAnother() throws {
        let url = try ScratchDirectory.make("review-prefix").appending(path: "store.sqlite")
        let schema = try Schema([PrefixCard.self, PrefixCardArchive.self])
        do {
            let container = try PersistentContainer(storeURL: url, schema: schema)
            let context = container.newBackgroundContext()
            try context.performAndWait {
                PrefixCard(context: context).title = "gull"
                PrefixCardArchive(context: context).title = "alpha"
                try context.save()
            }
            container.close()
        }
        let container = try PersistentContainer(storeURL: url, schema: schema)
        let context = container.newBackgroundContext()
        try context.performAndWait {
            PrefixCardArchive(context: context).title = "zebra"
            try context.save()
        }
        let found = try container.newBackgroundContext().fetch(
            FetchRequest<PrefixCardArchive>(predicate: .matches(TextSearch([.init("zebra")])))
        ).map(\.title)
        container.close()
        let queue = try DatabaseQueue(path: url.path)
        defer { try? queue.close() }
        let triggers = try queue.read {
            try String.fetchAll(
                $0, sql: "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%search%' ORDER BY name")
        }
        #expect(
            triggers.filter { $0.hasPrefix("_persistence_search_Card_archive_") }.count == 3, "\(triggers)")
        #expect(found == ["zebra"])
    }

    /// Another process adds an entity's table (and its sequence row) between the writer's
    /// check and its upkeep: the upkeep reads the schema again under the lock (GRDB's cache of
    /// what the check read took the table for gone, and quarantined a healthy store).
    @Test func anotherProcessAddingATableDuringTheOpenDoesNotQuarantine() throws {
        let url = try made()
        // Open throughout, after a commit: the `-wal` is not empty, and GRDB writes nothing at
        // open (its write would have made the writer read the schema again).
        let other = try DatabaseQueue(path: url.path)
        defer { try? other.close() }
        try other.write { try $0.execute(sql: #"UPDATE "IndexedNote" SET "title" = 'held'"#) }
        var options = PersistentContainer.Options()
        options.createsStore = false
        options.beforeUpkeep = {
            try? other.write { db in
                try db.execute(sql: #"CREATE TABLE "Foreign" ("id" INTEGER PRIMARY KEY, "_version" INTEGER NOT NULL)"#)
                try db.execute(sql: "INSERT INTO _persistence_sequence (entity, next) VALUES ('Foreign', 1)")
            }
        }
        let schema = try Schema(Self.entities + [AddedOpenItem.self], migrations: Self.schema.migrations)
        let container = try PersistentContainer(storeURL: url, schema: schema, options: options)
        container.close()
        let quarantine = url.deletingLastPathComponent().appending(path: "quarantine")
        #expect(!FileManager.default.fileExists(atPath: quarantine.path), "the store was quarantined")
        #expect(try other.read { try $0.tableExists("Foreign") && $0.tableExists("AddedOpenItem") })
    }
}
