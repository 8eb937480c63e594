import Foundation
import GRDB

/// The checks of RFC 8493 on what a read found, once it has ended: one function per rule, in
/// the files `BagReader+<Rule>.swift`, run in the order ``contents()`` gives. Each adds what it
/// finds to ``problems`` and ``warnings``; a rule that later ones build on (the root, the
/// declaration) throws instead when nothing else could be read right without it.
///
/// The problems are sorted by file at the end (``ProblemList``), so the order of the rules only
/// matters where one uses what another found, and for a reader that stops at its first
/// problems (``BagReadOptions/stopsAtMaxProblems``), which the walks check as they go.
final class BagValidation {
    let scan: Scan
    /// The index's databases of files and of manifests, in the read's transaction.
    let db: Database
    let mdb: Database
    let options: BagReadOptions

    /// The bag's root in the bundle: `""`, or its top-level directory and `/` (``findRoot()``).
    var root = ""
    /// The bounds of the paths of the payload, `root` and `data/` (``BagPayload/range(_:)``).
    var dataRange = ("", "")
    /// `BagIt-Version` and `Tag-File-Character-Encoding` (``readDeclaration()``).
    var version = ""
    var encoding = TagFile.Encoding.utf8
    /// `bag-info.txt`'s fields, in order.
    var info: [(label: String, value: String)] = []
    /// The payload manifests that could be read, by algorithm: their IDs in the index.
    var payloadManifests: [ChecksumAlgorithm: Int] = [:]
    /// The tag manifests that could be read, by algorithm: path → checksum.
    var tagManifests: [ChecksumAlgorithm: [String: String]] = [:]
    /// The digests of the tag files the tag manifests list, by path in the bag, where they
    /// were hashed after the read (from kept bytes, or a payload manifest's in the spool).
    var tagDigests: [String: [ChecksumAlgorithm: String]] = [:]
    /// How many files `fetch.txt` lists, and how many of them the bag lacks.
    var fetchListed = 0
    var filesToFetch = 0
    /// Listed files the bag lacks that the operating system makes (`.DS_Store`…), in the first
    /// payload manifest: they explain a `Payload-Oxum` that counts them.
    var absentSystemFiles = 0
    /// The problems other than `malformedManifest` before the completeness check: when none
    /// come after, every manifest lists every payload file with its digest.
    var problemsBeforeCompleteness = 0

    var problems: ProblemList
    var warnings: ProblemList
    /// With ``BagReadOptions/stopsAtMaxProblems``: whether a walk stopped there.
    var stopped = false

    init(_ scan: Scan, files: Database, manifests: Database) {
        self.scan = scan
        db = files
        mdb = manifests
        options = scan.options
        problems = ProblemList(limit: options.maxProblems)
        warnings = ProblemList(limit: options.maxProblems)
    }

    /// Applies the rules, in order, and gives what the read found.
    func contents() throws -> BagContents {
        try findRoot()
        try readDeclaration()
        try readTagManifests()
        try readPayloadManifests()
        try completeDigests()
        try readFetchList()
        try checkCompleteness()
        try checkTagManifests()
        let payload = try makePayload()
        checkPayloadOxum(payload)
        try checkFetchList()
        var tagFiles: [String: [UInt8]] = [:]
        for name in options.keptTagFiles { if let bytes = scan.kept[root + name] { tagFiles[name] = bytes } }
        return BagContents(
            source: scan.source, version: version, bagName: String(root.dropLast()), info: info, payload: payload,
            tagFiles: tagFiles, problems: problems.first, problemCount: problems.count, countsAllProblems: !stopped,
            warnings: warnings.first, warningCount: warnings.count, filesToFetch: filesToFetch,
            directory: scan.directoryRoot)
    }

    /// Whether a reader that stops at its first problems has found enough of them: a walk
    /// that meets this sets ``stopped`` and ends.
    var hasEnoughProblems: Bool {
        options.stopsAtMaxProblems && problems.count >= max(1, options.maxProblems)
    }

    /// Adds the problem `problem` makes of each row of `walk`, until the last, or until
    /// ``hasEnoughProblems`` (then ``stopped``); whether it took them all.
    @discardableResult
    func reportEach(_ walk: RowWalk, _ problem: (RowWalk) -> BagError) throws -> Bool {
        while walk.hasRow {
            if hasEnoughProblems {
                stopped = true
                return false
            }
            problems.append(problem(walk))
            try walk.step()
        }
        return true
    }

    /// Hashes, in a second pass, what the read could not: the tag files the tag manifests list
    /// in algorithms they were not hashed with (from kept bytes, or a payload manifest's in
    /// the spool, when it can), and payload hashed before a manifest of its algorithm came.
    func completeDigests() throws {
        var tagNeeds: [String: Set<ChecksumAlgorithm>] = [:]
        let tagAlgorithms = Set(tagManifests.keys)
        for path in Set(tagManifests.values.flatMap(\.keys)) where !path.hasBytePrefix("data/") {
            guard let seen = try scan.indexedFile(root + path) else { continue }
            // A hard link to a kept tag file has that file's bytes.
            if let bytes = scan.kept[root + path] ?? seen.linkTarget.flatMap({ scan.kept[$0] }) {
                var hasher = MultiHasher(tagAlgorithms)
                bytes.withUnsafeBytes { hasher.update($0) }
                tagDigests[path] = hasher.finalize()
            } else if let spooled = scan.spooledManifest(seen.linkTarget ?? seen.path) {
                // A payload manifest (or a hard link to one): from its bytes in the spool.
                var hasher = MultiHasher(tagAlgorithms)
                try scan.spool?.chunks(in: spooled) { chunk in
                    hasher.update(chunk)
                    return true
                }
                tagDigests[path] = hasher.finalize()
            } else {
                let lacking = tagAlgorithms.subtracting(seen.digests.keys)
                if !lacking.isEmpty { tagNeeds[root + path] = lacking }
            }
        }
        let payloadNeeds = Set(payloadManifests.keys)
        let lacking = payloadNeeds.map { "\($0.rawValue) IS NULL" }.joined(separator: " OR ")
        let payloadLacks =
            try !payloadNeeds.isEmpty
            && Bool.fetchOne(
                db, sql: "SELECT EXISTS (SELECT 1 FROM file WHERE path >= ? AND path < ? AND (\(lacking)))",
                arguments: [dataRange.0, dataRange.1]) == true
        if payloadLacks || !tagNeeds.isEmpty {
            try scan.completeDigests(db, root: root, payload: payloadLacks ? payloadNeeds : [], tags: tagNeeds)
        }
    }

    /// The payload as read: its files' count and bytes, and whether the manifests list each
    /// with its digest (no problem since ``problemsBeforeCompleteness`` but a manifest's).
    func makePayload() throws -> BagPayload {
        let totals = try Row.fetchOne(
            db, sql: "SELECT count(*), coalesce(sum(size), 0) FROM file WHERE path >= ? AND path < ?",
            arguments: [dataRange.0, dataRange.1])!
        return BagPayload(
            index: scan.index, root: root, manifests: payloadManifests,
            manifestsListDigests: problemsOtherThanManifests == problemsBeforeCompleteness, count: totals[0],
            bytes: totals[1])
    }

    /// The problems found so far other than `malformedManifest`.
    var problemsOtherThanManifests: Int { problems.count - problems.codes[.malformedManifest, default: 0] }

    /// A file whose digest differs from the one `manifest` lists — or that was not hashed in
    /// that algorithm, which must not pass for a match.
    static func checksumProblem(
        _ path: String, listed: String, in manifest: String, _ algorithm: ChecksumAlgorithm, _ actual: String?
    ) -> [BagError] {
        guard let actual else {
            return [
                BagError(
                    .checksumMismatch, file: path,
                    "\(manifest) lists it, but it could not be hashed in \(algorithm.rawValue) to check")
            ]
        }
        guard actual == listed else {
            return [
                BagError(
                    .checksumMismatch, file: path,
                    "\(algorithm.rawValue) checksum mismatch: \(manifest) says \(listed), the file has \(actual)")
            ]
        }
        return []
    }

    /// The warning for a manifest whose lines mark files with md5sum's binary-mode `*`.
    static func binaryMarkerWarning(_ count: Int, file: String) -> BagError {
        BagError(
            .malformedManifest, file: file,
            "\(count == 1 ? "1 line marks its file" : "\(count) lines mark their files") with md5sum's binary-mode "
                + "'*' (read as the name after it)")
    }
}
