import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// A row in a group; its `willBatchDelete` runs `userInfo["sprouting"]`, when set, on each page.
final class Sprout: ManagedObject {
    @Attribute var group = 0

    override class func willBatchDelete(_ rows: [ObjectSnapshot], effects: SaveEffects) throws {
        guard let sprouting = effects.userInfo["sprouting"] as? Sprouting else { return }
        try sprouting.page(rows.map(\.objectID.rowID), effects)
    }
}

/// A mark on a sprout: a sprout with a mark `"doomed"` is selected too.
final class SproutMark: ManagedObject {
    @Attribute var label = ""
    @ToOne(onDestinationDelete: .cascade) var sprout: Sprout?
}

/// What the deletion hook of ``Sprout`` does with each page: records it, then runs `body`.
final class Sprouting: @unchecked Sendable {
    var pages: [[Int64]] = []
    let body: (_ index: Int, _ page: [Int64], SaveEffects) throws -> Void

    init(_ body: @escaping (_ index: Int, _ page: [Int64], SaveEffects) throws -> Void = { _, _, _ in }) {
        self.body = body
    }

    func page(_ ids: [Int64], _ effects: SaveEffects) throws {
        pages.append(ids)
        try body(pages.count - 1, ids, effects)
    }
}

/// `batchDelete` selects its rows a page at a time, each page by "ID above the last page's"
/// (memory holds one page, however many rows match), in one transaction.
@Suite struct PagedBatchDeleteTests {
    /// A store with sprouts, and a context on it.
    struct Fixture {
        let container: PersistentContainer
        let context: ManagedObjectContext

        init(_ kind: StoreKind) throws {
            let directory = try ScratchDirectory.make("persistence-tests")
            container = try PersistentContainer.open(
                url: try kind.newStoreURL(in: directory),
                schema: try Schema(allEntities + [Sprout.self, SproutMark.self]))
            context = container.newBackgroundContext(name: "test")
        }

        /// Inserts sprouts of the given groups, in order; returns their IDs.
        func sprouts(_ groups: [Int]) throws -> [Int64] {
            let ids = try context.insertRows(Sprout.self, count: groups.count) { i, row in row[\.group] = groups[i] }
            try context.save()
            return ids.map(\.rowID)
        }

        func stored(_ predicate: FetchPredicate<Sprout>? = nil) throws -> [Int64] {
            try container.newBackgroundContext().fetchObjectIDs(FetchRequest<Sprout>(predicate: predicate)).map(\.rowID)
        }

        /// Group 1, or a mark "doomed".
        var doomed: FetchPredicate<Sprout> {
            \.group == 1 || .related(SproutMark.self, via: \.sprout, where: \.label == "doomed", unsaved: .none)
        }
    }

    @Test(arguments: StoreKind.allCases) func everyMatchingRowGoesAcrossPagesAndTheRestStays(_ kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        let (context, doomed) = (fixture.context, fixture.doomed)
        // 1,300 rows: every third kept (group 2), the others doomed: three pages of 500 and less.
        let ids = try fixture.sprouts((0..<1_300).map { $0 % 3 == 0 ? 2 : 1 })
        let sprouting = Sprouting()
        context.userInfo["sprouting"] = sprouting
        let note = try context.batchDeleteNamingRanges(FetchRequest<Sprout>(predicate: doomed))

        let kept = ids.enumerated().filter { $0.offset % 3 == 0 }.map(\.element)
        #expect(try fixture.stored() == kept)
        #expect(sprouting.pages.map(\.count) == [500, 366])
        #expect(sprouting.pages.joined().sorted() == ids.filter { !kept.contains($0) })
        #expect(note.deletedRowRanges["Sprout"].map { RowIDSet($0).count } == 866)
    }

    /// Each page is selected when it is read: a row that has come to match by then (the
    /// first page's hook inserted it, or marked it) goes if its ID is above the last page's,
    /// and stays if below; rows that do not match stay.
    @Test(arguments: StoreKind.allCases) func rowsMatchingBetweenPagesGoAboveTheLastIDAndStayBelowIt(_ kind: StoreKind)
        throws
    {
        let fixture = try Fixture(kind)
        let (context, doomed) = (fixture.context, fixture.doomed)
        let ids = try fixture.sprouts(Array(repeating: 2, count: 10) + Array(repeating: 1, count: 1_000))
        let early = ids[0]  // group 2, below every doomed row
        let sprouting = Sprouting { index, _, effects in
            guard index == 0 else { return }
            effects.insert(Sprout.self) { $0.group = 1 }  // above the last ID: deleted by a later page
            effects.insert(Sprout.self) { $0.group = 2 }  // does not match: stays
            effects.insertRow(SproutMark.self) { row in
                row[\.label] = "doomed"
                row[\.sprout] = ManagedObjectID(entityName: Sprout.entityName, rowID: early)  // below: stays
            }
        }
        context.userInfo["sprouting"] = sprouting
        try context.batchDelete(FetchRequest<Sprout>(predicate: doomed))

        let left = try fixture.stored()
        #expect(left.count == 11)
        #expect(Array(left.prefix(10)) == Array(ids.prefix(10)))  // `early` is marked by now, and kept
        let inserted = try #require(left.last)
        #expect(inserted > ids.last!)  // the row of group 2 the hook inserted
        #expect(try fixture.stored(\.group == 1).isEmpty)  // the row of group 1 it inserted went too
        #expect(sprouting.pages.map(\.count) == [500, 500, 1])
        #expect(try fixture.stored(doomed) == [early])
    }

    @Test(arguments: StoreKind.allCases) func aFailureOnALaterPageRollsBackEveryPage(_ kind: StoreKind) throws {
        let fixture = try Fixture(kind)
        let (container, context, doomed) = (fixture.container, fixture.context, fixture.doomed)
        let ids = try fixture.sprouts(Array(repeating: 1, count: 1_200))
        struct Refused: Error {}
        let sprouting = Sprouting { index, _, effects in
            effects.insert(Plan.self) { $0.path = "page \(index)" }
            if index == 2 { throw Refused() }
        }
        context.userInfo["sprouting"] = sprouting
        #expect(throws: Refused.self) { try context.batchDelete(FetchRequest<Sprout>(predicate: doomed)) }

        #expect(sprouting.pages.map(\.count) == [500, 500, 200])  // two pages deleted, then the failure
        #expect(try fixture.stored() == ids)
        #expect(try container.newBackgroundContext().count(for: FetchRequest<Plan>()) == 0)
    }
}
