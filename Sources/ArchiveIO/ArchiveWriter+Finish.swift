import CArchive
import CFileSync
import FoundationEssentials
import Glibc

// Finishing: the trailer, the compression stage drained, and a file archive published at
// its path (linked or renamed into place, synced).
extension ArchiveWriter {
    /// Writes the archive's trailer, flushes the compressor and, for a file archive, moves
    /// the finished file to its path.
    ///
    /// - Throws: ``ArchiveError`` with code `writeFailed` or `io`; `misuse` if called twice.
    public func finish() throws(ArchiveError) {
        try ensureOpen()
        let status = archive_write_close(handle)
        if status < ARCHIVE_WARN { throw poison(fail("archive_write_close", member: nil)) }
        if status == ARCHIVE_WARN { warn("archive_write_close", member: nil) }
        if let ending = stage?.finish() {
            let failure = ending.failure
            if ending.isWarning {
                warn(ending.operation, member: nil, message: failure.message)
            } else {
                throw poison(
                    ArchiveError(
                        code: failure.errno == ENOMEM ? .outOfMemory : .writeFailed,
                        message:
                            "Cannot write '\(archivePath)': compressing failed: \(failure.message ?? "unknown error")",
                        archivePath: archivePath, operation: ending.operation, libarchiveMessage: failure.message,
                        errno: failure.errno))
            }
        }
        if let file {
            if options.synchronizesOnFinish, let fd = sink.fd, fsync(fd) != 0 {
                throw poison(ioError("fsync", path: file.temporaryPath ?? archivePath, member: nil))
            }
            try publish(file)
            if options.synchronizesOnFinish {
                let directory = URL(fileURLWithPath: archivePath).deletingLastPathComponent().path
                let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                if fd >= 0 {
                    defer { close(fd) }
                    if fsync(fd) != 0 { throw poison(ioError("fsync", path: directory, member: nil)) }
                }
            }
        }
        state = .finished
    }

    /// Gives the finished file the archive's path: never replacing a file there unless
    /// ``ArchiveWriteOptions/replacesExisting``, and then in one `rename(2)`.
    private func publish(_ file: FileTarget) throws(ArchiveError) {
        switch file {
        case .named(let temporary):
            sink.closeFile()
            let status =
                options.replacesExisting
                ? rename(temporary, archivePath) : cfilesync_rename_noreplace(temporary, archivePath)
            guard status == 0 else {
                throw poison(
                    Glibc.errno == EEXIST ? alreadyExists() : ioError("rename", path: archivePath, member: nil))
            }
        case .unnamed:
            guard let fd = sink.fd else { throw poison(ioError("linkat", path: archivePath, member: nil)) }
            if cfilesync_link_unnamed(fd, archivePath) == 0 {
                sink.closeFile()
                return
            }
            guard Glibc.errno == EEXIST else { throw poison(ioError("linkat", path: archivePath, member: nil)) }
            guard options.replacesExisting else { throw poison(alreadyExists()) }
            // Replacing: linked under a hidden name beside the target, then renamed over it.
            let temporary = Self.temporaryPath(for: archivePath, "replacing")
            do throws(ArchiveError) {
                try Self.announced(temporary, to: willCreateTemporaryFile, archivePath: archivePath)
            } catch {
                throw poison(error)
            }
            guard cfilesync_link_unnamed(fd, temporary) == 0 else {
                throw poison(ioError("linkat", path: temporary, member: nil))
            }
            sink.closeFile()
            guard rename(temporary, archivePath) == 0 else {
                let error = ioError("rename", path: archivePath, member: nil)
                unlink(temporary)
                throw poison(error)
            }
        }
    }

    private func alreadyExists() -> ArchiveError {
        ArchiveError(
            code: .alreadyExists, message: "Cannot write '\(archivePath)': a file of that name already exists",
            archivePath: archivePath, operation: "link", errno: EEXIST)
    }
}
