import ArchiveIO
import Foundation
import GRDB
import GRDBSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// A payload manifest, line by line: split as its bytes stream, parsed into the read's index
/// or left in the spool until the version is known (``Scan/parsePending(_:version:encoding:)``).
extension Scan {
    /// A payload manifest of a possible bag root, read line by line into the index.
    struct Manifest {
        /// Its path in the bundle.
        var path: String
        var root: String
        var algorithm: ChecksumAlgorithm
        /// The root's version, which says how to decode paths; `nil` when the lines came
        /// before the root's `bagit.txt`.
        var version: String?
        /// The number of the first line that waits, raw, until the read ends rather than
        /// being parsed into the index as it streams (``Scan/parsePending(_:version:encoding:)``),
        /// if any does: line 1 when the version is not known yet, else the line after
        /// ``Scan/linesIndexedAsTheyStream``. Once a line waits, the bytes after it are not
        /// even split into lines until then.
        var waitsFrom: Int?
        /// Where the manifest's bytes, all of them, are in the read's ``Scan/spool``: the lines
        /// that wait are split from them, and a tag manifest that lists the manifest is checked
        /// against them (it is not hashed as it streams: which algorithms that needs is known
        /// once the read ends).
        var spooled: Range<Int64> = 0..<0
        /// The encoding of the root's tag files, known with the version.
        var encoding: TagFile.Encoding = .utf8
        /// Whether the manifest began with a UTF-16 byte-order mark: its lines were turned into
        /// UTF-8 as they were split.
        var isUTF16 = false
        /// The lines split so far.
        var lines = 0
        /// The first line that could not be read: the manifest is not used.
        var failure: BagError? {
            didSet { if failure != nil && failureLine == .max { failureLine = lines } }
        }
        /// The number of that line.
        var failureLine = Int.max
        /// How many lines marked their file with md5sum's binary-mode `*`.
        var binaryMarkers = 0
        /// The lines that listed a path again with the same checksum, by how (the first, and
        /// how many): warnings (see ``Scan/repeatIsError(_:version:)``).
        var repeats: [BagIndexWriter.Repeat: (number: Int, path: String, count: Int)] = [:]
        var name: String { "manifest-\(algorithm.rawValue).txt" }
    }

    /// Starts reading a payload manifest (`manifest-<algorithm>.txt` at a possible root) line
    /// by line; returns its ID, or `nil` when `path` is not one.
    func startManifest(_ path: String) -> Int? {
        for name in tagNames(path) where !name.utf8.contains(0x2F) {
            guard let algorithm = ChecksumAlgorithm(manifestName: name, prefix: "manifest-") else { continue }
            let root = String(Substring(path.utf8.dropLast(name.utf8.count)))
            manifestAlgorithms.insert(algorithm)
            if algorithm == .sha256 { sawSHA256Manifest = true }
            let declaration = self.declaration(of: root)
            manifests.append(
                Manifest(
                    path: path, root: root, algorithm: algorithm, version: declaration?.version,
                    waitsFrom: declaration == nil || linesIndexedAsTheyStream == 0 ? 1 : nil,
                    encoding: declaration?.encoding ?? .utf8))
            return manifests.count - 1
        }
        return nil
    }

    /// How many lines of a payload manifest are parsed into the index as they stream; the
    /// rest wait, raw, until the read ends (``parsePending(_:version:encoding:)``). Every line
    /// for a reader that checks them all; for one that stops at its first problems (an
    /// importer), only those a sink's look-ups of expected digests need — none without such a
    /// sink. A manifest that comes before the payload, as an export writes it, and lists files
    /// the bag lacks is then refused at the first such line once the payload is known, rather
    /// than after every line of it was indexed.
    var linesIndexedAsTheyStream: Int {
        guard options.stopsAtMaxProblems else { return .max }
        return sink != nil && options.looksUpExpectedSHA256 ? options.linesIndexedAsTheyStream : 0
    }

    /// Where the bytes of the payload manifest at `path` (in the bundle, or its key) are in the
    /// ``spool``, if it is one.
    func spooledManifest(_ path: String) -> Range<Int64>? {
        let key = BagIndex.key(path)
        return manifests.first { BagIndex.key($0.path) == key }?.spooled
    }

    /// The version and encoding a root's `bagit.txt`, read so far, declares.
    func declaration(of root: String) -> (version: String, encoding: TagFile.Encoding)? {
        kept[root + "bagit.txt"].flatMap { try? TagFile.parseDeclarationAndEncoding($0) }
    }

    /// Keeps the next bytes of manifest `id` in the read's ``spool``.
    func spoolManifestBytes(_ id: Int, _ chunk: UnsafeRawBufferPointer) throws(BagError) {
        let spool: ByteSpool
        if let existing = self.spool {
            spool = existing
        } else {
            spool = try ByteSpool()
            self.spool = spool
        }
        // A manifest's bytes come one chunk after the other: they are one run of the spool.
        if manifests[id].spooled.isEmpty { manifests[id].spooled = spool.end..<spool.end }
        try spool.append(chunk)
        manifests[id].spooled = manifests[id].spooled.lowerBound..<spool.end
    }

    /// Whether the lines of manifest `id` are split as its bytes stream: until one waits
    /// (``Manifest/waitsFrom``) or the manifest cannot be read.
    func splitsAsItStreams(_ id: Int) -> Bool {
        manifests[id].failure == nil && manifests[id].waitsFrom == nil
    }

    /// Splits `chunk`, the next bytes of manifest `id`, with `stream`, calling `line` with each
    /// line it ends (``Manifest/lines`` counts them); a manifest whose UTF-16 cannot be read,
    /// or a line longer than ``maxManifestLineBytes``, is the manifest's ``Manifest/failure``
    /// — as it streams, only before the first line that waits (the lines after it are split
    /// again, and such a failure found, once the read ends). `chunk` is `nil` at the end of
    /// the manifest.
    func splitManifest(
        _ id: Int, _ chunk: UnsafeRawBufferPointer?, _ stream: inout ManifestStream, asItStreams: Bool,
        _ line: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let each = { (bytes: UnsafeRawBufferPointer, isUTF16: Bool) throws in
            self.manifests[id].isUTF16 = isUTF16
            self.manifests[id].lines += 1
            try line(bytes)
        }
        if let chunk { try stream.split(chunk, each) } else { try stream.finish(each) }
        guard !asItStreams || manifests[id].waitsFrom == nil else { return }
        if let failure = stream.failure { manifests[id].failure = failure }
        // A line is held whole until it ends: a bounded one.
        if stream.pendingBytes > Self.maxManifestLineBytes {
            manifests[id].lines += 1
            manifests[id].failure = BagError(
                .malformedManifest, file: manifests[id].name,
                "line \(manifests[id].lines) is longer than \(Self.maxManifestLineBytes) bytes")
            stream = ManifestStream(file: manifests[id].name)
        }
    }

    /// Takes line ``Manifest/lines`` of manifest `id`, split as it streamed: parsed into the
    /// index, or, from the first line that waits (``Manifest/waitsFrom``), left in the spool
    /// until the read ends.
    func manifestLine(_ id: Int, _ line: UnsafeRawBufferPointer) throws {
        guard manifests[id].failure == nil else { return }
        let number = manifests[id].lines
        if manifests[id].waitsFrom == nil, number > linesIndexedAsTheyStream { manifests[id].waitsFrom = number }
        if let from = manifests[id].waitsFrom, number >= from { return }
        switch parseManifestLine(id, number: number, line, version: manifests[id].version!) {
        case .failure(let problem): manifests[id].failure = problem
        case .success(nil): break
        case .success(let parsed?):
            if parsed.marksBinary { manifests[id].binaryMarkers += 1 }
            try writer.add(
                .line(manifest: id, number: number, key: parsed.key, path: parsed.storedPath, checksum: parsed.checksum)
            )
        }
    }

    /// A manifest line, parsed, as the read's index keeps it.
    struct IndexedLine {
        var key: String
        /// The path as the row keeps it: `nil` when it is ``key`` without the manifest's root
        /// (``BagIndex/storedManifestLinePath(_:key:root:)``).
        var storedPath: String?
        var checksum: ManifestChecksum
        /// Whether the path came after md5sum's binary-mode `*`.
        var marksBinary: Bool

        /// The path, relative to the manifest's `root`.
        func path(root: String) -> String { BagIndex.manifestLinePath(stored: storedPath, key: key, root: root) }
    }

    /// Parses line `number` of manifest `id`: its key, path and checksum (`nil` for a blank
    /// line), or what is wrong with it.
    func parseManifestLine(
        _ id: Int, number: Int, _ line: UnsafeRawBufferPointer, version: String
    ) -> Result<IndexedLine?, BagError> {
        let root = manifests[id].root
        // Most lines, from their bytes (ASCII reads alike in every encoding a line can be in);
        // in a root of ASCII, the key is the root and the path's bytes, made in one string.
        if let scanned = TagFile.scanASCIIManifestLine(line, algorithm: manifests[id].algorithm) {
            guard root.utf8.allSatisfy({ $0 < 0x80 }) else {
                let path = String(decoding: scanned.path, as: UTF8.self)
                return .success(Self.indexedLine(path, root: root, scanned.checksum, marksBinary: scanned.marksBinary))
            }
            let key = String(unsafeUninitializedCapacity: root.utf8.count + scanned.path.count) { key in
                var i = 0
                for byte in root.utf8 {
                    key[i] = byte
                    i += 1
                }
                for byte in scanned.path {
                    key[i] = byte
                    i += 1
                }
                return i
            }
            return .success(
                IndexedLine(key: key, storedPath: nil, checksum: scanned.checksum, marksBinary: scanned.marksBinary))
        }
        let manifest = manifests[id]
        do {
            guard
                let parsed = try Self.parseStreamedManifestLine(
                    line, number: number, file: manifest.name, algorithm: manifest.algorithm, version: version,
                    encoding: manifest.encoding, isUTF16: manifest.isUTF16)
            else { return .success(nil) }
            return .success(
                Self.indexedLine(
                    parsed.path, root: root, ManifestChecksum(validHex: parsed.checksum),
                    marksBinary: parsed.marksBinary))
        } catch {
            return .failure(error)
        }
    }

    /// The line of `path` (relative to `root`) and `checksum`: its key is the NFC form of the
    /// root and path.
    static func indexedLine(
        _ path: String, root: String, _ checksum: ManifestChecksum, marksBinary: Bool
    ) -> IndexedLine {
        let key = BagIndex.key(root + path)
        return IndexedLine(
            key: key, storedPath: BagIndex.storedManifestLinePath(path, key: key, root: root), checksum: checksum,
            marksBinary: marksBinary)
    }

    /// Decodes (UTF-8) and parses line `number` (from 1) of `fetch.txt` as it streamed, its
    /// end cut off: the path it lists (``TagFile/parseFetchLine(_:number:version:)``), or
    /// `nil` for a blank line.
    static func parseStreamedFetchLine(
        _ line: some Collection<UInt8>, number: Int, version: String
    ) throws(BagError) -> String? {
        guard let text = String(validating: line, as: UTF8.self) else {
            throw BagError(.malformedTagFile, file: "fetch.txt", "line \(number) is not valid UTF-8")
        }
        return try TagFile.parseFetchLine(Substring(text), number: number, version: version)
    }

    /// Decodes and parses line `number` (from 1) of a manifest as it streamed, its end cut
    /// off: in ISO-8859-1 or UTF-8 as `encoding` says, or UTF-8 when the manifest was in
    /// UTF-16 (`isUTF16`: turned into UTF-8 as it streamed). `nil` for a blank line.
    static func parseStreamedManifestLine(
        _ line: some Collection<UInt8>, number: Int, file: String, algorithm: ChecksumAlgorithm, version: String,
        encoding: TagFile.Encoding, isUTF16: Bool
    ) throws(BagError) -> TagFile.ManifestLine? {
        let text: String
        if encoding == .latin1 && !isUTF16 {
            text = String(String.UnicodeScalarView(line.lazy.map { Unicode.Scalar($0) }))
        } else {
            // UTF-8, or UTF-16 turned into UTF-8 as it streamed.
            if number == 1, !isUTF16, line.starts(with: [0xEF, 0xBB, 0xBF]) {
                throw BagError(
                    .malformedTagFile, file: file, "begins with a byte-order mark, which BagIt does not allow")
            }
            guard let decoded = String(validating: line, as: UTF8.self) else {
                throw BagError(
                    .malformedTagFile, file: file, "line \(number) is not valid \(isUTF16 ? "UTF-16" : "UTF-8")")
            }
            text = decoded
        }
        return try TagFile.parseManifestLine(
            Substring(text), number: number, file: file, algorithm: algorithm, version: version)
    }

    /// Ends manifest `id` once its lines are written: a manifest that could not be read —
    /// a bad line, or one that lists a path again, whichever comes first — leaves nothing
    /// in the index.
    func endManifest(_ id: Int) throws {
        try writer.drain()
        let version = manifests[id].version ?? "1.0"  // (a manifest whose lines wait has written none)
        for (kind, first) in writer.repeats(in: id, root: manifests[id].root) {
            if Self.repeatIsError(kind, version: version) {
                if first.number < manifests[id].failureLine {
                    manifests[id].failure = TagFile.duplicateManifestLine(
                        first.path, number: first.number, file: manifests[id].name)
                }
            } else {
                manifests[id].repeats[kind] = first
            }
        }
        if manifests[id].failure != nil {
            try manifestDatabase { db in
                try db.execute(sql: "DELETE FROM manifest WHERE manifest = ?", arguments: [id])
            }
        } else if manifests[id].waitsFrom != 1, manifests[id].algorithm == .sha256 {
            sha256Manifests[manifests[id].root] = id
        }
    }

    /// Whether a manifest line that lists a path again is a problem, or only a warning: a
    /// line with another checksum always is; the same line again is in BagIt 1.0 (RFC 8493
    /// lists each file once) and a warning before it, as bagit-python has it; the path in
    /// another Unicode normalisation with the same checksum names the same file (the
    /// bag's index compares paths by their NFC form), a warning.
    static func repeatIsError(_ kind: BagIndexWriter.Repeat, version: String) -> Bool {
        switch kind {
        case .conflicting: true
        case .sameLine: version == "1.0"
        case .otherNormalization: false
        }
    }

    /// Parses the lines of manifest `id` that waited (once the read has ended: straight into
    /// the index).
    ///
    /// A reader that stops at its first problems (``BagReadOptions/stopsAtMaxProblems``)
    /// stops at the first line that names a payload file the bag lacks, unless `fetch.txt`
    /// may list it or the bag holds a file whose path differs from it only by case (then the
    /// checks after the read decide): the rest of a manifest of a million such lines is
    /// moot.
    ///
    /// - Throws: `missingFile` for that line.
    func parsePending(_ id: Int, version: String, encoding: TagFile.Encoding) throws {
        guard let db = mdb, let files = self.db else { return }
        manifests[id].version = version
        manifests[id].encoding = encoding
        let root = manifests[id].root
        var checksAbsence = options.stopsAtMaxProblems && fetchLists[root + "fetch.txt"] == nil
        /// Whether `line` names a payload file the bag lacks, with no twin.
        func isAbsent(_ line: IndexedLine, root: String) throws -> Bool {
            let path = line.path(root: root)
            guard path.hasBytePrefix("data/"), !BagValidation.isSystemFile(path) else { return false }
            let has = { (sql: String) in try Bool.fetchOne(files, sql: sql, arguments: [line.key]) == true }
            if try has("SELECT EXISTS (SELECT 1 FROM file WHERE key = ?)") { return false }
            // One scan of the files, once: a twin by case leaves the rest to the checks after.
            if try has("SELECT EXISTS (SELECT 1 FROM file WHERE key = ? COLLATE NOCASE)") {
                checksAbsence = false
                return false
            }
            return true
        }
        /// Parses line ``Manifest/lines`` into the index, unless it was as it streamed.
        func take(_ line: UnsafeRawBufferPointer) throws {
            let number = manifests[id].lines
            guard number >= manifests[id].waitsFrom ?? 1, manifests[id].failure == nil else { return }
            switch parseManifestLine(id, number: number, line, version: version) {
            case .failure(let problem): manifests[id].failure = problem
            case .success(nil): break
            case .success(let parsed?):
                if checksAbsence, try isAbsent(parsed, root: root) {
                    throw BagError(
                        .missingFile, file: parsed.path(root: root),
                        "is listed in \(manifests[id].name) but is not in the bag")
                }
                if parsed.marksBinary { manifests[id].binaryMarkers += 1 }
                let insert = try db.cachedStatement(sql: BagIndex.insertManifestLineSQL).sqliteStatement
                let isNew = try BagIndex.insertManifestLine(
                    insert, db, manifest: id, key: parsed.key, path: parsed.storedPath, checksum: parsed.checksum)
                if !isNew {
                    let path = parsed.path(root: root)
                    let kind = try BagIndexWriter.Repeat.of(
                        parsed.storedPath, parsed.checksum, key: parsed.key, manifest: id, db)
                    if Self.repeatIsError(kind, version: version) {
                        manifests[id].failure = TagFile.duplicateManifestLine(
                            path, number: number, file: manifests[id].name)
                    } else {
                        let count = (manifests[id].repeats[kind]?.count ?? 0) + 1
                        let first = manifests[id].repeats[kind].map { ($0.number, $0.path) } ?? (number, path)
                        manifests[id].repeats[kind] = (first.0, first.1, count)
                    }
                }
            }
        }
        // The manifest's lines, from its bytes: those before the first that waited were
        // parsed as they streamed, and are passed over.
        manifests[id].lines = 0
        var stream = ManifestStream(file: manifests[id].name)
        try spool?.chunks(in: manifests[id].spooled) { chunk in
            try splitManifest(id, chunk, &stream, asItStreams: false, take)
            return manifests[id].failure == nil
        }
        if manifests[id].failure == nil { try splitManifest(id, nil, &stream, asItStreams: false, take) }
        if manifests[id].failure != nil {
            try db.execute(sql: "DELETE FROM manifest WHERE manifest = ?", arguments: [id])
        }
    }
}
