public import ArchiveIO
import BagIt
import Foundation
import Locking
import Logging
@_spi(Testing) import Persistence

#if canImport(Glibc)
    import Glibc
#endif

/// What an import does with an asset whose name a top-level asset of the catalog already
/// has (with other content, tags or metadata: an identical asset is simply already there).
public enum ConflictPolicy: String, Sendable, Hashable, Codable, CaseIterable {
    /// Keep the catalog's asset; leave the bundle's out (counted in ``ImportResult/skipped``).
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
    /// The most items each of ``ImportResult``'s lists gives (its counts are always whole),
    /// so that the result of a bundle of a million conflicts stays small.
    public var listLimit: Int

    public init(onConflict: ConflictPolicy = .skip, policy: ExtractionPolicy = .default, listLimit: Int = 1_000) {
        self.onConflict = onConflict
        self.policy = policy
        self.listLimit = listLimit
    }
}

/// A list that may be as long as a bundle, kept short: how many there are in all, and the
/// first of them (in the bundle's order, or by ID), at most ``ImportOptions/listLimit``.
///
/// ```swift
/// let result = try await catalog.importBundle(from: "in.tar.zst")
/// print("\(result.skipped.count) skipped")
/// for skip in result.skipped.items { print(skip.name, skip.reason) }
/// if result.skipped.omitted > 0 { print("and \(result.skipped.omitted) more") }
/// ```
public struct CappedList<Element: Sendable & Hashable & Codable>: Sendable, Hashable, Codable {
    /// How many there are in all.
    public var count: Int
    /// The first of them: all of them when ``omitted`` is 0.
    public var items: [Element]

    /// A list of all of `items`.
    public init(_ items: [Element] = []) {
        count = items.count
        self.items = items
    }

    /// `count` in all, of which `items` are the first.
    init(count: Int, first items: [Element]) {
        self.count = count
        self.items = items
    }

    /// Whether there are none.
    public var isEmpty: Bool { count == 0 }
    /// How many ``items`` leaves out.
    public var omitted: Int { count - items.count }

    /// Counts one more, and keeps it while fewer than `limit` are kept.
    mutating func append(_ element: Element, limit: Int) {
        count += 1
        if items.count < limit { items.append(element) }
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
    /// How many assets were created.
    public var importedCount: Int
    /// The IDs of the assets created, as ranges: the top-level assets, then the archive
    /// members (`catalog.forEachAsset` pages through them). Ranges rather than a list, so
    /// that the result of a large import stays small.
    public var importedIDs: [ClosedRange<AssetID>]
    /// Bundle assets the catalog already had (same name, content, tags and metadata), by name.
    public var alreadyPresent: CappedList<String>
    /// Bundle assets left out by ``ConflictPolicy/skip``.
    public var skipped: CappedList<Skipped>
    /// Catalog assets deleted by ``ConflictPolicy/replace`` (their members too), by ID in
    /// ascending order.
    public var replaced: CappedList<AssetID>
    /// Bundle assets imported under another name by ``ConflictPolicy/keepBoth``.
    public var renamed: CappedList<Renamed>
    /// Referenced assets whose file is not on this machine (or differs): their bytes,
    /// from the bundle, are stored in the catalog instead. By name.
    public var storedAsManaged: CappedList<String>
    /// Bytes of content the catalog did not have before.
    public var bytesStored: Int64
    /// How many jobs were queued for the imported assets: a bag from another tool has its
    /// archives indexed and its images read, as an add would.
    public var queuedJobCount: Int
    /// The IDs of those jobs, as ranges (``JobQueue/list(_:)`` lists them with the others).
    public var queuedJobIDs: [ClosedRange<Int64>]
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
    /// The problems, one line each, naming its file: every one, or the first of them when
    /// there are many (a thousand of the bag's, a thousand of each kind of the records').
    public var problems: [String]
    /// How many problems there are in all (``problems`` may give fewer).
    public var problemCount: Int
    /// What the bag does that other tools accept and this catalog reads as they do
    /// (BagIt's `BagContents.warnings`), one line each, naming its file: a valid bag may have some.
    public var warnings: [String] = []
    /// How many warnings there are in all (``warnings`` may give fewer).
    public var warningCount = 0
}

/// Stages one payload file of an import in its staging folder — or, when the manifest says
/// the catalog already has the content, pins the existing object and only hashes the bytes.
/// Once the file is read, it notes the copy in the import's ``Catalog/StagedFiles``.
final class StagingSink: BagPayloadSink {
    /// The file's path in the bundle.
    let file: String
    /// Its number in the import's staging folder.
    let number: Int64
    /// The digest the manifest announced, when the content was already in `objects/`.
    let linkedDigest: String?
    /// The digest the manifest announced, when `objects/` did not have it.
    let absentDigest: String?
    let staged: Catalog.StagedFiles
    private var fd: Int32 = -1

    init(file: String, content: ContentStore, expected: String?, staged: Catalog.StagedFiles) throws {
        self.file = file
        self.staged = staged
        if let expected, let pin = content.pinObject(expected, in: staged.folder) {
            number = pin
            linkedDigest = expected
            absentDigest = nil
        } else {
            linkedDigest = nil
            absentDigest = expected
            (number, fd) = try content.createStagingFile(in: staged.folder)
        }
    }

    deinit { if fd >= 0 { close(fd) } }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard fd >= 0 else { return }
        try ContentStore.writeAll(fd, bytes, path: staged.folder.file(number))
    }

    func finish(digests: [ChecksumAlgorithm: String]) throws {
        if fd >= 0 { close(fd) }
        fd = -1
        guard let digest = digests[.sha256] else { return }
        if let linkedDigest, linkedDigest != digest { staged.changed.append(file) }
        let absent = linkedDigest == nil && (!staged.hadObjects || absentDigest == digest)
        try staged.note(.init(digest: digest, file: number, absent: absent))
    }
}

extension Catalog {
    /// Imports a BagIt bag — a directory or any archive libarchive reads — all or nothing.
    ///
    /// Every payload file is staged and checked against every manifest the bag has
    /// (MD5, SHA-1, SHA-224, SHA-256, SHA-384, SHA-512), for completeness both ways, and against this
    /// catalog's records file when the bag has one (each archive member the records name
    /// must be in its archive, at its ordinal, with its size and SHA-256; the first wrong
    /// record is named). Then one transaction adopts everything. A bag from another tool becomes assets named by their payload paths.
    /// Content the catalog has is not stored twice. On any failure — an invalid or
    /// hostile bag, a conflict error, a failed commit, cancellation — the catalog is as
    /// it was and nothing is left in staging.
    ///
    /// The bundle's entries and the plan for each are kept in a temporary database, not in
    /// memory: an import's memory does not grow with the number of assets.
    ///
    /// ```swift
    /// let result = try await catalog.importBundle(from: "trip.tar.zst", options: .init(onConflict: .keepBoth))
    /// print("imported \(result.importedCount)")
    /// ```
    public func importBundle(
        from path: String, options: ImportOptions = ImportOptions(),
        progress: (@Sendable (BundleProgress) -> Void)? = nil
    ) async throws -> ImportResult {
        let staged = try StagedFiles(
            scratch: ImportScratch(), folder: content.makeStagingFolder(), hadObjects: content.hasAnyObject())
        defer {
            staged.stop()
            content.removeStagingFolder(staged.folder)
        }
        // The bag, read and checked, is let go before the commit: only the entries and the
        // staged copies are needed from here on.
        let (foreign, earlyPlan) = try await readForImport(path, options: options, staged: staged, progress: progress)
        let scratch = staged.scratch
        // A plan made during the read is made again if the catalog changed meanwhile (or if
        // making it failed: the error, should it last, comes from the second attempt).
        var plan: ImportPlan
        if let early = earlyPlan.flatMap({ try? $0.get() }), try isCurrent(early) {
            plan = early
        } else {
            if earlyPlan != nil { try scratch.resetPlan() }
            plan = try planImport(scratch, options: options)
        }
        plan.result.bundle = path
        try commitImport(&plan, staged: staged, foreign: foreign)
        return plan.result
    }

    /// The staging files of one import, in a folder of their own that goes when it ends
    /// (adopted content stays in `objects/` as a second link), and what they hold: noted in
    /// the import's ``ImportScratch`` (``ImportScratch/Staged``), on another thread, so that
    /// the reading thread only hands each file over.
    final class StagedFiles: @unchecked Sendable {
        let scratch: ImportScratch
        let folder: ContentStore.StagingFolder
        /// Whether `objects/` had any content when the read began: when it had none, each
        /// content staged is new, with no need to look.
        let hadObjects: Bool
        private let notes: BackgroundBatches<ImportScratch.Staged>
        /// The files (by path in the bundle) whose content `objects/` had, but whose bytes
        /// differed from what the manifest announced: changed while they were read.
        var changed: [String] = []

        init(scratch: ImportScratch, folder: ContentStore.StagingFolder, hadObjects: Bool) {
            self.scratch = scratch
            self.folder = folder
            self.hadObjects = hadObjects
            notes = BackgroundBatches(label: "AssetCatalog.StagedFiles", batchSize: 1_000) { [scratch] files in
                try scratch.addStaged(files)
            }
        }

        /// Notes a file read (on the reading thread); throws what stopped an earlier note.
        func note(_ file: ImportScratch.Staged) throws { try notes.add(file) }

        /// Waits until every file is noted; throws what stopped that.
        func finish() throws { try notes.drain() }

        /// Waits for the notes under way (an import that failed ends with it).
        func stop() { notes.stop() }
    }

    /// What an import works out from our records while the payload is still being read.
    private struct EarlyWork: Sendable {
        /// Whether the records could be read into the import's entries.
        var records: Result<Void, any Error>
        /// The plan, when they could.
        var plan: Result<ImportPlan, any Error>?
    }

    /// Reads and checks a bag, staging its payload and putting its entries in the import's
    /// ``ImportScratch``: returns whether the bag came without our records, and the import's
    /// plan when it could be made during the read.
    func readForImport(
        _ path: String, options: ImportOptions, staged: StagedFiles, progress: (@Sendable (BundleProgress) -> Void)?
    ) async throws -> (foreign: Bool, plan: Result<ImportPlan, any Error>?) {
        let scratch = staged.scratch
        // Our records come before the payload: they are read into the entries, and the
        // import planned from them, on another core while the payload is read.
        var early: Task<EarlyWork, Never>?
        let moot = EarlyPlan()
        let planned = Self.afterEarlyPlan  // a detached task does not inherit it
        let records = RecordsFile.Tap(directory: content.ownStaging) { [scratch] file in
            early = Task.detached { [self] in
                let read = Result { try file.load(into: scratch, isCancelled: { Task.isCancelled }) }
                guard case .success = read, !Task.isCancelled, !moot.isMoot else { return EarlyWork(records: read) }
                let plan = Result { try self.planImport(scratch, options: options) }
                planned?()
                return EarlyWork(records: read, plan: plan)
            }
        }
        let bag: BagContents
        do {
            bag = try readBag(path, options: options, staged: staged, records: records, progress: progress)
            try staged.finish()
        } catch {
            // The early work reads the catalog: it ends before the import does.
            early?.cancel()
            _ = await early?.value
            throw error
        }
        // An invalid bag makes the plan moot (the records are still read: their problems are listed too).
        if !bag.isValid || bag.filesToFetch > 0 { moot.isMoot = true }
        let work = await early?.value
        var problems = bag.problems
        var problemCount = bag.problemCount
        if bag.filesToFetch > 0 {
            // Valid, but incomplete: what it lacks is elsewhere.
            problems.append(
                BagError(
                    .fetchUnsupported, file: "fetch.txt",
                    "lists \(bag.filesToFetch == 1 ? "1 file" : "\(bag.filesToFetch) files") the bag lacks: fetch them "
                        + "into the bag, then import it (fetching is not supported)"))
            problemCount += 1
        }
        let root = bag.bagName.isEmpty ? "" : bag.bagName + "/"
        let hasRecords = records.file?.path == root + BundleRecords.fileName
        var recordsRead = false
        var plan: Result<ImportPlan, any Error>?
        if hasRecords, let work {
            switch work.records {
            case .success:
                recordsRead = true
                plan = work.plan
            case .failure(let error as BagError):
                problems.append(error)
                problemCount += 1
            case .failure(let error): throw error
            }
        }
        // A records file elsewhere than the bag's root was read for nothing.
        if !hasRecords && records.file != nil { try scratch.resetEntries() }
        // One walk of the payload: the records checked against it, or for a bag without
        // them, an asset made of each file.
        let check = recordsRead ? BundleRecords.Check(scratch) : nil
        if recordsRead || (!hasRecords && problemCount == 0) {
            let now = Date()
            var plain: [BundleRecords.Entry] = []
            var count = 0
            try bundleErrors(path) {
                try bag.payload.forEach { file in
                    if let check {
                        try check.visit(file)
                    } else {
                        count += 1
                        plain.append(Self.plainEntry(file, key: Int64(count), date: now))
                        if plain.count == ImportScratch.pageSize {
                            try scratch.add(plain)
                            plain.removeAll(keepingCapacity: true)
                        }
                    }
                }
            }
            if let check {
                let found = try check.finish()
                problems += found.first
                problemCount += found.count
            } else {
                try scratch.add(plain)
                try scratch.seal()
            }
        }
        if let first = problems.first {
            let more =
                !bag.countsAllProblems
                ? " (and at least \(problemCount - 1) more; `assetcat validate` lists them)"
                : problemCount > 1 ? " (and \(problemCount - 1) more; `assetcat validate` lists them)" : ""
            let what = problemCount == 1 && first.code == .fetchUnsupported ? "is incomplete" : "is not a valid bag"
            throw CatalogError(
                .invalidArgument, "\(path) \(what), nothing was imported: \(first)\(more)", path: path)
        }
        let relative = { (file: String) in
            file.utf8.starts(with: root.utf8) ? String(Substring(file.utf8.dropFirst(root.utf8.count))) : file
        }
        if let first = staged.changed.map(relative).min() {
            throw CatalogError(
                .damaged, "\(path): \(first) changed while it was read; nothing was imported", path: path)
        }
        // The members the records give an archive must be in it, as recorded: each archive
        // is read once more, from its staged copy.
        if recordsRead {
            let members: (first: [BagError], count: Int)
            do {
                members = try BundleRecords.MemberCheck.problems(
                    scratch, policy: options.policy,
                    archiveFile: { digest, _ in try scratch.stagedFile(digest).map(staged.folder.file) },
                    isCancelled: { Task.isCancelled })
            } catch let error as BagError {
                members = ([error], 1)  // an archive that cannot be read as one
            }
            if let first = members.first.first {
                let more = members.count > 1 ? " (and \(members.count - 1) more)" : ""
                throw CatalogError(
                    .invalidArgument, "\(path) is not a valid bag, nothing was imported: \(first)\(more)", path: path)
            }
        }
        return (!hasRecords, plan)
    }

    /// Reads a bag for an import, staging its payload and streaming our records file to
    /// `records`.
    func readBag(
        _ path: String, options: ImportOptions, staged: StagedFiles, records: RecordsFile.Tap,
        progress: (@Sendable (BundleProgress) -> Void)?
    ) throws -> BagContents {
        try bundleErrors(path) {
            do {
                return try BagReader.read(
                    at: path,
                    options: BagReadOptions(
                        policy: options.policy,
                        // The expected digest only serves to find content `objects/` has.
                        looksUpExpectedSHA256: staged.hadObjects,
                        // The import refuses a bag with a problem: a thousand are enough to name.
                        stopsAtMaxProblems: true),
                    sink: { [content] file, expected in
                        try StagingSink(file: file, content: content, expected: expected, staged: staged)
                    },
                    tagSink: records.sink,
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
                // A listed file the bag lacks stops the read at the first (BagReader.read).
                let more = error.code == .missingFile ? " (there may be more; `assetcat validate` lists them)" : ""
                throw CatalogError(
                    error.code == .unreadableArchive ? .archive : .invalidArgument,
                    "\(path) is not a valid bag, nothing was imported: \(problem)\(more)", path: path, cause: error)
            }
        }
    }

    /// For a bag without our records: a managed asset of a payload file, named by its path.
    static func plainEntry(_ file: BagPayloadFile, key: Int64, date: Date) -> BundleRecords.Entry {
        let name = String(file.path.dropFirst("data/".count))
        return BundleRecords.Entry(
            key: key, archive: nil, payload: file.path,
            fields: AssetFields(
                name: name, kind: ContentKind.of(name), storage: .managed, size: file.size,
                sha256: file.digests[.sha256] ?? "", created: date, modified: date))
    }

    /// What an import does with each entry of its ``ImportScratch`` (the plan itself is
    /// there: each entry's outcome, name and storage), and what it reports.
    struct ImportPlan: @unchecked Sendable {
        let scratch: ImportScratch
        /// The catalog's top-level assets that have a name of the bundle's top-level assets,
        /// when the plan was made: how many, and a hash of them all.
        var existing = (count: 0, hash: 0)
        var result = ImportResult(
            bundle: "", importedCount: 0, importedIDs: [], alreadyPresent: CappedList(), skipped: CappedList(),
            replaced: CappedList(), renamed: CappedList(), storedAsManaged: CappedList(), bytesStored: 0,
            queuedJobCount: 0,
            queuedJobIDs: []
        )
    }
}

/// Tells an import's early work, from the reading task, that its plan is moot.
private final class EarlyPlan: Sendable {
    private let moot = Locked(false)
    var isMoot: Bool {
        get { moot.withLock { $0 } }
        set { moot.withLock { $0 = newValue } }
    }
}
