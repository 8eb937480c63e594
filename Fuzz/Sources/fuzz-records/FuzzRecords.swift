// The records file of a bundle as an import reads it: in pieces of any size. The pieces
// never change the outcome (the same entries, or the same error); entries are handed on in
// order and counted; and a file the parser accepts is JSON.
import BagIt
import Foundation
import FuzzSupport

@testable import AssetCatalog

/// The entries handed on and how the read ended.
private func parse(_ pieces: [ArraySlice<UInt8>]) -> (entries: [BundleRecords.Entry], count: Int, error: String?) {
    var entries: [BundleRecords.Entry] = []
    var parser = RecordsParser { batch in
        invariant(!batch.isEmpty && batch.count <= RecordsParser.batchSize, "a batch of \(batch.count) entries")
        entries += batch
    }
    do {
        for piece in pieces { try piece.withUnsafeBytes { try parser.feed($0) } }
        try parser.finish()
    } catch {
        return (entries, parser.count, "\(error)")
    }
    return (entries, parser.count, nil)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRecords(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    let seed = (0..<Int(input.byte() % 8)).map { _ in input.byte() }
    let bytes = input.rest()

    let whole = parse([bytes[...]])
    let streamed = parse(pieces(bytes, seed: seed))
    invariant(whole.count == whole.entries.count, "counted \(whole.count), handed on \(whole.entries.count)")
    invariant(
        whole.error == streamed.error,
        "whole: \(whole.error ?? "read"); in pieces: \(streamed.error ?? "read")")
    if whole.error == nil {
        invariant(whole.entries == streamed.entries, "whole and in pieces, other entries")
        invariant(
            (try? JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed)) != nil,
            "accepted a file that is not JSON")
    }
    return 0
}
