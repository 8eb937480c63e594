import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// A type another module owns: it declares no to-many to the entities that point at it.
final class Paper: LoggedObject {
    @Attribute var title = ""
}

/// Deleted with its paper.
final class Review: LoggedObject {
    @Attribute var text = ""
    @ToOne(onDestinationDelete: .cascade) var paper: Paper?
}

/// Unlinked when its paper goes.
final class Citation: ManagedObject {
    @ToOne(onDestinationDelete: .nullify) var paper: Paper?
}

/// Its paper cannot go while it points at it.
final class Embargo: ManagedObject {
    @ToOne(onDestinationDelete: .deny) var paper: Paper?
}

/// An inverse and a rule of its own: refused.
final class Shelved: ManagedObject {
    @ToOne(onDestinationDelete: .cascade) var rack: Rack?
}

final class Rack: ManagedObject {
    @ToMany(inverse: \Shelved.rack) var items: [Shelved]
}

/// Named like ``Paper``.
final class OtherPaper: ManagedObject {
    override class var entityName: String { "Paper" }
}

/// Takes `Paper`'s name in lower case: one table for SQLite, and for PostgreSQL unquoted.
final class LowerPaper: ManagedObject {
    override class var entityName: String { "paper" }
}

/// Takes the name of the store's own tables.
final class PrivateTable: ManagedObject {
    override class var entityName: String { "_Persistence_Links" }
}

/// Takes the name of the index of `Review.paper`, in upper case.
final class IndexNamed: ManagedObject {
    override class var entityName: String { "REVIEW_PAPER_INDEX" }
}

/// `@ToOne(onDestinationDelete:)`: a to-one relationship that says what deleting its
/// destination does to it, for destinations that cannot declare the to-many.
@Suite struct DestinationDeleteRuleTests {
    static let types: [ManagedObject.Type] = [Paper.self, Review.self, Citation.self, Embargo.self]

    func store(_ types: [ManagedObject.Type] = Self.types, at url: URL? = nil, kind: StoreKind = .sqlite) throws
        -> PersistentContainer
    {
        let directory = ScratchDirectory.path("destination-rules")
        let url = try url ?? kind.newStoreURL(in: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return try PersistentContainer.open(url: url, schema: try Schema(types))
    }

    @Test(arguments: StoreKind.allCases) func deletingTheDestinationCascadesNullifiesOrIsDenied(_ kind: StoreKind)
        throws
    {
        let container = try store(kind: kind)
        defer { container.close() }
        let log = HookLog()
        let context = container.newBackgroundContext(name: "c")
        context.userInfo["log"] = log
        let (paper, kept) = (Paper(context: context), Paper(context: context))
        let review = Review(context: context)
        review.paper = paper
        let citation = Citation(context: context)
        citation.paper = paper
        let embargo = Embargo(context: context)
        embargo.paper = kept
        try context.save()

        context.delete(paper)
        #expect(review.isDeleted)
        #expect(log.events.contains("prepareForDeletion \(review.objectID) @c"))
        #expect(citation.paper == nil)
        // A review committed by another context after the delete is reached in the store.
        let other = container.newBackgroundContext()
        let late = Review(context: other)
        late.paper = try other.existingObject(with: paper.objectID, as: Paper.self)
        try other.save()
        try context.save()
        let fresh = container.newBackgroundContext()
        #expect(try fresh.count(for: FetchRequest<Review>()) == 0)
        #expect(try fresh.fetch(FetchRequest<Citation>()).map { $0.paper == nil } == [true])

        context.delete(kept)
        let error = #expect(throws: PersistenceError.self) { try context.save() }
        #expect(
            error?.message
                == "Paper \(kept.objectID.rowID) cannot be deleted: Embargo \(embargo.objectID.rowID) points at it "
                + "through Embargo.paper (deny rule)")
        context.rollback()
        let batch = #expect(throws: PersistenceError.self) { try context.batchDelete(FetchRequest<Paper>()) }
        #expect(batch?.message == error?.message)
    }

    @Test(arguments: StoreKind.allCases) func aBatchDeleteCascadesAndNullifies(_ kind: StoreKind) throws {
        let container = try store(kind: kind)
        defer { container.close() }
        let context = container.newBackgroundContext()
        let paper = Paper(context: context)
        Review(context: context).paper = paper
        Citation(context: context).paper = paper
        try context.save()
        _ = try context.batchDelete(FetchRequest<Paper>())
        let fresh = container.newBackgroundContext()
        #expect(try fresh.count(for: FetchRequest<Review>()) == 0)
        #expect(try fresh.fetch(FetchRequest<Citation>()).map { $0.paper == nil } == [true])
    }

    /// Opened without the entity whose rows point at it, the store refuses to delete the
    /// destination rather than leave the link pointing at nothing.
    @Test(arguments: StoreKind.allCases) func aStoreOpenedWithoutTheEntityRefusesToDeleteWhatItPointsAt(
        _ kind: StoreKind
    ) throws {
        let url = try kind.newStoreURL(in: ScratchDirectory.path("destination-rules"))
        let with = try store(at: url)
        let context = with.newBackgroundContext()
        let (linked, free) = (Paper(context: context), Paper(context: context))
        let review = Review(context: context)
        review.paper = linked
        try context.save()
        with.close()

        let without = try store([Paper.self], at: url)
        defer { without.close() }
        let c = without.newBackgroundContext()
        c.delete(try c.existingObject(with: free.objectID))
        try c.save()
        c.delete(try c.existingObject(with: linked.objectID))
        let error = #expect(throws: PersistenceError.self) { try c.save() }
        #expect(
            error?.message
                == "Paper \(linked.objectID.rowID) cannot be deleted: Review \(review.objectID.rowID) points at it "
                + "through Review.paper, whose delete rule (cascade) this store cannot apply: it was opened without "
                + "the entity Review. Open it with Review in its schema to delete Paper \(linked.objectID.rowID)")
        c.rollback()
        #expect(throws: PersistenceError.self) { try c.batchDelete(FetchRequest<Paper>()) }
        #expect(try c.count(for: FetchRequest<Paper>()) == 1)
    }

    /// A link is a foreign key: a save that links to a row another save deleted and
    /// committed since fails, whether it links by object or by row, and saves nothing. The
    /// saving context cannot know: the store looks in the save's transaction.
    @Test(arguments: StoreKind.allCases) func aLinkToARowAnotherSaveDeletedFails(_ kind: StoreKind) throws {
        let container = try store(kind: kind)
        defer { container.close() }
        let setup = container.newBackgroundContext()
        let paper = Paper(context: setup)
        paper.title = "gone"
        try setup.save()
        let extractor = container.newBackgroundContext(name: "extractor")
        let read = try extractor.existingObject(with: paper.objectID, as: Paper.self)
        #expect(read.title == "gone")
        // Another context deletes the paper and commits.
        let remover = container.newBackgroundContext()
        remover.delete(try remover.existingObject(with: paper.objectID, as: Paper.self))
        try remover.save()

        let review = Review(context: extractor)
        review.text = "late"
        review.paper = read
        let byObject = #expect(throws: PersistenceError.self) { try extractor.save() }
        #expect(byObject?.code == .validation)
        #expect(
            byObject?.message
                == "\(review.objectID).paper points at \(paper.objectID), which is not in the store: another save "
                + "deleted it. Nothing was saved")
        extractor.rollback()

        let citation = Citation(context: extractor)  // written beside the rows: nothing of it is saved
        _ = citation
        try extractor.insertRows(Review.self, count: 3) { i, row in
            row[\.text] = "row \(i)"
            row[\.paper] = paper.objectID
        }
        let byRow = #expect(throws: PersistenceError.self) { try extractor.save() }
        #expect(
            byRow?.message
                == "A row of Review saved points at \(paper.objectID) through Review.paper, which is not in the store: "
                + "another save deleted it. Nothing was saved")
        let fresh = container.newBackgroundContext()
        #expect(try fresh.count(for: FetchRequest<Review>()) == 0)
        #expect(try fresh.count(for: FetchRequest<Citation>()) == 0)

        // A link to a row the same save inserts needs no look, and saves.
        let next = container.newBackgroundContext()
        let kept = Paper(context: next)
        let ids = try next.insertRows(Review.self, count: 2) { _, row in row[\.paper] = kept.objectID }
        try next.save()
        #expect(try fresh.count(for: FetchRequest<Review>()) == ids.count)
    }

    @Test func aSchemaRefusesARuleBesideAnInverseAndTwoEntitiesOfOneName() throws {
        let both = #expect(throws: PersistenceError.self) { try Schema([Shelved.self, Rack.self]) }
        #expect(
            both?.message
                == "Shelved.rack has an inverse to-many in Rack, whose delete rule says what deleting Rack does to it: "
                + "remove its onDestinationDelete rule")
        let twice = #expect(throws: PersistenceError.self) { try Schema([Paper.self, OtherPaper.self]) }
        #expect(
            twice?.message
                == "Two entities of the schema are named Paper (Paper and OtherPaper); give one another `entityName`")
    }

    /// A name the store would take for another, whatever its case, is refused before the
    /// store is touched: SQLite's names ignore case, and PostgreSQL folds unquoted ones.
    @Test func aSchemaRefusesANameTheStoreWouldTakeForAnother() throws {
        let folded = #expect(throws: PersistenceError.self) { try Schema([Paper.self, LowerPaper.self]) }
        #expect(
            folded?.message
                == "Two entities of the schema are named Paper and paper (Paper and LowerPaper), one name for the "
                + "store, which ignores case; give one another `entityName`")
        let own = #expect(throws: PersistenceError.self) { try Schema([Paper.self, PrivateTable.self]) }
        #expect(
            own?.message
                == "The entity PrivateTable cannot be named _Persistence_Links: names that begin with '_' (in any "
                + "case) are the store's own; give it another `entityName`")
        let index = #expect(throws: PersistenceError.self) {
            try Schema([Paper.self, Review.self, IndexNamed.self])
        }
        #expect(
            index?.message
                == "The entity IndexNamed cannot be named REVIEW_PAPER_INDEX: the store names an index of Review so; "
                + "give it another `entityName`")
        _ = try Schema([Paper.self, Review.self])
    }
}
