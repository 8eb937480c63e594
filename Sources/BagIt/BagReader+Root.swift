import GRDB

/// RFC 8493 §2 and §3: a bag is a directory holding `bagit.txt` — here the top of the bundle,
/// or its one top-level directory (an archive of a folder) — and nothing outside it.
extension BagValidation {
    /// Finds the bag's root, and reports each file of the bundle outside it.
    ///
    /// - Throws: `notABag` when the bundle holds no `bagit.txt`, or more than one bag.
    func findRoot() throws {
        var declarations = scan.declarations
        guard !declarations.isEmpty else {
            throw BagError(.notABag, file: scan.source, "holds no bagit.txt: it is not a BagIt bag")
        }
        // A bag at the top holds whatever else is named bagit.txt: payload (`data/bagit.txt`)
        // or a tag file in a tag directory.
        if declarations.contains("bagit.txt") { declarations = ["bagit.txt"] }
        guard declarations.count == 1 else {
            throw BagError(
                .notABag, file: scan.source,
                "holds more than one bag (\(declarations.sorted().joined(separator: ", ")))")
        }
        root = String(declarations[0].dropLast("bagit.txt".count))
        dataRange = BagPayload.range(root + "data/")
        guard !root.isEmpty else { return }
        let (low, high) = BagPayload.range(root)
        let outside = try RowWalk(
            db, "SELECT path FROM file WHERE path < ? OR path >= ? ORDER BY path", [.text(low), .text(high)])
        try reportEach(outside) {
            BagError(
                .unlistedFile, file: $0.text(0) ?? "",
                "is outside the bag's top-level directory \(self.root.dropLast())")
        }
    }
}
