import ArchiveIO
public import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which assets an export takes. An archive brings its members with it.
public struct ExportSelection: Sendable, Hashable {
    /// IDs or names; `nil` selects by ``query`` alone.
    public var references: [String]?
    /// Tag, kind and storage filters (all assets by default).
    public var query: AssetQuery

    public init(references: [String]? = nil, query: AssetQuery = AssetQuery()) {
        self.references = references
        self.query = query
    }

    /// Every asset.
    public static let all = ExportSelection()
}

/// How ``Catalog/export(to:selection:options:progress:)`` writes a bundle.
public struct ExportOptions: Sendable, Hashable {
    /// The bundle's format; `nil` takes it from the path (`.tar`, `.tar.gz`, `.tar.zst`,
    /// `.zip`; anything else is a directory).
    public var format: BagFormat?
    /// Leave out assets whose content is missing or damaged (reading everything once more
    /// first, to know), listing them in ``ExportResult/skipped``, instead of stopping.
    public var skipsDamaged: Bool
    /// For compressed formats; `nil` for the format's default.
    public var compressionLevel: Int?

    public init(format: BagFormat? = nil, skipsDamaged: Bool = false, compressionLevel: Int? = nil) {
        self.format = format
        self.skipsDamaged = skipsDamaged
        self.compressionLevel = compressionLevel
    }
}

/// Where an export or import stands.
public struct BundleProgress: Sendable, Hashable {
    public var filesDone: Int
    public var filesTotal: Int
    public var bytesDone: Int64
    public var bytesTotal: Int64
}

/// An asset left out of an export, and why.
public struct SkippedAsset: Sendable, Hashable, Codable {
    public var id: Int64
    public var name: String
    public var reason: String
}

/// What an export wrote.
public struct ExportResult: Sendable, Codable {
    public var path: String
    public var format: String
    /// Assets in the bundle (archives' members included).
    public var assets: Int
    /// Payload files and bytes.
    public var files: Int
    public var bytes: Int64
    /// With ``ExportOptions/skipsDamaged``: what was left out.
    public var skipped: [SkippedAsset]
}

extension Catalog {
    /// The agent named in the bags this catalog writes.
    public static let bagSoftwareAgent = "assetcat (AssetCatalog)"

    /// Writes the selected assets as a BagIt 1.0 bag: the payload under `data/` (an
    /// archive's members as files of their own, beside it), `assetcat-records.json` with
    /// names, tags, metadata, storage and member links, and the manifests.
    ///
    /// Streams the content and the records file: memory does not grow with the bytes (it
    /// grows with the number of assets, for the selection and the manifest, about 2 KB
    /// each). Every byte is hashed on the way out
    /// and compared with the catalog's digest; a missing or damaged asset stops the export
    /// with an error naming it (unless ``ExportOptions/skipsDamaged``), and no partial
    /// bundle is left at `path`. Cancelling the task stops it the same way.
    ///
    /// ```swift
    /// let result = try await catalog.export(to: "trip.tar.zst", selection: .init(query: .init(tag: "trip")))
    /// print("\(result.assets) assets, \(result.bytes) bytes")
    /// ```
    public func export(
        to path: String, selection: ExportSelection = .all, options: ExportOptions = ExportOptions(),
        progress: (@Sendable (BundleProgress) -> Void)? = nil
    ) async throws -> ExportResult {
        var records = try selectForExport(selection)
        if let unhashed = records.first(where: { $0.sha256.isEmpty }) {
            throw CatalogError(
                .invalidArgument,
                "Cannot export asset \(unhashed.id) (\(unhashed.name)): its digest is not computed yet; "
                    + "run `assetcat jobs run` first")
        }
        var skipped: [SkippedAsset] = []
        if options.skipsDamaged {
            // What `verify` finds missing, damaged or unreadable stays out.
            let report = try await verify(records.map { String($0.id) })
            let bad = Dictionary(uniqueKeysWithValues: report.issues.map { ($0.id, $0) })
            skipped = records.compactMap { record in
                bad[record.id].map { SkippedAsset(id: record.id, name: record.name, reason: Self.reason($0)) }
            }
            // A member whose archive is left out is still exported, on its own.
            records.removeAll { bad[$0.id] != nil }
        }

        // Payload paths: top-level assets by name, members under their archive's folder.
        var namer = PayloadNamer()
        var payloadPath: [Int64: String] = [:]
        let selected = Set(records.map(\.id))  // IDs only: a copy of every record would double the memory
        var archiveNames: [Int64: String] = [:]
        for record in records where record.storage != .member { payloadPath[record.id] = namer.claim(record.name) }
        for record in records where record.storage == .member {
            let archiveID = record.archive ?? 0
            if archiveNames[archiveID] == nil {
                let archiveName = payloadPath[archiveID] ?? (try? asset(String(archiveID)).name)
                archiveNames[archiveID] = Self.membersFolder(archiveName ?? "archive-\(archiveID)")
            }
            payloadPath[record.id] = namer.claim(archiveNames[archiveID]! + "/" + (record.member ?? record.name))
        }

        let entries = records.lazy.map { record in
            BundleRecords.Entry(
                key: record.id, name: record.name, kind: record.kind, storage: record.storage, size: record.size,
                sha256: record.sha256, payload: "data/" + payloadPath[record.id]!, path: record.path,
                archive: record.archive.flatMap { selected.contains($0) ? $0 : nil }, member: record.member,
                memberOrdinal: record.storage == .member ? record.memberOrdinal : nil, tags: record.tags,
                metadata: record.metadata, created: record.created, modified: record.modified)
        }
        let items = records.map { BagPayloadItem(path: payloadPath[$0.id]!, size: $0.size, sha256: $0.sha256) }
        // The records go through a file in this process's staging folder, not memory.
        let recordsFile = content.newStagingPath(suffix: ".records.json")
        defer { unlink(recordsFile) }
        try BundleRecords.write(entries, to: recordsFile)
        let writer = try bundleErrors(path) {
            try BagWriter(
                path: path, format: options.format, payload: items,
                tagFiles: [.file(BundleRecords.fileName, from: recordsFile)],
                agent: Self.bagSoftwareAgent, compressionLevel: options.compressionLevel)
        }
        var done = BundleProgress(
            filesDone: 0, filesTotal: records.count, bytesDone: 0, bytesTotal: items.reduce(0) { $0 + $1.size })
        progress?(done)
        func wrote(_ index: Int) {
            done.filesDone += 1
            done.bytesDone += items[index].size
            progress?(done)
        }

        // Files first, by ID; then each archive's members in one pass over the archive.
        let index = Dictionary(uniqueKeysWithValues: records.enumerated().map { ($1.id, $0) })
        var membersByArchive: [Int64: [AssetRecord]] = [:]
        for (i, record) in records.enumerated() {
            try Task.checkCancellation()
            if record.storage == .member, record.archive != nil {
                membersByArchive[record.archive!, default: []].append(record)
                continue
            }
            try writePayload(writer, i, record, path: path)
            wrote(i)
        }
        for archiveID in membersByArchive.keys.sorted() {
            let members = membersByArchive[archiveID]!
            try writeMembers(members, of: archiveID, to: writer, index: index, bundle: path, wrote: wrote)
        }
        try bundleErrors(path) { try writer.finish() }
        return ExportResult(
            path: path, format: writer.format.description, assets: records.count, files: items.count,
            bytes: done.bytesTotal, skipped: skipped)
    }

    /// The folder an archive's members go in: its payload name without the archive extension.
    static func membersFolder(_ archiveName: String) -> String {
        let lower = archiveName.lowercased()
        for suffix in ContentKind.archiveSuffixes.sorted(by: { $0.count > $1.count })
        where lower.hasSuffix(suffix) && archiveName.count > suffix.count {
            return String(archiveName.dropLast(suffix.count))
        }
        return archiveName + ".members"
    }

    private func selectForExport(_ selection: ExportSelection) throws -> [AssetRecord] {
        var chosen: [Int64: AssetRecord] = [:]
        if let references = selection.references {
            let filter = selection.query
            for reference in references {
                let record = try asset(reference)
                if filter.tag.map(record.tags.contains) ?? true, filter.kind.map({ $0 == record.kind }) ?? true,
                    filter.storage.map({ $0 == record.storage }) ?? true
                {
                    chosen[record.id] = record
                }
            }
        } else {
            // A page at a time: the records are kept, not the objects they were read from.
            try forEachAsset(selection.query) { chosen[$0.id] = $0 }
        }
        // An archive brings its members.
        let archives = Set(chosen.values.filter { $0.storage != .member && $0.kind == "archive" }.map(\.id))
        if !archives.isEmpty {
            try forEachAsset(AssetQuery(storage: .member)) { member in
                if archives.contains(member.archive ?? -1) { chosen[member.id] = member }
            }
        }
        return chosen.values.sorted { $0.id < $1.id }
    }

    /// Why `verify` found an asset unfit to export, in words.
    private static func reason(_ issue: VerifyIssue) -> String {
        switch issue.problem {
        case .missing: "its content is missing"
        case .unreadable: issue.detail ?? "its content cannot be read"
        case .damaged:
            issue.actualSHA256.map {
                "its content is damaged (SHA-256 \($0.prefix(12))…, recorded \(issue.expectedSHA256.prefix(12))…)"
            } ?? issue.detail ?? "its content is damaged"
        }
    }

    private func writePayload(_ writer: BagWriter, _ index: Int, _ record: AssetRecord, path: String) throws {
        do {
            try writer.writePayload(index) { write in
                try read(record) { chunk in
                    try Task.checkCancellation()
                    try write(chunk)
                }
            }
        } catch {
            throw exportFailure(error, record, bundle: path)
        }
    }

    /// Writes members of one archive, reading the archive once, in its own order.
    private func writeMembers(
        _ members: [AssetRecord], of archiveID: Int64, to writer: BagWriter, index: [Int64: Int], bundle: String,
        wrote: (Int) -> Void
    ) throws {
        guard let archivePath = try memberArchivePath(members[0]) else { return }
        // Keyed by bytes: a Swift String compares NFC and NFD spellings equal, and an
        // archive can hold both as two members.
        var wanted: [[UInt8]: [Int: AssetRecord]] = [:]
        for member in members { wanted[Array((member.member ?? "").utf8), default: [:]][member.memberOrdinal] = member }
        var seen: [[UInt8]: Int] = [:]
        var remaining = members.count
        do {
            try withArchiveReader(at: archivePath) { reader in
                while remaining > 0, let entry = try reader.nextEntry() {
                    guard entry.kind == .file || entry.kind == .hardlink else { continue }
                    let key = Array(entry.path.utf8)
                    let ordinal = seen[key, default: 0]
                    seen[key] = ordinal + 1
                    guard let record = wanted[key]?[ordinal] else { continue }
                    wanted[key]?[ordinal] = nil
                    remaining -= 1
                    let i = index[record.id]!
                    if entry.kind == .hardlink {
                        try writePayload(writer, i, record, path: bundle)  // its bytes are an earlier member's
                    } else {
                        do {
                            try writer.writePayload(i) { write in
                                try reader.readData { chunk in
                                    try Task.checkCancellation()
                                    try write(chunk)
                                }
                            }
                        } catch {
                            throw exportFailure(error, record, bundle: bundle)
                        }
                    }
                    wrote(i)
                }
            }
        } catch let error as CatalogError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw CatalogError(.archive, "Could not read \(archivePath): \(error)", path: archivePath, cause: error)
        }
        if let missing = wanted.values.flatMap(\.values).min(by: { $0.id < $1.id }) {
            throw CatalogError(
                .damaged,
                "Cannot export asset \(missing.id) (\(missing.name)): its member is missing from \(archivePath); "
                    + "run `assetcat verify`, or export with --skip-damaged",
                path: archivePath)
        }
    }

    private func exportFailure(_ error: any Error, _ record: AssetRecord, bundle: String) -> any Error {
        if error is CancellationError { return error }
        if let error = error as? BagError, error.code == .contentMismatch {
            return CatalogError(
                .damaged,
                "Cannot export asset \(record.id) (\(record.name)): it is damaged — \(error.reason); "
                    + "run `assetcat verify`, or export with --skip-damaged",
                path: record.path, cause: error)
        }
        if let error = error as? CatalogError, error.code == .notFound {
            return CatalogError(
                .damaged,
                "Cannot export asset \(record.id) (\(record.name)): its content is missing (\(error.path ?? "?")); "
                    + "run `assetcat verify`, or export with --skip-damaged",
                path: error.path, cause: error)
        }
        if let error = error as? CatalogError { return error }
        return CatalogError(
            .io, "Cannot export asset \(record.id) (\(record.name)) to \(bundle): \(error)", cause: error)
    }

    /// Runs `body`, turning a ``BagError`` into a ``CatalogError``.
    func bundleErrors<T>(_ bundle: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as BagError {
            let code: CatalogError.Code =
                switch error.code {
                case .io: .io
                case .cancelled: .cancelled
                case .contentMismatch: .damaged
                case .unreadableArchive: .archive
                default: .invalidArgument
                }
            throw CatalogError(code, error.description, path: bundle, cause: error)
        }
    }
}
