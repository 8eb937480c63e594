import GRDB
import GRDBSQLite

/// RFC 8493 §3: a bag is complete when every payload file is listed in every payload manifest
/// and every file a payload manifest lists is there (or `fetch.txt` says where to fetch it);
/// it is valid when each digest matches.
extension BagValidation {
    /// A listed file the bag lacks, kept for ``caseTwins(of:)``: its path, key and checksum.
    typealias AbsentFile = (path: String, key: String, checksum: ManifestChecksum)

    /// How many listed files a bag lacks that a read checks for a twin differing only by case
    /// (in each payload manifest); those beyond are problems without a look.
    static let maxCaseTwinChecks = 1000

    /// Checks every payload manifest against the payload, both ways, with the checksums; then
    /// excuses, with a warning, a listed file the bag lacks whose name differs only by case
    /// from a file it holds with the same checksum. (In any order: the problems are sorted by
    /// file at the end.)
    func checkCompleteness() throws {
        problemsBeforeCompleteness = problemsOtherThanManifests
        var absentByManifest: [(name: String, id: Int, files: [AbsentFile])] = []
        for (index, algorithm) in payloadManifests.keys.sorted().enumerated() where !stopped {
            let (name, id) = ("manifest-\(algorithm.rawValue).txt", payloadManifests[algorithm]!)
            var absent: [AbsentFile] = []
            try reportLinesOutsideData(of: id, name: name)
            if !stopped { try compare(id, algorithm, name: name, isFirst: index == 0, absent: &absent) }
            if !absent.isEmpty { absentByManifest.append((name, id, absent)) }
        }
        if !absentByManifest.isEmpty { try excuseCaseTwins(absentByManifest) }
    }

    /// The keys of the lines whose path is under `data/`: those under the root's key and
    /// `data/`. (A key is the NFC form of the root and the path, and NFC changes neither an
    /// ASCII `data/` nor anything across a `/`.)
    var dataKeyRange: (String, String) { BagPayload.range(BagIndex.key(root) + "data/") }

    /// Reports the lines of manifest `id` whose path is not under `data/`: the keys either
    /// side of ``dataKeyRange``.
    private func reportLinesOutsideData(of id: Int, name: String) throws {
        let (low, high) = dataKeyRange
        for (side, bound) in [("key < ?", low), ("key >= ?", high)] {
            let outside = try RowWalk(
                mdb, "SELECT key, path FROM manifest WHERE manifest = ? AND \(side) ORDER BY key",
                [.integer(Int64(id)), .text(bound)])
            let walked = try reportEach(outside) {
                BagError(
                    .malformedManifest, file: name,
                    "lists \($0.manifestLinePath(root: self.root)), which is not under data/")
            }
            guard walked else { return }
        }
    }

    /// Walks the lines of manifest `id` under `data/` and the payload files side by side, in
    /// the order of their keys: a line without a file is missing (or to fetch, or the
    /// operating system's, or kept in `absent` to look for a twin by case), a file without a
    /// line unlisted, and a pair compared by their checksums. `isFirst`: the first manifest's
    /// walk counts the files to fetch and the operating system's.
    private func compare(
        _ id: Int, _ algorithm: ChecksumAlgorithm, name: String, isFirst: Bool, absent: inout [AbsentFile]
    ) throws {
        let (low, high) = dataKeyRange
        let listed = try RowWalk(
            mdb, "SELECT key, path, checksum FROM manifest WHERE manifest = ? AND key >= ? AND key < ? ORDER BY key",
            [.integer(Int64(id)), .text(low), .text(high)])
        let files = try RowWalk(
            db, "SELECT key, path, \(algorithm.rawValue) FROM file WHERE path >= ? AND path < ? ORDER BY key",
            [.text(dataRange.0), .text(dataRange.1)])
        while listed.hasRow || files.hasRow {
            if hasEnoughProblems {
                stopped = true
                return
            }
            let order = !listed.hasRow ? 1 : !files.hasRow ? -1 : listed.compare(0, with: files, 0)
            if order < 0 {
                try reportAbsent(listed, name: name, isFirst: isFirst, absent: &absent)
                try listed.step()
            } else if order > 0 {
                problems.append(
                    .unlistedFile, file: (files.text(1) ?? "").droppingBytePrefix(root),
                    "is in the bag but not listed in \(name)")
                try files.step()
            } else {
                let checksum = Database.checksum(listed.handle, 2)
                if !checksum.matches(hex: files.bytes(2)) || sqlite3_column_type(files.handle, 2) == SQLITE_NULL {
                    problems.append(
                        contentsOf: Self.checksumProblem(
                            listed.manifestLinePath(root: root), listed: checksum.hex, in: name, algorithm,
                            files.text(2)))
                }
                try listed.step()
                try files.step()
            }
        }
    }

    /// A line (the current row of `listed`) whose file the bag lacks: to fetch, if `fetch.txt`
    /// lists it; a warning for a file the operating system makes; else a problem, once no twin
    /// by case excuses it (the first ``maxCaseTwinChecks`` wait in `absent` to be looked at).
    private func reportAbsent(_ listed: RowWalk, name: String, isFirst: Bool, absent: inout [AbsentFile]) throws {
        let path = listed.manifestLinePath(root: root)
        if fetchListed > 0,
            try Bool.fetchOne(
                mdb, sql: "SELECT EXISTS (SELECT 1 FROM fetch WHERE key = ?)", arguments: [listed.text(0)])
                == true
        {
            if isFirst { filesToFetch += 1 }
        } else if Self.isSystemFile(path) {
            warnings.append(
                BagError(
                    .missingFile, file: path,
                    "is listed in \(name) but is not in the bag: a file the operating system makes, "
                        + "which copies often leave out"))
            if isFirst { absentSystemFiles += 1 }
        } else if absent.count < Self.maxCaseTwinChecks {
            absent.append((path, listed.text(0) ?? "", Database.checksum(listed.handle, 2)))
        } else {
            problems.append(.missingFile, file: path, "is listed in \(name) but is not in the bag")
        }
    }

    /// A listed file the bag lacks is excused when the manifest lists, with the same checksum,
    /// a file the bag holds whose path differs only by (ASCII) case: on the case-insensitive
    /// file system the bag was made on, they were one file.
    private func excuseCaseTwins(_ absentByManifest: [(name: String, id: Int, files: [AbsentFile])]) throws {
        let twins = try caseTwins(of: absentByManifest.map { ($0.id, $0.files) })
        for (m, (name, _, absent)) in absentByManifest.enumerated() {
            for (f, file) in absent.enumerated() {
                if let twin = twins[m][f] {
                    warnings.append(
                        BagError(
                            .missingFile, file: file.path,
                            "is listed in \(name) but is not in the bag, which holds \(twin) with the same "
                                + "checksum: the two names differ only by case, one file on a case-insensitive "
                                + "file system"))
                } else {
                    problems.append(
                        BagError(.missingFile, file: file.path, "is listed in \(name) but is not in the bag"))
                }
            }
        }
    }

    /// For each manifest's listed files that the bag lacks (`absent`, by manifest ID): the
    /// path, as that manifest spells it, of a file the bag holds whose key differs from the
    /// absent one's only by ASCII case (as SQLite's `NOCASE` folds) and that the manifest lists
    /// with the same checksum — the first such key in byte order — or `nil`.
    ///
    /// One walk of the files read, each key folded and looked up among the absent ones (a
    /// few thousand at most, ``maxCaseTwinChecks`` a manifest), and a look in the manifest for
    /// each key that folds like one: the cost of the files' keys, whatever the number of
    /// manifest lines. (An index on the manifest's folded keys costs a sort of every line, and
    /// without statistics SQLite scans all of a manifest's lines for each look-up instead of
    /// using it.)
    func caseTwins(of absent: [(id: Int, files: [AbsentFile])]) throws -> [[String?]] {
        var byFolded: [String: [(manifest: Int, file: Int)]] = [:]
        for (m, list) in absent.enumerated() {
            for (f, file) in list.files.enumerated() {
                byFolded[Self.asciiFolded(file.key), default: []].append((m, f))
            }
        }
        var twins: [[(key: String, path: String)?]] = absent.map { Array(repeating: nil, count: $0.files.count) }
        let files = try RowWalk(db, "SELECT key FROM file", [])
        while files.hasRow {
            let key = files.text(0) ?? ""
            if let waiting = byFolded[Self.asciiFolded(key)] {
                for (m, f) in waiting {
                    let file = absent[m].files[f]
                    guard !key.utf8.elementsEqual(file.key.utf8),
                        twins[m][f].map({ key.utf8.lexicographicallyPrecedes($0.key.utf8) }) ?? true
                    else { continue }
                    var listed: (path: String, checksum: ManifestChecksum)?
                    try mdb.run(
                        "SELECT path, checksum FROM manifest WHERE manifest = ? AND key = ?",
                        [.integer(Int64(absent[m].id)), .text(key)]
                    ) {
                        listed = (
                            BagIndex.manifestLinePath(stored: Database.text($0, 0), key: key, root: root),
                            Database.checksum($0, 1)
                        )
                    }
                    if let listed, listed.checksum == file.checksum { twins[m][f] = (key, listed.path) }
                }
            }
            try files.step()
        }
        return twins.map { $0.map { $0?.path } }
    }

    /// `key` with its ASCII letters in lower case, as SQLite's `NOCASE` compares it.
    static func asciiFolded(_ key: String) -> String {
        guard key.utf8.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) else { return key }
        return String(decoding: key.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// The names of files that operating systems make in folders they show (Finder's
    /// `.DS_Store` and `._` AppleDouble files, Windows' `Thumbs.db` and `desktop.ini`), which
    /// copies between systems often leave out.
    /// (Asked of every listed file a bag lacks: a name that begins with none of their first
    /// letters is answered from the path's bytes, without a copy.)
    static func isSystemFile(_ path: String) -> Bool {
        var path = path
        let start = path.withUTF8 { bytes in
            var start = bytes.count
            while start > 0 && bytes[start - 1] != 0x2F { start -= 1 }
            return start < bytes.count && systemFileInitials.contains(bytes[start]) ? start : nil
        }
        guard let start else { return false }
        let name = String(Substring(path.utf8.dropFirst(start)))
        return systemFileNames.contains(name) || name.hasBytePrefix("._")
    }

    static let systemFileNames: Set<String> = [
        "Thumbs.db", "ehthumbs.db", "desktop.ini", "Desktop.ini", ".DS_Store", ".Spotlight-V100", ".Trashes",
        ".fseventsd", ".TemporaryItems", ".localized",
    ]
    static let systemFileInitials = Array(Set(systemFileNames.compactMap(\.utf8.first)))
}
