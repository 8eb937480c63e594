import Foundation
import Persistence
import Testing

/// `fetchSnapshots(_:)`: the rows a fetch would see, as values, without making objects.
@Suite struct FetchSnapshotsTests {
    @Test(arguments: StoreKind.allCases) func snapshotsAreTheRowsAFetchSeesWithoutObjects(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let writer = store.context("writer")
        try writer.performAndWait {
            let folder = Folder(context: writer)
            folder.name = "inbox"
            for i in 0..<5 {
                let note = Note(context: writer)
                note.title = "note \(i)"
                note.priority = i
                note.body = i.isMultiple(of: 2) ? nil : "body \(i)"
                note.folder = i < 3 ? folder : nil
            }
            try writer.save()
        }
        let reader = store.context("reader")
        try reader.performAndWait {
            let request = FetchRequest<Note>(predicate: \.priority >= 1, sortBy: [.init(\.priority, ascending: false)])
            let snapshots = try reader.fetchSnapshots(request)
            #expect(reader.registeredObjects.isEmpty)  // no object made
            #expect(store.log.count("awakeFromFetch") == 0)
            let objects = try reader.fetch(request)
            #expect(snapshots.map(\.objectID) == objects.map(\.objectID))
            #expect(snapshots.map { $0.value(for: \Note.title) } == objects.map(\.title))
            #expect(snapshots.map { $0.value(for: \Note.body) ?? nil } == objects.map(\.body))
            #expect(snapshots.map { $0.objectID(for: \Note.folder) } == objects.map { $0.folder?.objectID })
        }
    }

    @Test(arguments: StoreKind.allCases) func unsavedChangesCountAsForAFetch(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        try context.performAndWait {
            for i in 0..<3 {
                let note = Note(context: context)
                note.title = "saved \(i)"
                note.priority = i
            }
            try context.save()
            let notes = try context.fetch(FetchRequest<Note>(sortBy: [.objectID()]))
            notes[0].title = "changed"
            context.delete(notes[1])
            let added = Note(context: context)
            added.title = "unsaved"
            added.priority = 9
            let request = FetchRequest<Note>(sortBy: [.init(\.priority)])
            #expect(
                try context.fetchSnapshots(request).map { $0.value(for: \Note.title) } == [
                    "changed", "saved 2", "unsaved",
                ])
            var committedOnly = request
            committedOnly.includesPendingChanges = false
            #expect(
                try context.fetchSnapshots(committedOnly).map { $0.value(for: \Note.title) } == [
                    "saved 0", "saved 1", "saved 2",
                ])
        }
    }
}

/// `batchDeleteNamingRanges(_:)`: a batch delete whose notification names the deleted rows
/// by range, so that it stays small however many rows go, and still merges.
@Suite struct BatchDeleteNamingRangesTests {
    @Test(arguments: StoreKind.allCases) func theNotificationNamesDeletedRowsByRangeAndMerges(_ kind: StoreKind) throws
    {
        let store = try TestStore(kind)
        let context = store.context()
        let folder = Folder(context: context)
        folder.name = "f"
        for i in 0..<1_200 {
            let note = Note(context: context)
            note.title = "n\(i)"
            note.priority = i == 600 ? 1 : 0
            note.folder = i < 2 ? folder : nil
        }
        let sticker = Sticker(context: context)
        sticker.folder = folder
        try context.save()
        let live = try context.fetch(FetchRequest<Note>(sortBy: [.objectID()]))

        // Every note but the one of priority 1 (notes are rows 1...1,200; it is row 601).
        let notes = try context.batchDeleteNamingRanges(FetchRequest<Note>(predicate: \.priority == 0))
        #expect(notes.deletedObjectIDs.isEmpty)  // no ID per row
        #expect(notes.deletedRowRanges == ["Note": [1..<601, 602..<1_201]])
        let folders = try context.batchDeleteNamingRanges(FetchRequest<Folder>())
        #expect(folders.deletedRowRanges == ["Folder": [1..<2]])
        #expect(folders.updatedObjectIDs == [sticker.objectID])  // nullified: by ID

        context.mergeChanges(from: notes)
        #expect(live[0].managedObjectContext == nil && live[600].managedObjectContext === context)
        #expect(try context.fetch(FetchRequest<Note>()).map(\.title) == ["n600"])
        #expect(try store.stored(FetchRequest<Sticker>())[0].folder == nil)
    }
}
