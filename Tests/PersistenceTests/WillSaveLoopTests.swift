import Foundation
import Persistence
import Testing

@Test(arguments: StoreKind.allCases) func willSaveThatKeepsReDirtyingStopsWithAClearError(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    let looper = Looper(context: context)
    let error = #expect(throws: PersistenceError.self) { try context.save() }
    #expect(error?.code == .willSaveLoop)
    #expect(
        error?.message
            == "willSave kept changing Looper 1 through observed setters for 10 passes; change values in willSave "
            + "with setPrimitiveValue(_:for:)")
    #expect(looper.count == 10)
    #expect(looper.isInserted)  // nothing written, changes kept
    #expect(try store.stored(FetchRequest<Looper>()).isEmpty)
}

@Test(arguments: StoreKind.allCases) func theWillSavePassLimitIsAdjustable(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    context.maximumWillSavePasses = 3
    let looper = Looper(context: context)
    #expect(throws: PersistenceError.self) { try context.save() }
    #expect(looper.count == 3)
}

@Test(arguments: StoreKind.allCases) func anObserverSeesObservedChangesButNotPrimitiveOnes(_ kind: StoreKind) throws {
    let store = try TestStore(kind)
    let context = store.context()
    let note = Note(context: context)
    try context.save()
    var seen: [PropertyChange] = []
    let observation = note.addChangeObserver { seen.append($0) }
    note.title = "observed"
    note.setPrimitiveValue(5, for: \.priority)
    #expect(seen.map(\.property) == ["title"])
    #expect(seen.map(\.objectID) == [note.objectID])
    observation.cancel()
    note.title = "after cancel"
    #expect(seen.count == 1)
}

@Test(arguments: StoreKind.allCases) func primitiveSetterDoesNotDirtyButIsWrittenWhenTheObjectSaves(_ kind: StoreKind)
    throws
{
    let store = try TestStore(kind)
    let context = store.context()
    let note = Note(context: context)
    try context.save()

    note.setPrimitiveValue(7, for: \.priority)
    #expect(!note.isUpdated)
    #expect(!context.hasChanges)
    #expect(note.changedValues() == ["priority": .integer(7)])
    try context.save()  // nothing to save
    #expect(try store.stored(FetchRequest<Note>())[0].priority == 0)

    note.title = "now dirty"
    #expect(note.isUpdated)
    #expect(note.hasChangedValue(for: \.title))
    #expect(note.committedValue(for: \.title) == "")
    #expect(note.committedValues(forKeys: [\.title, \.priority]) == [\.title: .text(""), \.priority: .integer(0)])
    try context.save()
    let stored = try store.stored(FetchRequest<Note>())[0]
    #expect(stored.priority == 7)
    #expect(stored.title == "now dirty")
    #expect(note.committedValue(for: \.priority) == 7)
}
