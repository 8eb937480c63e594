import GRDB

/// RFC 8493 §2.1.3: a bag has at least one payload manifest, `manifest-<algorithm>.txt`, each
/// line a checksum and a path, each path once.
extension BagValidation {
    /// Takes the root's payload manifests that could be read (the lines of those that waited
    /// for the version are parsed now), and reports each that could not, and a bag with none.
    ///
    /// - Throws: For a reader that stops at its first problems, `missingFile` for the first
    ///   line that names a file the bag lacks (``Scan/parsePending(_:version:encoding:)``).
    func readPayloadManifests() throws {
        for id in scan.manifests.indices where scan.manifests[id].root == root {
            if scan.manifests[id].waitsFrom != nil && scan.manifests[id].failure == nil {
                try scan.parsePending(id, version: version, encoding: encoding)
            }
            checkEncoding(of: id)
            let manifest = scan.manifests[id]
            if let failure = manifest.failure {
                problems.append(failure)
                continue
            }
            payloadManifests[manifest.algorithm] = id
            if manifest.binaryMarkers > 0 {
                warnings.append(Self.binaryMarkerWarning(manifest.binaryMarkers, file: manifest.name))
            }
            for (kind, first) in manifest.repeats {
                let how = kind == .otherNormalization ? " in another Unicode normalisation" : ""
                let more = first.count > 1 ? " (and \(first.count - 1) more lines like it)" : ""
                warnings.append(
                    BagError(
                        .malformedManifest, file: manifest.name,
                        "line \(first.number) lists \(first.path) again\(how), with the same checksum\(more)"))
            }
        }
        try checkThereIsOne()
    }

    /// A manifest whose lines streamed in one encoding, of a bag that declares another, is
    /// not used.
    private func checkEncoding(of id: Int) {
        let manifest = scan.manifests[id]
        guard manifest.failure == nil, manifest.lines > 0, manifest.isUTF16 != (encoding == .utf16) else { return }
        scan.manifests[id].failure = BagError(
            .malformedTagFile, file: manifest.name,
            manifest.isUTF16
                ? "is in UTF-16, but bagit.txt declares \(encoding.rawValue)"
                : "has no UTF-16 byte-order mark, which this reader needs to read it as bagit.txt declares")
    }

    /// A bag needs a payload manifest in a supported algorithm. (A payload manifest that could
    /// not be read has said why already; a tag manifest, read or not, is not one.)
    private func checkThereIsOne() throws {
        let readManifest = scan.manifests.contains { $0.root == root }
        guard payloadManifests.isEmpty && !readManifest else { return }
        let manifestFiles = try String.fetchAll(
            db, sql: "SELECT path FROM file WHERE path >= ? AND path < ? ORDER BY path",
            arguments: [root + "manifest-", root + "manifest."]
        ).map { $0.droppingBytePrefix(root) }.filter { !$0.utf8.contains(0x2F) && $0.hasSuffix(".txt") }
        problems.append(
            BagError(
                .missingManifest, file: manifestFiles.first ?? "manifest-sha256.txt",
                manifestFiles.isEmpty
                    ? "is missing: a bag needs a payload manifest"
                    : "is in an unsupported algorithm; a bag needs a manifest in md5, sha1, sha224, sha256, sha384 or sha512"
            ))
    }
}
