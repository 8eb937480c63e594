import ArchiveIO
import BagIt
import Foundation
import Locking
import Logging
@_spi(Testing) import Persistence

#if canImport(Glibc)
    import Glibc
#endif

extension Catalog {
    /// The catalog's top-level assets (not archive members) with one of these names (a page
    /// of ``ImportScratch/forEachNamePage(_:)``: few enough for one SQL `IN (…)`).
    func topLevelAssets(named names: [String]) throws -> [AssetRecord] {
        try storeErrors {
            try withContext { context in
                try context.fetch(
                    FetchRequest<Asset>(predicate: .in(\.name, names) && \.storage != Storage.member)
                ).map(AssetRecord.init)
            }
        }
    }

    /// Calls `body` with the catalog's top-level assets that have a name of the bundle's
    /// top-level assets, a page of names at a time; returns how many and a hash of them all.
    @discardableResult
    func forEachExisting(
        _ scratch: ImportScratch, _ body: ([AssetRecord]) throws -> Void = { _ in }
    ) throws -> (count: Int, hash: Int) {
        var count = 0
        var hash = 0
        try scratch.forEachNamePage { names in
            if Task.isCancelled { throw CatalogError(.cancelled, "The import was stopped; nothing was imported") }
            let records = try topLevelAssets(named: names)
            count += records.count
            for record in records { hash &+= record.hashValue }  // in any order
            try body(records)
        }
        return (count, hash)
    }

    /// Whether the catalog's assets that share a name with the bundle's are still those the
    /// plan was made from (a plan made during a long read may be stale by its end).
    func isCurrent(_ plan: ImportPlan) throws -> Bool {
        let now = try forEachExisting(plan.scratch)
        return now.count == plan.existing.count && now.hash == plan.existing.hash
    }

    /// Decides, entry by entry, how each asset is stored and what a name conflict does.
    func planImport(_ scratch: ImportScratch, options: ImportOptions) throws -> ImportPlan {
        var plan = ImportPlan(scratch: scratch)
        let limit = max(0, options.listLimit)
        plan.existing = try forEachExisting(scratch) { try scratch.addExisting($0) }
        let cancelled = { CatalogError(.cancelled, "The import was stopped; nothing was imported") }
        if plan.existing.count > 0 {
            try scratch.forEach(where: "+e.top = 1 AND e.name IN (SELECT name FROM existing)") { entry in
                // Planning reads the catalog and hashes referenced files: it stops when the import does.
                if Task.isCancelled { throw cancelled() }
                let same = try scratch.existing(named: entry.fields.name)
                if let match = same.first(where: {
                    $0.sha256 == entry.fields.sha256 && $0.tags == entry.fields.tagText
                        && $0.metadata == entry.fields.metadataJSON
                }) {
                    // Another entry of this name may replace the others, not this one.
                    if options.onConflict == .replace { try scratch.keep(match.id) }
                    plan.result.alreadyPresent.append(entry.fields.name, limit: limit)
                    try scratch.plan(entry.seq, outcome: .alreadyPresent)
                    return
                }
                switch options.onConflict {
                case .skip:
                    let ids = same.map { String($0.id) }.joined(separator: ", ")
                    plan.result.skipped.append(
                        .init(name: entry.fields.name, reason: "the catalog has an asset with this name (ID \(ids))"),
                        limit: limit)
                    try scratch.plan(entry.seq, outcome: .skipped)
                case .replace:
                    try scratch.replace(named: entry.fields.name)
                case .keepBoth:
                    // Kept before under a numbered name: the same asset, not one more copy.
                    if try hasNumberedCopy(of: entry) {
                        plan.result.alreadyPresent.append(entry.fields.name, limit: limit)
                        try scratch.plan(entry.seq, outcome: .alreadyPresent)
                        return
                    }
                    // The name must be free in the whole catalog, not only among the bundle's names.
                    var name = entry.fields.name
                    var n = 2
                    while try scratch.isTaken(name) || hasTopLevelAsset(named: name) {
                        name = PayloadNamer.numbered(entry.fields.name, n)
                        n += 1
                    }
                    plan.result.renamed.append(.init(from: entry.fields.name, to: name), limit: limit)
                    try scratch.plan(entry.seq, outcome: .imported, name: name)
                }
            }
        }
        // A referenced asset stays referenced when its file is here, the same.
        try scratch.forEach(where: "\(ImportScratch.importedTop) AND e.storage = 'referenced'") { entry in
            if Task.isCancelled { throw cancelled() }
            if let file = entry.fields.path,
                Self.fileMatches(file, size: entry.fields.size, sha256: entry.fields.sha256)
            {
                try scratch.execute("UPDATE entry SET referenced = 1 WHERE seq = ?", [.integer(entry.seq)])
            } else {
                plan.result.storedAsManaged.append(entry.fields.name, limit: limit)
            }
        }
        plan.result.replaced = try scratch.replaced(limit: limit)
        return plan
    }

    /// Whether a top-level asset has the entry's content, tags and metadata under a numbered
    /// form of its name (`a (2).txt` for `a.txt`) — what an earlier keep-both import made.
    func hasNumberedCopy(of entry: ImportScratch.Row) throws -> Bool {
        // `a (0).txt` gives the text around the number: `a (` and `).txt`.
        let zero = Array(PayloadNamer.numbered(entry.fields.name, 0).utf8)
        let mark: [UInt8] = Array(" (0)".utf8)
        guard let at = (0...(zero.count - mark.count)).last(where: { zero[$0..<($0 + mark.count)].elementsEqual(mark) })
        else { return false }
        let prefix = zero[..<(at + 2)]
        let suffix = zero[(at + 3)...]
        // Found by name (indexed for every asset), not by digest (indexed for managed assets
        // only): the names that follow `prefix` with a digit from 1 to 9 sort, byte by byte,
        // from `prefix + "1"` to before `prefix + ":"`.
        let stem = String(decoding: prefix, as: UTF8.self)
        let copies: [AssetRecord] = try storeErrors {
            try withContext { context in
                try context.fetch(
                    FetchRequest<Asset>(
                        predicate: \.name >= stem + "1" && \.name < stem + ":" && \.storage != Storage.member
                            && \.sha256 == entry.fields.sha256)
                ).map(AssetRecord.init)
            }
        }
        return copies.contains { copy in
            let name = Array(copy.name.utf8)
            guard name.count > prefix.count + suffix.count, name.starts(with: prefix),
                name.reversed().starts(with: suffix.reversed())
            else { return false }
            let number = name[prefix.count..<(name.count - suffix.count)]
            return number.first != 0x30 && number.allSatisfy { (0x30...0x39).contains($0) }
                && Asset.tagText(copy.tags) == entry.fields.tagText
                && Asset.metadataJSON(copy.metadata) == entry.fields.metadataJSON
        }
    }

    /// Whether a top-level asset (not an archive member) of the catalog has this name.
    func hasTopLevelAsset(named name: String) throws -> Bool {
        try storeErrors {
            try withContext { context in
                try context.count(for: FetchRequest<Asset>(predicate: \.name == name && \.storage != Storage.member))
                    > 0
            }
        }
    }

    /// Whether a referenced file is here with the recorded size and content. A relative
    /// path never is: it would name a file relative to wherever the import runs.
    static func fileMatches(_ path: String, size: Int64, sha256: String) -> Bool {
        var info = stat()
        guard path.hasPrefix("/"), stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
            Int64(info.st_size) == size,
            let (digest, _) = try? ContentStore.digest(ofFileAt: path, isCancelled: { Task.isCancelled })
        else { return false }
        return digest == sha256
    }

    /// The most digests in one row of an import's journal.
    static let journalRowSize = 10_000
}
