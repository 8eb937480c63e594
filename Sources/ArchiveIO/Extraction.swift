import CArchive
import FoundationEssentials
import Glibc

/// What ``ArchiveReader/extract(to:policy:)`` extracted.
public struct ExtractionSummary: Sendable, Hashable {
    /// Members processed (including a `./` root member).
    public var entryCount = 0
    /// Regular files created.
    public var fileCount = 0
    /// Directories created or already present.
    public var directoryCount = 0
    /// Symbolic links created.
    public var symlinkCount = 0
    /// Hard links created.
    public var hardlinkCount = 0
    /// Bytes of file data written.
    public var totalBytes: Int64 = 0
    /// The warnings libarchive reported while reading the archive.
    public var warnings: [ArchiveWarning] = []
}

extension ArchiveReader {
    /// Extracts the remaining members into `destination`, refusing whatever `policy`
    /// refuses.
    ///
    /// Nothing is ever written outside `destination`: every path is checked by an
    /// ``ExtractionGuard`` first, parent directories are opened one component at a time
    /// without following symbolic links (`openat` with `O_NOFOLLOW`), and files are created
    /// with `O_CREAT | O_EXCL | O_NOFOLLOW`, so an existing file or link is never overwritten
    /// or followed — including links this extraction created itself. Size and ratio limits
    /// are checked before each chunk reaches the disk.
    ///
    /// `destination` is created if missing. On an error, the member being written is removed
    /// and the error is thrown; members extracted before it stay. Extract into a fresh
    /// staging directory and delete it on failure.
    ///
    /// ```swift
    /// let summary = try withArchiveReader(at: "bundle.tar.gz") { reader in
    ///     try reader.extract(to: "/tmp/staging-42", policy: .default)
    /// }
    /// print(summary.fileCount, "files,", summary.totalBytes, "bytes")
    /// ```
    ///
    /// - Parameters:
    ///   - destination: The extraction root.
    ///   - policy: The limits and rules to enforce.
    /// - Returns: What was extracted.
    /// - Throws: ``ArchiveError``: any refusal of the policy (see ``ExtractionPolicy``),
    ///   `destinationExists` or `pathThroughSymlink` when something is in the way, `io` for a
    ///   failing system call, or any read error.
    @discardableResult
    public func extract(to destination: String, policy: ExtractionPolicy = .default) throws(ArchiveError)
        -> ExtractionSummary
    {
        let disk = try DiskExtractor(root: destination, archivePath: archivePath)
        var checker = ExtractionGuard(policy: policy, archivePath: archivePath)
        var summary = ExtractionSummary()
        var directories: [(ExtractionPath, ArchiveEntry)] = []
        let warningsBefore = warnings.count
        while let entry = try nextEntry() {
            summary.entryCount += 1
            guard let path = try checker.admit(entry) else { continue }
            let name = path.components[path.components.count - 1]
            let parent = try disk.directory(path.components.dropLast(), member: entry.path)
            switch entry.kind {
            case .file:
                let fd = try disk.createFile(name, in: parent, path: path, member: entry.path)
                do throws(ArchiveError) {
                    var length: Int64 = 0
                    var endsWithHole = false
                    while let chunk = try nextChunk() {
                        if lastChunkIsHole {
                            // Holes of sparse members stay holes on disk.
                            try checker.accountHole(bytes: chunk.count)
                            try disk.skip(chunk.count, in: fd, path: path, member: entry.path)
                        } else {
                            try checker.account(bytes: chunk.count, compressedBytesRead: compressedBytesRead)
                            try disk.write(chunk, to: fd, path: path, member: entry.path)
                        }
                        length += Int64(chunk.count)
                        endsWithHole = lastChunkIsHole
                    }
                    if endsWithHole { try disk.setLength(length, of: fd, path: path, member: entry.path) }
                    try disk.finishFile(fd, entry: entry, path: path, policy: policy)
                } catch {
                    close(fd)
                    unlinkat(parent, name, 0)
                    throw error
                }
                summary.fileCount += 1
            case .directory:
                try disk.makeDirectory(name, in: parent, path: path, member: entry.path)
                directories.append((path, entry))
                summary.directoryCount += 1
            case .symlink:
                try disk.makeSymlink(
                    name, in: parent, target: entry.linkTarget ?? "", entry: entry, path: path, policy: policy)
                summary.symlinkCount += 1
            case .hardlink:
                try disk.makeHardlink(name, in: parent, target: entry.linkTarget ?? "", path: path, member: entry.path)
                summary.hardlinkCount += 1
            default:
                break  // The guard refuses every other kind.
            }
        }
        // Directory permissions and dates last (deepest first), so that adding their
        // contents neither fails on a read-only directory nor changes the restored date.
        for (path, entry) in directories.reversed() {
            try disk.finishDirectory(path, entry: entry, policy: policy)
        }
        summary.totalBytes = checker.totalBytes
        summary.warnings = Array(warnings[warningsBefore...])
        return summary
    }

    /// Opens the archive at `archivePath` and extracts it into `destination`; see
    /// ``extract(to:policy:)``.
    ///
    /// ```swift
    /// try ArchiveReader.extract(archiveAt: "upload.zip", to: staging, policy: .filesAndDirectoriesOnly)
    /// ```
    ///
    /// - Throws: Like ``extract(to:policy:)``, plus `openFailed`.
    @discardableResult
    public static func extract(
        archiveAt archivePath: String, to destination: String, policy: ExtractionPolicy = .default
    ) throws(ArchiveError) -> ExtractionSummary {
        let reader = try ArchiveReader(path: archivePath)
        return try reader.extract(to: destination, policy: policy)
    }
}

/// The file-system side of extraction: every operation is relative to a directory file
/// descriptor reached from the root without following symbolic links.
final class DiskExtractor {
    let rootPath: String
    let archivePath: String
    private let rootFD: Int32
    /// The last parent directory opened, kept because members usually come grouped by folder.
    private var cached: (components: ArraySlice<String>, fd: Int32)?

    init(root: String, archivePath: String) throws(ArchiveError) {
        self.rootPath = root
        self.archivePath = archivePath
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        } catch {
            throw ArchiveError(
                code: .io,
                message: "Cannot extract '\(archivePath)' to '\(root)': cannot create the directory: \(error)",
                archivePath: archivePath, operation: "mkdir", cause: error)
        }
        let fd = Glibc.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = Glibc.errno
            throw ArchiveError(
                code: .io, message: "Cannot extract '\(archivePath)' to '\(root)': open failed: \(systemMessage(code))",
                archivePath: archivePath, operation: "open", errno: code)
        }
        rootFD = fd
    }

    deinit {
        if let cached { close(cached.fd) }
        close(rootFD)
    }

    /// The directory `components` below the root, created as needed; valid until the next
    /// call.
    func directory(_ components: ArraySlice<String>, member: String) throws(ArchiveError) -> Int32 {
        if components.isEmpty { return rootFD }
        if let cached, cached.components.elementsEqual(components, by: { $0.utf8.elementsEqual($1.utf8) }) {
            return cached.fd
        }
        let fd = try open(components, create: true, member: member)
        if let cached { close(cached.fd) }
        cached = (components, fd)
        return fd
    }

    /// Opens `components` below the root one at a time with `O_NOFOLLOW`, creating missing
    /// directories when `create` is set. The caller owns the returned descriptor.
    private func open(_ components: ArraySlice<String>, create: Bool, member: String) throws(ArchiveError) -> Int32 {
        var fd = rootFD
        var walked: [String] = []
        for component in components {
            walked.append(component)
            var next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 && Glibc.errno == ENOENT && create {
                if mkdirat(fd, component, 0o755) != 0 && Glibc.errno != EEXIST {
                    let error = ioError("mkdirat", walked, member: member)
                    if fd != rootFD { close(fd) }
                    throw error
                }
                next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            if next < 0 {
                let error = blockedError(fd, component, walked, member: member, walking: true)
                if fd != rootFD { close(fd) }
                throw error
            }
            if fd != rootFD { close(fd) }
            fd = next
        }
        return fd
    }

    func createFile(_ name: String, in parent: Int32, path: ExtractionPath, member: String) throws(ArchiveError)
        -> Int32
    {
        let fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666)
        guard fd >= 0 else { throw blockedError(parent, name, path.components, member: member) }
        return fd
    }

    func write(_ chunk: UnsafeRawBufferPointer, to fd: Int32, path: ExtractionPath, member: String) throws(ArchiveError)
    {
        var remaining = chunk
        while !remaining.isEmpty {
            let count = Glibc.write(fd, remaining.baseAddress, remaining.count)
            if count < 0 {
                if Glibc.errno == EINTR { continue }
                throw ioError("write", path.components, member: member)
            }
            remaining = UnsafeRawBufferPointer(rebasing: remaining[count...])
        }
    }

    func skip(_ count: Int, in fd: Int32, path: ExtractionPath, member: String) throws(ArchiveError) {
        if lseek(fd, off_t(count), SEEK_CUR) < 0 { throw ioError("lseek", path.components, member: member) }
    }

    func setLength(_ length: Int64, of fd: Int32, path: ExtractionPath, member: String) throws(ArchiveError) {
        if ftruncate(fd, off_t(length)) != 0 { throw ioError("ftruncate", path.components, member: member) }
    }

    func finishFile(_ fd: Int32, entry: ArchiveEntry, path: ExtractionPath, policy: ExtractionPolicy)
        throws(ArchiveError)
    {
        if policy.restoresPermissions, fchmod(fd, mode_t(entry.permissions & 0o777)) != 0 {
            throw ioError("fchmod", path.components, member: entry.path)
        }
        if policy.restoresModificationDates, let date = entry.modificationDate {
            let times = Self.times(date)
            if futimens(fd, times) != 0 { throw ioError("futimens", path.components, member: entry.path) }
        }
        if close(fd) != 0 { throw ioError("close", path.components, member: entry.path) }
    }

    func makeDirectory(_ name: String, in parent: Int32, path: ExtractionPath, member: String) throws(ArchiveError) {
        if mkdirat(parent, name, 0o755) == 0 { return }
        guard Glibc.errno == EEXIST else { throw ioError("mkdirat", path.components, member: member) }
        var info = stat()
        if fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 && info.st_mode & S_IFMT == S_IFDIR { return }
        throw blockedError(parent, name, path.components, member: member, exists: true)
    }

    func finishDirectory(_ path: ExtractionPath, entry: ArchiveEntry, policy: ExtractionPolicy) throws(ArchiveError) {
        guard policy.restoresPermissions || policy.restoresModificationDates else { return }
        let fd = try open(path.components[...], create: false, member: entry.path)
        defer { close(fd) }
        if policy.restoresPermissions, fchmod(fd, mode_t(entry.permissions & 0o777 | 0o700)) != 0 {
            throw ioError("fchmod", path.components, member: entry.path)
        }
        if policy.restoresModificationDates, let date = entry.modificationDate {
            let times = Self.times(date)
            if futimens(fd, times) != 0 { throw ioError("futimens", path.components, member: entry.path) }
        }
    }

    func makeSymlink(
        _ name: String, in parent: Int32, target: String, entry: ArchiveEntry, path: ExtractionPath,
        policy: ExtractionPolicy
    ) throws(ArchiveError) {
        guard symlinkat(target, parent, name) == 0 else {
            throw blockedError(parent, name, path.components, member: entry.path)
        }
        if policy.restoresModificationDates, let date = entry.modificationDate {
            let times = Self.times(date)
            _ = utimensat(parent, name, times, AT_SYMLINK_NOFOLLOW)
        }
    }

    func makeHardlink(
        _ name: String, in parent: Int32, target: String, path: ExtractionPath, member: String
    ) throws(ArchiveError) {
        let targetComponents = target.split(separator: "/").filter { $0 != "." }.map(String.init)
        let targetParent = try open(targetComponents.dropLast(), create: false, member: member)
        defer { if targetParent != rootFD { close(targetParent) } }
        guard linkat(targetParent, targetComponents[targetComponents.count - 1], parent, name, 0) == 0 else {
            throw blockedError(parent, name, path.components, member: member)
        }
    }

    /// `[atime (unchanged), mtime]` for `futimens`/`utimensat` (an array: a pointer to a
    /// tuple's first element need not reach the second).
    private static func times(_ date: Date) -> [timespec] {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        let nanoseconds = Int((date.timeIntervalSince1970 - seconds) * 1e9)
        let mtime = timespec(tv_sec: Int(seconds), tv_nsec: min(max(nanoseconds, 0), 999_999_999))
        return [timespec(tv_sec: 0, tv_nsec: Int(CARCHIVE_UTIME_OMIT)), mtime]
    }

    /// The error for a failed create or open at `name` in `parent`: something in the way, a
    /// symbolic link, or a system error.
    private func blockedError(
        _ parent: Int32, _ name: String, _ components: some Collection<String>, member: String, exists: Bool = false,
        walking: Bool = false
    ) -> ArchiveError {
        let code = Glibc.errno
        let shownPath = components.joined(separator: "/")
        var info = stat()
        let found = fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0
        if found && info.st_mode & S_IFMT == S_IFLNK && walking {
            return ArchiveError(
                code: .pathThroughSymlink,
                message: "Refusing member '\(displayName(member))' of '\(archivePath)': '\(displayName(shownPath))' "
                    + "is a symbolic link, and extraction never writes through one",
                archivePath: archivePath, member: member, errno: code)
        }
        if found && (exists || code == EEXIST || code == ENOTDIR || code == ELOOP) {
            let what =
                info.st_mode & S_IFMT == S_IFDIR
                ? "a directory" : (info.st_mode & S_IFMT == S_IFLNK ? "a symbolic link" : "a file")
            return ArchiveError(
                code: .destinationExists,
                message: "Cannot extract member '\(displayName(member))' of '\(archivePath)': "
                    + "'\(rootPath)/\(displayName(shownPath))' already exists as \(what)",
                archivePath: archivePath, member: member, errno: code)
        }
        Glibc.errno = code
        return ioError("openat", Array(components), member: member)
    }

    private func ioError(_ operation: String, _ components: [String], member: String) -> ArchiveError {
        let code = Glibc.errno
        let shown = ([rootPath] + components).joined(separator: "/")
        return ArchiveError(
            code: .io,
            message: "Cannot extract member '\(displayName(member))' of '\(archivePath)' to '\(displayName(shown))': "
                + "\(operation) failed: \(systemMessage(code))",
            archivePath: archivePath, member: member, operation: operation, errno: code)
    }
}
