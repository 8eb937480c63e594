/// RFC 8493 §2.2.1: a tag manifest lists tag files with their checksums; each must be there
/// and match, and none is payload.
extension BagValidation {
    /// Parses the root's tag manifests from their kept bytes (a problem each that cannot be).
    func readTagManifests() throws {
        for (path, bytes) in scan.kept where path.hasBytePrefix(root) {
            let relative = path.droppingBytePrefix(root)
            guard let algorithm = ChecksumAlgorithm(manifestName: relative, prefix: "tagmanifest-") else { continue }
            do {
                let parsed = try TagFile.parseManifestCountingMarkers(
                    bytes, file: relative, algorithm: algorithm, version: version, encoding: encoding)
                tagManifests[algorithm] = parsed.entries
                if parsed.binaryMarkers > 0 {
                    warnings.append(Self.binaryMarkerWarning(parsed.binaryMarkers, file: relative))
                }
            } catch { problems.append(error) }
        }
    }

    /// Checks what each tag manifest lists: there, with its checksum, and not payload.
    func checkTagManifests() throws {
        for algorithm in tagManifests.keys.sorted() {
            let name = "tagmanifest-\(algorithm.rawValue).txt"
            for (path, checksum) in tagManifests[algorithm]!.sorted(by: { $0.key < $1.key }) {
                if path.hasBytePrefix("data/") {
                    problems.append(BagError(.malformedManifest, file: name, "lists the payload file \(path)"))
                } else if let digests = try tagDigests[path] ?? scan.indexedFile(root + path)?.digests {
                    problems.append(
                        contentsOf: Self.checksumProblem(
                            path, listed: checksum, in: name, algorithm, digests[algorithm]))
                } else {
                    problems.append(BagError(.missingFile, file: path, "is listed in \(name) but is not in the bag"))
                }
            }
        }
    }
}
