import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// A label on a note: one row per (note, text), looked up both ways.
final class IndexedNote: ManagedObject {
    @Attribute var title = ""
}

final class IndexedLabel: ManagedObject {
    @Attribute var text = ""
    @ToOne(onDestinationDelete: .cascade) var note: IndexedNote?

    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\IndexedLabel.text, \IndexedLabel.note, unique: true)]
    }
}

/// An item whose digest is indexed only while it is stored.
final class PartiallyIndexedItem: ManagedObject {
    @Attribute var digest = ""
    @Attribute var state = "stored"

    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\PartiallyIndexedItem.digest, where: \PartiallyIndexedItem.state, is: "stored")]
    }
}

/// Rows waiting in a queue, taken oldest first: the index of their row IDs holds the
/// waiting ones alone.
final class QueuedRow: ManagedObject {
    @Attribute var state = "queued"
    /// Who takes it (a queue's claim names the kinds it takes); indexed, as a job's is.
    @Attribute(.indexed) var kind = "work"

    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(rowIDsWhere: \QueuedRow.state, is: "queued")]
    }
}

/// An index that names a to-many relationship, which has no column.
final class BadlyIndexedNote: ManagedObject {
    @Attribute var title = ""
    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\BadlyIndexedNote.title, \BadlyIndexedNote.label)]
    }
    var label = ""  // not a persistent property
}

@Suite struct CompositeIndexTests {
    func temporaryStore() throws -> URL {
        let directory = ScratchDirectory.path("composite-index")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appending(path: "store.sqlite")
    }

    @Test(arguments: StoreKind.allCases) func aUniqueIndexOverTwoPropertiesRefusesOnlyTheSamePair(_ kind: StoreKind)
        throws
    {
        let directory = try temporaryStore().deletingLastPathComponent()
        let container = try PersistentContainer.open(
            url: try kind.newStoreURL(in: directory), schema: try Schema([IndexedNote.self, IndexedLabel.self]))
        let context = container.newBackgroundContext()
        let a = IndexedNote(context: context)
        let b = IndexedNote(context: context)
        for (text, note) in [("red", a), ("blue", a), ("red", b)] {
            let label = IndexedLabel(context: context)
            label.text = text
            label.note = note
        }
        try context.save()  // the same text on two notes, two texts on one note: allowed
        let twin = IndexedLabel(context: context)
        twin.text = "red"
        twin.note = a
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(error?.code == .constraint)
    }

    @Test func theStoreKeepsTheIndexUnderItsName() throws {
        let url = try temporaryStore()
        do {
            let container = try PersistentContainer(
                storeURL: url, schema: try Schema([IndexedNote.self, IndexedLabel.self]))
            container.close()
        }
        let names = try Self.indexes(of: "IndexedLabel", in: url)
        #expect(names.contains("IndexedLabel_text_note_unique"))
    }

    /// A partial index is made with its condition, under a name that says which column it
    /// filters on; fetches answer the same for the rows it holds and for the others.
    @Test func aPartialIndexHoldsTheRowsOfItsCondition() throws {
        let url = try temporaryStore()
        let container = try PersistentContainer(storeURL: url, schema: try Schema([PartiallyIndexedItem.self]))
        let context = container.newBackgroundContext()
        for (digest, state) in [("a", "stored"), ("a", "listed"), ("b", "listed"), ("b", "stored"), ("c", "listed")] {
            let item = PartiallyIndexedItem(context: context)
            item.digest = digest
            item.state = state
        }
        try context.save()
        let fresh = container.newBackgroundContext()
        func count(_ predicate: FetchPredicate<PartiallyIndexedItem>) throws -> Int {
            try fresh.count(for: FetchRequest<PartiallyIndexedItem>(predicate: predicate))
        }
        #expect(try count(\.digest == "a" && \.state == "stored") == 1)
        #expect(try count(.in(\.digest, ["a", "b", "c"]) && \.state == "stored") == 2)
        #expect(try count(\.digest == "c") == 1)
        #expect(try count(\.digest == "b" && \.state == "listed") == 1)
        container.close()

        let outcome = try ChildProcess(
            "/usr/bin/python3",
            [
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "print(c.execute('SELECT sql FROM sqlite_master WHERE name = ?', (sys.argv[2],)).fetchone()[0])",
                url.path, "PartiallyIndexedItem_digest_where_state_index",
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        #expect(
            outcome.stdoutText
                == "CREATE INDEX \"PartiallyIndexedItem_digest_where_state_index\" ON \"PartiallyIndexedItem\" "
                + "(\"digest\") WHERE \"state\" IS 'stored'\n")
    }

    /// An index of row IDs is made over `id`, with its condition; a fetch in ID order of the
    /// rows it holds walks it (SQLite's plan), and a claim takes the oldest of them.
    @Test func anIndexOfRowIDsHoldsTheRowIDsOfItsCondition() throws {
        let url = try temporaryStore()
        let container = try PersistentContainer(storeURL: url, schema: try Schema([QueuedRow.self]))
        let context = container.newBackgroundContext()
        for state in ["done", "queued", "done", "queued", "queued"] { QueuedRow(context: context).state = state }
        try context.save()
        let claimed = try context.claimRows(FetchRequest<QueuedRow>(predicate: \.state == "queued"), limit: 2) {
            _, row in row[\.state] = "taken"
        }
        #expect(claimed.map(\.objectID.rowID) == [2, 4])
        container.close()

        let outcome = try ChildProcess(
            "/usr/bin/python3",
            [
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "print(c.execute('SELECT sql FROM sqlite_master WHERE name = ?', (sys.argv[2],)).fetchone()[0]); "
                    + "[print(r[3]) for r in c.execute("
                    + "'EXPLAIN QUERY PLAN SELECT id FROM QueuedRow WHERE state IS ? ORDER BY id LIMIT 10', ('queued',))]",
                url.path, "QueuedRow_id_where_state_index",
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        #expect(
            outcome.stdoutText
                == "CREATE INDEX \"QueuedRow_id_where_state_index\" ON \"QueuedRow\" (\"id\") WHERE \"state\" IS 'queued'\n"
                + "SCAN QueuedRow USING INDEX QueuedRow_id_where_state_index\n")
    }

    @Test func anIndexOnSomethingThatIsNotAColumnIsRefused() throws {
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: try temporaryStore(), schema: try Schema([BadlyIndexedNote.self]))
        }
        #expect(error?.code == .misuse)
        #expect(
            error?.message.contains(
                "An index of BadlyIndexedNote names \\BadlyIndexedNote.label, which is not an attribute or to-one "
                    + "relationship of it") == true)
    }

    /// The names of `table`'s indexes, read with python3's sqlite3.
    static func indexes(of table: String, in url: URL) throws -> [String] {
        let outcome = try ChildProcess(
            "/usr/bin/python3",
            [
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "print('\\n'.join(r[1] for r in c.execute('PRAGMA index_list(' + sys.argv[2] + ')')))",
                url.path, table,
            ]
        ).wait()
        #expect(outcome.termination == .exited(0), "\(outcome.stderrText)")
        let data = outcome.stdout
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }
}
