import CFileSync

#if canImport(Glibc)
    import Glibc
#endif

/// Opening files that someone else may be changing: a directory bag being imported, the files
/// an `add` was given. A file is opened once and what was opened is checked (`fstat`), never a
/// path checked first and opened later; below a directory, no component may be a symbolic
/// link and nothing leads outside it (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`,
/// or `O_NOFOLLOW` component by component where the kernel lacks `openat2`). Files are opened
/// with `O_NONBLOCK`, so a FIFO is refused at once instead of waiting for a writer.
package enum FileAccess {
    /// Why a file was not opened.
    package struct Failure: Error, Sendable, Equatable {
        package enum Kind: Sendable, Equatable {
            /// It is not a regular file: its type, in words ("a FIFO").
            case notRegular(String)
            /// It, or a directory on the way to it, is a symbolic link.
            case symbolicLink
            /// The path is absolute or climbs out with `..`.
            case outside
            /// `open` failed with this `errno`.
            case system(Int32)
        }

        package var kind: Kind

        /// What is wrong, in words, to follow the file's name: "is a FIFO, not a regular file".
        package var reason: String {
            switch kind {
            case .notRegular(let type): "is \(type), not a regular file"
            case .symbolicLink: "is a symbolic link, or is reached through one"
            case .outside: "is not a path inside the directory it is read from"
            case .system(let code): "cannot be opened: \(String(cString: strerror(code)))"
            }
        }
    }

    /// Whether opens below a directory skip `openat2` for the component-by-component way, as
    /// on a kernel without it (for the tests of that way).
    @TaskLocal package static var avoidsOpenat2 = false

    /// Opens the directory at `path` (following symbolic links: it is the one a user named),
    /// to open files below it with ``openRegularFile(_:beneath:)``.
    package static func openDirectory(_ path: String) throws(Failure) -> Int32 {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(kind: .system(errno)) }
        return fd
    }

    /// Opens the directory `relative` below the directory `directory`, without following a link.
    package static func openDirectory(_ relative: String, beneath directory: Int32) throws(Failure) -> Int32 {
        try openBeneath(directory, relative, O_DIRECTORY)
    }

    /// Opens the regular file `relative` below the directory `directory` for reading, without
    /// following a link at any component. Returns the descriptor (the caller closes it) and
    /// the file's size.
    package static func openRegularFile(_ relative: String, beneath directory: Int32) throws(Failure) -> (
        fd: Int32, size: Int64
    ) {
        try requireRegular(try openBeneath(directory, relative, 0))
    }

    /// Opens the regular file at `path` for reading, following symbolic links (a file a user
    /// named), with `O_NONBLOCK`. Returns the descriptor (the caller closes it) and the file's
    /// size.
    package static func openRegularFile(atPath path: String) throws(Failure) -> (fd: Int32, size: Int64) {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { throw Failure(kind: .system(errno)) }
        return try requireRegular(fd)
    }

    private static func openBeneath(_ directory: Int32, _ relative: String, _ flags: Int32) throws(Failure) -> Int32 {
        let fd = cfilesync_open_beneath(directory, relative, flags, avoidsOpenat2 ? 0 : 1)
        guard fd >= 0 else {
            switch errno {
            case ELOOP: throw Failure(kind: .symbolicLink)
            case EXDEV: throw Failure(kind: .outside)
            case let code: throw Failure(kind: .system(code))
            }
        }
        return fd
    }

    /// `fd`, and its `fstat`, if it is a regular file; otherwise it is closed.
    private static func requireRegular(_ fd: Int32) throws(Failure) -> (fd: Int32, size: Int64) {
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let code = errno
            close(fd)
            throw Failure(kind: .system(code))
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw Failure(kind: .notRegular(typeName(info.st_mode)))
        }
        return (fd, Int64(info.st_size))
    }

    /// A file type in words, for a mode that is not a regular file's.
    static func typeName(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFCHR, S_IFBLK: "a device"
        case S_IFSOCK: "a socket"
        case S_IFLNK: "a symbolic link"
        default: "a file of an unknown type"
        }
    }
}

extension BagReader {
    /// Called with a directory bag's root once its files have been listed, before any is read:
    /// the tests swap a file there, to show that what is read is what was listed or nothing.
    @TaskLocal package static var afterListing: (@Sendable (_ root: String) -> Void)?
}

extension BagError {
    /// The error for a file or directory of a directory bag that was not opened: `io` when
    /// the system refused, `hostileEntry` when it is not what a bag holds (a link, a FIFO, …).
    init(opening file: String, _ failure: FileAccess.Failure) {
        if case .system = failure.kind {
            self.init(.io, file: file, failure.reason)
        } else {
            self.init(.hostileEntry, file: file, "\(failure.reason); a bag holds regular files only")
        }
    }
}
