import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Bytes kept as they came until they can be read: appended through a buffer to a temporary
/// file unlinked as soon as it is open (its space goes with the process, however it ends), so
/// that keeping them costs a copy. A caller notes where its bytes begin and end (``end``) and
/// reads them back, a chunk at a time, with ``chunks(in:_:)``. The memory is the buffer's,
/// whatever the bytes' number.
///
/// A read keeps each payload manifest's bytes here, raw: the lines that wait until the
/// payload is known are split from them then, and a tag manifest that lists the manifest is
/// checked against them, in the algorithms it turns out to need.
///
/// ```swift
/// let spool = try ByteSpool()
/// let start = spool.end
/// try spool.append(chunk)
/// try spool.chunks(in: start..<spool.end) { bytes in print(bytes.count); return true }
/// ```
final class ByteSpool {
    private let fd: Int32
    /// The bytes appended and not written yet: the first ``buffered`` of them.
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkBytes, alignment: 16)
    private var buffered = 0
    /// Bytes written to the file so far (the buffer's come after them).
    private var written: Int64 = 0
    static let chunkBytes = 1 << 20

    init() throws(BagError) {
        let directory = FileManager.default.temporaryDirectory.path
        // Named only until it is open: unlinked at once.
        var template = Array((directory + "/bagit-spool-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd >= 0 {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        }
        guard fd >= 0 else { throw Self.failure(errno) }
        self.fd = fd
    }

    deinit {
        close(fd)
        buffer.deallocate()
    }

    /// Where the next bytes appended go.
    var end: Int64 { written + Int64(buffered) }

    /// Keeps `bytes`, after those appended before.
    func append(_ bytes: UnsafeRawBufferPointer) throws(BagError) {
        if buffered + bytes.count > Self.chunkBytes { try flush() }
        if bytes.count >= Self.chunkBytes {
            try write(bytes)
        } else if let base = bytes.baseAddress {
            (buffer.baseAddress! + buffered).copyMemory(from: base, byteCount: bytes.count)
            buffered += bytes.count
        }
    }

    /// Calls `body` with the bytes in `range` (bounds from ``end``), in order, in chunks of at
    /// most ``chunkBytes``, until it returns `false`.
    func chunks(in range: Range<Int64>, _ body: (UnsafeRawBufferPointer) throws -> Bool) throws {
        try flush()
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkBytes, alignment: 16)
        defer { chunk.deallocate() }
        var offset = range.lowerBound
        while offset < range.upperBound {
            let count = Int(min(Int64(Self.chunkBytes), range.upperBound - offset))
            try read(into: UnsafeMutableRawBufferPointer(rebasing: chunk[0..<count]), at: offset)
            guard try body(UnsafeRawBufferPointer(rebasing: chunk[0..<count])) else { return }
            offset += Int64(count)
        }
    }

    private func flush() throws(BagError) {
        guard buffered > 0 else { return }
        try write(UnsafeRawBufferPointer(rebasing: buffer[0..<buffered]))
        buffered = 0
    }

    private func write(_ bytes: UnsafeRawBufferPointer) throws(BagError) {
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(written))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw Self.failure(errno) }
            done += n
            written += Int64(n)
        }
    }

    private func read(into chunk: UnsafeMutableRawBufferPointer, at offset: Int64) throws(BagError) {
        var done = 0
        while done < chunk.count {
            let n = pread(fd, chunk.baseAddress! + done, chunk.count - done, off_t(offset) + off_t(done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw n == 0
                    ? BagError(
                        .io, file: nil,
                        "could not read back a manifest's lines kept in a temporary file: it ended early")
                    : Self.failure(errno)
            }
            done += n
        }
    }

    private static func failure(_ code: Int32) -> BagError {
        BagError(
            .io, file: nil,
            "could not keep a manifest's lines in a temporary file in \(FileManager.default.temporaryDirectory.path): "
                + String(cString: strerror(code)))
    }
}
