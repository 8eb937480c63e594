import Crypto
import Foundation
import Logging
import Persistence
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The mark an add keeps in the store while it runs, written in the transaction of each batch
/// it commits: which add it is (``key``, a digest of its sources and options) and the last
/// file, in the add's order, that a committed batch recorded. An add that completes deletes
/// it in its last transaction; an add cancelled or killed leaves it, and the same add run
/// again resumes after it (``AddOptions/resumesInterrupted``). One row per interrupted add.
final class AddMark: ManagedObject {
    /// The add's identity (``Catalog/AddResumption/key(of:options:host:)``).
    @Attribute var key = ""
    /// The path of the last file, in the add's order, that a committed batch recorded.
    @Attribute var path = ""
    @Attribute var created = Date(timeIntervalSince1970: 0)
}

extension Catalog {
    /// An add's side of ``AddMark``: the interrupted add of the same sources and options it
    /// resumes (if any), the files of it that are skipped, and the mark each batch writes.
    ///
    /// The files an interrupted add recorded are among those before its mark, in the add's
    /// order (the walk's: named paths in order, sorted paths below a directory) — not all
    /// of them: a file that failed, or was cancelled while the batch after it completed, was
    /// not recorded. So until the walk reaches the mark's file, each file is looked up in
    /// the store (``recordedUnchanged(_:)``) and skipped only if a record of it is there;
    /// after it, nothing is looked up. The mark only moves forward, so a resumed add
    /// interrupted again is resumed as exactly.
    final class AddResumption: Sendable {
        /// The add's identity: the SHA-256 of its options and named paths.
        let key: String
        let storage: Storage
        private let named: [NamedSource]
        /// The mark's path when the add began, or `nil` when it resumes nothing.
        let resumedMark: String?
        private struct State {
            /// The mark's path now (the last committed batch's last file) and its rows.
            var path: String?
            var rows: [Int64]
        }
        private let state: Mutex<State>

        /// Reads the mark of an interrupted add of the same `named` sources and `options`.
        init(_ named: [NamedSource], options: AddOptions, in catalog: Catalog) throws {
            self.named = named
            key = Self.key(of: named, options: options, host: catalog.runtime.liveness.sharedHost)
            storage = options.mode == .copy ? .managed : .referenced
            let key = key
            let marks = try catalog.storeErrors {
                try catalog.withContext { context in
                    try context.fetchSnapshots(FetchRequest<AddMark>(predicate: \.key == key, sortBy: [.objectID()]))
                }
            }
            let path = marks.last.flatMap { $0.value(for: \AddMark.path) }
            resumedMark = options.resumesInterrupted ? path : nil
            state = Mutex(State(path: path, rows: marks.map(\.objectID.rowID)))
        }

        /// The SHA-256 of what makes two adds the same add: their options (but the tuning
        /// ones: concurrency, batch size, records kept, resuming) and their named paths, in
        /// order — and, on a catalog that several hosts share, the host (`host`): a path names
        /// a file of the host's own, and two hosts adding `/data/in` add different files. On a
        /// catalog of one host (`host` nil) the key is what it was before hosts shared catalogs,
        /// so that an add interrupted by an earlier version is resumed.
        static func key(of named: [NamedSource], options: AddOptions, host: String? = nil) -> String {
            var text = "add 1\n\(options.mode.rawValue)\n\(options.recursive)\n\(options.defersHashing)\n"
            if let host { text += "host \(host)\n" }
            text += "\(options.indexesArchives)\n\(options.extractsMetadata)\n"
            // Named only when off: the key of an add from before thumbnails stays the same.
            if !options.makesThumbnails { text += "no thumbnails\n" }
            text += Set(options.tags).sorted().map { "tag \($0)\n" }.joined()
            for source in named {
                switch source {
                case .file(let file): text += "file \(file.path)\n"
                case .directory(let path, _): text += "directory \(path)\n"
                }
            }
            return SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
        }

        /// What the transaction that records a batch whose last file is `lastPath` does to
        /// the mark: the mark's new path (`nil`: it stays, the batch lies before it) and the
        /// mark rows it replaces.
        func markUpdate(lastPath: String) -> (path: String?, replacing: [Int64]) {
            state.withLock { state in
                if let path = state.path, !precedes(path, lastPath) { return (nil, []) }
                return (lastPath, state.rows)
            }
        }

        /// The batch's transaction committed with the mark rows `rows` (nil: unchanged) at `path`.
        func markCommitted(path: String?, rows: Range<Int64>) {
            guard let path else { return }
            state.withLock { state in
                state.path = path
                state.rows = Array(rows)
            }
        }

        /// The mark rows the add's last transaction deletes.
        var rows: [Int64] { state.withLock { $0.rows } }

        /// The mark rows are gone.
        func cleared() {
            state.withLock { state in
                state.path = nil
                state.rows = []
            }
        }

        /// Whether `a` comes before `b` in the add's order.
        private func precedes(_ a: String, _ b: String) -> Bool {
            let (x, y) = (place(a), place(b))
            return x.source != y.source ? x.source < y.source : x.below < y.below
        }

        /// Which named source a path is found under, and its path below it: a directory's
        /// files are walked in the order of their sorted paths (``SourceWalk``).
        private func place(_ path: String) -> (source: Int, below: String) {
            for (i, source) in named.enumerated() {
                switch source {
                case .file(let file) where file.path == path: return (i, "")
                case .directory(let directory, _):
                    let prefix = directory.hasSuffix("/") ? directory : directory + "/"
                    if path.utf8.starts(with: prefix.utf8) { return (i, String(path.dropFirst(prefix.count))) }
                default: continue
                }
            }
            return (named.count, path)
        }
    }

    /// The paths among `files` that the catalog records, from an add in the same storage,
    /// as they are now: a record with the same path and size, made no earlier than the
    /// file's last modification (a file changed since it was recorded is added again).
    /// One query for all of them, through the index on names.
    func recordedUnchanged(_ files: ArraySlice<SourceFile>, storage: Storage) throws -> Set<String> {
        guard !files.isEmpty else { return [] }
        let names = Set(
            files.map { file in
                file.path.utf8.lastIndex(of: UInt8(ascii: "/")).map {
                    String(file.path[file.path.utf8.index(after: $0)...])
                }
                    ?? file.path
            })
        let paths = Set(files.map(\.path))
        let records = try storeErrors {
            try withContext { context in
                try context.fetchSnapshots(
                    FetchRequest<Asset>(
                        predicate: .in(\.name, names) && .in(\.path, paths.map { Optional($0) })
                            && \.storage == storage))
            }
        }
        var recorded: [String: [(size: Int64, created: Date)]] = [:]
        for record in records {
            guard let path = record.value(for: \Asset.path) ?? nil else { continue }
            recorded[path, default: []].append(
                (record.value(for: \Asset.size) ?? -1, record.value(for: \Asset.created) ?? .distantPast))
        }
        var unchanged = Set<String>()
        for file in files {
            guard let records = recorded[file.path] else { continue }
            var info = stat()
            guard stat(file.path, &info) == 0 else { continue }  // gone: the add says so
            let modified = Date(
                timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
            if records.contains(where: { $0.size == Int64(info.st_size) && $0.created >= modified }) {
                unchanged.insert(file.path)
            }
        }
        return unchanged
    }
}

extension Catalog {
    /// In the transaction of a batch whose last file is `lastPath`: moves the add's mark there
    /// (unless the batch lies before it: a resumed add adding what its interrupted add had
    /// not) or, `clearing`, deletes it. Returns the mark's new path and rows, to hand to
    /// ``AddResumption/markCommitted(path:rows:)`` once the transaction commits.
    func writeMark(
        _ resumption: AddResumption, lastPath: String?, clearing: Bool, in context: ManagedObjectContext
    ) throws -> (path: String?, rows: Range<Int64>) {
        if clearing {
            try deleteMarkRows(resumption.rows, in: context)
            return (nil, 0..<0)
        }
        guard let lastPath else { return (nil, 0..<0) }
        let update = resumption.markUpdate(lastPath: lastPath)
        guard let path = update.path else { return (nil, 0..<0) }
        try deleteMarkRows(update.replacing, in: context)
        let key = resumption.key
        let rows = try context.insertRows(AddMark.self, count: 1, batchSize: 1) { _, row in
            row[\.key] = key
            row[\.path] = path
            row[\.created] = Date()
        }
        return (path, rows)
    }

    private func deleteMarkRows(_ rows: [Int64], in context: ManagedObjectContext) throws {
        guard !rows.isEmpty else { return }
        let sorted = rows.sorted()
        try context.deleteRows(AddMark.self) { after in sorted.filter { $0 > after } }
    }

    /// Deletes the mark of an add that completed with nothing left to commit. Should that
    /// fail, the mark stays: the same add run again then skips what this one recorded.
    func clearMark(_ resumption: AddResumption) {
        let rows = resumption.rows
        guard !rows.isEmpty else { return }
        do {
            try withContext { context in
                try deleteMarkRows(rows, in: context)
                try context.save()
            }
            resumption.cleared()
        } catch {
            runtime.logger.warning("could not clear the mark of a completed add: \(error)")
        }
    }
}
