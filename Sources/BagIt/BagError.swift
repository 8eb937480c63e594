/// A problem with a bag: one that stops reading or writing it (thrown), or
/// one of the problems a validation lists (``BagContents/problems``).
///
/// ``description`` is one line that names the file — the bag's own relative
/// path (`data/a.txt`, `manifest-sha256.txt`) or the bundle's path.
public struct BagError: Error, Sendable, CustomStringConvertible, Hashable {
    /// What kind of problem it is.
    public enum Code: String, Sendable, Hashable {
        /// `bagit.txt` is missing: this is not a bag.
        case notABag
        /// `bagit.txt` or another tag file cannot be parsed.
        case malformedTagFile
        /// The bag declares a BagIt version or tag-file encoding this reader does not support.
        case unsupportedVersion
        /// The bag has no payload manifest in a supported algorithm.
        case missingManifest
        /// A manifest line cannot be parsed, or names a path outside `data/` (or inside it, for a tag manifest).
        case malformedManifest
        /// A manifest lists a file the bag does not hold.
        case missingFile
        /// The bag holds a payload file that a manifest does not list.
        case unlistedFile
        /// A file's checksum differs from its manifest's.
        case checksumMismatch
        /// `Payload-Oxum` in `bag-info.txt` does not match the payload.
        case oxumMismatch
        /// The bag lists files to fetch from elsewhere (`fetch.txt`): a warning when reading it,
        /// and a problem for importing it while it lacks them (fetching is not supported).
        case fetchUnsupported
        /// An entry is not allowed in a bag: an absolute path, `..`, a link, a device, a
        /// duplicate, a size or compression-ratio bomb.
        case hostileEntry
        /// The archive cannot be read: truncated, corrupt, not an archive.
        case unreadableArchive
        /// Reading or writing files failed.
        case io
        /// Export: an item's bytes differ from the digest they were listed with.
        case contentMismatch
        /// A value given to the API is not acceptable.
        case invalidArgument
        /// Writing: the bag's path holds a file or a non-empty folder, which the writer was
        /// not told to replace.
        case alreadyExists
        /// The work was cancelled.
        case cancelled
    }

    public var code: Code
    /// The file the problem is about, relative to the bag (or a path on disk); `nil` when the
    /// reason names it itself (ArchiveIO's messages name the archive and the member).
    public var file: String?
    /// The problem in words, without the file.
    public var reason: String
    /// The error that caused this one, in words.
    public var underlying: String?

    public init(_ code: Code, file: String?, _ reason: String, underlying: String? = nil) {
        self.code = code
        self.file = file
        self.reason = reason
        self.underlying = underlying
    }

    /// `file: reason`, one line.
    public var description: String {
        let line = file.map { "\($0): \(reason)" } ?? reason
        return line.replacingNewlines()
    }
}

extension String {
    func replacingNewlines() -> String {
        var result = ""
        for scalar in unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}

/// The first problems of a validation, by file and reason, and how many there are in all: a
/// bag of a million problems keeps the memory of `limit` of them, whatever order they are
/// found in.
package struct ProblemList {
    /// How many problems were added.
    package private(set) var count = 0
    /// How many of them had each code.
    package private(set) var codes: [BagError.Code: Int] = [:]
    private var kept: [BagError] = []
    private let limit: Int
    /// The last of the first `limit` problems at the last trim: one that does not precede it
    /// cannot be among the first `limit`, and is only counted. (Problems that come in the
    /// order they are listed in — a manifest's lines a bag lacks, say — then cost no sort.)
    private var last: BagError?

    package init(limit: Int) { self.limit = max(0, limit) }

    package mutating func append(_ problem: BagError) {
        count += 1
        codes[problem.code, default: 0] += 1
        guard limit > 0 else { return }
        if let last, !Self.precedes(problem, last) { return }
        kept.append(problem)
        // Trimmed now and then to the first `limit`: a sort per `limit` problems.
        if kept.count >= 2 * limit { trim() }
    }

    /// Adds a problem whose reason is made only if the list may keep it: for the checks that
    /// can add millions in file order (a manifest's lines a bag lacks), of which all but the
    /// first are only counted.
    package mutating func append(_ code: BagError.Code, file: String, _ reason: @autoclosure () -> String) {
        if limit == 0 || last.map({ file > ($0.file ?? "") }) == true {
            count += 1
            codes[code, default: 0] += 1
        } else {
            append(BagError(code, file: file, reason()))
        }
    }

    package mutating func append(contentsOf problems: some Sequence<BagError>) {
        for problem in problems { append(problem) }
    }

    /// Whether a problem with `code` was added.
    package func contains(_ code: BagError.Code) -> Bool { codes[code, default: 0] > 0 }

    /// The first `limit` problems, sorted by file, then reason.
    package var first: [BagError] {
        var list = self
        list.trim()
        return list.kept
    }

    private mutating func trim() {
        kept.sort(by: Self.precedes)
        if kept.count >= limit {
            kept.removeLast(kept.count - limit)
            last = kept.last
        }
    }

    /// The order problems are listed in: by file, then reason.
    package static func precedes(_ a: BagError, _ b: BagError) -> Bool {
        (a.file ?? "", a.reason) < (b.file ?? "", b.reason)
    }
}
