public import ArchiveIO
import BagIt
import Foundation
import Logging
import Persistence

#if canImport(Glibc)
    import Glibc
#endif

/// What an import does with an asset whose name a top-level asset of the catalog already
/// has (with other content, tags or metadata: an identical asset is simply already there).
public enum ConflictPolicy: String, Sendable, Hashable, Codable, CaseIterable {
    /// Keep the catalog's asset; leave the bundle's out (listed in ``ImportResult/skipped``).
    case skip
    /// Delete the catalog's asset (its file goes once the import commits), import the bundle's.
    case replace
    /// Import the bundle's under a free name: `photo (2).jpg`.
    case keepBoth = "keep-both"
}

/// How ``Catalog/importBundle(from:options:progress:)`` imports.
public struct ImportOptions: Sendable, Hashable {
    public var onConflict: ConflictPolicy
    /// Limits for an archive bundle's members (count, size, compression ratio).
    public var policy: ExtractionPolicy

    public init(onConflict: ConflictPolicy = .skip, policy: ExtractionPolicy = .default) {
        self.onConflict = onConflict
        self.policy = policy
    }
}

/// What an import did.
public struct ImportResult: Sendable, Codable {
    public struct Renamed: Sendable, Hashable, Codable {
        public var from: String
        public var to: String
    }

    public struct Skipped: Sendable, Hashable, Codable {
        public var name: String
        public var reason: String
    }

    public var bundle: String
    /// The assets created, archives before their members.
    public var imported: [AssetRecord]
    /// Bundle assets the catalog already had (same name, content, tags and metadata).
    public var alreadyPresent: [String]
    /// Bundle assets left out by ``ConflictPolicy/skip``.
    public var skipped: [Skipped]
    /// Catalog assets deleted by ``ConflictPolicy/replace`` (their members too).
    public var replaced: [Int64]
    /// Bundle assets imported under another name by ``ConflictPolicy/keepBoth``.
    public var renamed: [Renamed]
    /// Referenced assets whose file is not on this machine (or differs): their bytes,
    /// from the bundle, are stored in the catalog instead.
    public var storedAsManaged: [String]
    /// Bytes of content the catalog did not have before.
    public var bytesStored: Int64
    /// Jobs queued for the imported assets (a bag from another tool is indexed and read
    /// like an add).
    public var queuedJobs: [Int64]
}

/// What ``Catalog/validateBundle(at:policy:progress:)`` found.
public struct BundleValidation: Sendable, Codable {
    public var bundle: String
    public var isValid: Bool
    /// `BagIt-Version`, when `bagit.txt` could be read.
    public var version: String?
    public var payloadFiles: Int
    public var payloadBytes: Int64
    /// Whether the bag carries this catalog's records (`assetcat-records.json`).
    public var hasRecords: Bool
    /// Every problem, one line each, naming its file.
    public var problems: [String]
}

/// Stages one payload file of an import in the catalog's staging folder — or, when the
/// manifest says the catalog already has the content, pins the existing object and only
/// hashes the bytes. Once the file is read, it notes the copy in the import's
/// ``Catalog/StagedFiles``.
final class StagingSink: BagPayloadSink {
    /// The file's path in the bundle.
    let file: String
    let path: String
    /// The digest the manifest announced, when the content was already in `objects/`.
    let linkedDigest: String?
    /// The digest the manifest announced, when `objects/` did not have it.
    let absentDigest: String?
    let staged: Catalog.StagedFiles
    private var fd: Int32 = -1

    init(file: String, content: ContentStore, expected: String?, staged: Catalog.StagedFiles) throws {
        self.file = file
        self.staged = staged
        if let expected, let pin = content.pinObject(expected) {
            path = pin
            linkedDigest = expected
            absentDigest = nil
        } else {
            linkedDigest = nil
            absentDigest = expected
            (path, fd) = try content.createStagingFile()
        }
        staged.paths.append(path)
    }

    deinit { if fd >= 0 { close(fd) } }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard fd >= 0 else { return }
        try ContentStore.writeAll(fd, bytes, path: path)
    }

    func finish(digests: [ChecksumAlgorithm: String]) throws {
        if fd >= 0 { close(fd) }
        fd = -1
        guard let digest = digests[.sha256] else { return }
        if let linkedDigest, linkedDigest != digest { staged.changed.append(file) }
        if absentDigest == digest { staged.absent.insert(digest) }
        if staged.pins[digest] == nil { staged.pins[digest] = path }
    }
}

extension Catalog {
    /// Imports a BagIt bag — a directory or any archive libarchive reads — all or nothing.
    ///
    /// Every payload file is staged and checked against every manifest the bag has
    /// (MD5, SHA-1, SHA-256, SHA-512), for completeness both ways, and against this
    /// catalog's records file when the bag has one; then one transaction adopts
    /// everything. A bag from another tool becomes assets named by their payload paths.
    /// Content the catalog has is not stored twice. On any failure — an invalid or
    /// hostile bag, a conflict error, a failed commit, cancellation — the catalog is as
    /// it was and nothing is left in staging.
    ///
    /// ```swift
    /// let result = try await catalog.importBundle(from: "trip.tar.zst", options: .init(onConflict: .keepBoth))
    /// print("imported \(result.imported.count)")
    /// ```
    public func importBundle(
        from path: String, options: ImportOptions = ImportOptions(),
        progress: (@Sendable (BundleProgress) -> Void)? = nil
    ) async throws -> ImportResult {
        let staged = StagedFiles()
        defer { for file in staged.paths { content.unpin(file) } }
        // The bag, read and checked, is let go before the commit: only the entries and the
        // staged copies are needed from here on.
        let (entries, pins, absent, foreign, earlyPlan) = try await readForImport(
            path, options: options, staged: staged, progress: progress)
        // A plan made during the read is made again if the catalog changed meanwhile (or if
        // making it failed: the error, should it last, comes from the second attempt).
        var plan =
            try earlyPlan.flatMap { try? $0.get() }.flatMap { try isCurrent($0) ? $0 : nil }
            ?? planImport(entries, policy: options.onConflict)
        plan.result.bundle = path
        try commitImport(&plan, pins: pins, absent: absent, foreign: foreign)
        return plan.result
    }

    /// The staging files of one import, removed when it ends (adopted content stays in
    /// `objects/` as a second link), and what they hold.
    final class StagedFiles {
        var paths: [String] = []
        /// The staged copy of each content, by SHA-256 (any copy of the same content will do).
        var pins: [String: String] = [:]
        /// The content `objects/` did not have when the read began.
        var absent = Set<String>()
        /// The files (by path in the bundle) whose content `objects/` had, but whose bytes
        /// differed from what the manifest announced: changed while they were read.
        var changed: [String] = []
    }

    /// What an import works out from our records while the payload is still being read.
    private struct EarlyWork: Sendable {
        var records: Result<BundleRecords, BagError>
        /// The plan, when the records could be decoded.
        var plan: Result<ImportPlan, any Error>?
    }

    /// Reads and checks a bag, staging its payload: returns the assets to import, the
    /// staged copy of each content by SHA-256, the content `objects/` did not have while
    /// the bag was read, whether the bag came without our records, and the import's plan
    /// when it could be made during the read.
    private func readForImport(
        _ path: String, options: ImportOptions, staged: StagedFiles, progress: (@Sendable (BundleProgress) -> Void)?
    ) async throws -> (
        entries: [BundleRecords.Entry], pins: [String: String], absent: Set<String>, foreign: Bool,
        plan: Result<ImportPlan, any Error>?
    ) {
        // Our records come before the payload: they are decoded, and the import planned from
        // them, on another core while the payload is read.
        var early: (bytes: [UInt8], work: Task<EarlyWork, Never>)?
        let policy = options.onConflict
        let bag: BagContents
        do {
            bag = try readBag(path, options: options, staged: staged, progress: progress) { bytes in
                guard early == nil else { return }
                early = (
                    bytes,
                    Task.detached { [self] in
                        let records = Result { () throws(BagError) in try BundleRecords.decode(bytes) }
                        guard case .success(let decoded) = records, !Task.isCancelled else {
                            return EarlyWork(records: records)
                        }
                        return EarlyWork(
                            records: records, plan: Result { try self.planImport(decoded.assets, policy: policy) })
                    }
                )
            }
        } catch {
            // The early work reads the catalog: it ends before the import does.
            early?.work.cancel()
            _ = await early?.work.value
            throw error
        }
        if !bag.problems.isEmpty { early?.work.cancel() }  // the plan is moot: stop it, keep the decode
        let work = await early?.work.value
        var problems = bag.problems
        var records: BundleRecords?
        var plan: Result<ImportPlan, any Error>?
        if let bytes = bag.tagFiles[BundleRecords.fileName] {
            do throws(BagError) {
                if let work, early?.bytes == bytes {
                    records = try work.records.get()
                    plan = work.plan
                } else {
                    records = try BundleRecords.decode(bytes)
                }
            } catch {
                problems.append(error)
            }
        }
        early = nil
        // One walk of the payload: the records checked against it, or for a bag without
        // them, an asset made of each file.
        var check = records.map(BundleRecords.Check.init)
        var plain: [BundleRecords.Entry] = []
        let now = Date()
        if check != nil || problems.isEmpty {
            try bundleErrors(path) {
                try bag.payload.forEach { file in
                    if check != nil {
                        check!.visit(file)
                    } else {
                        plain.append(Self.plainEntry(file, key: Int64(plain.count + 1), date: now))
                    }
                }
            }
        }
        problems += check?.finish() ?? []
        if let first = problems.first {
            let more = problems.count > 1 ? " (and \(problems.count - 1) more; `assetcat validate` lists them)" : ""
            throw CatalogError(
                .invalidArgument, "\(path) is not a valid bag, nothing was imported: \(first)\(more)", path: path)
        }
        let root = bag.bagName.isEmpty ? "" : bag.bagName + "/"
        let relative = { (file: String) in
            file.utf8.starts(with: root.utf8) ? String(Substring(file.utf8.dropFirst(root.utf8.count))) : file
        }
        if let first = staged.changed.map(relative).min() {
            throw CatalogError(
                .damaged, "\(path): \(first) changed while it was read; nothing was imported", path: path)
        }
        return (records?.assets ?? plain, staged.pins, staged.absent, records == nil, plan)
    }

    /// Reads a bag for an import, staging its payload; `recordsRead` gets our records file
    /// as soon as it is read.
    private func readBag(
        _ path: String, options: ImportOptions, staged: StagedFiles, progress: (@Sendable (BundleProgress) -> Void)?,
        recordsRead: @escaping ([UInt8]) -> Void
    ) throws -> BagContents {
        try bundleErrors(path) {
            do {
                return try BagReader.read(
                    at: path,
                    options: BagReadOptions(
                        policy: options.policy, keptTagFiles: [BundleRecords.fileName],
                        // The expected digest only serves to find content `objects/` has.
                        looksUpExpectedSHA256: content.hasAnyObject()),
                    sink: { [content] file, expected in
                        try StagingSink(file: file, content: content, expected: expected, staged: staged)
                    },
                    tagFileRead: { name, bytes in
                        if name == BundleRecords.fileName { recordsRead(bytes) }
                    },
                    progress: { p in
                        progress?(
                            BundleProgress(
                                filesDone: p.filesDone, filesTotal: 0, bytesDone: p.bytesDone, bytesTotal: p.bytesTotal
                            ))
                    },
                    isCancelled: { Task.isCancelled })
            } catch let error as BagError where error.code != .io && error.code != .cancelled {
                // What stops a read (a hostile member, a damaged archive, no or a bad bagit.txt)
                // reads like the problems found after it: the bundle, then the file and reason.
                let problem = error.file == path ? error.reason : error.description
                throw CatalogError(
                    error.code == .unreadableArchive ? .archive : .invalidArgument,
                    "\(path) is not a valid bag, nothing was imported: \(problem)", path: path, cause: error)
            }
        }
    }

    /// For a bag without our records: a managed asset of a payload file, named by its path.
    static func plainEntry(_ file: BagPayloadFile, key: Int64, date: Date) -> BundleRecords.Entry {
        let name = String(file.path.dropFirst("data/".count))
        return BundleRecords.Entry(
            key: key, name: name, kind: ContentKind.of(name), storage: .managed, size: file.size,
            sha256: file.digests[.sha256] ?? "", payload: file.path, path: nil, archive: nil, member: nil,
            memberOrdinal: nil, tags: [], metadata: [:], created: date, modified: date)
    }

    struct ImportPlan {
        /// One asset to import: an entry of ``entries``, by index (an entry is large; the
        /// plan does not copy it).
        struct Item {
            var index: Int
            var name: String
            var storage: Storage
            /// For a member: its archive's key.
            var archiveKey: Int64?
        }
        /// The bundle's assets.
        var entries: [BundleRecords.Entry] = []
        /// The names of its top-level assets, and the catalog's top-level assets with one of
        /// them when the plan was made.
        var names: [String] = []
        var existing: [AssetRecord] = []
        var items: [Item] = []
        var replacing: [Int64] = []
        var result = ImportResult(
            bundle: "", imported: [], alreadyPresent: [], skipped: [], replaced: [], renamed: [], storedAsManaged: [],
            bytesStored: 0, queuedJobs: [])
    }

    /// The most values put in one SQL `IN (…)`.
    static let sqlBatch = 10_000

    /// The catalog's top-level assets (not archive members) with one of these names, by ID.
    private func topLevelAssets(named names: [String]) throws -> [AssetRecord] {
        // In batches: SQLite limits the values one statement takes.
        try storeErrors {
            try withContext { context in
                try stride(from: 0, to: names.count, by: Self.sqlBatch).flatMap { start in
                    try context.fetch(
                        FetchRequest<Asset>(
                            predicate: .in(\.name, names[start..<min(start + Self.sqlBatch, names.count)])
                                && \.storage != Storage.member)
                    ).map(AssetRecord.init)
                }
            }
        }.sorted { $0.id < $1.id }
    }

    /// Whether the catalog's assets that share a name with the bundle's are still those the
    /// plan was made from (a plan made during a long read may be stale by its end).
    private func isCurrent(_ plan: ImportPlan) throws -> Bool {
        try topLevelAssets(named: plan.names) == plan.existing
    }

    /// Decides, entry by entry, how each asset is stored and what a name conflict does.
    private func planImport(_ entries: [BundleRecords.Entry], policy: ConflictPolicy) throws -> ImportPlan {
        var plan = ImportPlan()
        plan.entries = entries
        let keys = Set(entries.map(\.key))
        let topLevel = entries.indices.filter {
            !(entries[$0].storage == .member && entries[$0].archive.map(keys.contains) == true)
        }
        let names = Array(Set(topLevel.map { entries[$0].name }))
        let existing = try topLevelAssets(named: names)
        plan.names = names
        plan.existing = existing
        // Names a renamed asset cannot take: the catalog's, and the bundle's own.
        var taken = Set(existing.map(\.name)).union(names)
        let byName = Dictionary(grouping: existing, by: \.name)
        var importedArchives = Set<Int64>()
        for index in topLevel {
            // Planning reads the catalog and hashes referenced files: it stops when the import does.
            if Task.isCancelled { throw CatalogError(.cancelled, "The import was stopped; nothing was imported") }
            let entry = entries[index]
            var name = entry.name
            if let same = byName[entry.name] {
                if same.contains(where: {
                    $0.sha256 == entry.sha256 && $0.tags == entry.tags.sorted() && $0.metadata == entry.metadata
                }) {
                    plan.result.alreadyPresent.append(entry.name)
                    continue
                }
                switch policy {
                case .skip:
                    let ids = same.map { String($0.id) }.joined(separator: ", ")
                    plan.result.skipped.append(
                        .init(name: entry.name, reason: "the catalog has an asset with this name (ID \(ids))"))
                    continue
                case .replace:
                    plan.replacing += same.map(\.id).filter { !plan.replacing.contains($0) }
                case .keepBoth:
                    // Kept before under a numbered name: the same asset, not one more copy.
                    if try hasNumberedCopy(of: entry) {
                        plan.result.alreadyPresent.append(entry.name)
                        continue
                    }
                    // The name must be free in the whole catalog, not only among the bundle's names.
                    var n = 2
                    while try taken.contains(name) || hasTopLevelAsset(named: name) {
                        name = PayloadNamer.numbered(entry.name, n)
                        n += 1
                    }
                    plan.result.renamed.append(.init(from: entry.name, to: name))
                }
            }
            taken.insert(name)
            var storage = Storage.managed
            if entry.storage == .referenced, let file = entry.path, Self.fileMatches(file, entry) {
                storage = .referenced
            } else if entry.storage == .referenced {
                plan.result.storedAsManaged.append(entry.name)
            }
            plan.items.append(.init(index: index, name: name, storage: storage, archiveKey: nil))
            importedArchives.insert(entry.key)
        }
        for (index, entry) in entries.enumerated() where entry.storage == .member {
            guard let archive = entry.archive, keys.contains(archive) else { continue }
            guard importedArchives.contains(archive) else { continue }  // its archive is skipped or already present
            plan.items.append(.init(index: index, name: entry.name, storage: .member, archiveKey: archive))
        }
        plan.result.replaced = plan.replacing.sorted()
        return plan
    }

    /// Whether a top-level asset has the entry's content, tags and metadata under a numbered
    /// form of its name (`a (2).txt` for `a.txt`) — what an earlier keep-both import made.
    private func hasNumberedCopy(of entry: BundleRecords.Entry) throws -> Bool {
        // `a (0).txt` gives the text around the number: `a (` and `).txt`.
        let zero = Array(PayloadNamer.numbered(entry.name, 0).utf8)
        let mark: [UInt8] = Array(" (0)".utf8)
        guard let at = (0...(zero.count - mark.count)).last(where: { zero[$0..<($0 + mark.count)].elementsEqual(mark) })
        else { return false }
        let prefix = zero[..<(at + 2)]
        let suffix = zero[(at + 3)...]
        let copies: [AssetRecord] = try storeErrors {
            try withContext { context in
                try context.fetch(
                    FetchRequest<Asset>(predicate: \.sha256 == entry.sha256 && \.storage != Storage.member)
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
                && copy.tags == entry.tags.sorted() && copy.metadata == entry.metadata
        }
    }

    /// Whether a top-level asset (not an archive member) of the catalog has this name.
    private func hasTopLevelAsset(named name: String) throws -> Bool {
        try storeErrors {
            try withContext { context in
                try context.count(for: FetchRequest<Asset>(predicate: \.name == name && \.storage != Storage.member))
                    > 0
            }
        }
    }

    /// Whether a referenced file is here with the recorded size and content. A relative
    /// path never is: it would name a file relative to wherever the import runs.
    private static func fileMatches(_ path: String, _ entry: BundleRecords.Entry) -> Bool {
        var info = stat()
        guard path.hasPrefix("/"), stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG,
            Int64(info.st_size) == entry.size,
            let (digest, _) = try? ContentStore.digest(ofFileAt: path, isCancelled: { Task.isCancelled })
        else { return false }
        return digest == entry.sha256
    }

    /// Adopts the staged content and records every planned asset in one transaction.
    private func commitImport(
        _ plan: inout ImportPlan, pins: [String: String], absent: Set<String>, foreign: Bool
    ) throws {
        let entries = plan.entries
        let managed = Set(plan.items.filter { $0.storage == .managed }.map { entries[$0.index].sha256 })
        var newContent: [String] = []
        for digest in managed.sorted() {
            guard pins[digest] != nil else {
                throw CatalogError(
                    .invalidArgument, "The bundle has no payload with SHA-256 \(digest); nothing was imported")
            }
            // What the read found missing needs no second look. Should another process store
            // it meanwhile, the journal row is harmless: a sweep keeps content in use.
            if absent.contains(digest) || !content.hasObject(digest) { newContent.append(digest) }
        }
        // A set: `newContent.contains` for every item was quadratic (10,000 files: 10⁸ compares).
        let isNew = Set(newContent)
        var newSizes: [String: Int64] = [:]
        for item in plan.items where item.storage == .managed && isNew.contains(entries[item.index].sha256) {
            newSizes[entries[item.index].sha256] = entries[item.index].size
        }
        plan.result.bytesStored = newSizes.values.reduce(0, +)
        // New content is journaled before it is linked into objects/: should the import not
        // commit (an error, a crash), it is removed again. One row for all of it, which the
        // import's own transaction deletes.
        let journal: ManagedObjectID? = try storeErrors {
            guard !newContent.isEmpty else { return nil }
            return try withContext { context in
                let pending = PendingImport(context: context)
                pending.owner = content.owner
                pending.digests = newContent.joined(separator: "\n")
                try context.save()
                return pending.objectID
            }
        }
        // The content is adopted on another thread while the rows are built and written.
        let adoption =
            managed.isEmpty
            ? ContentAdoption(pins: pins) : ContentAdoption(content: content, pins: pins, adopting: managed.sorted())
        do {
            let (imported, jobs) = try recordImport(plan, adoption: adoption, journal: journal, foreign: foreign)
            plan.result.imported = imported
            plan.result.queuedJobs = jobs
        } catch {
            var error = error
            do { try adoption.wait() } catch let failure { error = failure }  // what stopped the linking comes first
            if let journal { giveUp(journal) }
            if let error = error as? CatalogError { throw error }
            throw CatalogError(.store, "The import could not be recorded, nothing was imported: \(error)", cause: error)
        }
    }

    /// Turns the journal of an import that did not commit into removal plans, and sweeps:
    /// its content goes, unless another asset uses it by now. Should that fail, the row
    /// loses its owner, so that the next sweep (from any process) takes it up.
    private func giveUp(_ journal: ManagedObjectID) {
        do {
            try withContext { context in
                do {
                    try context.existingObject(with: journal, as: PendingImport.self).giveUp()
                    try context.save()
                } catch {
                    context.rollback()
                    try context.existingObject(with: journal, as: PendingImport.self).owner = ""
                    try context.save()
                    throw error
                }
            }
            _ = try runtime.sweep()
        } catch {
            runtime.logger.warning("content of a failed import stays in objects/ until the next sweep: \(error)")
        }
    }

    private func recordImport(
        _ plan: ImportPlan, adoption: ContentAdoption, journal: ManagedObjectID?, foreign: Bool
    ) throws -> ([AssetRecord], [Int64]) {
        let recorded = try storeErrors {
            try withContext { context in
                // The records make the journal moot: both in one transaction.
                if let journal { context.delete(try context.existingObject(with: journal)) }
                for id in plan.replacing {
                    if let asset = try? context.existingObject(
                        with: ManagedObjectID(entityName: Asset.entityName, rowID: id), as: Asset.self)
                    {
                        context.delete(asset)
                    }
                }
                // The assets as rows, without an object each: archives (and every other
                // top-level asset) first, then the members, which point at their archive's ID.
                // Asset.willInsertRows checks them as an insert's hooks would, and that
                // the content of each managed one is in objects/ (the pins put it back).
                context.userInfo[Asset.adoptionKey] = adoption
                let top = plan.items.filter { $0.storage != .member }
                let members = plan.items.filter { $0.storage == .member }
                let entries = plan.entries
                let topIDs = try context.insertRows(Asset.self, count: top.count) { i, row in
                    Self.fill(&row, top[i], entries[top[i].index], archive: nil)
                }
                let archives = Dictionary(
                    zip(top.map { entries[$0.index].key }, topIDs), uniquingKeysWith: { a, _ in a })
                let memberIDs = try context.insertRows(Asset.self, count: members.count) { i, row in
                    Self.fill(
                        &row, members[i], entries[members[i].index],
                        archive: members[i].archiveKey.flatMap { archives[$0] })
                }
                // The bytes durable before the transaction takes the write lock (the links
                // follow meanwhile; the check before the commit waits for them).
                try adoption.waitUntilDurable()
                var jobs: [Job] = []
                if foreign {
                    for (item, id) in zip(top, topIDs) {
                        let kind = entries[item.index].kind
                        for kind in [
                            kind == "archive" ? BuiltInProcessors.indexArchive : nil,
                            kind == "image" ? BuiltInProcessors.metadata : nil,
                        ].compactMap({ $0 }) {
                            let job = Job(context: context)
                            job.kind = kind
                            job.assetID = id.rowID
                            jobs.append(job)
                        }
                    }
                }
                if FaultPoint.isActive(.failImportCommit) {
                    container.failNextCommit(with: CatalogError(.io, "the disk is full (injected)"))
                }
                try context.save()
                let records = zip(top + members, topIDs + memberIDs).map { item, id in
                    let entry = entries[item.index]
                    return AssetRecord(
                        id: id.rowID, name: item.name, kind: entry.kind, size: entry.size, sha256: entry.sha256,
                        storage: item.storage, path: item.storage == .member ? nil : entry.path,
                        archive: item.archiveKey.flatMap { archives[$0]?.rowID },
                        member: item.storage == .member ? entry.member : nil,
                        memberOrdinal: item.storage == .member ? entry.memberOrdinal ?? 0 : 0,
                        tags: Asset.tags(fromText: Asset.tagText(entry.tags)), created: entry.created,
                        modified: entry.modified,
                        metadata: entry.metadata)
                }
                return (records, jobs.map(\.objectID.rowID))
            }
        }
        if !recorded.1.isEmpty { jobs.wakeWorker() }
        return recorded
    }

    /// The row of a planned asset.
    private static func fill(
        _ row: inout BatchInsertRow<Asset>, _ item: ImportPlan.Item, _ entry: BundleRecords.Entry,
        archive: ManagedObjectID?
    ) {
        row[\.name] = item.name
        row[\.kind] = entry.kind
        row[\.storage] = item.storage
        row[\.size] = entry.size
        row[\.sha256] = entry.sha256
        row[\.tagText] = Asset.tagText(entry.tags)
        row[\.metadataJSON] = Asset.metadataJSON(entry.metadata)
        row[\.created] = entry.created
        row[\.modified] = entry.modified
        if item.storage == .member {
            row[\.archive] = archive
            row[\.member] = entry.member
            row[\.memberOrdinal] = entry.memberOrdinal ?? 0
        } else {
            row[\.path] = entry.path
        }
    }

    /// Checks a bag — a directory or an archive — as an import would, without importing:
    /// the declaration, every manifest both ways, checksums, `Payload-Oxum`, this
    /// catalog's records file when present, and the safety of every archive member.
    ///
    /// - Returns: The findings; ``BundleValidation/problems`` lists every problem, one
    ///   line each, naming its file.
    /// - Throws: ``CatalogError`` `notFound` when there is nothing at `path`.
    public static func validateBundle(
        at path: String, policy: ExtractionPolicy = .default, progress: (@Sendable (BundleProgress) -> Void)? = nil
    ) throws -> BundleValidation {
        guard FileManager.default.fileExists(atPath: path) else {
            throw CatalogError(.notFound, "No such file or directory: \(path)", path: path)
        }
        var validation = BundleValidation(
            bundle: path, isValid: false, version: nil, payloadFiles: 0, payloadBytes: 0, hasRecords: false,
            problems: [])
        // Our records come before the payload: they are decoded on another core meanwhile.
        let early = EarlyRecords()
        defer { early.wait() }  // the decode never outlives the call
        do {
            let bag = try BagReader.read(
                at: path, options: BagReadOptions(policy: policy, keptTagFiles: [BundleRecords.fileName]),
                tagFileRead: { name, bytes in
                    if name == BundleRecords.fileName { early.start(bytes) }
                },
                progress: { p in
                    progress?(
                        BundleProgress(
                            filesDone: p.filesDone, filesTotal: 0, bytesDone: p.bytesDone, bytesTotal: p.bytesTotal))
                })
            var problems = bag.problems
            if let bytes = bag.tagFiles[BundleRecords.fileName] {
                validation.hasRecords = true
                do throws(BagError) {
                    let records: BundleRecords
                    if let decoded = try early.records(of: bytes) {
                        records = decoded
                    } else {
                        records = try BundleRecords.decode(bytes)
                    }
                    problems += try records.problems(in: bag.payload)
                } catch {
                    problems.append(error)
                }
            }
            validation.version = bag.version
            validation.payloadFiles = bag.payload.count
            validation.payloadBytes = bag.payloadBytes
            validation.problems = problems.map(\.description)
        } catch let error as BagError {
            validation.problems = [error.description]
        }
        validation.isValid = validation.problems.isEmpty
        return validation
    }
}

/// Our records file, decoded on another thread while the rest of the bag is read (for
/// ``Catalog/validateBundle(at:policy:progress:)``, which does not run in a task).
private final class EarlyRecords: @unchecked Sendable {
    private let done = DispatchGroup()
    /// Set by `start`, on the reading thread; the result is written before `done` is left.
    private var bytes: [UInt8]?
    private var result: Result<BundleRecords, BagError>?

    /// Starts decoding `bytes`, once.
    func start(_ bytes: [UInt8]) {
        guard self.bytes == nil else { return }
        self.bytes = bytes
        done.enter()
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            result = Result { () throws(BagError) in try BundleRecords.decode(bytes) }
            done.leave()
        }
    }

    /// The decoded records, when these very bytes were decoded; `nil` otherwise.
    func records(of bytes: [UInt8]) throws(BagError) -> BundleRecords? {
        guard self.bytes == bytes else { return nil }
        done.wait()
        return try result?.get()
    }

    /// Waits for a decode in progress.
    func wait() { done.wait() }
}
