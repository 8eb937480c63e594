import AssetCatalog
import Foundation
import Persistence

/// Ingests a directory, marks large files, deletes the smallest: the README's library example.
func ingestionExample(catalogAt root: URL, incoming: String) async throws -> (added: Int, large: Int, saves: Int) {
    let catalog = try Catalog.open(at: root, options: .init(createIfMissing: true))
    defer { catalog.close() }
    let saves = catalog.saveNotifications()  // every committed save, from any task or context

    // Hash and copy on all cores; commit in batches; members of archives get their own records.
    let result = try await catalog.add([incoming], options: .init(tags: ["incoming"], recursive: true))

    // The object graph, on a background context: tag the large ones.
    let large = try await catalog.performBackgroundTask { context in
        let big = try context.fetch(FetchRequest<Asset>(predicate: \.size >= 1_000))
        for asset in big { asset.tags += ["large"] }
        try context.save()
        return big.count
    }

    // Delete one: its file goes once the deletion has committed, if no other asset shares it.
    let smallest = try catalog.assets(AssetQuery(tag: "incoming")).min { $0.size < $1.size }
    if let smallest { try catalog.remove([String(smallest.id)]) }

    var seen = 0
    for await _ in saves.prefix(3) { seen += 1 }  // add, tag, remove
    return (result.added.count, large, seen)
}
