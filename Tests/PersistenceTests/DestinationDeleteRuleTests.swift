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
}
