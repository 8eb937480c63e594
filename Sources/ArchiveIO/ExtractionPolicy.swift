/// The limits and rules that decide which archive members may be extracted.
///
/// An archive from elsewhere is hostile until proven otherwise. The policy refuses, each
/// with its own error code naming the member:
///
/// - absolute paths (`absolutePath`) and paths with a `..` component (`parentTraversal`);
/// - empty names and names with a NUL byte (`invalidName`), names or components longer than
///   ``maxPathLength`` / ``maxComponentLength`` (`nameTooLong`);
/// - symbolic links whose target is absolute or leaves the extraction root, and hard links
///   to anything but a regular file extracted before them (`linkOutsideRoot`,
///   `hardlinkTargetMissing`);
/// - devices, FIFOs and sockets, always, and any kind left out of ``allowedKinds``
///   (`entryTypeNotAllowed`);
/// - a second member with the same path (`duplicateEntry`);
/// - more than ``maxEntryCount`` members (`tooManyEntries`), more than ``maxTotalBytes``
///   uncompressed bytes (`sizeLimitExceeded`) and an archive that expands more than
///   ``maxCompressionRatio`` times (`compressionRatioExceeded`) — checked while the data
///   streams, before the bytes reach the disk.
///
/// ```swift
/// var policy = ExtractionPolicy.default
/// policy.maxTotalBytes = 10 << 30
/// policy.allowedKinds = [.files, .directories]
/// try withArchiveReader(at: "upload.zip") { try $0.extract(to: staging, policy: policy) }
/// ```
///
/// Code that extracts by other means (for example straight into a content store) applies
/// the same rules through an ``ExtractionGuard``.
public struct ExtractionPolicy: Sendable, Hashable {
    /// The kinds of member a policy may allow. Devices, FIFOs and sockets are never allowed.
    public struct Kinds: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Regular files.
        public static let files = Kinds(rawValue: 1 << 0)
        /// Directories.
        public static let directories = Kinds(rawValue: 1 << 1)
        /// Symbolic links whose target stays inside the extraction root.
        public static let symlinks = Kinds(rawValue: 1 << 2)
        /// Hard links to regular files extracted earlier from the same archive.
        public static let hardlinks = Kinds(rawValue: 1 << 3)
        /// All of the above.
        public static let all: Kinds = [.files, .directories, .symlinks, .hardlinks]
    }

    /// The most members an archive may have.
    public var maxEntryCount: Int
    /// The most uncompressed bytes all members together may hold.
    public var maxTotalBytes: Int64
    /// The most an archive may expand: uncompressed bytes produced divided by archive bytes
    /// read. Checked once more than ``ratioGraceBytes`` have been produced.
    public var maxCompressionRatio: Double
    /// How many uncompressed bytes may be produced before the ratio is checked, so that tiny,
    /// highly compressible archives pass.
    public var ratioGraceBytes: Int64
    /// The longest member path, in UTF-8 bytes.
    public var maxPathLength: Int
    /// The longest component of a member path, in UTF-8 bytes.
    public var maxComponentLength: Int
    /// The kinds of member that may be extracted.
    public var allowedKinds: Kinds
    /// Whether extracted files and directories get the member's permission bits (without
    /// setuid, setgid and sticky bits; directories always keep owner `rwx`).
    public var restoresPermissions: Bool
    /// Whether extracted files and directories get the member's modification date.
    public var restoresModificationDates: Bool

    /// Creates a policy; every parameter defaults to the value of ``default``.
    public init(
        maxEntryCount: Int = 1_000_000,
        maxTotalBytes: Int64 = 64 << 30,
        maxCompressionRatio: Double = 250,
        ratioGraceBytes: Int64 = 1 << 20,
        maxPathLength: Int = 1024,
        maxComponentLength: Int = 255,
        allowedKinds: Kinds = .all,
        restoresPermissions: Bool = true,
        restoresModificationDates: Bool = true
    ) {
        self.maxEntryCount = maxEntryCount
        self.maxTotalBytes = maxTotalBytes
        self.maxCompressionRatio = maxCompressionRatio
        self.ratioGraceBytes = ratioGraceBytes
        self.maxPathLength = maxPathLength
        self.maxComponentLength = maxComponentLength
        self.allowedKinds = allowedKinds
        self.restoresPermissions = restoresPermissions
        self.restoresModificationDates = restoresModificationDates
    }

    /// One million members, 64 GiB, a ratio of 250, paths up to 1024 bytes, files,
    /// directories and links that stay inside the root.
    public static let `default` = ExtractionPolicy()

    /// Like ``default`` but only regular files and directories: no links at all.
    public static let filesAndDirectoriesOnly = ExtractionPolicy(allowedKinds: [.files, .directories])
}

/// A member the policy accepted: its path split into safe components.
public struct ExtractionPath: Sendable, Hashable, CustomStringConvertible {
    /// The normalised components (no empty, `.` or `..` components); empty for the root.
    public let components: [String]

    /// The components joined with `/`.
    public var description: String { components.joined(separator: "/") }
}

/// Applies an ``ExtractionPolicy`` to the members of one archive, in order.
///
/// ``ArchiveReader/extract(to:policy:)`` uses a guard internally; use one directly when
/// members are consumed another way (for example hashed into a content store) so that the
/// same rules hold. Call ``admit(_:)`` for each member, then ``account(bytes:compressedBytesRead:)``
/// before using each chunk of its data.
///
/// ```swift
/// var checker = ExtractionGuard(policy: .default, archivePath: reader.archivePath)
/// while let entry = try reader.nextEntry() {
///     guard let path = try checker.admit(entry) else { continue }   // nil: the root itself
///     try reader.readData { chunk in
///         if reader.lastChunkIsHole {
///             try checker.accountHole(bytes: chunk.count)
///         } else {
///             try checker.account(bytes: chunk.count, compressedBytesRead: reader.compressedBytesRead)
///         }
///         store(chunk, at: path)
///     }
/// }
/// ```
///
/// A guard remembers each member's path, about 21 bytes per member, to refuse duplicates
/// and hard links to anything but a regular file admitted before them. A caller that keeps
/// the members it takes somewhere of its own (an index on disk, say) can make one that
/// remembers nothing, `remembersPaths: false`, and refuse those members itself with the
/// guard's own errors: ``duplicateRefusal(for:)`` and ``missingLinkTargetRefusal(for:)``.
public struct ExtractionGuard: Sendable {
    /// The policy applied.
    public let policy: ExtractionPolicy
    /// The archive's path, used in messages.
    public let archivePath: String
    /// Whether the guard remembers the members' paths, to refuse a second member with the
    /// same path and a hard link to anything but a regular file admitted before it.
    public let remembersPaths: Bool
    /// Members admitted or refused so far.
    public private(set) var entryCount = 0
    /// Uncompressed bytes accounted so far.
    public private(set) var totalBytes: Int64 = 0

    private var current: String?
    /// Bytes of sparse holes, left out of the compression ratio.
    private var holeBytes: Int64 = 0
    /// The path of each member admitted, as a ``PathPrint`` marked when the member is a
    /// regular file (which a hard link may name): about 21 bytes per member, whatever the
    /// length of its path.
    private var seen: Set<PathPrint> = []

    /// Creates a guard for one pass over one archive.
    ///
    /// - Parameters:
    ///   - policy: The limits and kinds of member the guard admits.
    ///   - archivePath: The archive's path, as its refusals name it.
    ///   - remembersPaths: `false` for a guard that remembers no path, and so
    ///     checks neither duplicates nor hard-link targets (beyond their staying inside the
    ///     root): its memory stays the same however many members the archive has. Its caller
    ///     must make those checks itself.
    public init(policy: ExtractionPolicy, archivePath: String, remembersPaths: Bool = true) {
        self.policy = policy
        self.archivePath = archivePath
        self.remembersPaths = remembersPaths
    }

    /// Checks a member against the policy and returns its safe path, or `nil` for a
    /// directory member that names the root itself (`./`), which needs no extraction.
    ///
    /// - Parameter entry: The member's header.
    /// - Returns: The member's normalised path.
    /// - Throws: ``ArchiveError`` with one of the policy's codes (see ``ExtractionPolicy``).
    public mutating func admit(_ entry: ArchiveEntry) throws(ArchiveError) -> ExtractionPath? {
        current = entry.path
        entryCount += 1
        if entryCount > policy.maxEntryCount {
            throw refusal(
                .tooManyEntries, entry, "the archive has more than \(policy.maxEntryCount) members, the policy's limit")
        }
        let components = try validatePath(entry.path, of: entry)
        switch entry.kind {
        case .file: try require(.files, entry)
        case .directory: try require(.directories, entry)
        case .symlink: try require(.symlinks, entry)
        case .hardlink: try require(.hardlinks, entry)
        case .characterDevice, .blockDevice, .fifo, .socket, .other:
            throw refusal(
                .entryTypeNotAllowed, entry,
                "it is a \(entry.kind); device, FIFO and socket entries are never extracted")
        }
        if components.isEmpty {
            guard entry.kind == .directory else { throw refusal(.invalidName, entry, "its path names no file") }
            return nil
        }
        let print = remembersPaths ? PathPrint(components, regularFile: false) : nil
        if let print, seen.contains(print) || seen.contains(print.regularFile) {
            throw duplicateRefusal(for: entry)
        }
        if entry.kind == .symlink { try validateSymlink(entry, depth: components.count - 1) }
        if entry.kind == .hardlink { try validateHardlink(entry) }
        if entry.kind == .file, let size = entry.size, size > policy.maxTotalBytes - totalBytes {
            throw sizeRefusal(entry)
        }
        // Remembered once admitted: a member refused is no hard link's target, nor a duplicate.
        if let print { seen.insert(entry.kind == .file ? print.regularFile : print) }
        return ExtractionPath(components: components)
    }

    /// Counts `bytes` more uncompressed bytes of the current member's data, before they are
    /// used, and checks the size and compression-ratio limits.
    ///
    /// - Parameters:
    ///   - bytes: The size of the next chunk.
    ///   - compressedBytesRead: The archive bytes read so far
    ///     (``ArchiveReader/compressedBytesRead``).
    /// - Throws: ``ArchiveError`` with code `sizeLimitExceeded` or `compressionRatioExceeded`.
    public mutating func account(bytes: Int, compressedBytesRead: Int64) throws(ArchiveError) {
        let entry = ArchiveEntry(path: current ?? "", kind: .file)
        guard Int64(bytes) <= policy.maxTotalBytes - totalBytes else { throw sizeRefusal(entry) }
        totalBytes += Int64(bytes)
        let stored = totalBytes - holeBytes
        if stored > policy.ratioGraceBytes {
            let consumed = max(compressedBytesRead, 1)
            if Double(stored) > policy.maxCompressionRatio * Double(consumed) {
                throw refusal(
                    .compressionRatioExceeded, entry,
                    "the archive expands more than \(Self.format(policy.maxCompressionRatio)) times "
                        + "(\(stored) bytes from \(consumed)), the policy's limit")
            }
        }
    }

    /// Counts a hole of a sparse member: `bytes` zeros that the archive does not store. They
    /// count toward ``ExtractionPolicy/maxTotalBytes`` but not toward the compression ratio,
    /// since they cost neither archive bytes nor (written as holes) disk space.
    ///
    /// - Throws: ``ArchiveError`` with code `sizeLimitExceeded`.
    public mutating func accountHole(bytes: Int) throws(ArchiveError) {
        let entry = ArchiveEntry(path: current ?? "", kind: .file)
        guard Int64(bytes) <= policy.maxTotalBytes - totalBytes else { throw sizeRefusal(entry) }
        totalBytes += Int64(bytes)
        holeBytes += Int64(bytes)
    }

    /// Checks that a path is relative, free of `..`, NUL and over-long names, and returns its
    /// normalised components (empty, `.` components and a leading `./` are dropped).
    ///
    /// - Throws: ``ArchiveError`` with code `invalidName`, `nameTooLong`, `absolutePath` or
    ///   `parentTraversal`.
    public func validatePath(_ path: String, of entry: ArchiveEntry) throws(ArchiveError) -> [String] {
        if path.isEmpty { throw refusal(.invalidName, entry, "its path is empty") }
        if path.utf8.contains(0) { throw refusal(.invalidName, entry, "its path contains a NUL byte") }
        let length = path.utf8.count
        if length > policy.maxPathLength {
            throw refusal(
                .nameTooLong, entry,
                "its path is \(length) bytes long, more than the policy's limit of \(policy.maxPathLength)")
        }
        // By bytes: `/` followed by a combining mark is one Character, not a "/" prefix.
        if path.utf8.first == 0x2F { throw refusal(.absolutePath, entry, "its path is absolute") }
        var components: [String] = []
        // By UTF-8 code units ('/' and '.' are ASCII): splitting by Character costs a
        // grapheme walk per member.
        for component in path.utf8.split(separator: 0x2F, omittingEmptySubsequences: true) {
            if component.elementsEqual([0x2E]) { continue }
            if component.elementsEqual([0x2E, 0x2E]) {
                throw refusal(.parentTraversal, entry, "its path contains a '..' component")
            }
            if component.count > policy.maxComponentLength {
                throw refusal(
                    .nameTooLong, entry,
                    "its path has a component of \(component.count) bytes, more than the policy's limit "
                        + "of \(policy.maxComponentLength)")
            }
            components.append(String(Substring(component)))
        }
        return components
    }

    private func validateSymlink(_ entry: ArchiveEntry, depth: Int) throws(ArchiveError) {
        let target = entry.linkTarget ?? ""
        let shown = displayName(target)
        if target.isEmpty { throw refusal(.invalidName, entry, "it is a symbolic link with an empty target") }
        if target.utf8.contains(0) {
            throw refusal(.invalidName, entry, "it is a symbolic link whose target contains a NUL byte")
        }
        if target.utf8.count > policy.maxPathLength {
            throw refusal(
                .nameTooLong, entry,
                "it is a symbolic link whose target is \(target.utf8.count) bytes long, more than the policy's "
                    + "limit of \(policy.maxPathLength)")
        }
        if target.utf8.first == 0x2F {
            throw refusal(.linkOutsideRoot, entry, "it is a symbolic link to the absolute path '\(shown)'")
        }
        // Leading '..' components climb real directories created by the extraction (never
        // links), so counting them is exact. A '..' after a name could climb out of a
        // symbolic link instead, which cannot be checked safely: refuse it.
        var ups = 0
        var sawName = false
        // By bytes, as the kernel resolves it: split by Character, `../` + a combining mark
        // would be one name, not a climb.
        for component in target.utf8.split(separator: 0x2F, omittingEmptySubsequences: true)
        where !component.elementsEqual([0x2E]) {
            if component.elementsEqual([0x2E, 0x2E]) {
                if sawName {
                    throw refusal(
                        .linkOutsideRoot, entry,
                        "it is a symbolic link to '\(shown)', which climbs with '..' after a name; only leading "
                            + "'..' components can be checked to stay inside the extraction root")
                }
                ups += 1
            } else {
                sawName = true
            }
        }
        if ups > depth {
            throw refusal(
                .linkOutsideRoot, entry, "it is a symbolic link to '\(shown)', which leaves the extraction root")
        }
    }

    private func validateHardlink(_ entry: ArchiveEntry) throws(ArchiveError) {
        let target = entry.linkTarget ?? ""
        let shown = displayName(target)
        if target.utf8.first == 0x2F {
            throw refusal(.linkOutsideRoot, entry, "it is a hard link to the absolute path '\(shown)'")
        }
        let components = target.utf8.split(separator: 0x2F).filter { !$0.elementsEqual([0x2E]) }.map {
            String(Substring($0))
        }
        if target.utf8.contains(0) || components.isEmpty {
            throw refusal(.invalidName, entry, "it is a hard link with an empty or invalid target")
        }
        if components.contains(where: { $0.utf8.elementsEqual([0x2E, 0x2E]) }) {
            throw refusal(.linkOutsideRoot, entry, "it is a hard link to '\(shown)', which leaves the extraction root")
        }
        if remembersPaths, !seen.contains(PathPrint(components, regularFile: true)) {
            throw missingLinkTargetRefusal(for: entry)
        }
    }

    /// The error ``admit(_:)`` throws for a member whose path an earlier member has, for a
    /// caller whose guard does not remember paths and that finds such members itself.
    ///
    /// - Parameter entry: The second member, with its path as the archive spells it.
    /// - Returns: An ``ArchiveError`` with code `duplicateEntry`.
    public func duplicateRefusal(for entry: ArchiveEntry) -> ArchiveError {
        refusal(.duplicateEntry, entry, "an earlier member has the same path")
    }

    /// The error ``admit(_:)`` throws for a hard link whose target is not a regular file
    /// admitted before it, for a caller whose guard does not remember paths and that checks
    /// the targets itself.
    ///
    /// - Parameter entry: The hard link, with its target.
    /// - Returns: An ``ArchiveError`` with code `hardlinkTargetMissing`.
    public func missingLinkTargetRefusal(for entry: ArchiveEntry) -> ArchiveError {
        refusal(
            .hardlinkTargetMissing, entry,
            "it is a hard link to '\(displayName(entry.linkTarget ?? ""))', which is not a regular file extracted "
                + "before it")
    }

    private func require(_ kind: ExtractionPolicy.Kinds, _ entry: ArchiveEntry) throws(ArchiveError) {
        guard policy.allowedKinds.contains(kind) else {
            throw refusal(
                .entryTypeNotAllowed, entry, "it is a \(entry.kind), which the extraction policy does not allow")
        }
    }

    private func sizeRefusal(_ entry: ArchiveEntry) -> ArchiveError {
        refusal(
            .sizeLimitExceeded, entry,
            "extracting it would exceed the policy's limit of \(policy.maxTotalBytes) uncompressed bytes")
    }

    private func refusal(_ code: ArchiveError.Code, _ entry: ArchiveEntry, _ reason: String) -> ArchiveError {
        ArchiveError(
            code: code, message: "Refusing member '\(displayName(entry.path))' of '\(archivePath)': \(reason)",
            archivePath: archivePath, member: entry.path)
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}

/// A member's path (its normalised components) as a 127-bit keyed hash — two SipHash values
/// of this process's random seed — and a mark for a regular file. Two different paths get
/// the same print with a probability of about n² / 2¹²⁸ for n members: never, in practice,
/// where keeping the paths themselves would cost a hundred bytes or more per member.
struct PathPrint: Hashable, Sendable {
    private let high: UInt64
    private let low: UInt64

    init(_ components: [String], regularFile: Bool) {
        // By bytes, as paths are compared here: a String's hash would merge names that
        // differ only in Unicode normalisation, which are two files on Linux.
        var path = components.joined(separator: "/")
        func hash(_ salt: UInt8) -> UInt64 {
            var hasher = Hasher()
            hasher.combine(salt)
            path.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
            return UInt64(truncatingIfNeeded: hasher.finalize())
        }
        high = hash(0)
        low = hash(1) & ~1 | (regularFile ? 1 : 0)
    }

    private init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The same path, marked as a regular file.
    var regularFile: PathPrint { PathPrint(high: high, low: low | 1) }
}
