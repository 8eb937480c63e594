/// RFC 8493 §2.2.2: `Payload-Oxum`, `octets.files`, counts the payload.
extension BagValidation {
    /// Compares `bag-info.txt`'s `Payload-Oxum`, if it has one, with `payload`: of the whole
    /// bag once fetched when `fetch.txt` lists files it lacks (its files only can be counted),
    /// and a warning when the files it lacks are the operating system's (`.DS_Store`…).
    func checkPayloadOxum(_ payload: BagPayload) {
        guard let oxum = info.first(where: { $0.label.lowercased() == "payload-oxum" })?.value else { return }
        let parts = oxum.split(separator: ".")
        if parts.count != 2 || Int64(parts[0]) == nil || Int(parts[1]) == nil {
            problems.append(
                BagError(.malformedTagFile, file: "bag-info.txt", "Payload-Oxum '\(oxum)' is not 'octets.files'"))
        } else if filesToFetch > 0 {
            if Int(parts[1]) != payload.count + filesToFetch {
                problems.append(
                    BagError(
                        .oxumMismatch, file: "bag-info.txt",
                        "Payload-Oxum is \(oxum) but the payload is \(payload.count) files and fetch.txt lists "
                            + "\(filesToFetch) more it lacks"))
            }
        } else if oxum != "\(payload.bytes).\(payload.count)" {
            let mismatch = "Payload-Oxum is \(oxum) but the payload is \(payload.bytes) bytes in \(payload.count) files"
            if absentSystemFiles > 0, Int(parts[1]) == payload.count + absentSystemFiles,
                let bytes = Int64(parts[0]), bytes >= payload.bytes
            {
                warnings.append(
                    BagError(
                        .oxumMismatch, file: "bag-info.txt",
                        mismatch + ": the files it lacks are ones the operating system makes"))
            } else {
                problems.append(BagError(.oxumMismatch, file: "bag-info.txt", mismatch))
            }
        }
    }
}
