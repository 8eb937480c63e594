import Foundation
import Persistence

final class Shelf: ManagedObject {
    @Attribute(.unique) var name = ""
    @ToMany(inverse: \Book.shelf, deleteRule: .cascade) var books: [Book]
}

final class Book: ManagedObject {
    @Attribute(.indexed) var title = ""
    @Attribute var added = Date.distantPast
    @Attribute var coverFile: String?
    @ToOne var shelf: Shelf?

    override func awakeFromInsert() {
        setPrimitiveValue(Date(), for: \.added)  // once in the object's life
    }
    override func prepareForDeletion() {
        // Cancel work in progress for this book here; never remove files here.
    }
    override func willSave() {
        // Plan the clean-up when the deletion is about to be written: the row
        // commits or rolls back with the deletion itself, and the work runs
        // only after the commit (never for a rollback, a failed or a child save).
        guard isDeleted, let coverFile, let effects = saveEffects else { return }
        effects.insert(FileRemoval.self) { $0.path = coverFile }
        effects.afterCommit { try? FileManager.default.removeItem(atPath: coverFile) }
    }
}

final class FileRemoval: ManagedObject {
    @Attribute var path = ""
}

func bookshelfExample(in directory: URL) async throws -> [String] {
    let container = try PersistentContainer(
        storeURL: directory.appending(path: "store.sqlite"),
        schema: try Schema([Shelf.self, Book.self, FileRemoval.self]))

    return try await container.performBackgroundTask { context in
        let shelf = Shelf(context: context)
        shelf.name = "Kitchen"
        for title in ["Bread", "Soup"] {
            let book = Book(context: context)
            book.title = title
            book.shelf = shelf
        }
        try context.save()  // willSave → one transaction → didSave

        let books = try context.fetch(
            FetchRequest<Book>(predicate: \.shelf == shelf && \.title != "", sortBy: [.init(\.title)]))
        context.delete(books[0])  // prepareForDeletion runs now…
        context.rollback()  // …and the book is back; nothing was removed
        return shelf.books.map(\.title)
    }
}
