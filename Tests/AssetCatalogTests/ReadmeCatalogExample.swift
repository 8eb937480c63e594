import AssetCatalog
import Foundation
import Persistence

/// A pipeline's own job kind: counts a text file's lines.
struct LineCount: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput {
        var lines = 0
        try job.readAsset { chunk in lines += chunk.filter { $0 == UInt8(ascii: "\n") }.count }
        return JobOutput(metadata: ["lines": String(lines)])
    }
}

/// Ingests a directory, counts lines in jobs, tags the large files, deletes the smallest.
func ingestionExample(catalogAt root: URL, incoming: String) async throws -> (added: Int, counted: Int, large: Int) {
    let catalog = try Catalog.open(at: root, options: .init(createIfMissing: true))
    defer { catalog.close() }
    catalog.jobs.register(LineCount(), as: "line-count")
    let saves = catalog.saveNotifications()  // every committed save, from any task or context

    // Hash and copy on all cores, commit in batches; archives and images get jobs queued.
    let result = try await catalog.add([incoming], options: .init(tags: ["incoming"], recursive: true))
    try catalog.jobs.submit(["line-count"], for: result.added.filter { $0.kind == "text" }.map(\.id))
    let jobs = try await catalog.jobs.runUntilIdle()  // or jobs.start(): a worker that keeps going

    // The object graph, on a background context: tag the large ones.
    let large = try await catalog.performBackgroundTask { context in
        let big = try context.fetch(FetchRequest<Asset>(predicate: \.size >= 1_000))
        for asset in big { asset.tags += ["large"] }
        try context.save()
        return big.count
    }

    // Delete one: its jobs are cancelled, and its file goes once the deletion has committed.
    let smallest = try catalog.assets(AssetQuery(tag: "incoming")).min { $0.size < $1.size }
    if let smallest { try catalog.remove(smallest.id) }
    for await save in saves where !save.deletedObjectIDs.isEmpty { break }  // that commit, observed
    return (result.added.count, jobs.succeeded, large)
}
