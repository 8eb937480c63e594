import AssetCatalogTestSupport
import Foundation
@_spi(Testing) import Persistence
import Testing

@testable import AssetCatalog

/// Every way an asset is written goes through the same rules (`AssetRules`): here, the
/// ways that used to miss them — content changed in place, a context of no catalog.
@Suite struct AssetRulesTests {
    func catalogWithTwo() async throws -> (TestCatalog, Catalog, AssetRecord, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add([try t.file("a.txt", "alpha"), try t.file("b.txt", "beta")]).added
        return (t, catalog, added[0], added[1])
    }

    /// A managed asset given another asset's content: the old content is journaled like a
    /// deleted asset's, and goes once the change commits (no asset uses it any more).
    @Test func contentChangedInPlaceRemovesTheOldContentAfterTheCommit() async throws {
        let (t, catalog, a, b) = try await catalogWithTwo()
        defer { catalog.close() }
        let context = catalog.newContext()
        try context.performAndWait {
            let asset = try context.existingObject(with: a.objectID, as: Asset.self)
            asset.sha256 = b.sha256
            asset.size = b.size
            try context.save()
        }
        #expect(!t.hasObject(a.sha256))
        #expect(t.hasObject(b.sha256))
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
        #expect(try await catalog.verify().isHealthy)
    }

    /// The same change rolled back, or failed, removes nothing.
    @Test func contentChangedThenRolledBackKeepsEverything() async throws {
        let (t, catalog, a, b) = try await catalogWithTwo()
        defer { catalog.close() }
        let context = catalog.newContext()
        struct DiskFull: Error {}
        try context.performAndWait {
            let asset = try context.existingObject(with: a.objectID, as: Asset.self)
            asset.sha256 = b.sha256
            catalog.container.failNextCommit(with: DiskFull())
            #expect(throws: (any Error).self) { try context.save() }
            context.rollback()
        }
        #expect(t.hasObject(a.sha256))
        #expect(try await catalog.verify().isHealthy)
    }

    /// A managed asset turned into a reference to a file outside: its content goes.
    @Test func storageChangedFromManagedJournalsTheOldContent() async throws {
        let (t, catalog, a, _) = try await catalogWithTwo()
        defer { catalog.close() }
        let outside = try t.file("outside.txt", "alpha")
        let context = catalog.newContext()
        try context.performAndWait {
            let asset = try context.existingObject(with: a.objectID, as: Asset.self)
            asset.storage = .referenced
            asset.path = outside
            try context.save()
        }
        #expect(!t.hasObject(a.sha256))
        #expect(try await catalog.verify().isHealthy)
    }

    /// Content that is not in objects/ is refused, whether the asset is new or changed.
    @Test func contentChangedToSomethingMissingIsRefused() async throws {
        let (t, catalog, a, _) = try await catalogWithTwo()
        defer { catalog.close() }
        let missing = String(repeating: "0", count: 64)
        let context = catalog.newContext()
        let error = #expect(throws: PersistenceError.self) {
            try context.performAndWait {
                let asset = try context.existingObject(with: a.objectID, as: Asset.self)
                asset.sha256 = missing
                try context.save()
            }
        }
        #expect(
            (error?.cause as? CatalogError)?.message
                == "The content of a.txt (000000000000…) is missing from objects/; add the file again")
        #expect(t.hasObject(a.sha256))
        #expect(try catalog.asset(a.id).sha256 == a.sha256)
    }

    /// A context on the store that belongs to no catalog cannot write assets: the rules
    /// would be skipped, so the save is refused instead.
    @Test func aContextOfNoCatalogCannotWriteAssets() async throws {
        let (t, catalog, a, _) = try await catalogWithTwo()
        defer { catalog.close() }
        let message =
            "Assets are written in a catalog's contexts only (Catalog.newContext, performBackgroundTask): this context "
            + "belongs to no open catalog"
        let foreign = catalog.container.newBackgroundContext(name: "foreign")
        let deletion = #expect(throws: PersistenceError.self) {
            try foreign.performAndWait {
                foreign.delete(try foreign.existingObject(with: a.objectID))
                try foreign.save()
            }
        }
        #expect(deletion?.message.contains(message) == true)
        foreign.performAndWait { foreign.rollback() }
        let insertion = #expect(throws: PersistenceError.self) {
            try foreign.performAndWait {
                let asset = Asset(context: foreign)
                asset.name = "stray"
                asset.storage = .managed
                asset.sha256 = a.sha256
                try foreign.save()
            }
        }
        #expect(insertion?.message.contains(message) == true)
        #expect(t.hasObject(a.sha256))
        #expect(try catalog.assets().map(\.name) == ["a.txt", "b.txt"])
    }

    /// Removal plans are carried out by the catalog's sweeper only: a context other than the
    /// sweep's (here, of no catalog) that deletes one — as an object, or as rows in a batch deletion, the way the sweep
    /// deletes them — is refused, and the plan stays pending for the sweep.
    @Test func aContextOfNoCatalogCannotCarryOutARemovalPlan() async throws {
        let (t, catalog, a, _) = try await catalogWithTwo()
        defer { catalog.close() }
        let foreign = catalog.container.newBackgroundContext(name: "foreign")
        try foreign.performAndWait {
            RemovalPlan(context: foreign).sha256 = a.sha256
            try foreign.save()
        }
        let message = "removal plans are carried out by the catalog's sweeper only"
        let asObject = #expect(throws: PersistenceError.self) {
            try foreign.performAndWait {
                for plan in try foreign.fetch(FetchRequest<RemovalPlan>()) { foreign.delete(plan) }
                try foreign.save()
            }
        }
        #expect(asObject?.message == "RemovalPlan 1: " + message)
        foreign.performAndWait { foreign.rollback() }
        let asRows = #expect(throws: CatalogError.self) {
            try foreign.performAndWait { _ = try foreign.batchDelete(FetchRequest<RemovalPlan>()) }
        }
        #expect(asRows?.message == message)
        // Nor does one of the catalog's own contexts.
        let inCatalog = #expect(throws: CatalogError.self) {
            try catalog.withContext { _ = try $0.batchDelete(FetchRequest<RemovalPlan>()) }
        }
        #expect(inCatalog?.message == message)
        #expect(try catalog.stats().pendingRemovals == 1)
        // The sweep carries it out: the content is in use, so the file stays.
        #expect(try catalog.runtime.sweep() == 1)
        #expect(try catalog.stats().pendingRemovals == 0)
        #expect(t.hasObject(a.sha256))
    }
}
