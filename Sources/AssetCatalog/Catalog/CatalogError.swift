/// An error of the catalog, with a message that names the path or asset and
/// says what to do.
public struct CatalogError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. Extensible: match on the static members.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        public var description: String { name }

        /// No catalog, asset or file where one was expected.
        public static let notFound = Code(name: "notFound")
        /// Something already exists where a new one was to be created.
        public static let exists = Code(name: "exists")
        /// An argument the catalog cannot accept.
        public static let invalidArgument = Code(name: "invalidArgument")
        /// Reading or writing a file failed.
        public static let io = Code(name: "io")
        /// Content does not match what the catalog recorded.
        public static let damaged = Code(name: "damaged")
        /// The catalog's store failed (see `cause`).
        public static let store = Code(name: "store")
        /// Work was stopped before it finished (Ctrl-C, task cancellation).
        public static let cancelled = Code(name: "cancelled")
        /// An archive could not be read.
        public static let archive = Code(name: "archive")
        /// The catalog cannot be changed: it was opened read-only, or it is on a
        /// file system (or in a folder) that this process cannot write.
        public static let readOnly = Code(name: "readOnly")
        /// The file system holding the catalog has no space left for what the change must
        /// write: nothing was changed. Commands that only read still work.
        public static let diskFull = Code(name: "diskFull")
    }

    public var code: Code
    /// One line naming the path or asset, saying what happened and what to do.
    public var message: String
    /// The file the error is about, if any.
    public var path: String?
    /// The error that caused this one.
    public var cause: (any Error)?

    public init(_ code: Code, _ message: String, path: String? = nil, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.cause = cause
    }

    public var description: String { message }
}

extension CatalogError {
    /// A read or write of the store that found its file damaged: the store's own message
    /// (which names the file), and what to do. Nothing is moved or removed.
    static func damagedStore(_ error: any Error, message: String, store: String) -> CatalogError {
        CatalogError(
            .store,
            "\(message). Run `assetcat verify --store-only` to see the damage, and restore the catalog from a backup",
            path: store, cause: error)
    }

    /// A change the catalog at `root` could not write: its file system is full. Names the
    /// file system, and says that nothing was changed and what to do.
    static func diskFull(_ root: String, cause: any Error) -> CatalogError {
        CatalogError(
            .diskFull,
            "The disk is full: \(FileSystemSpace(of: root).description) has no space left for the catalog at "
                + "\(root) to write its change. Nothing was changed; free space on it, then run the command again "
                + "(commands that only read the catalog still work)", path: root, cause: cause)
    }

    /// A change asked of a catalog opened read-only.
    static func readOnlyCatalog(_ root: String) -> CatalogError {
        CatalogError(
            .readOnly, "The catalog at \(root) is open read-only: it cannot be changed", path: root)
    }
}
