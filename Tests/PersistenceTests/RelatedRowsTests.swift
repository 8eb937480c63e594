import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// A post that keeps its labels twice: as rows (``Label``, what queries use) and in its own
/// `labelText` column (what it reads), kept in step by its `willSave` through the save's
/// effects — the shape of a denormalised to-many.
final class Labelled: ManagedObject {
    @Attribute var title = ""
    @Attribute var labelText = "\n"

    var labels: Set<String> {
        get { Set(labelText.split(separator: "\n").map(String.init)) }
        set { labelText = "\n" + newValue.sorted().map { $0 + "\n" }.joined() }
    }

    override func willSave() {
        guard let effects = saveEffects, !isDeleted else { return }
        let committed = isInserted ? "\n" : committedValue(for: \.labelText) ?? labelText
        let pending = effects.shared(Pending.self) {
            let pending = Pending()
            effects.beforeTransaction {
                for (id, (old, new)) in pending.changes {
                    let removed = old.subtracting(new)
                    if !removed.isEmpty {
                        try effects.delete(FetchRequest<Label>(predicate: \.post == id && .in(\.text, removed)))
                    }
                    for text in new.subtracting(old) {
                        effects.insertRow(Label.self) {
                            $0[\.text] = text
                            $0[\.post] = id
                        }
                    }
                }
            }
            return pending
        }
        let old = Set(committed.split(separator: "\n").map(String.init))
        pending.changes[objectID] = (old, labels)
    }

    static func labelled(_ text: String) -> FetchPredicate<Labelled> {
        .related(Label.self, via: \.post, where: \.text == text, unsaved: .contains(\.labelText, "\n\(text)\n"))
    }

    final class Pending {
        var changes: [ManagedObjectID: (Set<String>, Set<String>)] = [:]
    }
}

final class Label: ManagedObject {
    @Attribute var text = ""
    @ToOne(onDestinationDelete: .cascade) var post: Labelled?
    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\Label.text, \Label.post, unique: true)]
    }
}

@Suite struct RelatedRowsTests {
    func store(_ kind: StoreKind = .sqlite) throws -> PersistentContainer {
        let directory = ScratchDirectory.path("related-rows")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return try PersistentContainer.open(
            url: try kind.newStoreURL(in: directory), schema: try Schema([Labelled.self, Label.self]))
    }

    func labels(_ container: PersistentContainer) throws -> [String] {
        let context = container.newBackgroundContext()
        return try context.fetch(FetchRequest<Label>()).map { "\($0.post?.title ?? "-"):\($0.text)" }.sorted()
    }

    @Test(arguments: StoreKind.allCases) func effectsInsertAndDeleteRowsFromTheObjectsFinalState(_ kind: StoreKind)
        throws
    {
        let container = try store(kind)
        defer { container.close() }
        let context = container.newBackgroundContext()
        let post = Labelled(context: context)
        post.title = "p"
        post.labels = ["a", "b"]
        try context.save()
        let first = try labels(container)
        #expect(first == ["p:a", "p:b"])
        post.labels = ["b", "c"]
        try context.save()
        #expect(try labels(container) == ["p:b", "p:c"])
        context.delete(post)
        try context.save()
        #expect(try labels(container) == [])
    }

    @Test(arguments: StoreKind.allCases) func aRelatedPredicateSaysTheSameInSQLAndInMemoryAndItsNegationToo(
        _ kind: StoreKind
    ) throws {
        let container = try store(kind)
        defer { container.close() }
        let context = container.newBackgroundContext()
        for (title, labels) in [("ab", ["a", "b"]), ("a", ["a"]), ("none", [])] {
            let post = Labelled(context: context)
            post.title = title
            post.labels = Set(labels)
        }
        try context.save()
        // A label row that points at nothing: `NOT IN` a list holding NULL must still be true.
        let orphan = Label(context: context)
        orphan.text = "b"
        try context.save()

        func titles(_ predicate: FetchPredicate<Labelled>, in context: ManagedObjectContext) throws -> [String] {
            try context.fetch(FetchRequest<Labelled>(predicate: predicate)).map(\.title)
        }
        let fresh = container.newBackgroundContext()
        #expect(try titles(Labelled.labelled("a"), in: fresh) == ["ab", "a"])
        #expect(try titles(Labelled.labelled("a") && Labelled.labelled("b"), in: fresh) == ["ab"])
        #expect(try titles(!Labelled.labelled("b"), in: fresh) == ["a", "none"])
        #expect(try titles(Labelled.labelled("z"), in: fresh) == [])

        // Unsaved: judged by the object's own values (its rows come with its save).
        let a = try #require(try fresh.fetch(FetchRequest<Labelled>(predicate: \.title == "a")).first)
        a.labels = ["a", "b"]
        #expect(try titles(Labelled.labelled("b"), in: fresh) == ["ab", "a"])
        #expect(try titles(!Labelled.labelled("b"), in: fresh) == ["none"])
        #expect(try fresh.count(for: FetchRequest<Labelled>(predicate: !Labelled.labelled("b"))) == 1)
    }
}
