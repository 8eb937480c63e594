import ArchiveIO
public import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which assets an export takes. An archive brings its members with it.
public struct ExportSelection: Sendable, Hashable {
    /// The assets' IDs; `nil` selects by ``query`` alone.
    public var ids: [AssetID]?
    /// Tag, kind and storage filters (all assets by default).
    public var query: AssetQuery

    public init(ids: [AssetID]? = nil, query: AssetQuery = AssetQuery()) {
        self.ids = ids
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
    /// Replace a file, or a folder that is not empty, at the bundle's path (the CLI's
    /// `--force`). Otherwise the export refuses it with ``CatalogError/Code/exists``, before
    /// doing any work, and nothing there is touched.
    public var replacesExisting: Bool

    public init(
        format: BagFormat? = nil, skipsDamaged: Bool = false, compressionLevel: Int? = nil,
        replacesExisting: Bool = false
    ) {
        self.format = format
        self.skipsDamaged = skipsDamaged
        self.compressionLevel = compressionLevel
        self.replacesExisting = replacesExisting
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
    /// The asset left out.
    public var id: AssetID
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
    /// Assets whose name differs from another's only by letter case (`Photo.jpg` and
    /// `photo.jpg`): the bag gives the later ones numbered payload paths (`photo (2).jpg`),
    /// or the folder spelling taken first, so that it extracts on a case-insensitive file
    /// system (macOS, Windows) as one file each. The bag's records keep their names, so an
    /// import restores them. In the order the export names them; the first 100 of them.
    public var apartByCase: CappedList<PayloadPath>

    /// Where an asset's content is in the bag.
    public struct PayloadPath: Sendable, Hashable, Codable {
        /// The asset.
        public var id: AssetID
        /// Its name in the catalog (and the bag's records).
        public var name: String
        /// Its payload path in the bag (`data/…`).
        public var payload: String
    }
}

extension Catalog {
    /// The agent named in the bags this catalog writes.
    public static let bagSoftwareAgent = "assetcat (AssetCatalog)"

    /// Writes the selected assets as a BagIt 1.0 bag: the payload under `data/` (an
    /// archive's members as files of their own, beside it), `assetcat-records.json` with
    /// names, tags, metadata, storage and member links, and the manifests.
    ///
    /// Payload paths are written in NFC, so that every extractor (bsdtar, unzip, Python's
    /// zipfile, tar) gives the same tree, which bagit-python validates. Names that are one
    /// string in another Unicode normalisation, or that differ only by letter case (one file
    /// on macOS and Windows), get numbered payload paths of their own (`photo (2).jpg`); a
    /// folder keeps the spelling it was first written with. Those moved for case are listed
    /// in ``ExportResult/apartByCase``. The records keep every name and member path byte for
    /// byte, so an import restores them.
    ///
    /// Streams: the assets are read from the catalog a page at a time (those named in
    /// ``ExportSelection/ids`` all at once), and what the export
    /// must remember of each (its payload path, digest, whether it was written) goes to a
    /// temporary database, the records and the manifest to files in the catalog's staging
    /// folder — memory does not grow with the number of assets or their bytes. Every byte is
    /// hashed on the way out and compared with the catalog's digest; a missing or damaged
    /// asset stops the export with an error naming it (unless ``ExportOptions/skipsDamaged``),
    /// and no partial bundle is left at `path`. Cancelling the task stops it the same way.
    ///
    /// Nothing is left at or beside `path` by an export that fails, is cancelled, or whose
    /// process is killed: an archive is written to an unnamed file in `path`'s folder, which
    /// vanishes with the process, and linked at `path` once complete. The hidden files a
    /// killed export could leave (a directory bag under construction; an archive on a file
    /// system without unnamed files) are recorded in the catalog before they exist, and the
    /// next open of the catalog removes them.
    ///
    /// The folders above `path` are created if missing (as `mkdir -p` would); an export that
    /// fails or is cancelled removes those it created, if they are still empty. Each is
    /// recorded in the catalog before it is made, so that those of an export whose process
    /// is killed are removed by the next open, if they are empty (the bundle, once
    /// published, keeps them).
    ///
    /// - Throws: ``CatalogError/Code/exists`` when `path` holds a file or a folder that is
    ///   not empty, unless ``ExportOptions/replacesExisting``; ``CatalogError/Code/io`` when
    ///   a missing folder above `path` cannot be created.
    ///
    /// ```swift
    /// let result = try await catalog.export(to: "trip.tar.zst", selection: .init(query: .init(tag: "trip")))
    /// print("\(result.assets) assets, \(result.bytes) bytes")
    /// ```
    public func export(
        to path: String, selection: ExportSelection = .all, options: ExportOptions = ExportOptions(),
        progress: (@Sendable (BundleProgress) -> Void)? = nil
    ) async throws -> ExportResult {
        if !options.replacesExisting, BagWriter.wouldReplace(path, format: options.format) {
            throw Self.bundleExists(path)
        }
        // The hidden paths the writer makes beside `path`, recorded before they exist; once the
        // writer is gone (the bundle published, or its work removed), so are they.
        let temporaries = TemporaryRows()
        defer { forgetTemporaries(temporaries.rows) }
        let createdFolders = try createMissingFolders(above: path, temporaries: temporaries)
        content.faults.reach(.afterExportFolders)
        do {
            return try await export(
                to: path, selection: selection, options: options, temporaries: temporaries, progress: progress)
        } catch {
            Self.removeEmptyFolders(createdFolders)
            throw error
        }
    }

    /// Creates the missing folders above `path`, outermost first; returns those it created.
    /// They are recorded first (``PendingTemporary/createdFolderRow(_:)``, in `temporaries`,
    /// in one transaction), so that the next open removes those a killed export leaves, if
    /// they are empty; one made meanwhile by someone else is not the export's, and is forgotten.
    /// A read-only catalog records none (it cannot).
    func createMissingFolders(above path: String, temporaries: TemporaryRows) throws -> [String] {
        var missing: [String] = []
        var folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
        var info = stat()
        // Up to the first that exists (ENOTDIR: a file above; its mkdir below names it).
        while folder.count > 1, lstat(folder, &info) != 0, errno == ENOENT || errno == ENOTDIR {
            missing.append(folder)
            folder = URL(fileURLWithPath: folder).deletingLastPathComponent().path
        }
        missing.reverse()
        guard !missing.isEmpty else { return [] }
        let rows = isReadOnly ? [] : try recordTemporaries(missing.map(PendingTemporary.createdFolderRow))
        temporaries.rows += rows
        var created: [String] = []
        for (index, folder) in missing.enumerated() {
            if mkdir(folder, 0o777) == 0 {
                created.append(folder)
                continue
            }
            let code = errno
            if code == EEXIST {  // made meanwhile, by someone else
                if index < rows.count {
                    forgetTemporaries([rows[index]])
                    temporaries.rows.removeAll { $0 == rows[index] }
                }
                continue
            }
            Self.removeEmptyFolders(created)
            throw CatalogError(
                .io,
                "Cannot export to \(path): could not create the folder \(folder): \(String(cString: strerror(code)))",
                path: path)
        }
        return created
    }

    /// Removes folders that ``createMissingFolders(above:)`` created, innermost first, if empty.
    static func removeEmptyFolders(_ folders: [String]) {
        for folder in folders.reversed() { rmdir(folder) }
    }

    /// The refusal to export over what is at `path`.
    static func bundleExists(_ path: String) -> CatalogError {
        CatalogError(
            .exists, "Cannot export to \(path): it already exists; use --force to replace it", path: path)
    }

    /// The rows of ``PendingTemporary`` an export recorded.
    final class TemporaryRows: @unchecked Sendable {
        var rows: [Int64] = []
    }

    private func export(
        to path: String, selection: ExportSelection, options: ExportOptions, temporaries: TemporaryRows,
        progress: (@Sendable (BundleProgress) -> Void)?
    ) async throws -> ExportResult {
        let scratch = try ExportScratch()
        let recordsFile = content.newStagingPath(suffix: ".records.json")
        let manifestFile = content.newStagingPath(suffix: ".manifest.txt")
        defer {
            unlink(recordsFile)
            unlink(manifestFile)
        }
        var skipped: [SkippedAsset] = []
        var apartByCase = CappedList<ExportResult.PayloadPath>()

        /// Adds an asset to the bundle: its payload path, its line of records.
        func add(
            _ record: AssetRecord, as claim: PayloadNamer.Claim, archiveKey: Int64?, to batch: ExportScratch.Batch
        ) throws {
            let payloadPath = claim.path
            if claim.apartByCase {
                apartByCase.append(.init(id: record.id, name: record.name, payload: "data/" + payloadPath), limit: 100)
            }
            var line: [UInt8] = []
            BundleRecords.Entry(
                key: record.id.rawValue, archive: archiveKey, payload: "data/" + payloadPath, fields: record.fields
            )
            .appendJSON(to: &line)
            try batch.add(ExportScratch.Payload(path: payloadPath, record: record), record: line)
        }
        /// The assets of `page` fit to export (all of them, unless skipping the damaged).
        func fit(_ page: [AssetRecord]) async throws -> [AssetRecord] {
            if let unhashed = page.first(where: { $0.sha256.isEmpty }) {
                throw CatalogError(
                    .invalidArgument,
                    "Cannot export asset \(unhashed.id) (\(unhashed.name)): its digest is not computed yet; "
                        + "run `assetcat jobs run` first")
            }
            if let odd = page.first(where: { !ContentStore.isDigest($0.sha256) }) {
                throw CatalogError(
                    .damaged,
                    "Cannot export asset \(odd.id) (\(odd.name)): its recorded digest '\(odd.sha256)' is not a SHA-256; "
                        + "run `assetcat verify`")
            }
            guard options.skipsDamaged else { return page }
            // What `verify` finds missing, damaged or unreadable stays out.
            let report = try await check(page)
            try Task.checkCancellation()
            for issue in report.issues {
                skipped.append(SkippedAsset(id: issue.id, name: issue.name, reason: Self.reason(issue)))
            }
            let bad = Set(report.issues.map(\.id))
            return page.filter { !bad.contains($0.id) }
        }

        // Top-level assets by ID; the members chosen wait until every archive is named.
        try await forEachChosenPage(selection) { page in
            let good = try await fit(page.filter { $0.storage != .member })
            try scratch.batch { batch in
                for record in page where record.storage == .member || record.kind == "archive" {
                    try batch.choose(record.id.rawValue, archive: record.storage != .member)
                }
                let namer = PayloadNamer(names: batch)
                for record in good { try add(record, as: namer.claim(record.name), archiveKey: nil, to: batch) }
            }
        }
        // Members, by ID: those chosen, and every member of a chosen archive (kept even when
        // their archive is left out as damaged, then on their own). An archive's members go
        // under a folder named after it.
        if try scratch.choseArchivesOrMembers() {
            var folder: (archive: Int64, name: String)?
            var after: Int64 = 0
            while true {
                let page = try assetPage(AssetQuery(storage: .member), after: after, limit: 1_000)
                guard let last = page.last else { break }
                after = last.id.rawValue
                let wanted = try scratch.batch { batch in
                    try page.filter { try batch.isChosen(member: $0.id.rawValue, archive: $0.archive?.rawValue) }
                }
                let good = try await fit(wanted)
                try scratch.batch { batch in
                    let namer = PayloadNamer(names: batch)
                    for record in good {
                        let archiveID = record.archive?.rawValue ?? 0
                        let archivePayload = try batch.payloadPath(archiveID)
                        if folder?.archive != archiveID {
                            let name = archivePayload ?? (try? asset(AssetID(archiveID)).name)
                            folder = (archiveID, Self.membersFolder(name ?? "archive-\(archiveID)"))
                        }
                        let path = try namer.claim(folder!.name + "/" + (record.member ?? record.name))
                        try add(record, as: path, archiveKey: archivePayload != nil ? archiveID : nil, to: batch)
                    }
                }
                if page.count < 1_000 { break }
            }
        }
        // The records by ID, as the catalog lists them.
        let records = try BundleRecords.Writer(path: recordsFile)
        try scratch.forEachRecord { try records.append(line: $0) }
        try records.finish()
        try scratch.writeManifest(to: manifestFile)

        // Each hidden path the writer makes beside `path` is recorded before it exists.
        let recordingTemporary: (String) throws -> Void = { [self] in temporaries.rows.append(try recordTemporary($0)) }
        let writer = try bundleErrors(path) {
            try BagWriter(
                path: path, format: options.format,
                payload: BagPayloadManifest(file: manifestFile, files: scratch.files, bytes: scratch.bytes),
                tagFiles: [.file(BundleRecords.fileName, from: recordsFile)],
                agent: Self.bagSoftwareAgent, compressionLevel: options.compressionLevel,
                replacesExisting: options.replacesExisting,
                willCreateTemporaryFile: recordingTemporary,
                usesUnnamedFile: !content.faults.isActive(.namedExportFile))
        }
        var done = BundleProgress(filesDone: 0, filesTotal: scratch.files, bytesDone: 0, bytesTotal: scratch.bytes)
        progress?(done)
        func wrote(_ payload: ExportScratch.Payload) {
            done.filesDone += 1
            done.bytesDone += payload.record.size
            progress?(done)
        }

        // Files first, by ID; then each archive's members in one pass over the archive.
        var after: Int64 = 0
        while true {
            let page = try scratch.files(after: after, limit: 500)
            guard let last = page.last else { break }
            after = last.record.id.rawValue
            for payload in page {
                try Task.checkCancellation()
                try writePayload(writer, payload, bundle: path)
                wrote(payload)
                content.faults.reach(.afterExportPayload)
                content.faults.reach(.slowExport)
            }
        }
        var archive: Int64 = 0
        while let next = try scratch.nextArchive(after: archive) {
            archive = next.id
            try writeMembers(of: next.id, count: next.members, scratch: scratch, to: writer, bundle: path, wrote: wrote)
        }
        content.faults.reach(.beforeExportPublish)
        try bundleErrors(path) { try writer.finish() }
        return ExportResult(
            path: path, format: writer.format.description, assets: scratch.files, files: scratch.files,
            bytes: scratch.bytes, skipped: skipped.sorted { $0.id < $1.id }, apartByCase: apartByCase)
    }

    /// Calls `body` with the assets `selection` chooses, a page at a time, by ID.
    private func forEachChosenPage(
        _ selection: ExportSelection, _ body: ([AssetRecord]) async throws -> Void
    ) async throws {
        if let ids = selection.ids {
            let filter = selection.query
            var chosen: [AssetID: AssetRecord] = [:]
            for id in ids {
                let record = try asset(id)
                if filter.matches(record) { chosen[record.id] = record }
            }
            try await body(chosen.values.sorted { $0.id < $1.id })
            return
        }
        var after: Int64 = 0
        while true {
            let page = try assetPage(selection.query, after: after, limit: 1_000)
            guard let last = page.last else { return }
            try await body(page)
            after = last.id.rawValue
            if page.count < 1_000 { return }
        }
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

    private func writePayload(_ writer: BagWriter, _ payload: ExportScratch.Payload, bundle: String) throws {
        let record = payload.record
        do {
            try writer.writePayload(payload.item) { write in
                try read(record) { chunk in
                    try Task.checkCancellation()
                    try write(chunk)
                }
            }
        } catch {
            throw exportFailure(error, record, bundle: bundle)
        }
    }

    /// Writes the `count` members of archive `archiveID` in the bundle, reading the archive
    /// once, in its own order.
    private func writeMembers(
        of archiveID: Int64, count: Int, scratch: ExportScratch, to writer: BagWriter, bundle: String,
        wrote: (ExportScratch.Payload) -> Void
    ) throws {
        guard let first = try scratch.unwrittenMember(of: archiveID) else { return }
        guard let archivePath = try memberArchivePath(first.record) else {
            throw CatalogError(
                .damaged,
                "Cannot export asset \(first.record.id) (\(first.record.name)): its archive (asset \(archiveID)) has no file; "
                    + "run `assetcat verify`, or export with --skip-damaged")
        }
        var remaining = count
        do {
            try withArchiveReader(at: archivePath) { reader in
                while remaining > 0, let entry = try reader.nextEntry() {
                    guard entry.kind == .file || entry.kind == .hardlink else { continue }
                    // By bytes: a Swift String compares NFC and NFD spellings equal, and an
                    // archive can hold both as two members.
                    guard let payload = try scratch.member(of: archiveID, path: Array(entry.path.utf8)) else {
                        continue
                    }
                    remaining -= 1
                    if entry.kind == .hardlink {
                        try writePayload(writer, payload, bundle: bundle)  // its bytes are an earlier member's
                    } else {
                        do {
                            try writer.writePayload(payload.item) { write in
                                try reader.readData { chunk in
                                    try Task.checkCancellation()
                                    try write(chunk)
                                }
                            }
                        } catch {
                            throw exportFailure(error, payload.record, bundle: bundle)
                        }
                    }
                    wrote(payload)
                    content.faults.reach(.afterExportPayload)
                    content.faults.reach(.slowExport)
                }
            }
        } catch let error as CatalogError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw CatalogError(.archive, "Could not read \(archivePath): \(error)", path: archivePath, cause: error)
        }
        if let missing = try scratch.unwrittenMember(of: archiveID) {
            throw CatalogError(
                .damaged,
                "Cannot export asset \(missing.record.id) (\(missing.record.name)): its member is missing from \(archivePath); "
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
            if error.code == .alreadyExists { throw Self.bundleExists(bundle) }
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
