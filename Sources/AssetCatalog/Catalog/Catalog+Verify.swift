import BagIt
import Crypto
import Foundation
import Persistence

/// A problem ``Catalog/verify(_:progress:)`` found.
public struct VerifyIssue: Sendable, Codable, Hashable {
    public enum Problem: String, Sendable, Codable {
        /// The file (or archive member) is not there.
        case missing
        /// The bytes no longer match the recorded SHA-256.
        case damaged
        /// The file is there but cannot be read (permissions, not a file).
        case unreadable
    }
    /// The asset with the problem.
    public var id: AssetID
    public var name: String
    public var problem: Problem
    /// Where the bytes were looked for.
    public var path: String
    public var expectedSHA256: String
    /// What the bytes hash to now (damaged only).
    public var actualSHA256: String?
    /// Why the content could not be read (unreadable, damaged archives).
    public var detail: String?
}

/// What ``Catalog/verify(_:progress:)`` checked and found.
public struct VerifyReport: Sendable, Codable {
    public var checked: Int
    public var issues: [VerifyIssue]
    /// Files in `objects/` that no asset uses, counted by a verify of the whole catalog
    /// (`0` when only some assets were verified). Nothing is removed: ``Catalog/collectGarbage(_:)``
    /// lists them, and adopts or purges them when asked. Content an add in progress holds
    /// is not counted, nor content whose removal is pending.
    public var unreferencedObjects: Int = 0

    /// What the full check of the catalog's store found, one finding a line, by a verify of
    /// the whole catalog (``Catalog/verifyStore()``); empty when the store is sound. When the damage keeps the assets from being read, `checked` is 0.
    public var storeProblems: [String] = []

    /// The catalog's statistics (``Catalog/stats()``) that did not match its assets, one line
    /// each, found by a verify of the whole catalog (``Catalog/repairStatistics()``): fixed
    /// unless the catalog is read-only. Empty when they were right.
    public var statisticsFixed: [String] = []

    /// What was wrong with the catalog's search index (``Catalog/repairSearchIndex()``), one
    /// line each, found by a verify of the whole catalog: rebuilt unless the catalog is
    /// read-only. Empty when it matched the assets.
    public var searchIndexFixed: [String] = []

    /// Whether nothing is wrong: no damage in the store, no issue, and no content that no
    /// asset uses.
    public var isHealthy: Bool { storeProblems.isEmpty && issues.isEmpty && unreferencedObjects == 0 }
}

/// An unreferenced file in `objects/`.
public struct UnreferencedObject: Sendable, Codable, Hashable {
    public var sha256: String
    public var path: String
    public var size: Int64
    /// Whether an add in progress holds it (a staged link): not garbage, left alone.
    var isPinned = false

    enum CodingKeys: String, CodingKey { case sha256, path, size }
}

/// What ``Catalog/collectGarbage(_:)`` did.
public struct GarbageReport: Sendable, Codable {
    /// Removals left pending by a crash, now carried out.
    public var pendingRemovalsFinished: Int
    /// Files in `objects/` that no asset uses.
    public var unreferenced: [UnreferencedObject]
    /// With ``GarbageAction/adopt``: the assets made for them.
    public var adopted: [AssetRecord]
    /// With ``GarbageAction/purge``: the files removed.
    public var purged: [String]
    /// The catalog's statistics that did not match its assets, one line each, now fixed
    /// (``Catalog/repairStatistics()``).
    public var statisticsFixed: [String] = []
}

/// What ``Catalog/collectGarbage(_:)`` does with unreferenced files.
public enum GarbageAction: String, Sendable {
    /// Only report them.
    case report
    /// Record each as a managed asset named `recovered-<digest>`, tagged `recovered`.
    case adopt
    /// Remove them (each checked again, under the store's write lock).
    case purge
}

extension Catalog {
    /// Re-hashes assets' content (all of them, or those with `ids`) and
    /// reports the missing and damaged ones; a verify of the whole catalog also
    /// checks the store (``verifyStore()``) and counts the files in `objects/` that no
    /// asset uses. Changes nothing.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has one of `ids`.
    public func verify(_ ids: [AssetID]? = nil, progress: (@Sendable (Int, Int) -> Void)? = nil) async throws
        -> VerifyReport
    {
        try await verify(ids, pageSize: 1_000, progress: progress)
    }

    /// ``verify(_:progress:)``, reading the whole catalog's assets `pageSize` at a time: the
    /// memory it takes does not grow with the catalog (only with what it finds).
    func verify(_ ids: [AssetID]?, pageSize: Int, progress: (@Sendable (Int, Int) -> Void)?) async throws
        -> VerifyReport
    {
        let storeProblems = ids == nil ? try verifyStore() : []
        var report: VerifyReport
        do {
            if let ids {
                report = try await check(try ids.map { try asset($0) }, progress: progress)
            } else {
                report = VerifyReport(checked: 0, issues: [])
                let total = try stats().assets
                var after: Int64 = 0
                while !Task.isCancelled {
                    let page = try assetPage(AssetQuery(), after: after, limit: pageSize)
                    let done = report.checked
                    let part = try await check(page) { checked, _ in
                        progress?(done + checked, max(total, done + checked))
                    }
                    report.checked += part.checked
                    report.issues += part.issues
                    guard page.count == pageSize, let last = page.last else { break }
                    after = last.id.rawValue
                }
            }
        } catch let error as CatalogError where !storeProblems.isEmpty && error.code == .store {
            // The damage the check found keeps the assets from being read: that is the report.
            return VerifyReport(checked: 0, issues: [], storeProblems: storeProblems)
        }
        report.storeProblems = storeProblems
        if ids == nil {
            report.statisticsFixed = try repairStatistics()
            report.searchIndexFixed = try repairSearchIndex()
        }
        if ids == nil && !Task.isCancelled {
            try forEachUnreferencedObject { _ in report.unreferencedObjects += 1 }
        }
        return report
    }

    /// Calls `body` with each file of `objects/` that no managed asset uses, whose removal is
    /// not pending (a crash, a read-only open: not lost) and that no add in progress holds (a
    /// staged link pins it). A folder of `objects/` at a time, its digests looked up in the
    /// store 500 to a query: memory flat whatever the number of files or assets.
    func forEachUnreferencedObject(_ body: (UnreferencedObject) throws -> Void) throws {
        try content.forEachObjectFolder { files in
            let candidates = files.filter { !$0.isPinned }
            for start in stride(from: 0, to: candidates.count, by: 500) {
                let chunk = candidates[start..<min(start + 500, candidates.count)]
                let digests = chunk.map(\.sha256)
                let used = try storeErrors {
                    try withContext { context in
                        let (managed, thumbnails) = ContentUse.users(of: digests)
                        let pending = try context.fetch(FetchRequest<RemovalPlan>(predicate: .in(\.sha256, digests)))
                        return Set(try context.fetchSnapshots(managed).compactMap { $0.value(for: \Asset.sha256) })
                            .union(
                                try context.fetchSnapshots(thumbnails).compactMap {
                                    $0.value(for: \Asset.thumbnail) ?? nil
                                }
                            )
                            .union(pending.map(\.sha256))
                    }
                }
                for file in chunk where !used.contains(file.sha256) { try body(file) }
            }
        }
    }

    /// Runs the full integrity check of the catalog's store (`PersistentContainer`'s
    /// `checkIntegrity()`): on SQLite (`catalog.sqlite`), every page and every index against
    /// its table; on PostgreSQL, whose server keeps its own pages, that the store is the one
    /// this version makes (migrations, tables, columns, links, IDs). Returns what it found,
    /// one finding a line; empty when the store is sound. Linear in the store's size —
    /// opening a catalog does not do it. Changes nothing, moves nothing; works on a catalog
    /// opened read-only.
    public func verifyStore() throws -> [String] {
        try storeErrors { try container.checkIntegrity() }
    }

    /// Counts the catalog's statistics (``stats()``) again from its assets — SQL aggregates,
    /// memory flat whatever the catalog's size, linear in time — and fixes those that were
    /// wrong (on a catalog opened for writing; a read-only one is only checked). Returns a
    /// line for each count that was wrong, naming it and both values; empty when all were
    /// right. ``verify(_:progress:)`` of the whole catalog and ``collectGarbage(_:)`` run it.
    public func repairStatistics() throws -> [String] {
        let fix = !isReadOnly
        return try storeErrors { try container.recountTallies(fix: fix) }.map { wrong in
            let what: String
            switch wrong.tally {
            case Asset.storageTally: what = "assets with storage '\(wrong.key)'"
            case Asset.kindTally: what = "assets of kind '\(wrong.key)'"
            case Asset.contentTally: what = "files in objects/"
            case AssetTag.tagTally: what = "assets tagged '\(wrong.key)'"
            default: what = "\(wrong.entity) \(wrong.tally) '\(wrong.key)'"
            }
            func text(_ count: TallyCount?) -> String {
                let count = count ?? TallyCount(key: wrong.key, count: 0, total: 0)
                return wrong.tally == AssetTag.tagTally ? "\(count.count)" : "\(count.count) (\(count.total) bytes)"
            }
            return "statistics: \(what) were recorded as \(text(wrong.recorded)), counted \(text(wrong.counted))"
                + (fix ? "; fixed" : "; not fixed (the catalog is read-only)")
        }
    }

    /// Compares the catalog's search index (what ``search(_:limit:offset:)`` reads) with its
    /// assets — every asset's entry against what the asset holds now, in a walk by ID (memory
    /// flat), and on SQLite the index's own integrity check — and makes it again from the
    /// assets when it is wrong (on a catalog opened for writing; a read-only one is only
    /// checked). Returns a line for each problem; empty when the index matched.
    public func repairSearchIndex() throws -> [String] {
        let fix = !isReadOnly
        return try storeErrors { try container.checkSearchIndex(fix: fix) }.map { wrong in
            "search index: \(wrong.problem)" + (fix ? "; rebuilt" : "; not rebuilt (the catalog is read-only)")
        }
    }

    /// What is missing, damaged or unreadable among `records`: a file per core at a time.
    /// A cancelled check stops early, reporting what it checked.
    func check(_ records: [AssetRecord], progress: (@Sendable (Int, Int) -> Void)? = nil) async throws
        -> VerifyReport
    {
        var issues: [VerifyIssue] = []
        var checked = 0
        try await withThrowingTaskGroup(of: VerifyIssue?.self) { group in
            var next = 0
            let width = ProcessInfo.processInfo.activeProcessorCount
            func launch() {
                let record = records[next]
                next += 1
                group.addTask { [self] in try check(record) }
            }
            while next < records.count && next < width { launch() }
            while let issue = try await group.next() {
                if let issue { issues.append(issue) }
                checked += 1
                progress?(checked, records.count)
                if next < records.count && !Task.isCancelled { launch() }
            }
        }
        return VerifyReport(checked: checked, issues: issues.sorted { $0.id < $1.id })
    }

    private func check(_ record: AssetRecord) throws -> VerifyIssue? {
        let path: String
        switch record.storage {
        case .managed: path = content.objectPath(record.sha256)
        case .referenced: path = record.path ?? ""
        case .member:
            let archive = record.archive.map { "\($0)" } ?? "?"
            path = "\(archive):\(record.member ?? "")"
        }
        var issue = VerifyIssue(
            id: record.id, name: record.name, problem: .missing, path: path, expectedSHA256: record.sha256)
        // The file is opened once: whether it is missing is told by the open's error.
        do {
            if record.storage == .member {
                guard !record.sha256.isEmpty else {
                    // Not indexed yet: nothing to compare, but its archive must be there.
                    guard let archive = try memberArchivePath(record) else { return issue }
                    return try opened(archive, issue) { _ in nil }
                }
                var hasher = DigestAccumulator()
                try read(record) { hasher.add($0) }
                return judged(hasher.hex, issue)
            }
            return try opened(path, issue) { file in
                // A digest job not run yet (`add --defer-hash`): there is nothing to compare,
                // but the file must still be there.
                guard !record.sha256.isEmpty else { return nil }
                var hasher = DigestAccumulator()
                try ContentStore.readChunks(file.fd, path: path, size: file.size) { hasher.add($0) }
                return judged(hasher.hex, issue)
            }
        } catch let error as CatalogError where error.code == .notFound {
            return issue  // a member's archive, or the member in it, is gone
        } catch let error as CatalogError where error.code == .archive {
            issue.problem = .damaged  // its archive can no longer be read
            issue.detail = error.message
            return issue
        } catch let error as CatalogError where error.code == .io {
            issue.problem = .unreadable
            issue.detail = error.message
            return issue
        }
    }

    /// `issue` as missing when `path` is gone; otherwise what `body` makes of the opened file
    /// (an `io` error, such as a file that is not a regular one, is the caller's to report).
    private func opened(
        _ path: String, _ issue: VerifyIssue, _ body: ((fd: Int32, size: Int64)) throws -> VerifyIssue?
    ) throws -> VerifyIssue? {
        let file: (fd: Int32, size: Int64)
        do {
            file = try FileAccess.openRegularFile(atPath: path)
        } catch {
            if case .system(ENOENT) = error.kind { return issue }
            throw ContentStore.openFailure(error, path: path)
        }
        defer { Glibc.close(file.fd) }
        return try body(file)
    }

    /// `nil` when the bytes hash to what was recorded, otherwise `issue` as damaged.
    private func judged(_ digest: String, _ issue: VerifyIssue) -> VerifyIssue? {
        guard digest != issue.expectedSHA256 else { return nil }
        var issue = issue
        issue.problem = .damaged
        issue.actualSHA256 = digest
        return issue
    }

    /// Finishes pending removals, then reports — or with `adopt` / `purge`
    /// acts on — files in `objects/` that no asset uses. Nothing is ever
    /// removed by scanning alone: `purge` is explicit, and each file is
    /// checked again under the store's write lock before it goes.
    public func collectGarbage(_ action: GarbageAction = .report) throws -> GarbageReport {
        let finished = try finishPendingRemovals()
        // Content an add in progress has linked but not yet recorded is pinned: not garbage.
        var unreferenced: [UnreferencedObject] = []
        try forEachUnreferencedObject { unreferenced.append($0) }
        var report = GarbageReport(
            pendingRemovalsFinished: finished, unreferenced: unreferenced, adopted: [], purged: [])
        report.statisticsFixed = try repairStatistics()
        switch action {
        case .report: break
        case .adopt:
            report.adopted = try storeErrors {
                try withContext { context in
                    let assets = unreferenced.map { object -> Asset in
                        let asset = Asset(context: context)
                        asset.name = "recovered-\(object.sha256)"
                        asset.storage = .managed
                        asset.sha256 = object.sha256
                        asset.size = object.size
                        asset.tags = ["recovered"]
                        return asset
                    }
                    try context.save()
                    return assets.map(AssetRecord.init)
                }
            }
        case .purge:
            try storeErrors {
                try withContext { context in
                    for object in unreferenced {
                        let plan = RemovalPlan(context: context)
                        plan.sha256 = object.sha256
                    }
                    try context.save()
                }
                _ = try runtime.sweep()
            }
            report.purged = unreferenced.map(\.path).filter { !FileManager.default.fileExists(atPath: $0) }
        }
        return report
    }
}

/// SHA-256 over chunks, for content that is not a file.
struct DigestAccumulator {
    private var hasher = Crypto.SHA256()
    mutating func add(_ chunk: UnsafeRawBufferPointer) { hasher.update(bufferPointer: chunk) }
    var hex: String { ContentStore.hex(hasher.finalize()) }
}
