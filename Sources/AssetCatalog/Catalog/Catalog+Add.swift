import ArchiveIO
import BagIt
public import Foundation
import Locking
import Logging
import Persistence

#if canImport(Glibc)
    import Glibc
#endif

/// How ``Catalog/add(_:options:progress:)`` brings files in.
public struct AddOptions: Sendable, Hashable {
    /// How files are stored.
    public enum Mode: String, Sendable, Hashable {
        /// Copy into the catalog's `objects/` (the catalog owns the copy).
        case copy
        /// Record the file where it is; the catalog never writes or deletes it.
        case reference
    }

    public var mode: Mode
    /// Tags given to every added asset.
    public var tags: [String]
    /// Descend into directories (otherwise a directory is an error).
    public var recursive: Bool
    /// Queue an `index-archive` job for each archive (tar, zip, …), which
    /// records one asset per member as it reads.
    public var indexesArchives: Bool
    /// Reference mode only: record files without reading them and queue a
    /// `digest` job to hash them later.
    public var defersHashing: Bool
    /// Queue a `metadata` job (media type, pixel size) for each image.
    public var extractsMetadata: Bool
    /// Queue a `thumbnail` job for each image (``Catalog/thumbnailURL(of:)``).
    public var makesThumbnails: Bool
    /// How many files are read at once (small files go in runs of up to 64 per read); all
    /// cores by default.
    public var concurrency: Int
    /// How many files the first transaction commits. Each later one commits twice as many
    /// as the one before, up to 32 times this: the first files are recorded soon, and a
    /// large add commits (and syncs the store) rarely.
    public var batchSize: Int
    /// Whether the result lists every record added (``AddResult/added``) and job queued
    /// (``AddResult/queuedJobs``). Without them the result holds their counts only
    /// (``AddResult/addedCount``, ``AddResult/queuedJobCount``, ``AddResult/queuedJobIDs``), and an add of any number of
    /// files runs in flat memory.
    public var keepsRecords: Bool
    /// Whether an add resumes an interrupted add of the same paths with the same options
    /// (mode, tags, `recursive`, hashing, jobs): one that was cancelled, or whose process was
    /// killed, after it committed some of its files. Each batch an add commits records in the
    /// same transaction how far it got (the last file, in the add's order); an add that
    /// completes clears that mark. Resuming, the add skips the files the interrupted one
    /// recorded — a file is skipped when the catalog records it from the same path, in the
    /// same storage, with the same size, and the file was not modified after its record was
    /// made — and adds the rest: files it failed on or had not reached, files new since, and
    /// files changed since (recorded again, beside their earlier record). It counts what it
    /// skipped (``AddResult/skippedCount``). Only the files up to the mark are looked up (one
    /// query per page of the walk, through the index on names); after it, and in an add that
    /// resumes nothing, the mark costs one row written per batch.
    ///
    /// An add that resumes nothing records every file it is given, already recorded or not;
    /// so does every add with this off. On by default.
    public var resumesInterrupted: Bool

    /// Options for ``Catalog/add(_:options:progress:)``; each parameter sets the property of
    /// the same name.
    public init(
        mode: Mode = .copy, tags: [String] = [], recursive: Bool = false, indexesArchives: Bool = true,
        defersHashing: Bool = false, extractsMetadata: Bool = true, makesThumbnails: Bool = true,
        concurrency: Int = ProcessInfo.processInfo.activeProcessorCount, batchSize: Int = 512,
        keepsRecords: Bool = true, resumesInterrupted: Bool = true
    ) {
        self.mode = mode
        self.tags = tags
        self.recursive = recursive
        self.indexesArchives = indexesArchives
        self.defersHashing = defersHashing
        self.extractsMetadata = extractsMetadata
        self.makesThumbnails = makesThumbnails
        self.concurrency = max(1, concurrency)
        self.batchSize = max(1, batchSize)
        self.keepsRecords = keepsRecords
        self.resumesInterrupted = resumesInterrupted
    }
}

/// Where an add stands, reported as files complete.
public struct AddProgress: Sendable, Hashable {
    public var filesDone: Int
    public var filesTotal: Int
    public var bytesDone: Int64
    public var bytesTotal: Int64
}

/// What an add did.
public struct AddResult: Sendable {
    /// The committed assets (archives first, then their members); empty when the add's
    /// options do not keep records (``AddOptions/keepsRecords``).
    public var added: [AssetRecord]
    /// How many assets were committed (whether or not ``added`` lists them).
    public var addedCount = 0
    /// Files that could not be added, each with why.
    public var failures: [CatalogError]
    /// Whether the add was cancelled; what had completed is committed.
    public var wasCancelled: Bool
    /// How many files were found to add.
    public var filesFound: Int
    /// The jobs queued for the added assets (archive indexing, deferred
    /// digests, metadata), in the catalog's ``Catalog/jobs`` queue; empty when the add's
    /// options do not keep records (``AddOptions/keepsRecords``).
    public var queuedJobs: [Int64] = []
    /// How many jobs were queued (whether or not ``queuedJobs`` lists them).
    public var queuedJobCount = 0
    /// The IDs of the jobs queued, as ranges, whatever the add's options (a few ranges for
    /// any number of jobs): what ``JobQueue/runUntilIdle(jobs:progress:)`` takes to run
    /// this add's jobs and no others.
    public var queuedJobIDs: [ClosedRange<Int64>] = []
    /// Whether the add resumed an interrupted add of the same paths and options
    /// (``AddOptions/resumesInterrupted``).
    public var resumedInterruptedAdd = false
    /// How many files were skipped because the interrupted add it resumed had recorded them
    /// (``AddOptions/resumesInterrupted``); they count in ``filesFound``, not in ``addedCount``.
    public var skippedCount = 0

    /// Takes in what one batch's commit did.
    mutating func merge(_ batch: Catalog.BatchOutcome, keepingRecords: Bool) {
        addedCount += batch.added.count
        queuedJobCount += batch.queuedJobs.count
        for id in batch.queuedJobs.sorted() {
            if let last = queuedJobIDs.last, id >= last.lowerBound, id <= last.upperBound &+ 1 {
                queuedJobIDs[queuedJobIDs.count - 1] = last.lowerBound...max(last.upperBound, id)
            } else {
                queuedJobIDs.append(id...id)
            }
        }
        if keepingRecords {
            added += batch.added
            queuedJobs += batch.queuedJobs
        }
    }
}

/// One file read and (in copy mode) stored, not yet recorded.
struct IngestedFile: Sendable {
    var source: String
    var name: String
    /// The name's ``ContentKind``, found where the file is read, off the writer's thread.
    var kind: String
    var digest: String
    var size: Int64
    /// In copy mode: the staged link that holds the content until the record commits.
    var pin: String?
}

struct IngestedMember: Sendable {
    var path: String
    var ordinal: Int
    var digest: String
    var size: Int64
}

extension Catalog {
    /// Adds files, directories (with `recursive`) and archives (one record
    /// per member) to the catalog.
    ///
    /// Files are read on all cores at once; each is hashed with SHA-256 and,
    /// in copy mode, written to staging, synced and linked into `objects/`
    /// before the transaction that records it commits. Completed files are
    /// committed in batches, in the order they were found, one batch while the
    /// next files are read; cancelling the task commits what is complete,
    /// stops the rest, and leaves nothing in staging.
    /// Should the process die instead (a kill, a crash), the batches committed
    /// stay (the first files found, in order), and the content its last
    /// batch linked is journaled: the next open of the catalog removes what no
    /// commit recorded. Either way, the same add run again adds the rest, and only the
    /// rest: it skips the files the interrupted add recorded
    /// (``AddOptions/resumesInterrupted``, ``AddResult/skippedCount``).
    ///
    /// Directories are walked twice, a directory at a time — once to count the
    /// files and, when `progress` is given, their bytes (``AddProgress/filesTotal``,
    /// ``AddProgress/bytesTotal``: a look-up of each file's size, which an add without
    /// `progress` is spared; several directories at once, on ``AddOptions/concurrency``
    /// threads), and once to add
    /// them — so the add never holds the list of its files: with
    /// ``AddOptions/keepsRecords`` off, its memory does not grow with their number (it
    /// holds the names of the largest directories on the way, and a few batches).
    ///
    /// ```swift
    /// let result = try await catalog.add(["/srv/photos"], options: .init(tags: ["2024"], recursive: true))
    /// print("added \(result.added.count), failed \(result.failures.count)")
    /// ```
    ///
    /// - Throws: ``CatalogError/Code/notFound`` for a path that does not
    ///   exist and ``CatalogError/Code/invalidArgument`` for a directory
    ///   without `recursive` — before anything is added. Per-file read errors
    ///   do not stop the add: they are in ``AddResult/failures``, as is each file or
    ///   folder inside a directory whose name is not UTF-8 (which the catalog cannot
    ///   record; it is not added). A batch that cannot be recorded — the store failed, or
    ///   could not be reached (a PostgreSQL store retries a lost connection for its URL's
    ///   `reconnect_timeout` first) — stops the add: the batches committed before it stay,
    ///   nothing is left in staging, and it throws one error (``CatalogError/Code/store``)
    ///   saying how many files were recorded and that the same add run again records the
    ///   rest.
    public func add(
        _ paths: [String], options: AddOptions = AddOptions(), progress: (@Sendable (AddProgress) -> Void)? = nil
    ) async throws -> AddResult {
        try content.requireWritable()
        for tag in options.tags { try Self.validateTag(tag) }
        if options.defersHashing && options.mode != .reference {
            throw CatalogError(
                .invalidArgument, "Hashing can only be deferred for referenced files (content is stored by its digest)")
        }
        let named = try Self.namedSources(paths, recursive: options.recursive, excluding: root.path)
        // The interrupted add of the same sources this one resumes, and the mark its batches move.
        let resumption = try AddResumption(named, options: options, in: self)
        var resumeUntil = resumption.resumedMark
        // A first walk counts the files (for the progress and the result) and finds those whose
        // name cannot be recorded, before anything is added; the second walk feeds the work,
        // a page at a time. Neither holds the list of files.
        let stopped = Locked(false)
        let counted = await withTaskCancellationHandler {
            // Sizes only for the progress: without it, the count reads no file's.
            SourceWalk.count(
                named, excluding: root.path, needsSizes: progress != nil, workers: options.concurrency,
                stopped: stopped)
        } onCancel: {
            stopped.withLock { $0 = true }
        }
        guard let counted else {
            var result = AddResult(added: [], failures: [], wasCancelled: true, filesFound: 0)
            result.resumedInterruptedAdd = resumeUntil != nil
            return result
        }
        let found = counted.files
        // Files whose name cannot be recorded are failures: never left out without a word.
        var result = AddResult(added: [], failures: counted.unnamable, wasCancelled: false, filesFound: found)
        result.resumedInterruptedAdd = resumeUntil != nil
        var done = AddProgress(filesDone: 0, filesTotal: found, bytesDone: 0, bytesTotal: counted.bytes)
        progress?(done)
        Self.afterCounting?()
        // The count read every file's size, for a progress; this walk reads none (a directory
        // entry gives its type), each file's size comes from the fstat of its reading — but
        // with deferred hashing, which records the size of a file it does not open.
        var sources = SourceWalk(named, excluding: root.path, needsSizes: options.defersHashing)
        // The files found and not started yet: a page of the walk at a time.
        var page: [SourceFile] = []
        var pageNext = 0
        var walked = 0
        var isFirstPage = true
        var lookupFailure: (any Error)?
        func nextSource() -> SourceFile? {
            while pageNext == page.count {
                guard lookupFailure == nil else { return nil }  // nothing more is read
                page.removeAll(keepingCapacity: true)
                pageNext = 0
                while page.count < Self.walkPageSize, let file = sources.next() { page.append(file) }
                walked += page.count
                if isFirstPage {
                    isFirstPage = false
                    Self.afterExpanding?(page.map(\.path))  // the tests' window: listed, nothing opened yet
                }
                if page.isEmpty { return nil }
                if let mark = resumeUntil {
                    // Resuming: the files up to the mark that the interrupted add recorded are
                    // skipped (a page of them all: on to the next page).
                    let end = page.firstIndex { $0.path == mark }.map { $0 + 1 }
                    do {
                        let recorded = try recordedUnchanged(page[..<(end ?? page.count)], storage: resumption.storage)
                        page.removeAll { recorded.contains($0.path) }
                        result.skippedCount += recorded.count
                        done.filesDone += recorded.count
                        if end != nil { resumeUntil = nil }
                    } catch {
                        lookupFailure = error  // what is complete is committed, and the add throws it
                        page.removeAll()
                    }
                }
            }
            pageNext += 1
            return page[pageNext - 1]
        }

        // Files complete in any order; they are recorded in the order found, so IDs follow
        // the command line and directory order. A batch is committed while the next files are
        // read, one batch at a time; what waits is bounded (a batch being committed, one
        // ready, and the files being read into the next).
        var completed: [Int: IngestedFile] = [:]
        var failed = Set<Int>()
        var nextToRecord = 0
        var pending: [IngestedFile] = []
        var ready: [[IngestedFile]] = []
        var batchSize = options.batchSize
        func collectInOrder() {
            while true {
                if let file = completed.removeValue(forKey: nextToRecord) {
                    pending.append(file)
                } else if failed.remove(nextToRecord) == nil {
                    return
                }
                nextToRecord += 1
                if pending.count >= batchSize {
                    ready.append(pending)
                    pending = []
                    batchSize = min(batchSize * 2, options.batchSize * Self.batchGrowth)
                }
            }
        }

        enum Outcome: Sendable {
            /// The files of a run, from the index of its first.
            case files(Int, [Result<IngestedFile, CatalogError>])
            case batch(BatchOutcome)
        }
        // Copies are staged in two folders per reading task, made for this add and removed
        // with what is left in them when it ends (``ContentStore/stage(fileAt:below:opened:in:isCancelled:)``).
        let lanes = try (options.mode == .copy ? 0..<2 * options.concurrency : 0..<0).map { _ in
            try content.makeStagingFolder()
        }
        defer { for lane in lanes { content.removeStagingFolder(lane) } }
        // The failure of a batch's commit, which stops the add.
        var failure: CatalogError?
        try await withThrowingTaskGroup(of: Outcome.self) { group in
            var next = 0
            var launched = 0
            var reading = 0
            var committing = false
            var stopped = false
            // Files are read in runs (up to `runFiles` files or `runBytes` bytes), a task each:
            // a task per tiny file costs more in hand-offs between threads than its reading.
            func launchReads() {
                while !stopped && reading < options.concurrency && ready.isEmpty {
                    var run: [SourceFile] = []
                    var bytes: Int64 = 0
                    // Most sizes are not known yet (0): a run takes fewer files as fewer remain,
                    // so that the last files, large ones too, still spread over the tasks.
                    let most = min(Self.runFiles, max(1, (found - next) / (max(1, options.concurrency) * 4)))
                    while run.count < most && bytes < Self.runBytes, let file = nextSource() {
                        run.append(file)
                        bytes += file.size
                    }
                    guard !run.isEmpty else { return }
                    let first = next
                    next += run.count
                    reading += 1
                    // Runs read at once stage their copies in different folders.
                    let lane = lanes.isEmpty ? nil : lanes[launched % lanes.count]
                    launched += 1
                    group.addTask { [self] in .files(first, self.ingest(run, lane: lane, options: options)) }
                }
            }
            func launchCommit() {
                guard !stopped, failure == nil, !committing, !ready.isEmpty else { return }
                let batch = ready.removeFirst()
                committing = true
                group.addTask { [self] in .batch(self.commitBatch(batch, options: options, resumption: resumption)) }
            }
            launchReads()
            while let outcome = try await group.next() {
                switch outcome {
                case .files(let first, let outcomes):
                    reading -= 1
                    for (index, outcome) in zip(first..., outcomes) {
                        switch outcome {
                        case .success(let file):
                            completed[index] = file
                            done.bytesDone += file.size
                        case .failure(let error):
                            failed.insert(index)
                            if error.code == .cancelled {
                                result.wasCancelled = true
                            } else {
                                result.failures.append(error)
                            }
                        }
                        done.filesDone += 1
                        done.filesTotal = max(done.filesTotal, done.filesDone)  // a file made since the count
                        progress?(done)
                    }
                    collectInOrder()
                case .batch(let batch):
                    committing = false
                    result.merge(batch, keepingRecords: options.keepsRecords)
                    if let batchFailure = batch.failure, failure == nil {
                        // Nothing more is read or recorded; what is staged goes with its lanes.
                        failure = batchFailure
                        stopped = true
                        group.cancelAll()
                    }
                }
                if Task.isCancelled {
                    result.wasCancelled = true
                    stopped = true
                }
                launchCommit()
                launchReads()
            }
        }
        if let failure { throw Self.stopped(at: failure, after: result) }
        // What is complete and not committed yet (when cancelled, also what completed past a
        // gap: it is complete too), in order.
        ready.append(pending + completed.sorted { $0.key < $1.key }.map(\.value))
        ready.removeAll { $0.isEmpty }
        // An add that went through all its files clears its mark, in its last transaction.
        let isComplete = !result.wasCancelled && lookupFailure == nil
        for (i, batch) in ready.enumerated() {
            let outcome = commitBatch(
                batch, options: options, resumption: resumption, clearsMark: isComplete && i == ready.count - 1)
            result.merge(outcome, keepingRecords: options.keepsRecords)
            if let failure = outcome.failure { throw Self.stopped(at: failure, after: result) }
        }
        if isComplete && ready.isEmpty { clearMark(resumption) }
        if let lookupFailure { throw lookupFailure }
        if !result.wasCancelled { result.filesFound = walked }
        result.failures.sort { ($0.path ?? "") < ($1.path ?? "") }
        return result
    }

    /// How many files the walk of an add lists ahead of the work.
    static let walkPageSize = 1_024
    /// How many times ``AddOptions/batchSize`` an add's batches grow to (8,192 rows by
    /// default). Up to three batches are held at once (one committing, one ready, one being
    /// read), with the committing one's objects: at 16,384 rows a tagged add of a million
    /// files peaked at 104 MB, at 8,192 at 80 MB, for 3 % more time on ext4 (twice the
    /// commits, each syncing the `-wal`) and none on tmpfs.
    static let batchGrowth = 16
    /// The most files, and about the most bytes, one task of an add reads.
    static let runFiles = 64
    static let runBytes: Int64 = 1 << 20

    /// Reads (and in copy mode stores) a run of files, in order; a file below a directory
    /// the user named is opened below it, opened once for the run.
    private func ingest(_ run: [SourceFile], lane: ContentStore.StagingFolder?, options: AddOptions) -> [Result<
        IngestedFile, CatalogError
    >] {
        var directory: (path: String, fd: Int32)?  // fd -1: it did not open; each file says why
        defer { if let directory, directory.fd >= 0 { Glibc.close(directory.fd) } }
        return run.map { file in
            do {
                var fd: Int32 = -1
                if let below = file.below {
                    if directory?.path != below {
                        if let directory, directory.fd >= 0 { Glibc.close(directory.fd) }
                        directory = (below, (try? FileAccess.openDirectory(below)) ?? -1)
                    }
                    fd = directory!.fd
                }
                return .success(try ingest(file, directoryFD: fd, lane: lane, options: options))
            } catch let error as CatalogError {
                return .failure(error)
            } catch {
                return .failure(CatalogError(.io, "\(file.path): \(error)", path: file.path, cause: error))
            }
        }
    }

    /// Reads (and in copy mode stores) one file, and indexes its members.
    private func ingest(_ file: SourceFile, directoryFD: Int32, lane: ContentStore.StagingFolder?, options: AddOptions)
        throws -> IngestedFile
    {
        let stop = { Task.isCancelled }
        let slash = file.path.utf8.lastIndex(of: UInt8(ascii: "/"))  // paths are absolute, never end in "/"
        let name = slash.map { String(file.path[file.path.utf8.index(after: $0)...]) } ?? file.path
        let kind = ContentKind.of(name)
        switch options.mode {
        case .reference where options.defersHashing:
            return IngestedFile(source: file.path, name: name, kind: kind, digest: "", size: file.size, pin: nil)
        case .reference:
            let (digest, size) = try ContentStore.digest(
                ofFileAt: file.path, below: file.below, opened: directoryFD, isCancelled: stop)
            return IngestedFile(source: file.path, name: name, kind: kind, digest: digest, size: size, pin: nil)
        case .copy:
            // Linked into objects/ with its whole batch, just before the batch commits.
            let (digest, size, staged) = try content.stage(
                fileAt: file.path, below: file.below, opened: directoryFD, in: lane, isCancelled: stop)
            return IngestedFile(source: file.path, name: name, kind: kind, digest: digest, size: size, pin: staged)
        }
    }

    /// What committing one batch did.
    struct BatchOutcome: Sendable {
        var added: [AssetRecord] = []
        var queuedJobs: [Int64] = []
        /// Why the batch could not be recorded (nothing of it was): the add stops.
        var failure: CatalogError?
    }

    /// Commits a batch. A batch that cannot be recorded — the store failed, or could not be
    /// reached — is no problem of its files: the add stops there (``stopped(at:after:)``),
    /// earlier batches committed, rather than report the same failure for every file left.
    private func commitBatch(
        _ files: [IngestedFile], options: AddOptions, resumption: AddResumption, clearsMark: Bool = false
    ) -> BatchOutcome {
        do {
            let (added, jobs) = try commit(files, options: options, resumption: resumption, clearsMark: clearsMark)
            return BatchOutcome(added: added, queuedJobs: jobs)
        } catch let error as CatalogError {
            return BatchOutcome(failure: error)
        } catch {
            return BatchOutcome(failure: CatalogError(.store, "\(error)", cause: error))
        }
    }

    /// The error of an add that stopped at a batch it could not record (`failure`), with
    /// `result` what it had recorded: one message, saying how far it got and that the same
    /// add run again records the rest (``AddOptions/resumesInterrupted``).
    static func stopped(at failure: CatalogError, after result: AddResult) -> CatalogError {
        let reason = failure.message.hasSuffix(".") ? failure.message : failure.message + "."
        let recorded = result.addedCount + result.skippedCount
        return CatalogError(
            failure.code,
            "The add stopped after recording \(recorded) of \(result.filesFound) files: \(reason) Run the same "
                + "`assetcat add` again to record the rest", path: failure.path, cause: failure)
    }

    /// Records ingested files in one transaction. Their content is journaled first, as an
    /// import's is (``PendingImport``, owned by this process): should the records not
    /// commit — an error, or the process killed at any instant — the journal becomes
    /// removal plans (here, or in the next sweep of any process once this one is gone) and
    /// that content goes again, unless an asset uses it by then. All of it, not only what
    /// `objects/` lacks now: content there now may be removed by another process before
    /// this one links (or puts back) its own copy. The records' transaction deletes the
    /// journal.
    private func commit(
        _ files: [IngestedFile], options: AddOptions, resumption: AddResumption, clearsMark: Bool
    ) throws -> ([AssetRecord], [Int64]) {
        defer { for pin in files.compactMap(\.pin) { content.unpin(pin) } }
        let staged = files.compactMap { file in file.pin.map { (path: $0, digest: file.digest) } }
        let journal = try journal(Set(staged.map(\.digest)))
        do {
            content.faults.reach(.afterAddJournal)
            try content.adoptAll(staged)
            content.faults.reach(.beforeAddCommit)
            return try record(
                files, options: options, journal: journal, resumption: resumption, clearsMark: clearsMark)
        } catch {
            // A store that failed is the add's error, which stops it: its content is given up
            // here, else by the next open, without a line of its own.
            if !journal.isEmpty { giveUp(journal, warns: (error as? CatalogError)?.code != .store) }
            throw error
        }
    }

    /// Writes the journal of content about to be linked into `objects/` (rows of
    /// ``PendingImport``, up to ``journalRowSize`` digests each, owned by this process), in
    /// one transaction; returns the rows' IDs.
    func journal(_ digests: Set<String>) throws -> Range<Int64> {
        guard !digests.isEmpty else { return 0..<0 }
        let sorted = digests.sorted()
        let size = Self.journalRowSize
        return try storeErrors {
            try withContext { context in
                let created = Date()
                let ids = try context.insertRows(
                    PendingImport.self, count: (sorted.count + size - 1) / size, batchSize: 1,
                    streaming: { [content] i, row in
                        row[\.owner] = content.owner
                        row[\.created] = created
                        row[\.digests] = sorted[(i * size)..<min(sorted.count, (i + 1) * size)].joined(separator: "\n")
                    })
                try context.save()
                return ids
            }
        }
    }

    /// Records ingested files, and the jobs they need, in one transaction: the assets as
    /// rows (``Asset/willInsertRows(_:in:effects:)`` checks them and, under the write lock,
    /// their content, which the pins put back should a removal have taken it).
    /// The rows of `journal` (``PendingImport``) are deleted in the same transaction, and the
    /// add's mark (``AddMark``) moves to the batch's last file, or goes with `clearsMark`.
    private func record(
        _ files: [IngestedFile], options: AddOptions, journal: Range<Int64>, resumption: AddResumption,
        clearsMark: Bool
    ) throws -> ([AssetRecord], [Int64]) {
        let storage: Storage = options.mode == .copy ? .managed : .referenced
        let now = Date()
        // The batch's shared fields (its tags' text, its date) made once, each file's set on a copy.
        let shared = AssetFields(
            name: "", kind: "", storage: storage, size: 0, sha256: "", tags: options.tags, created: now, modified: now)
        let fields = files.map { file in
            var fields = shared
            (fields.name, fields.kind, fields.size, fields.sha256, fields.path) =
                (file.name, file.kind, file.size, file.digest, file.source)
            return fields
        }
        let recorded = try storeErrors {
            try withContext { context in
                var pins: [String: String] = [:]
                for file in files { if let pin = file.pin, pins[file.digest] == nil { pins[file.digest] = pin } }
                context[ContentAdoption.self] = ContentAdoption(holding: PinTable(pins: pins))
                let ids = try context.insertRows(Asset.self, count: files.count) { i, row in fields[i].write(to: &row) }
                var jobs: [Job] = []
                func queue(_ kind: String, for id: ManagedObjectID) {
                    let job = Job(context: context)
                    job.kind = kind
                    job.assetID = id.rowID
                    jobs.append(job)
                }
                for (i, id) in ids.enumerated() {
                    if files[i].digest.isEmpty { queue(BuiltInProcessors.digest, for: id) }
                    if options.indexesArchives && fields[i].kind == "archive" {
                        queue(BuiltInProcessors.indexArchive, for: id)
                    }
                    if options.extractsMetadata && fields[i].kind == "image" {
                        queue(BuiltInProcessors.metadata, for: id)
                    }
                    if options.makesThumbnails && fields[i].kind == "image" {
                        queue(BuiltInProcessors.thumbnail, for: id)
                    }
                }
                if !journal.isEmpty {
                    // The records make the journal moot: it goes in their transaction.
                    try context.deleteRows(PendingImport.self) { after in
                        Array(max(after + 1, journal.lowerBound)..<journal.upperBound)
                    }
                }
                let mark = try writeMark(resumption, lastPath: files.last?.source, clearing: clearsMark, in: context)
                try context.save()
                if clearsMark {
                    resumption.cleared()
                } else {
                    resumption.markCommitted(path: mark.path, rows: mark.rows)
                }
                let records = zip(ids, fields).map { id, fields in
                    AssetRecord(id: AssetID(id.rowID), archive: nil, fields: fields)
                }
                return (records, jobs.map(\.objectID.rowID))
            }
        }
        if !recorded.1.isEmpty { jobs.wakeWorker() }
        return recorded
    }

    struct SourceFile: Sendable {
        var path: String
        var size: Int64
        /// For a file found under a directory the user named: that directory, below which it
        /// is opened without following links (``ContentStore/openSource(_:below:opened:)``).
        var below: String? = nil
    }

    /// A name with each byte that is not part of valid UTF-8 shown as `\xNN`.
    static func escaped(_ bytes: [UInt8]) -> String {
        var text = ""
        var rest = bytes[...]
        while !rest.isEmpty {
            // The longest valid prefix (1 to 4 bytes) of the rest, else one byte escaped.
            if let length = (1...min(4, rest.count)).first(where: {
                String(validating: rest.prefix($0), as: UTF8.self) != nil
            }) {
                text += String(decoding: rest.prefix(length), as: UTF8.self)
                rest = rest.dropFirst(length)
            } else {
                text += "\\x" + String(rest.first!, radix: 16).leftPadded(to: 2)
                rest = rest.dropFirst()
            }
        }
        return text
    }

    static func validateTag(_ tag: String) throws {
        guard !tag.isEmpty, !tag.contains("\n") else {
            throw CatalogError(.invalidArgument, "Invalid tag \(tag.debugDescription): tags are non-empty, one line")
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
