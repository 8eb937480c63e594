public import FoundationEssentials

/// The header of one archive member: its path, type, size, date, permissions and link target.
///
/// A reader returns one `ArchiveEntry` per member; a writer takes one to write a member's
/// header. Paths are stored as the exact UTF-8 bytes found in (or written to) the archive:
/// a decomposed name (NFD) stays decomposed. Compare paths with ``ArchiveEntry/hasPath(_:)``,
/// not `==` on `String` (which treats NFC and NFD spellings as equal).
///
/// ```swift
/// let entry = ArchiveEntry(path: "docs/readme.txt", kind: .file, size: 12, permissions: 0o644)
/// try writer.writeEntry(entry, contents: Array("hello world\n".utf8))
/// ```
public struct ArchiveEntry: Sendable, Hashable {
    /// The type of an archive member.
    public enum Kind: Sendable, Hashable, CustomStringConvertible {
        /// A regular file.
        case file
        /// A directory.
        case directory
        /// A symbolic link; ``ArchiveEntry/linkTarget`` holds its target.
        case symlink
        /// A hard link to an earlier member; ``ArchiveEntry/linkTarget`` holds that member's path.
        case hardlink
        /// A character device.
        case characterDevice
        /// A block device.
        case blockDevice
        /// A named pipe.
        case fifo
        /// A Unix domain socket.
        case socket
        /// A type libarchive does not name.
        case other

        public var description: String {
            switch self {
            case .file: "regular file"
            case .directory: "directory"
            case .symlink: "symbolic link"
            case .hardlink: "hard link"
            case .characterDevice: "character device"
            case .blockDevice: "block device"
            case .fifo: "FIFO"
            case .socket: "socket"
            case .other: "special file"
            }
        }
    }

    /// The member's path inside the archive, exactly as stored (no `./` stripping, no
    /// Unicode normalisation).
    public var path: String
    /// The member's type.
    public var kind: Kind
    /// The size of the member's data in bytes, when the archive records it. Streamed zip
    /// members (data descriptors) may not know it until their data has been read.
    public var size: Int64?
    /// The member's modification date, when the archive records it.
    public var modificationDate: Date?
    /// The permission bits (`0o7777` at most), for example `0o644`.
    public var permissions: UInt16
    /// The target of a symbolic link, or the path of the member a hard link refers to.
    public var linkTarget: String?
    /// Whether the member's data is encrypted (zip, 7z); ArchiveIO reads no encrypted data.
    public var isEncrypted: Bool

    /// Creates an entry, typically to write it with an ``ArchiveWriter``.
    ///
    /// - Parameters:
    ///   - path: The member's path inside the archive, relative, `/`-separated.
    ///   - kind: The member's type.
    ///   - size: The number of data bytes that will follow (regular files only).
    ///   - modificationDate: The date recorded in the header; `nil` writes the epoch.
    ///   - permissions: The permission bits; defaults to `0o644` for files, `0o755` for
    ///     directories.
    ///   - linkTarget: The target of a symbolic or hard link.
    public init(
        path: String,
        kind: Kind,
        size: Int64? = nil,
        modificationDate: Date? = nil,
        permissions: UInt16? = nil,
        linkTarget: String? = nil
    ) {
        self.path = path
        self.kind = kind
        self.size = size
        self.modificationDate = modificationDate
        self.permissions = permissions ?? (kind == .directory ? 0o755 : (kind == .symlink ? 0o777 : 0o644))
        self.linkTarget = linkTarget
        self.isEncrypted = false
    }

    /// Whether the member's path is byte-for-byte `path` (no Unicode normalisation).
    public func hasPath(_ path: String) -> Bool {
        self.path.utf8.elementsEqual(path.utf8)
    }
}
