import CArchive
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where a libarchive write handle's output blocks go (the client of its write callback).
protocol ArchiveOutput: AnyObject {
    /// Takes one block of the archive; returns its size, or -1 after setting `archive`'s error.
    func accept(_ archive: OpaquePointer?, _ bytes: UnsafeRawBufferPointer) -> Int
}

/// Compresses an archive's bytes on a thread of its own, so that compression runs beside the
/// work that produces them (reading and hashing the members' files) instead of after it:
/// the writer's libarchive handle writes the uncompressed archive to this stage, which hands
/// each block to a second handle — libarchive's `raw` format, whose one entry is the whole
/// archive, through the compression filter — on a serial queue.
///
/// At most ``maxWaitingBlocks`` blocks wait (their copies are the stage's memory: 1 MiB of
/// 64 KiB blocks). The first failure of the second handle stops the stage: the writer's
/// next block, or ``finish()``, reports it.
final class CompressionStage: ArchiveOutput, @unchecked Sendable {
    static let maxWaitingBlocks = 16

    private let inner: OpaquePointer
    private let output: ChunkSink
    private let queue = DispatchQueue(label: "ArchiveIO.CompressionStage")
    private let slots = DispatchSemaphore(value: CompressionStage.maxWaitingBlocks)
    /// What the queued work shares with the stage. (The work does not hold the stage: were
    /// it the last to let go, `deinit` would wait for the queue from the queue.)
    private let state: State
    private var closed = false

    /// The second handle, used by one thread at a time (the queue's, then `finish` or
    /// `deinit` once the queue is idle), and its first failure.
    private final class State: @unchecked Sendable {
        let inner: OpaquePointer
        let lock = NSLock()
        /// Guarded by `lock`.
        var failure: LibarchiveFailure?
        /// The writer let go without finishing: the blocks still waiting are dropped.
        /// Guarded by `lock`.
        var abandoned = false

        init(inner: OpaquePointer) { self.inner = inner }
    }

    private var failure: LibarchiveFailure? { state.lock.withLock { state.failure } }

    /// A stage that compresses with `filter` (an `archive_write_add_filter_*` function) at
    /// `level` (`nil`: the filter's default) into `output`.
    ///
    /// - Throws: The failing operation's name and libarchive's failure.
    init(
        filter: (OpaquePointer) -> Int32, filterName: String, level: String?, output: ChunkSink
    ) throws(StageSetupError) {
        guard let inner = archive_write_new() else {
            throw StageSetupError(operation: "archive_write_new", failure: nil)
        }
        self.inner = inner
        self.output = output
        state = State(inner: inner)
        func check(_ status: Int32, _ operation: String) throws(StageSetupError) {
            if status < ARCHIVE_WARN {
                throw StageSetupError(operation: operation, failure: LibarchiveFailure(inner))
            }
        }
        // A failure from here on ends in `deinit`, which frees the handle.
        try check(archive_write_set_format_raw(inner), "archive_write_set_format_raw")
        try check(filter(inner), filterName)
        if let level {
            try check(
                archive_write_set_filter_option(inner, nil, "compression-level", level),
                "archive_write_set_filter_option(compression-level=\(level))")
        }
        try check(archive_write_set_bytes_per_block(inner, 64 << 10), "archive_write_set_bytes_per_block")
        // Never pad the last block: padded zstd output is unreadable (PLATFORM.md trap 2).
        try check(archive_write_set_bytes_in_last_block(inner, 1), "archive_write_set_bytes_in_last_block")
        let client = Unmanaged.passUnretained(output as AnyObject).toOpaque()
        try check(
            archive_write_open2(inner, client, nil, archiveIOWriteCallback, nil, nil), "archive_write_open2")
        // The raw format holds one regular file: here, the whole uncompressed archive.
        guard let entry = archive_entry_new2(inner) else {
            throw StageSetupError(operation: "archive_entry_new2", failure: nil)
        }
        defer { archive_entry_free(entry) }
        archive_entry_set_filetype(entry, CARCHIVE_AE_IFREG)
        archive_entry_copy_pathname(entry, "archive")
        try check(archive_write_header(inner, entry), "archive_write_header")
    }

    deinit {
        if !closed { state.lock.withLock { state.abandoned = true } }
        queue.sync {}
        // Keep libarchive from ending the stream: a partial archive must not look whole.
        if !closed { archive_write_fail(inner) }
        archive_write_free(inner)
    }

    func accept(_ archive: OpaquePointer?, _ bytes: UnsafeRawBufferPointer) -> Int {
        if let failure {
            carchive_set_error(
                archive, failure.errno == 0 ? EIO : failure.errno, failure.message ?? "compression failed")
            return -1
        }
        let block = [UInt8](bytes)
        slots.wait()
        queue.async { [state, slots] in
            let inner = state.inner
            defer { slots.signal() }
            guard state.lock.withLock({ state.failure == nil && !state.abandoned }) else { return }
            block.withUnsafeBytes { block in
                var remaining = block
                while !remaining.isEmpty {
                    let count = archive_write_data(inner, remaining.baseAddress, remaining.count)
                    if count <= 0 {
                        state.lock.withLock { state.failure = LibarchiveFailure(inner) }
                        return
                    }
                    remaining = UnsafeRawBufferPointer(rebasing: remaining[count...])
                }
            }
        }
        return bytes.count
    }

    /// How the compressed stream ended, when not cleanly: the operation, what libarchive
    /// said, and whether it was only a warning.
    struct Ending {
        var operation: String
        var failure: LibarchiveFailure
        var isWarning = false
    }

    /// Compresses what waits and ends the compressed stream; returns its first failure, or a
    /// warning of the end, if any.
    func finish() -> Ending? {
        queue.sync {}
        if let failure { return Ending(operation: "archive_write_data", failure: failure) }
        closed = true
        let status = archive_write_close(inner)
        if status < ARCHIVE_WARN { return Ending(operation: "archive_write_close", failure: LibarchiveFailure(inner)) }
        if status == ARCHIVE_WARN {
            return Ending(operation: "archive_write_close", failure: LibarchiveFailure(inner), isWarning: true)
        }
        return nil
    }
}

/// What kept a ``CompressionStage`` from being set up.
struct StageSetupError: Error {
    var operation: String
    var failure: LibarchiveFailure?
}
