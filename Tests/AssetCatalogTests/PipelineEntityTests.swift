import AssetCatalogTestSupport
import Foundation
@_spi(Testing) import Persistence
import Synchronization
import TestScratch
import Testing

@testable import AssetCatalog

/// What the pipeline entities' hooks did, by document title (the tests run in parallel).
let pipelineHookLog = Mutex<[String: [String]]>([:])

func pipelineHooks(_ title: String) -> [String] { pipelineHookLog.withLock { $0[title] ?? [] } }

/// A pipeline's entity: a document extracted from an asset, deleted with it.
final class PipelineDocument: ManagedObject {
    override class var entityName: String { "Document" }
    @Attribute(.unique) var title = ""
    @Attribute var created = Date(timeIntervalSince1970: 0)
    @Attribute var saves = 0
    @ToOne(onDestinationDelete: .cascade) var asset: Asset?

    private func log(_ event: String) { pipelineHookLog.withLock { $0[title, default: []].append(event) } }

    override func awakeFromInsert() { setPrimitiveValue(Date(), for: \.created) }
    override func willSave() {
        log(isDeleted ? "willSave deleted" : "willSave")
        if !isDeleted { setPrimitiveValue(saves + 1, for: \.saves) }
    }
    override func didSave() { log("didSave") }
    override func prepareForDeletion() { log("prepareForDeletion") }
}

/// A pipeline's note on an asset, kept (unlinked) when the asset goes.
final class PipelineNote: ManagedObject {
    @Attribute var text = ""
    @ToOne(onDestinationDelete: .nullify) var asset: Asset?
}

/// A pipeline's claim on an asset: the asset cannot be removed while it holds.
final class PipelineHold: ManagedObject {
    @Attribute var reason = ""
    @ToOne(onDestinationDelete: .deny) var asset: Asset?
}

/// Takes the name of the catalog's own entity.
final class ImpostorAsset: ManagedObject {
    override class var entityName: String { "Asset" }
    @Attribute var name = ""
}

/// Takes the name of the catalog's own entity in lower case: the same table for the store.
final class LowerCaseAsset: ManagedObject {
    override class var entityName: String { "asset" }
    @Attribute var label = ""
}

/// Points at an asset without saying what removing it does.
final class UnruledLink: ManagedObject {
    @ToOne var asset: Asset?
}

/// A program builds on the catalog: its own entities live in the catalog's store and are
/// saved in the catalog's transactions, with their hooks and delete rules.
@Suite struct PipelineEntityTests {
    static let entities: [ManagedObject.Type] = [PipelineDocument.self, PipelineNote.self, PipelineHold.self]

    func open(_ t: TestCatalog, entities: [ManagedObject.Type] = Self.entities) throws -> Catalog {
        try Catalog.open(at: t.root, options: .init(entities: entities))
    }

    /// A catalog, made with the pipeline's entities, holding one managed asset.
    func catalogWithAsset(_ text: String = "payload") async throws -> (TestCatalog, Catalog, AssetRecord) {
        let t = try TestCatalog()
        let catalog = try Catalog.create(at: t.root, options: .init(entities: Self.entities))
        let asset = try #require(try await catalog.add([try t.file("a.txt", "\(text) \(UUID())")]).added.first)
        return (t, catalog, asset)
    }

    /// Inserts a document for `asset`; returns its ID.
    func insertDocument(_ catalog: Catalog, _ title: String, for asset: AssetRecord?) throws -> ManagedObjectID {
        let context = catalog.newContext()
        return try context.performAndWait {
            let document = PipelineDocument(context: context)
            document.title = title
            if let asset { document.asset = try context.existingObject(with: asset.objectID, as: Asset.self) }
            try context.save()
            return document.objectID
        }
    }

    func documents(_ catalog: Catalog) throws -> [(title: String, asset: AssetID?)] {
        try catalog.withContext { context in
            try context.fetch(FetchRequest<PipelineDocument>()).map { ($0.title, $0.asset?.assetID) }
        }
    }

    @Test func aDocumentIsSavedWithAnAssetChangeInOneSaveWithItsHooks() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        let title = "doc-\(UUID())"
        let context = catalog.newContext()
        try context.performAndWait {
            let document = PipelineDocument(context: context)
            document.title = title
            let owner = try context.existingObject(with: asset.objectID, as: Asset.self)
            document.asset = owner
            owner.name = "renamed.txt"
            #expect(document.created > Date(timeIntervalSince1970: 0), "awakeFromInsert ran")
            try context.save()
        }
        #expect(pipelineHooks(title) == ["willSave", "didSave"])
        #expect(try catalog.asset(asset.id).name == "renamed.txt")
        let saved = try documents(catalog)
        #expect(saved.count == 1 && saved[0].title == title && saved[0].asset == asset.id)
        let saves = try catalog.withContext { try $0.fetch(FetchRequest<PipelineDocument>())[0].saves }
        #expect(saves == 1)
    }

    /// A save that fails in its transaction writes neither the document nor the asset's
    /// deletion, and removes no file.
    @Test func aFailedSaveWritesNeitherTheDocumentNorTheAssetChange() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        struct DiskFull: Error {}
        let context = catalog.newContext()
        try context.performAndWait {
            let other = try context.existingObject(with: asset.objectID, as: Asset.self)
            let document = PipelineDocument(context: context)
            document.title = "lost-\(UUID())"
            other.name = "renamed.txt"
            catalog.container.failNextCommit(with: DiskFull())
            #expect(throws: (any Error).self) { try context.save() }
            context.rollback()
        }
        // The same through a constraint the store refuses mid-transaction, with the asset deleted.
        let title = "dup-\(UUID())"
        _ = try insertDocument(catalog, title, for: nil)
        try context.performAndWait {
            let duplicate = PipelineDocument(context: context)
            duplicate.title = title
            context.delete(try context.existingObject(with: asset.objectID, as: Asset.self))
            let error = #expect(throws: PersistenceError.self) { try context.save() }
            #expect(error?.code == .constraint)
            context.rollback()
        }
        #expect(try catalog.asset(asset.id).name == "a.txt")
        #expect(try documents(catalog).map(\.title) == [title])
        #expect(t.hasObject(asset.sha256))
        #expect(try catalog.pendingRemovalCount() == 0)
    }

    /// Removing the asset cascades to its documents (their prepareForDeletion and willSave
    /// run) in the removal's transaction; the file goes after the commit.
    @Test func removingTheAssetDeletesItsDocumentsAndThenItsFile() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        let title = "doc-\(UUID())"
        _ = try insertDocument(catalog, title, for: asset)
        #expect(t.hasObject(asset.sha256))
        let removed = try catalog.remove(asset.id)
        #expect(removed.removed.map(\.id) == [asset.id])
        #expect(try documents(catalog).isEmpty)
        #expect(pipelineHooks(title) == ["willSave", "didSave", "prepareForDeletion", "willSave deleted", "didSave"])
        #expect(!t.hasObject(asset.sha256))
        #expect(try catalog.pendingRemovalCount() == 0)
    }

    /// The same through a batch delete (no objects): the rows go in the same transaction.
    @Test func removeAllDeletesTheDocumentsOfTheRemovedAssets() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        _ = try insertDocument(catalog, "doc-\(UUID())", for: asset)
        #expect(try catalog.removeAll(AssetQuery()) == 1)
        #expect(try documents(catalog).isEmpty)
        #expect(!t.hasObject(asset.sha256))
    }

    /// A nullify rule keeps the note and clears its link.
    @Test func removingTheAssetUnlinksItsNotes() async throws {
        let (_, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        let context = catalog.newContext()
        try context.performAndWait {
            let note = PipelineNote(context: context)
            note.text = "keep me"
            note.asset = try context.existingObject(with: asset.objectID, as: Asset.self)
            try context.save()
        }
        try catalog.remove(asset.id)
        let notes = try catalog.withContext { c in
            try c.fetch(FetchRequest<PipelineNote>()).map { ($0.text, $0.asset == nil) }
        }
        #expect(notes.count == 1 && notes[0].0 == "keep me" && notes[0].1)
    }

    /// A deny rule refuses the removal; nothing changes, the file stays.
    @Test func aHoldRefusesTheRemovalOfItsAsset() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        defer { catalog.close() }
        let holdID = try catalog.withContext { context in
            let hold = PipelineHold(context: context)
            hold.reason = "legal"
            hold.asset = try context.existingObject(with: asset.objectID, as: Asset.self)
            try context.save()
            return hold.objectID
        }
        let error = #expect(throws: CatalogError.self) { try catalog.remove(asset.id) }
        #expect(
            error?.message
                == "Asset \(asset.id) cannot be deleted: PipelineHold \(holdID.rowID) points at it through PipelineHold.asset "
                + "(deny rule)")
        let batch = #expect(throws: CatalogError.self) { try catalog.removeAll(AssetQuery()) }
        #expect(batch?.message.hasPrefix("Asset \(asset.id) cannot be deleted: PipelineHold") == true)
        // A dry run says what the removal would do: refuse, with the same error.
        let dryRun = #expect(throws: CatalogError.self) { try catalog.remove(asset.id, dryRun: true) }
        #expect(dryRun?.message == error?.message)
        let batchDryRun = #expect(throws: CatalogError.self) { try catalog.removeAll(AssetQuery(), dryRun: true) }
        #expect(batchDryRun?.message == error?.message)
        #expect(try catalog.assets().map(\.id) == [asset.id])
        #expect(t.hasObject(asset.sha256))
        catalog.close()

        // assetcat, which does not know the pipeline's entity, refuses the dry run as it
        // refuses the removal: the store holds the link and its rule.
        let message =
            "assetcat: Asset \(asset.id) cannot be deleted: PipelineHold \(holdID.rowID) points at it through "
            + "PipelineHold.asset, whose delete rule (deny) this store cannot apply: it was opened without the entity "
            + "PipelineHold. Open it with PipelineHold in its schema to delete Asset \(asset.id)\n"
        #expect(try await t.run(["tag", "\(asset.id)", "--add", "held"]).status == 0)
        for arguments in [
            ["rm", "-n", "\(asset.id)"], ["rm", "\(asset.id)"], ["rm", "--tag", "held", "--dry-run"],
            ["rm", "--tag", "held"],
        ] {
            let rm = try await t.run(arguments)
            #expect(rm.status == 1, "\(arguments)")
            #expect(rm.stdout == "", "\(arguments)")
            #expect(rm.stderr == message, "\(arguments)")
        }
        #expect(t.hasObject(asset.sha256))
    }

    /// A catalog made without the pipeline's entities gets their tables when it is first
    /// opened with them; opened without them again, it opens and works.
    @Test func anExistingCatalogOpenedWithANewEntityGetsItsTable() async throws {
        let t = try TestCatalog()
        let plain = try t.create()
        let asset = try #require(try await plain.add([try t.file("a.txt", "plain \(UUID())")]).added.first)
        plain.close()
        let catalog = try open(t)
        let title = "doc-\(UUID())"
        _ = try insertDocument(catalog, title, for: asset)
        #expect(try documents(catalog).map(\.title) == [title])
        catalog.close()
        let again = try t.open()
        defer { again.close() }
        #expect(try again.assets().map(\.id) == [asset.id])
    }

    /// A read-only open cannot create the new entity's table: it fails saying so, and
    /// changes nothing; a read-only open without the entity still works.
    @Test func aReadOnlyOpenWithANewEntityFailsUntilAWritableOpenMadeItsTable() async throws {
        let t = try TestCatalog()
        let plain = try t.create()
        let asset = try #require(try await plain.add([try t.file("a.txt", "plain \(UUID())")]).added.first)
        plain.close()
        let error = #expect(throws: CatalogError.self) {
            try Catalog.open(at: t.root, options: .init(access: .readOnly, entities: Self.entities))
        }
        #expect(error?.code == .store)
        #expect(error?.message.hasSuffix("open it once where it can be written") == true)
        let reader = try Catalog.open(at: t.root, options: .init(access: .readOnly))
        #expect(try reader.assets().map(\.id) == [asset.id])
        reader.close()
        try open(t).close()
        let later = try Catalog.open(at: t.root, options: .init(access: .readOnly, entities: Self.entities))
        defer { later.close() }
        #expect(try documents(later).isEmpty)
    }

    /// Opened without the pipeline's entities, the catalog still opens and works, removes
    /// assets no document points at, and refuses — with a message saying what to do — to
    /// remove one a document points at (the link would point at nothing, and the
    /// document's rule and hooks cannot run). Reopened with them, the link is intact.
    @Test func openedWithoutTheEntityTheCatalogRefusesToRemoveALinkedAsset() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        let free = try #require(try await catalog.add([try t.file("b.txt", "free \(UUID())")]).added.first)
        let title = "doc-\(UUID())"
        let documentID = try insertDocument(catalog, title, for: asset)
        catalog.close()

        let without = try t.open()
        #expect(Set(try without.assets().map(\.id)) == [asset.id, free.id])
        try without.remove(free.id)
        #expect(!t.hasObject(free.sha256))
        let message =
            "Asset \(asset.id) cannot be deleted: Document \(documentID.rowID) points at it through Document.asset, "
            + "whose delete rule (cascade) this store cannot apply: it was opened without the entity Document. Open "
            + "it with Document in its schema to delete Asset \(asset.id)"
        let error = #expect(throws: CatalogError.self) { try without.remove(asset.id) }
        #expect(error?.message == message)
        let batch = #expect(throws: CatalogError.self) { try without.removeAll(AssetQuery()) }
        #expect(batch?.message == message)
        #expect(t.hasObject(asset.sha256))
        without.close()

        let cli = try await t.run(["rm", asset.id.description])
        #expect(cli.status != 0)
        #expect(cli.stderr.contains("opened without the entity Document"))

        let with = try open(t)
        defer { with.close() }
        #expect(try documents(with).map(\.asset) == [asset.id])
        try with.remove(asset.id)
        #expect(try documents(with).isEmpty)
        #expect(!t.hasObject(asset.sha256))
    }

    /// A catalog already open without the entity (a long `assetcat` command, another
    /// process) learns of it when another opening creates its table: it refuses too.
    @Test func aCatalogOpenBeforeTheEntityExistedRefusesToRemoveALinkedAsset() async throws {
        let t = try TestCatalog()
        let without = try t.create()
        defer { without.close() }
        let asset = try #require(try await without.add([try t.file("a.txt", "early \(UUID())")]).added.first)
        let with = try open(t)
        defer { with.close() }
        let documentID = try insertDocument(with, "doc-\(UUID())", for: asset)
        let error = #expect(throws: CatalogError.self) { try without.remove(asset.id) }
        #expect(
            error?.message
                == "Asset \(asset.id) cannot be deleted: Document \(documentID.rowID) points at it through "
                + "Document.asset, whose delete rule (cascade) this store cannot apply: it was opened without the "
                + "entity Document. Open it with Document in its schema to delete Asset \(asset.id)")
        #expect(try documents(with).map(\.asset) == [asset.id])
    }

    /// The pipeline's table, once made, is part of the store: a store that lost it is
    /// damaged and quarantined like one that lost the catalog's own tables, whether the
    /// open knows the entity or not.
    @Test func aStoreThatLostThePipelinesTableIsQuarantined() async throws {
        let (t, catalog, asset) = try await catalogWithAsset()
        _ = try insertDocument(catalog, "doc-\(UUID())", for: asset)
        catalog.close()
        let drop = try await ChildProcess.run(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('DROP TABLE Document'); c.commit()",
                t.root.appending(path: "catalog.sqlite").path,
            ], stdout: .inherit, stderr: .inherit)
        #expect(drop.status == 0)
        let error = #expect(throws: CatalogError.self) { try t.open() }
        #expect(error?.message.contains("is unusable (its table \"Document\" is gone)") == true)
        #expect(t.hasObject(asset.sha256))
        let later = #expect(throws: CatalogError.self) { try open(t) }
        #expect(later?.code == .store)
    }

    @Test func anEntityNamedLikeOneOfTheCatalogsIsRefused() throws {
        let t = try TestCatalog()
        let error = #expect(throws: CatalogError.self) {
            try Catalog.create(at: t.root, options: .init(entities: [ImpostorAsset.self]))
        }
        #expect(error?.code == .invalidArgument)
        #expect(
            error?.message
                == "The entity ImpostorAsset cannot be added to the catalog: its name Asset is taken by the catalog's "
                + "own entity (reserved: AddMark, Asset, AssetTag, CatalogInfo, Job, PendingImport, PendingTemporary, RemovalPlan); "
                + "give it another `entityName`")
        #expect(!FileManager.default.fileExists(atPath: t.root.path), "nothing was made")
    }

    /// An extractor read an asset; another context removed it and committed; the extractor
    /// then saves a document linking to it. The save fails (the link is a foreign key,
    /// checked in the store), nothing of it is written, and no document points at nothing.
    @Test(arguments: [false, true]) func aDocumentLinkedToAnAssetRemovedMeanwhileIsNotSaved(onPostgreSQL: Bool)
        async throws
    {
        let t = try TestCatalog()
        let catalog =
            onPostgreSQL
            ? try Catalog.create(
                at: t.root, store: MigrateStoreTests.newLocation(), options: .init(entities: Self.entities)
            ).catalog
            : try Catalog.create(at: t.root, options: .init(entities: Self.entities))
        defer { catalog.close() }
        let asset = try #require(try await catalog.add([try t.file("a.txt", "late \(UUID())")]).added.first)
        let extractor = catalog.newContext()
        let name = try extractor.performAndWait {
            try extractor.existingObject(with: asset.objectID, as: Asset.self).name
        }
        #expect(name == "a.txt")
        try catalog.remove(asset.id)
        let title = "late-\(UUID())"
        let (documentID, error) = extractor.performAndWait {
            let document = PipelineDocument(context: extractor)
            document.title = title
            do {
                document.asset = try extractor.existingObject(with: asset.objectID, as: Asset.self)
                try extractor.save()
                return (document.objectID, nil as (any Error)?)
            } catch {
                return (document.objectID, error)
            }
        }
        let message = try #require(error.map { ($0 as? PersistenceError)?.message ?? "\($0)" })
        #expect(
            message
                == "\(documentID).asset points at \(asset.objectID), which is not in the store: another save deleted "
                + "it. Nothing was saved")
        #expect(try documents(catalog).isEmpty)
        #expect(pipelineHooks(title) == ["willSave"])
    }

    /// `asset` is the catalog's `Asset` table for SQLite: refused at create and at the open of
    /// an existing catalog, which is left as it was (no column added, no row listed).
    @Test func anEntityNamedLikeOneOfTheCatalogsInAnotherCaseIsRefused() async throws {
        let t = try TestCatalog()
        let message =
            "The entity LowerCaseAsset cannot be added to the catalog: its name asset is taken by the catalog's own "
            + "entity (reserved: AddMark, Asset, AssetTag, CatalogInfo, Job, PendingImport, PendingTemporary, "
            + "RemovalPlan); give it another `entityName`"
        let create = #expect(throws: CatalogError.self) {
            try Catalog.create(at: t.root, options: .init(entities: [LowerCaseAsset.self]))
        }
        #expect(create?.code == .invalidArgument)
        #expect(create?.message == message)
        #expect(!FileManager.default.fileExists(atPath: t.root.path), "nothing was made")

        let catalog = try t.create()
        _ = try await catalog.add([try t.file("a.txt", "a \(UUID())")])
        catalog.close()
        let open = #expect(throws: CatalogError.self) {
            try Catalog.open(at: t.root, options: .init(entities: [LowerCaseAsset.self]))
        }
        #expect(open?.message == message)
        let columns = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    + "print(' '.join(r[1] for r in c.execute('PRAGMA table_info(\"Asset\")')))",
                t.root.appending(path: "catalog.sqlite").path,
            ]
        ).wait()
        #expect(columns.termination == .exited(0), "\(columns.stderrText)")
        #expect(!columns.stdoutText.split(separator: " ").contains("label"), "the catalog's table was not altered")
        let reopened = try t.open()
        defer { reopened.close() }
        #expect(try reopened.assets().map(\.name) == ["a.txt"])
    }

    @Test func aLinkToAnAssetWithoutADeleteRuleIsRefused() throws {
        let t = try TestCatalog()
        let error = #expect(throws: CatalogError.self) {
            try Catalog.create(at: t.root, options: .init(entities: [UnruledLink.self]))
        }
        #expect(
            error?.message
                == "UnruledLink.asset points at Asset without saying what removing it does: declare it "
                + "@ToOne(onDestinationDelete: .nullify), .cascade or .deny")
    }
}
