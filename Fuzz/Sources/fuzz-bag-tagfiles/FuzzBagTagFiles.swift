// bagit.txt and bag-info.txt as a bag reader parses them: the declaration, then the fields
// of a tag file in each encoding a declaration may name; and the two ways a read splits
// lines (whole text, and a stream of pieces) agree.
import FuzzSupport

@testable import BagIt

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBagTagFiles(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let seed = (0..<Int(input.byte() % 8)).map { _ in input.byte() }
    let bytes = input.rest()

    if let declaration = try? TagFile.parseDeclarationAndEncoding(bytes) {
        invariant(
            TagFile.supportedVersions.contains(declaration.version), "version \(declaration.version) accepted")
    }
    // Any bytes are ISO-8859-1 text, a character each.
    let latin1 = try? TagFile.decode(bytes, file: "bag-info.txt", encoding: .latin1)
    invariant(latin1?.unicodeScalars.count == bytes.count, "ISO-8859-1 refused or miscounted")
    for encoding in [TagFile.Encoding.utf8, .latin1, .utf16] {
        let fields: [(label: String, value: String)]
        do {
            fields = try TagFile.parseFields(bytes, file: "bag-info.txt", encoding: encoding)
        } catch {
            invariant(error.file == "bag-info.txt", "an error about \(error.file ?? "nothing")")
            continue
        }
        for (label, value) in fields {
            let isBreak: (UInt8) -> Bool = { $0 == 0x0A || $0 == 0x0D }
            invariant(!label.isEmpty, "an empty label")
            invariant(!label.utf8.contains(where: isBreak) && !value.utf8.contains(where: isBreak), "a line break")
            invariant(!label.utf8.contains(0x3A), "a label with a colon: \(label)")
            let blank: (UInt8?) -> Bool = { $0 == 0x20 || $0 == 0x09 }
            invariant(!blank(label.utf8.first) && !blank(label.utf8.last), "an untrimmed label '\(label)'")
        }
    }

    // Lines of UTF-8 text: split whole (tag files kept in memory) and as a stream of pieces
    // (manifests and fetch.txt), the same lines.
    if let text = String(validating: bytes, as: UTF8.self) {
        let whole = TagFile.lines(text).map { Array($0.utf8) }
        var streamed: [[UInt8]] = []
        var splitter = LineSplitter()
        for piece in pieces(bytes, seed: seed) {
            piece.withUnsafeBytes { splitter.split($0) { streamed.append(Array($0)) } }
        }
        splitter.finish { streamed.append(Array($0)) }
        invariant(whole == streamed, "lines split whole \(whole) and streamed \(streamed) differ")
    }

    // UTF-16 in pieces, as a streamed manifest decodes it, and whole.
    var units = UTF16Units()
    var decoded: [UInt16] = []
    for piece in pieces(bytes, seed: seed) {
        units.append(piece)
        decoded += units.takeWhole()
    }
    var whole = UTF16Units()
    whole.append(bytes)
    // What the pieces held back is at most a high surrogate waiting for its pair.
    invariant(units.units.count <= 1, "UTF-16 pieces held back \(units.units.count) units")
    invariant(decoded + units.units == whole.units, "UTF-16 in pieces and whole differ")
    invariant(units.isComplete == whole.isComplete, "UTF-16 in pieces and whole end differently")
    return 0
}
