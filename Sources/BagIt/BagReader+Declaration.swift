/// RFC 8493 §2.1.1 and §2.2.2: `bagit.txt` declares the version and the tag files' encoding,
/// which everything after it needs; `bag-info.txt` holds the bag's fields.
extension BagValidation {
    /// Reads the root's `bagit.txt`, then its `bag-info.txt` (a problem of its own).
    ///
    /// - Throws: What is wrong with `bagit.txt`: nothing else reads right without the version.
    func readDeclaration() throws {
        (version, encoding) = try TagFile.parseDeclarationAndEncoding(scan.kept[root + "bagit.txt"] ?? [])
        if let bytes = scan.kept[root + "bag-info.txt"] {
            do {
                info = try TagFile.parseFields(bytes, file: "bag-info.txt", encoding: encoding)
            } catch { problems.append(error) }
        }
    }
}
