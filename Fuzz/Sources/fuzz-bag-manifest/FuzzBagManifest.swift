// Manifests as a bag reader parses them: whole (tag manifests, kept in memory) and streamed
// in pieces, line by line (payload manifests, in UTF-8, ISO-8859-1, or UTF-16 turned into
// UTF-8 as it streams). Every path accepted is relative, normal and free of `..` and NUL;
// every checksum is lowercase hex of the algorithm's length; both ways agree; and what a
// writer formats reads back the same.
import FuzzSupport

@testable import BagIt

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBagManifest(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let algorithm = input.choose(ChecksumAlgorithm.allCases)
    let version = input.choose(["1.0", "0.97", "0.96", "0.93"])
    let encoding = input.choose([TagFile.Encoding.utf8, .latin1, .utf16])
    let seed = (0..<Int(input.byte() % 8)).map { _ in input.byte() }
    let bytes = input.rest()
    let file = "manifest-\(algorithm.rawValue).txt"

    func check(_ path: String, _ checksum: String) {
        invariant(TagFile.isNormal(path), "an accepted path is not normal: \(path.debugDescription)")
        invariant(path.utf8.first != 0x2F, "an accepted path is absolute: \(path.debugDescription)")
        invariant(!path.utf8.contains(0), "an accepted path has a NUL: \(path.debugDescription)")
        invariant(
            !path.utf8.split(separator: 0x2F).contains { $0.elementsEqual([0x2E, 0x2E]) },
            "an accepted path has '..': \(path.debugDescription)")
        invariant(
            checksum.utf8.count == algorithm.hexLength && checksum.utf8.allSatisfy(TagFile.isHexDigit),
            "an accepted checksum \(checksum.debugDescription) is not \(algorithm.hexLength) lowercase hex digits")
    }

    // Whole, as a tag manifest is read.
    let whole = try? TagFile.parseManifestCountingMarkers(
        bytes, file: file, algorithm: algorithm, version: version, encoding: encoding)
    for (path, checksum) in whole?.entries ?? [:] { check(path, checksum) }

    // Streamed, as a payload manifest is read: a UTF-16 byte-order mark turns what follows
    // into UTF-8; lines split as the pieces come.
    var lines = ManifestStream(file: file)
    var streamed: [String: String] = [:]
    var markers = 0
    var failure: BagError?
    var number = 0
    func take(_ line: UnsafeRawBufferPointer, isUTF16: Bool) {
        number += 1
        guard failure == nil else { return }
        do {
            guard
                let parsed = try Scan.parseStreamedManifestLine(
                    line, number: number, file: file, algorithm: algorithm, version: version, encoding: encoding,
                    isUTF16: isUTF16)
            else { return }
            check(parsed.path, parsed.checksum)
            if parsed.marksBinary { markers += 1 }
            if streamed.updateValue(parsed.checksum, forKey: parsed.path) != nil {
                failure = TagFile.duplicateManifestLine(parsed.path, number: number, file: file)
            }
        } catch {
            failure = error
        }
    }
    for piece in pieces(bytes, seed: seed) {
        piece.withUnsafeBytes { lines.split($0, take) }
    }
    lines.finish(take)
    if failure == nil { failure = lines.failure }
    let isUTF16 = lines.isUTF16
    invariant(isUTF16 == TagFile.Encoding.hasUTF16Mark(bytes), "streamed isUTF16 \(isUTF16) for \(bytes.prefix(2))")

    // A manifest the reader reads both ways (its encoding and its byte-order mark agree)
    // reads the same both ways.
    if let whole, isUTF16 == (encoding == .utf16) {
        invariant(failure == nil, "read whole, refused streamed: \(failure!)")
        invariant(whole.entries == streamed, "whole \(whole.entries) and streamed \(streamed) differ")
        invariant(whole.binaryMarkers == markers, "binary markers \(whole.binaryMarkers) and \(markers) differ")
    }
    if whole == nil, isUTF16 == (encoding == .utf16) {
        invariant(failure != nil, "refused whole, read streamed: \(streamed)")
    }

    // What a writer formats reads back the same (its paths begin with no blank: a bag's
    // paths begin with data/ or a tag file's name).
    if let whole, version == "1.0",
        !whole.entries.keys.contains(where: { $0.utf8.first == 0x20 || $0.utf8.first == 0x09 })
    {
        let formatted = TagFile.formatManifest(whole.entries.map { ($0.key, $0.value) })
        do {
            let again = try TagFile.parseManifest(formatted, file: file, algorithm: algorithm, version: version)
            invariant(again == whole.entries, "formatted \(whole.entries), read back \(again)")
        } catch {
            invariant(false, "formatted \(whole.entries), read back: \(error)")
        }
    }

    // Percent-encoding of paths (BagIt 1.0) round-trips any text.
    let text = String(decoding: bytes, as: UTF8.self)
    let decoded = TagFile.decodePath(TagFile.encodePath(text), version: "1.0")
    invariant(decoded.utf8.elementsEqual(text.utf8), "encodePath then decodePath changed \(text.debugDescription)")
    return 0
}
