import AssetCatalogTestSupport
import Foundation
import Persistence
import TestScratch
import Testing

@testable import AssetCatalog

/// ``Catalog/migrateStore(at:to:entities:progress:)`` with a program's own entities: refused
/// (naming them) without them, their rows moved with them.
@Suite struct MigrateStoreTests {
    static func newLocation() throws -> CatalogStoreLocation {
        try CatalogStoreLocation(PostgreSQLTestServer.newSchema().string!)
    }

    @Test func aStoreWithAProgramsEntitiesMovesOnlyWithThem() async throws {
        let t = try TestCatalog()
        let catalog = try Catalog.create(at: t.root, options: .init(entities: PipelineEntityTests.entities))
        let asset = try #require(try await catalog.add([try t.file("a.txt", "payload \(UUID())")]).added.first)
        let context = catalog.newContext()
        try context.performAndWait {
            let document = PipelineDocument(context: context)
            document.title = "kept"
            document.asset = try context.existingObject(with: asset.objectID, as: Asset.self)
            try context.save()
        }
        catalog.close()
        let location = try Self.newLocation()
        let json = try Data(contentsOf: t.root.appending(path: "catalog.json"))
        let error = #expect(throws: CatalogError.self) {
            try Catalog.migrateStore(at: t.root, to: .postgresql(location))
        }
        #expect(error?.code == .store)
        #expect(
            error?.message
                == "The catalog at \(t.root.path) keeps tables of a program's own entities (Document, PipelineHold, "
                + "PipelineNote) that assetcat does not know, so it cannot move them: move the catalog from that "
                + "program, with Catalog.migrateStore(at:to:entities:progress:) and its entities. Nothing was changed")
        #expect(try Data(contentsOf: t.root.appending(path: "catalog.json")) == json)

        var reports: [Int] = []
        let migration = try Catalog.migrateStore(
            at: t.root, to: .postgresql(location), entities: PipelineEntityTests.entities
        ) { copied, _ in reports.append(copied) }
        #expect(!migration.finishedEarlierRun)
        #expect(reports.last == migration.rows)
        let moved = try Catalog.open(at: t.root, options: .init(entities: PipelineEntityTests.entities))
        defer { moved.close() }
        let context2 = moved.newContext()
        let titles = try context2.performAndWait {
            try context2.fetch(FetchRequest<PipelineDocument>()).map {
                "\($0.title) \($0.asset?.objectID == asset.objectID)"
            }
        }
        #expect(titles == ["kept true"])
    }
}
