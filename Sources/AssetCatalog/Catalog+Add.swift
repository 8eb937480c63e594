import ArchiveIO
public import Foundation
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
    /// How many files are read at once; all cores by default.
    public var concurrency: Int
    /// How many files are committed per transaction.
    public var batchSize: Int

    public init(
        mode: Mode = .copy, tags: [String] = [], recursive: Bool = false, indexesArchives: Bool = true,
        defersHashing: Bool = false, extractsMetadata: Bool = true,
        concurrency: Int = ProcessInfo.processInfo.activeProcessorCount, batchSize: Int = 512
    ) {
        self.mode = mode
        self.tags = tags
        self.recursive = recursive
        self.indexesArchives = indexesArchives
        self.defersHashing = defersHashing
        self.extractsMetadata = extractsMetadata
        self.concurrency = max(1, concurrency)
        self.batchSize = max(1, batchSize)
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
    /// The committed assets (archives first, then their members).
    public var added: [AssetRecord]
    /// Files that could not be added, each with why.
    public var failures: [CatalogError]
    /// Whether the add was cancelled; what had completed is committed.
    public var wasCancelled: Bool
    /// How many files were found to add.
    public var filesFound: Int
    /// The jobs queued for the added assets (archive indexing, deferred
    /// digests, metadata), in the catalog's ``Catalog/jobs`` queue.
    public var queuedJobs: [Int64] = []
}

/// One file read and (in copy mode) stored, not yet recorded.
struct IngestedFile: Sendable {
    var source: String
    var name: String
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
    /// committed in batches; cancelling the task commits what is complete,
    /// stops the rest, and leaves nothing in staging.
    /// Should the process die instead (a kill, a crash), the content its last
    /// batch linked is journaled: the next open of the catalog removes what no
    /// commit recorded.
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
    ///   record; it is not added).
    public func add(
        _ paths: [String], options: AddOptions = AddOptions(), progress: (@Sendable (AddProgress) -> Void)? = nil
    ) async throws -> AddResult {
        try content.requireWritable()
        for tag in options.tags { try Self.validateTag(tag) }
        if options.defersHashing && options.mode != .reference {
            throw CatalogError(
                .invalidArgument, "Hashing can only be deferred for referenced files (content is stored by its digest)")
        }
        var unnamable: [CatalogError] = []
        let files = try Self.expand(paths, recursive: options.recursive, excluding: root.path, unnamable: &unnamable)
        let totalBytes = files.reduce(Int64(0)) { $0 + $1.size }
        // Files whose name cannot be recorded are failures: never left out without a word.
        var result = AddResult(added: [], failures: unnamable, wasCancelled: false, filesFound: files.count)
        var done = AddProgress(filesDone: 0, filesTotal: files.count, bytesDone: 0, bytesTotal: totalBytes)
        progress?(done)
        // Files complete in any order; they are recorded in the order given,
        // so IDs follow the command line and directory order.
        var completed: [Int: IngestedFile] = [:]
        var failed = Set<Int>()
        var nextToRecord = 0
        var pending: [IngestedFile] = []
        func collectInOrder() {
            while nextToRecord < files.count {
                if let file = completed.removeValue(forKey: nextToRecord) {
                    pending.append(file)
                } else if !failed.contains(nextToRecord) {
                    return
                }
                nextToRecord += 1
            }
        }

        Self.afterExpanding?(files.map(\.path))  // the tests' window: listed, nothing opened yet
        try await withThrowingTaskGroup(of: (Int, Result<IngestedFile, CatalogError>).self) { group in
            var next = 0
            func launch() {
                let index = next
                let file = files[index]
                next += 1
                group.addTask { [self] in
                    do {
                        return (index, .success(try self.ingest(file, options: options)))
                    } catch let error as CatalogError {
                        return (index, .failure(error))
                    } catch {
                        return (
                            index, .failure(CatalogError(.io, "\(file.path): \(error)", path: file.path, cause: error))
                        )
                    }
                }
            }
            while next < files.count && next < options.concurrency { launch() }
            while let (index, outcome) = try await group.next() {
                switch outcome {
                case .success(let file):
                    completed[index] = file
                    done.bytesDone += file.size
                case .failure(let error):
                    failed.insert(index)
                    if error.code == .cancelled { result.wasCancelled = true } else { result.failures.append(error) }
                }
                done.filesDone += 1
                progress?(done)
                collectInOrder()
                if pending.count >= options.batchSize {
                    commitReporting(pending, options: options, into: &result)
                    pending = []
                }
                if Task.isCancelled {
                    result.wasCancelled = true
                } else if next < files.count {
                    launch()
                }
            }
        }
        // Cancelled: what completed past a gap is complete too; record it, in order.
        pending += completed.sorted { $0.key < $1.key }.map(\.value)
        if !pending.isEmpty { commitReporting(pending, options: options, into: &result) }
        result.failures.sort { ($0.path ?? "") < ($1.path ?? "") }
        return result
    }

    /// Reads (and in copy mode stores) one file, and indexes its members.
    private func ingest(_ file: SourceFile, options: AddOptions) throws -> IngestedFile {
        let stop = { Task.isCancelled }
        let name = (file.path as NSString).lastPathComponent
        switch options.mode {
        case .reference where options.defersHashing:
            return IngestedFile(source: file.path, name: name, digest: "", size: file.size, pin: nil)
        case .reference:
            let (digest, size) = try ContentStore.digest(ofFileAt: file.path, below: file.below, isCancelled: stop)
            return IngestedFile(source: file.path, name: name, digest: digest, size: size, pin: nil)
        case .copy:
            // Linked into objects/ with its whole batch, just before the batch commits.
            let (digest, size, staged) = try content.stage(fileAt: file.path, below: file.below, isCancelled: stop)
            return IngestedFile(source: file.path, name: name, digest: digest, size: size, pin: staged)
        }
    }

    /// Commits a batch; a batch that cannot be recorded becomes one failure
    /// per file, and the add goes on (earlier batches stay committed).
    private func commitReporting(_ files: [IngestedFile], options: AddOptions, into result: inout AddResult) {
        do {
            let (added, jobs) = try commit(files, options: options)
            result.added += added
            result.queuedJobs += jobs
        } catch {
            let reason = (error as? CatalogError)?.message ?? "\(error)"
            for file in files {
                result.failures.append(
                    CatalogError(.store, "Could not record \(file.source): \(reason)", path: file.source, cause: error))
            }
        }
    }

    /// Records ingested files in one transaction. The content new to `objects/` is journaled
    /// first, as an import's is (``PendingImport``, owned by this process): should the
    /// records not commit — an error, or the process killed at any instant — the journal
    /// becomes removal plans (here, or in the next sweep of any process once this one is
    /// gone) and that content goes again, unless an asset uses it by then. The records'
    /// transaction deletes the journal.
    private func commit(_ files: [IngestedFile], options: AddOptions) throws -> ([AssetRecord], [Int64]) {
        defer { for pin in files.compactMap(\.pin) { content.unpin(pin) } }
        let staged = files.compactMap { file in file.pin.map { (path: $0, digest: file.digest) } }
        let journal = try journal(Set(staged.map(\.digest)).filter { !content.hasObject($0) })
        do {
            FaultPoint.reach(.afterAddJournal)
            try content.adoptAll(staged)
            FaultPoint.reach(.beforeAddCommit)
            return try record(files, options: options, journal: journal)
        } catch {
            if !journal.isEmpty { giveUp(journal) }
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
    /// The rows of `journal` (``PendingImport``) are deleted in the same transaction.
    private func record(
        _ files: [IngestedFile], options: AddOptions, journal: Range<Int64>
    ) throws -> ([AssetRecord], [Int64]) {
        let storage: Storage = options.mode == .copy ? .managed : .referenced
        let now = Date()
        let fields = files.map { file in
            AssetFields(
                name: file.name, kind: ContentKind.of(file.name), storage: storage, size: file.size,
                sha256: file.digest, path: file.source, tags: options.tags, created: now, modified: now)
        }
        let recorded = try storeErrors {
            try withContext { context in
                var pins: [String: String] = [:]
                for file in files { if let pin = file.pin, pins[file.digest] == nil { pins[file.digest] = pin } }
                context.userInfo[Asset.adoptionKey] = ContentAdoption(holding: PinTable(pins: pins))
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
                }
                if !journal.isEmpty {
                    // The records make the journal moot: it goes in their transaction.
                    try context.deleteRows(PendingImport.self) { after in
                        Array(max(after + 1, journal.lowerBound)..<journal.upperBound)
                    }
                }
                try context.save()
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
        /// is opened without following links (``ContentStore/openSource(_:below:)``).
        var below: String? = nil
    }

    /// The regular files named by `paths` (directories expanded when
    /// `recursive`), absolute and in a stable order. Symbolic links are
    /// followed for named files and skipped inside directories. A file or folder inside a
    /// directory whose name is not UTF-8 (a name is text in the catalog, and would not
    /// survive `ls --json` or a bundle) is not added: it goes to `unnamable`, one error
    /// each naming it with its bytes escaped (`bad\xff.txt`), a folder's contents with it.
    static func expand(
        _ paths: [String], recursive: Bool, excluding catalogRoot: String, unnamable: inout [CatalogError]
    ) throws -> [SourceFile] {
        var files: [SourceFile] = []
        let manager = FileManager.default
        let excluded = realPath(catalogRoot) ?? catalogRoot
        func isInsideCatalog(_ path: String) -> Bool {
            let real = realPath(path) ?? path
            return real == excluded || real.hasPrefix(excluded + "/")
        }
        for raw in paths {
            let path = URL(fileURLWithPath: raw).standardizedFileURL.path
            var isDirectory: ObjCBool = false
            guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else {
                throw CatalogError(.notFound, "No such file or directory: \(raw)", path: raw)
            }
            guard !isInsideCatalog(path) else {
                throw CatalogError(
                    .invalidArgument, "\(raw) is inside the catalog itself; add files from elsewhere", path: raw)
            }
            if !isDirectory.boolValue {
                var info = stat()
                guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
                    throw CatalogError(.invalidArgument, "\(raw) is not a regular file", path: raw)
                }
                files.append(SourceFile(path: path, size: Int64(info.st_size)))
                continue
            }
            guard recursive else {
                throw CatalogError(.invalidArgument, "\(raw) is a directory; add it with --recursive", path: raw)
            }
            // A named directory is followed like a named file: FileManager's enumerator would
            // list nothing under a link to a directory.
            guard let walker = manager.enumerator(atPath: realPath(path) ?? path) else { continue }
            var found: [SourceFile] = []
            while let relative = walker.nextObject() as? String {
                let full = path + "/" + relative
                var info = stat()  // one lstat per entry (attributesOfItem also looks up owner names)
                guard lstat(full, &info) == 0 else {
                    // The enumerator decodes a name that is not UTF-8 with U+FFFD, a name no
                    // file has: say so, rather than leave the file out silently.
                    if relative.unicodeScalars.contains("\u{FFFD}"), let error = unnamableEntry(full) {
                        unnamable.append(error)
                        walker.skipDescendants()
                    }
                    continue
                }
                let type = info.st_mode & S_IFMT
                if type == S_IFDIR, isInsideCatalog(full) {
                    walker.skipDescendants()  // e.g. `add --recursive .` next to ./.assetcat
                } else if type == S_IFREG {
                    found.append(SourceFile(path: full, size: Int64(info.st_size), below: path))
                }
            }
            files += found.sorted { $0.path < $1.path }
        }
        return files
    }

    /// The refusal of an entry whose name is not UTF-8, found by its decoded name `lossy`
    /// among the raw names of its folder; `nil` if it is not there (it went meanwhile).
    private static func unnamableEntry(_ lossy: String) -> CatalogError? {
        let slash = lossy.utf8.lastIndex(of: UInt8(ascii: "/")) ?? lossy.utf8.startIndex
        let parent = String(Substring(lossy.utf8[..<slash]))
        let lossyName = String(Substring(lossy.utf8[lossy.utf8.index(after: slash)...]))
        guard let directory = opendir(parent) else { return nil }
        defer { closedir(directory) }
        var found: CatalogError?
        _ = forEachDirectoryEntry(in: directory) { name in
            let bytes = Array(name)
            guard found == nil, String(validating: bytes, as: UTF8.self) == nil,
                String(decoding: bytes, as: UTF8.self) == lossyName
            else { return }
            found = CatalogError(
                .invalidArgument,
                "Cannot add \(parent + "/" + escaped(bytes)): its name is not valid UTF-8, which the catalog cannot "
                    + "record; rename it and add it again",
                path: lossy)
        }
        return found
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

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
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
