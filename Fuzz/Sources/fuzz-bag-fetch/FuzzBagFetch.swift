// fetch.txt as a bag reader parses it: split in pieces into lines, each decoded and parsed.
// Every path accepted is under data/, normal, and free of `..` and NUL.
import FuzzSupport

@testable import BagIt

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBagFetch(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let version = input.choose(["1.0", "0.97", "0.96", "0.93"])
    let seed = (0..<Int(input.byte() % 8)).map { _ in input.byte() }
    let bytes = input.rest()

    var splitter = LineSplitter()
    var number = 0
    func take(_ line: UnsafeRawBufferPointer) {
        number += 1
        let path: String?
        do {
            path = try Scan.parseStreamedFetchLine(line, number: number, version: version)
        } catch {
            invariant(
                error.code == .malformedTagFile && error.file == "fetch.txt",
                "an error of another kind: \(error)")
            return
        }
        guard let path else { return }
        invariant(path.utf8.starts(with: "data/".utf8), "an accepted path is not under data/: \(path.debugDescription)")
        invariant(TagFile.isNormal(path), "an accepted path is not normal: \(path.debugDescription)")
        invariant(!path.utf8.contains(0), "an accepted path has a NUL: \(path.debugDescription)")
        invariant(
            !path.utf8.split(separator: 0x2F).contains { $0.elementsEqual([0x2E, 0x2E]) },
            "an accepted path has '..': \(path.debugDescription)")
    }
    for piece in pieces(bytes, seed: seed) { piece.withUnsafeBytes { splitter.split($0, take) } }
    splitter.finish(take)
    return 0
}
