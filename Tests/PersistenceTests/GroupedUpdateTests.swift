import Foundation
import PersistencePostgreSQL
import TestScratch
import Testing

@testable import Persistence

/// A title kept in a search index, and a unique code.
final class IndexedCard: ManagedObject {
    @Attribute var title = ""
    @Attribute(.unique) var code = ""
    @Attribute var rank = 0
    override class var searchIndex: SearchIndex? { SearchIndex(SearchField("title", .attribute(\IndexedCard.title))) }
}

/// A save of many changed objects writes those of one entity and the same changed columns
/// with one statement a group (on SQLite: one FTS5 flush a statement, not a row): what they
/// hold, their versions, the search index and the errors come out as a row at a time.
@Suite struct GroupedUpdateTests {
    struct Store {
        let container: PersistentContainer
        init(_ kind: StoreKind) throws {
            let directory = try ScratchDirectory.make("grouped-updates")
            container = try PersistentContainer.open(
                url: try kind.newStoreURL(in: directory), schema: try Schema([IndexedCard.self]))
        }

        func cards(_ context: ManagedObjectContext? = nil) throws -> [IndexedCard] {
            try (context ?? container.newBackgroundContext()).fetch(
                FetchRequest<IndexedCard>(sortBy: [.init(\.code)]))
        }

        func found(_ word: String) throws -> [String] {
            try container.newBackgroundContext().fetch(
                FetchRequest<IndexedCard>(predicate: .matches(TextSearch([.init(word)])), sortBy: [.init(\.code)])
            ).map(\.code)
        }
    }

    /// 26 cards: `c00`…`c25`, titled "old N".
    func made(_ kind: StoreKind) throws -> (Store, ManagedObjectContext, [IndexedCard]) {
        let store = try Store(kind)
        let context = store.container.newBackgroundContext()
        for i in 0..<26 {
            let card = IndexedCard(context: context)
            card.title = "old \(i)"
            card.code = String(format: "c%02d", i)
        }
        try context.save()
        return (store, context, try store.cards(context))
    }

    @Test(arguments: StoreKind.allCases) func manyUpdatesAreWrittenAndIndexedAsOneAtATime(_ kind: StoreKind) throws {
        let (store, context, cards) = try made(kind)
        for card in cards[0..<21] { card.title = "renamed \(card.code)" }  // one group (16), then 4, then 1
        for card in cards[21..<26] { card.rank = 7 }  // another group: other columns
        cards[25].title = "renamed too"  // and one of them changes both
        try context.save()
        let stored = try store.cards()
        #expect(stored[0..<21].allSatisfy { $0.title == "renamed \($0.code)" && $0.rank == 0 })
        #expect(stored[21..<25].allSatisfy { $0.title.hasPrefix("old") && $0.rank == 7 })
        #expect(stored[25].title == "renamed too" && stored[25].rank == 7)
        #expect(try store.found("renamed").count == 22)
        #expect(try store.found("old") == ["c21", "c22", "c23", "c24"])
        #expect(try store.container.checkSearchIndex(fix: false) == [])

        // The versions the save stepped are the ones the store holds: a second save of the
        // same objects is no conflict.
        for card in cards { card.title = "again" }
        try context.save()
        #expect(try store.found("again").count == 26)
    }

    /// The statement of a group: its rows a `VALUES` list joined by ID (and version), each
    /// row's new version returned with its ID.
    @Test func aGroupIsOneStatement() throws {
        let sql = EntitySQL(IndexedCard.entityDescription, dialect: .sqlite)
        let title = try #require(IndexedCard.entityDescription.storedProperties.firstIndex { $0.name == "title" })
        let rank = try #require(IndexedCard.entityDescription.storedProperties.firstIndex { $0.name == "rank" })
        #expect(
            sql.update(slots: [title, rank], rows: 2, versioned: true)
                == "UPDATE \"IndexedCard\" SET \"title\" = v.column3, \"rank\" = v.column4, \"_version\" = "
                + "\"IndexedCard\".\"_version\" + 1 FROM (VALUES (?, ?, ?, ?), (?, ?, ?, ?)) AS v WHERE "
                + "\"IndexedCard\".\"id\" = v.column1 AND \"IndexedCard\".\"_version\" = v.column2 RETURNING "
                + "\"IndexedCard\".\"id\", \"IndexedCard\".\"_version\"")
        #expect(
            sql.update(slots: [rank], rows: 1, versioned: false)
                == "UPDATE \"IndexedCard\" SET \"rank\" = v.column2, \"_version\" = \"IndexedCard\".\"_version\" + 1 "
                + "FROM (VALUES (?, ?)) AS v WHERE \"IndexedCard\".\"id\" = v.column1 RETURNING "
                + "\"IndexedCard\".\"id\", \"IndexedCard\".\"_version\"")
    }

    /// A group that breaks a unique constraint writes none of its rows, and the error names
    /// the one object at fault, as a row at a time does.
    @Test(arguments: StoreKind.allCases) func aConstraintInAGroupNamesItsObjectAndWritesNothing(_ kind: StoreKind)
        throws
    {
        let (store, context, cards) = try made(kind)
        for (i, card) in cards[0..<10].enumerated() { card.code = "n\(i)" }
        cards[6].code = "c20"  // taken by a card this save does not change
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .constraint)
        #expect(error.objectIDs == [cards[6].objectID])
        #expect(error.message.hasPrefix("Could not save \(cards[6].objectID): "))
        #expect(try store.cards().map(\.code) == (0..<26).map { String(format: "c%02d", $0) })
        cards[6].code = "n6"
        try context.save()
        #expect(try store.cards().filter { $0.code.hasPrefix("n") }.count == 10)
    }
}
