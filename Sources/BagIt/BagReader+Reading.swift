import ArchiveIO
import Foundation
import GRDB
import GRDBSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// One file's bytes, whatever the bundle: hashed, kept, spooled or passed to a sink, by what the
/// file is to the bag.
extension Scan {
    /// The longest line of a payload manifest (a checksum and a path: a few hundred bytes).
    static let maxManifestLineBytes = 1 << 20

    /// Hashes (and keeps, or passes to a sink) one file's bytes, pushed by `produce`.
    ///
    /// - Parameter member: The archive member's path as the archive spells it, for an error
    ///   naming it; `nil` in a directory.
    func consume(
        _ path: String, member: String? = nil, produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        let roots = Self.payloadRoots(path)
        let isPayload = !roots.isEmpty
        if !isPayload, let member, handledTags.contains(Array(path.utf8)) { throw duplicate(member) }
        var target: (any BagPayloadSink)?
        if isPayload, let sink {
            var expected: String?
            for root in roots where expected == nil && options.looksUpExpectedSHA256 {
                expected = try expectedSHA256(path, root: root)
            }
            target = try sink(path, expected)
        }
        let manifest = isPayload ? nil : startManifest(path)
        let keeps = !isPayload && manifest == nil && isKeptTag(path)
        // Of `fetch.txt`, only whether it lists anything is kept.
        let isFetch = !isPayload && manifest == nil && !keeps && tagNames(path).contains("fetch.txt")
        if !isPayload && manifest == nil && !keeps && !isFetch, let tagSink {
            // Relative to a root whose `bagit.txt` came already, when one did.
            let names = tagNames(path).filter { name in
                declarations.isEmpty
                    || declarations.contains(String(Substring(path.utf8.dropLast(name.utf8.count))) + "bagit.txt")
            }
            for name in names where target == nil { target = try tagSink(name, path) }
        }
        if !isPayload && (manifest != nil || keeps || isFetch || target != nil) {
            handledTags.insert(Array(path.utf8))
        }
        // A standard tag file kept in memory has limits of its own, checked as its bytes come.
        let tagLimit =
            keeps
            ? tagNames(path).lazy.compactMap { name in BagReader.TagLimit.of(name).map { (name, $0) } }.first : nil
        var lineCount = LineCount()
        var fetchLines = LineSplitter()
        var fetchLineCount = 0
        var fetchFailure: BagError?
        let keepFetchLine = { (line: UnsafeRawBufferPointer) throws in
            fetchLineCount += 1
            try self.writer.add(.fetchLine(file: path, number: fetchLineCount, line: Array(line)))
        }
        // A kept tag file is hashed later, from its bytes, with the algorithms of the tag
        // manifests the bag turns out to have.
        // A payload manifest too, from its bytes in the spool, should a tag manifest list it.
        let hasher = SplitHasher(isPayload ? payloadAlgorithms() : keeps || manifest != nil ? [] : tagAlgorithms())
        var lines = ManifestStream(file: manifest.map { manifests[$0].name } ?? path)
        var bytes: [UInt8] = []
        var size: Int64 = 0
        let limit = options.maxTagFileBytes
        let cancelled = isCancelled
        try produce { chunk in
            if cancelled() { throw BagError(.cancelled, file: nil, "cancelled") }
            hasher.update(chunk)
            size += Int64(chunk.count)
            try target?.write(chunk)
            if let manifest {
                try spoolManifestBytes(manifest, chunk)
                // A manifest in UTF-16 (it begins with a byte-order mark) is split as UTF-8.
                if splitsAsItStreams(manifest) {
                    try splitManifest(manifest, chunk, &lines, asItStreams: true) {
                        try self.manifestLine(manifest, $0)
                    }
                }
            }
            if isFetch && fetchFailure == nil {
                try fetchLines.split(chunk, keepFetchLine)
                if fetchLines.pendingBytes > Self.maxManifestLineBytes {
                    fetchFailure = BagError(
                        .malformedTagFile, file: "fetch.txt",
                        "line \(fetchLineCount + 1) is longer than \(Self.maxManifestLineBytes) bytes")
                    fetchLines = LineSplitter()
                }
            }
            if let (name, tagLimit) = tagLimit {
                guard bytes.count + chunk.count <= tagLimit.bytes else {
                    throw BagError(
                        .hostileEntry, file: path,
                        "is larger than \(BagReader.TagLimit.describe(tagLimit.bytes)), the limit for \(name)")
                }
                guard keptStandardBytes + chunk.count <= BagReader.TagLimit.totalBytes else {
                    throw BagError(
                        .hostileEntry, file: path,
                        "takes the tag files kept in memory (bagit.txt, bag-info.txt and tag manifests, of every "
                            + "possible root) over \(BagReader.TagLimit.describe(BagReader.TagLimit.totalBytes)), "
                            + "their limit together")
                }
                keptStandardBytes += chunk.count
                try lineCount.count(chunk, limit: tagLimit.lineBytes) { number in
                    BagError(
                        .hostileEntry, file: path,
                        "line \(number) is longer than \(BagReader.TagLimit.describe(tagLimit.lineBytes)), "
                            + "the limit for a line of \(name)")
                }
            }
            if keeps {
                guard bytes.count + chunk.count <= limit else {
                    throw BagError(
                        .hostileEntry, file: path, "is a tag file larger than \(limit) bytes, the limit for tag files")
                }
                bytes.append(contentsOf: chunk)
            }
        }
        let digests = hasher.finalize()
        try target?.finish(digests: digests)
        if let manifest {
            if splitsAsItStreams(manifest) {
                try splitManifest(manifest, nil, &lines, asItStreams: true) { try manifestLine(manifest, $0) }
            }
            try endManifest(manifest)
        }
        if isFetch {
            if fetchFailure == nil { try fetchLines.finish(keepFetchLine) }
            fetchLists[path] = fetchFailure
        }
        if keeps {
            kept[path] = bytes
            noteKept(path)
            if let tagFileRead, let name = tagNames(path).first(where: options.keptTagFiles.contains) {
                tagFileRead(name, bytes)
            }
        }
        try record(path, size: size, digests: digests, link: nil, member: member)
    }
}
