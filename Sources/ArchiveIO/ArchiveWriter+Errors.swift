import CArchive
import FoundationEssentials
import Glibc

// How the writer's failures are reported: libarchive's statuses and the system's errors as
// `ArchiveError`s, a failure that poisons the writer, and warnings.
extension ArchiveWriter {
    func ensureOpen() throws(ArchiveError) {
        switch state {
        case .open: return
        case .failed(let error): throw error
        case .finished:
            throw ArchiveError(
                code: .misuse, message: "Cannot write to '\(archivePath)': the archive is already finished",
                archivePath: archivePath)
        }
    }

    func check(_ status: Int32, _ operation: String) throws(ArchiveError) {
        if status == ARCHIVE_WARN { warn(operation, member: nil) }
        if status < ARCHIVE_WARN { throw failEarly(fail(operation, member: nil, code: .invalidArgument)) }
    }

    /// A failure while setting up: the writer never becomes usable.
    func failEarly(_ error: ArchiveError) -> ArchiveError {
        state = .failed(error)
        return error
    }

    /// Marks the writer failed: no later call can produce a complete-looking archive.
    /// Poisons the writer with `error` unless it failed already (with that error).
    func poisonIfOpen(_ error: ArchiveError) -> ArchiveError {
        if case .failed(let first) = state { return first }
        return poison(error)
    }

    func poison(_ error: ArchiveError) -> ArchiveError {
        state = .failed(error)
        archive_write_fail(handle)
        return error
    }

    func fail(_ operation: String, member: String?, code: ArchiveError.Code = .writeFailed) -> ArchiveError {
        let failure = LibarchiveFailure(handle)
        var location = "'\(archivePath)'"
        if let member { location += ", member '\(displayName(member))'" }
        if let cause = sink.error {
            return ArchiveError(
                code: .callbackFailed, message: "Cannot write \(location): the chunk sink threw: \(cause)",
                archivePath: archivePath, member: member, operation: operation, libarchiveMessage: failure.message,
                errno: failure.errno, cause: cause)
        }
        return ArchiveError(
            code: failure.errno == ENOMEM ? .outOfMemory : code,
            message: "Cannot write \(location): \(operation) failed: \(failure.message ?? "unknown error")",
            archivePath: archivePath, member: member, operation: operation, libarchiveMessage: failure.message,
            errno: failure.errno)
    }

    func ioError(_ operation: String, path: String, member: String?) -> ArchiveError {
        let code = Glibc.errno
        return ArchiveError(
            code: .io, message: "Cannot write '\(archivePath)': \(operation) '\(path)' failed: \(systemMessage(code))",
            archivePath: archivePath, member: member, operation: operation, errno: code)
    }

    func warn(_ operation: String, member: String?, message: String? = nil) {
        let message = message ?? archive_error_string(handle).map { String(cString: $0) } ?? "warning"
        let warning = ArchiveWarning(archivePath: archivePath, member: member, operation: operation, message: message)
        warnings.append(warning)
        onWarning?(warning)
    }
}
