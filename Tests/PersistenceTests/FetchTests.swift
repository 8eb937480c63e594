import Foundation
import Persistence
import Testing

@Suite struct FetchTests {
    /// 12 notes: title "n00"…"n11", priority i % 4, body nil for even i.
    func seeded(_ kind: StoreKind = .sqlite) throws -> (TestStore, ManagedObjectContext) {
        let store = try TestStore(kind)
        let context = store.context()
        for i in 0..<12 {
            let note = Note(context: context)
            note.title = String(format: "n%02d", i)
            note.priority = i % 4
            note.body = i.isMultiple(of: 2) ? nil : "body \(i)"
        }
        try context.save()
        return (store, store.context("reader"))
    }

    func titles(_ context: ManagedObjectContext, _ request: FetchRequest<Note>) throws -> [String] {
        try context.fetch(request).map(\.title)
    }

    @Test(arguments: StoreKind.allCases) func predicates(_ kind: StoreKind) throws {
        let (_, context) = try seeded(kind)
        #expect(try titles(context, .init(predicate: \.title == "n03")) == ["n03"])
        #expect(try titles(context, .init(predicate: \.priority > 2)) == ["n03", "n07", "n11"])
        #expect(try titles(context, .init(predicate: \.priority <= 0)) == ["n00", "n04", "n08"])
        #expect(try titles(context, .init(predicate: .in(\.priority, [1, 3]) && \.title < "n04")) == ["n01", "n03"])
        #expect(try titles(context, .init(predicate: .hasPrefix(\.title, "n1"))) == ["n10", "n11"])
        #expect(try titles(context, .init(predicate: .hasSuffix(\.title, "1"))) == ["n01", "n11"])
        #expect(try titles(context, .init(predicate: .contains(\.body, "y 1"))) == ["n01", "n11"])
        #expect(
            try titles(context, .init(predicate: \.priority == 0 || \.title == "n01")) == ["n00", "n01", "n04", "n08"])
        #expect(try context.count(for: FetchRequest<Note>(predicate: \.body == nil)) == 6)
        // A comparison with a missing value is false, so its negation is true.
        #expect(try context.count(for: FetchRequest<Note>(predicate: !(\.body == "body 1"))) == 11)
        #expect(try context.count(for: FetchRequest<Note>(predicate: !(\.priority > 2))) == 9)
    }

    @Test(arguments: StoreKind.allCases) func sortLimitOffsetAndIDs(_ kind: StoreKind) throws {
        let (store, context) = try seeded(kind)
        let request = FetchRequest<Note>(
            sortBy: [.init(\.priority, ascending: false), .init(\.title)], limit: 4, offset: 1)
        #expect(try titles(context, request) == ["n07", "n11", "n02", "n06"])
        let idReader = store.context("ids")
        let ids = try idReader.fetchObjectIDs(FetchRequest<Note>(predicate: \.priority == 3))
        #expect(ids.map(\.description) == ["Note 4", "Note 8", "Note 12"])
        #expect(idReader.registeredObjects.isEmpty)  // IDs only: nothing loaded
        #expect(try titles(context, .init(sortBy: [.objectID(ascending: false)], limit: 2)) == ["n11", "n10"])
    }

    @Test(arguments: StoreKind.allCases) func fetchesIncludeUnsavedChangesAndAgreeWithTheStore(_ kind: StoreKind) throws
    {
        let (store, context) = try seeded(kind)
        var predicates: [FetchPredicate<Note>] = [\.priority == 1, \.priority != 1, \.body == nil]
        predicates.append(!(\.body == nil))
        predicates.append(.contains(\.body, "1"))
        predicates.append(\.priority >= 2 && !(.hasPrefix(\.title, "n0")))
        predicates.append(.in(\.body, ["body 1", nil]))
        predicates += [.all, .none]
        // Change objects in memory, then compare every predicate evaluated in
        // memory (pending changes) with the same predicate run by SQLite
        // after the changes are saved.
        let notes = try context.fetch(FetchRequest<Note>())
        notes[0].priority = 9
        notes[1].body = nil
        notes[2].title = "z"
        context.delete(notes[3])
        let fresh = Note(context: context)
        fresh.title = "n99"
        fresh.priority = 1
        var inMemory: [[String]] = []
        for p in predicates {
            inMemory.append(try titles(context, .init(predicate: p, sortBy: [.init(\.title)])))
        }
        var notPending = FetchRequest<Note>(predicate: \.title == "n99")
        notPending.includesPendingChanges = false
        #expect(try context.fetch(notPending).isEmpty)
        try context.save()
        let reader = store.context("after")
        for (p, expected) in zip(predicates, inMemory) {
            #expect(try titles(reader, .init(predicate: p, sortBy: [.init(\.title)])) == expected)
        }
        #expect(inMemory[0] == ["n01", "n05", "n09", "n99"])
    }

    @Test(arguments: StoreKind.allCases) func pagingByObjectIDAgreesInSQLAndInMemory(_ kind: StoreKind) throws {
        let (_, context) = try seeded(kind)
        var pages: [[String]] = []
        var after: Int64 = 0
        while true {
            let page = try context.fetch(
                FetchRequest<Note>(predicate: .objectIDs(after: after), sortBy: [.objectID()], limit: 5))
            if page.isEmpty { break }
            pages.append(page.map(\.title))
            after = page.last!.objectID.rowID
        }
        #expect(pages.map(\.count) == [5, 5, 2])
        #expect(pages.flatMap { $0 } == (0..<12).map { String(format: "n%02d", $0) })
        Note(context: context).title = "pending"  // evaluated in memory too
        #expect(
            try context.fetch(FetchRequest<Note>(predicate: .objectIDs(after: 11))).map(\.title) == ["n11", "pending"])
    }

    @Test(arguments: StoreKind.allCases) func uniquing(_ kind: StoreKind) throws {
        let (store, context) = try seeded(kind)
        let a = try context.fetch(FetchRequest<Note>(predicate: \.title == "n01"))[0]
        let b = try context.fetch(FetchRequest<Note>(predicate: .hasSuffix(\.title, "01")))[0]
        #expect(a === b)
        #expect(context.object(with: a.objectID) === a)
        #expect(try context.existingObject(with: a.objectID) === a)
        let other = try context.fetch(FetchRequest<Note>(predicate: \.title == "n01"))
        #expect(other[0] === a)
        let elsewhere = try store.context("other").fetch(FetchRequest<Note>(predicate: \.title == "n01"))[0]
        #expect(elsewhere !== a && elsewhere.objectID == a.objectID)
    }

    @Test(arguments: StoreKind.allCases) func batchSizeReturnsFaultsThatLoadABatchAtATime(_ kind: StoreKind) throws {
        let (_, context) = try seeded(kind)
        var request = FetchRequest<Note>()
        request.fetchBatchSize = 5
        let notes = try context.fetch(request)
        #expect(notes.count == 12)
        #expect(notes.prefix(5).allSatisfy { !$0.isFault })
        #expect(notes.dropFirst(5).allSatisfy { $0.isFault })
        #expect(notes[6].title == "n06")
        #expect(notes[5...9].allSatisfy { !$0.isFault })  // its whole batch loaded
        #expect(notes[10].isFault)
    }

    @Test(arguments: StoreKind.allCases) func existingObjectThrowsForAMissingRow(_ kind: StoreKind) throws {
        let (_, context) = try seeded(kind)
        let missing = ManagedObjectID(entityName: "Note", rowID: 999)
        let error = #expect(throws: PersistenceError.self) { try context.existingObject(with: missing) }
        #expect(error?.message == "No Note 999 in the store")
        #expect(error?.code == .notFound)
    }

    @Test func objectIDsRoundTripThroughURIs() {
        let id = ManagedObjectID(entityName: "Note", rowID: 42)
        #expect(id.uriRepresentation == "x-persistence://Note/42")
        #expect(ManagedObjectID(uriRepresentation: id.uriRepresentation) == id)
        #expect(ManagedObjectID(uriRepresentation: "http://x/1") == nil)
    }
}
