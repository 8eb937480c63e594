/// The one error type of ArchiveIO.
///
/// Every failure — a libarchive call that failed, an I/O error, a member that an
/// ``ExtractionPolicy`` refuses — is reported as an `ArchiveError`. Its ``code`` says what
/// kind of failure it is (switch on it), its ``message`` says what happened in words a user
/// can act on, naming the archive and the member.
///
/// When libarchive reported the failure, ``operation`` names the C call that failed (for
/// example `archive_read_data_block`) and ``libarchiveMessage`` carries
/// `archive_error_string`; both are also part of ``message``.
///
/// ```swift
/// do {
///     try withArchiveReader(at: "bundle.tar.zst") { reader in
///         try reader.extract(to: "/tmp/staging", policy: .default)
///     }
/// } catch let error as ArchiveError where error.code == .parentTraversal {
///     print(error.member ?? "?", "tries to escape:", error)
/// }
/// ```
public struct ArchiveError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure an ``ArchiveError`` is.
    ///
    /// Codes are compared with `==` or matched in a `switch`; new codes may be added in
    /// later versions, so a `switch` needs a `default` case.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A short, stable identifier such as `"parentTraversal"`.
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        // MARK: Using libarchive

        /// The archive could not be opened (missing file, permission, unreadable stream).
        public static let openFailed = Code("openFailed")
        /// The data is not in any archive format libarchive recognises.
        public static let unrecognizedFormat = Code("unrecognizedFormat")
        /// The archive ends before its last member is complete.
        public static let truncatedArchive = Code("truncatedArchive")
        /// The archive is damaged: a bad header, a checksum or decompression failure.
        public static let corruptArchive = Code("corruptArchive")
        /// libarchive cannot read this member (for example it is encrypted) or write this entry.
        public static let unsupportedEntry = Code("unsupportedEntry")
        /// Writing the archive failed.
        public static let writeFailed = Code("writeFailed")
        /// A file or directory on disk could not be read, created or written.
        public static let io = Code("io")
        /// The archive's path is taken, and the writer was told not to replace what is there.
        public static let alreadyExists = Code("alreadyExists")
        /// A value passed to ArchiveIO is not acceptable (bad compression level, wrong size).
        public static let invalidArgument = Code("invalidArgument")
        /// The API was used in a way it does not allow (reading data before the first entry,
        /// adding entries after `finish()`).
        public static let misuse = Code("misuse")
        /// No member with the requested path exists.
        public static let memberNotFound = Code("memberNotFound")
        /// A chunk source or sink supplied by the caller threw; see ``ArchiveError/cause``.
        public static let callbackFailed = Code("callbackFailed")
        /// libarchive could not allocate memory.
        public static let outOfMemory = Code("outOfMemory")

        // MARK: Refusals of the extraction policy

        /// A member's path is absolute.
        public static let absolutePath = Code("absolutePath")
        /// A member's path contains a `..` component.
        public static let parentTraversal = Code("parentTraversal")
        /// A member's path is empty or contains a NUL byte.
        public static let invalidName = Code("invalidName")
        /// A member's path, or one of its components, is longer than the policy allows.
        public static let nameTooLong = Code("nameTooLong")
        /// A symbolic or hard link points outside the extraction root.
        public static let linkOutsideRoot = Code("linkOutsideRoot")
        /// A hard link names a target that was not extracted before it as a regular file.
        public static let hardlinkTargetMissing = Code("hardlinkTargetMissing")
        /// A member's type (device, FIFO, socket, or a type the policy excludes) is not allowed.
        public static let entryTypeNotAllowed = Code("entryTypeNotAllowed")
        /// Two members have the same path.
        public static let duplicateEntry = Code("duplicateEntry")
        /// Something already exists at the member's destination, or a parent is not a directory.
        public static let destinationExists = Code("destinationExists")
        /// A member would be written through a symbolic link.
        public static let pathThroughSymlink = Code("pathThroughSymlink")
        /// The archive has more members than the policy allows.
        public static let tooManyEntries = Code("tooManyEntries")
        /// The members' total uncompressed size exceeds the policy's limit.
        public static let sizeLimitExceeded = Code("sizeLimitExceeded")
        /// The archive expands more than the policy's maximum compression ratio.
        public static let compressionRatioExceeded = Code("compressionRatioExceeded")
    }

    /// What kind of failure this is.
    public var code: Code
    /// A complete sentence naming the archive, the member and the cause.
    public var message: String
    /// The archive's path, or the name given to a streamed archive.
    public var archivePath: String
    /// The member's path inside the archive, when the failure concerns one member.
    public var member: String?
    /// The libarchive function that failed (`archive_read_next_header`, …), if any.
    public var operation: String?
    /// libarchive's own message (`archive_error_string`), if any.
    public var libarchiveMessage: String?
    /// The `errno` value libarchive or the system call reported, if any.
    public var errno: Int32?
    /// The error thrown by a caller-supplied chunk source or sink, if any.
    public var cause: (any Error)?

    /// Creates an error. ArchiveIO builds its errors itself; this initializer lets other
    /// layers (the bundle importer, tests) build the same kind of value.
    public init(
        code: Code,
        message: String,
        archivePath: String,
        member: String? = nil,
        operation: String? = nil,
        libarchiveMessage: String? = nil,
        errno: Int32? = nil,
        cause: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.archivePath = archivePath
        self.member = member
        self.operation = operation
        self.libarchiveMessage = libarchiveMessage
        self.errno = errno
        self.cause = cause
    }

    public var description: String { message }
}

/// A non-fatal problem libarchive reported (`ARCHIVE_WARN`).
///
/// Warnings are never swallowed: readers and writers collect them in their `warnings`
/// array and pass each one to their `onWarning` handler as it happens.
public struct ArchiveWarning: Sendable, Hashable, CustomStringConvertible {
    /// The archive's path, or the name given to a streamed archive.
    public var archivePath: String
    /// The member concerned, if any.
    public var member: String?
    /// The libarchive function that returned `ARCHIVE_WARN`.
    public var operation: String
    /// libarchive's message.
    public var message: String

    public init(archivePath: String, member: String?, operation: String, message: String) {
        self.archivePath = archivePath
        self.member = member
        self.operation = operation
        self.message = message
    }

    public var description: String {
        let what = member.map { "member '\($0)' of '\(archivePath)'" } ?? "'\(archivePath)'"
        return "Warning for \(what): \(operation): \(message)"
    }
}
