import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Lines kept raw, in the order they came, until they can be read: appended through a
/// buffer to a temporary file unlinked as soon as it is open (its space goes with the
/// process, however it ends), so that keeping a line costs a copy. Each line is a record of
/// its length and its bytes; a caller notes where its lines begin and end (``end``) and reads
/// them back with ``lines(in:_:)``. The memory is the buffer's, whatever the lines' number.
///
/// ```swift
/// let spool = try LineSpool()
/// let start = spool.end
/// try spool.append(line)
/// try spool.lines(in: start..<spool.end) { number, line in print(number, line.count); return true }
/// ```
final class LineSpool {
    private let fd: Int32
    private var buffer: [UInt8] = []
    /// Bytes written to the file so far (the buffer's come after them).
    private var written: Int64 = 0
    private static let bufferBytes = 1 << 20

    init() throws(BagError) {
        let directory = FileManager.default.temporaryDirectory.path
        // Named only until it is open: unlinked at once.
        var template = Array((directory + "/bagit-lines-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd >= 0 {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        }
        guard fd >= 0 else { throw Self.failure(errno) }
        self.fd = fd
        buffer.reserveCapacity(Self.bufferBytes)
    }

    deinit { close(fd) }

    /// Where the next line's record begins.
    var end: Int64 { written + Int64(buffer.count) }

    /// Keeps `line` (at most 4 GiB).
    func append(_ line: UnsafeRawBufferPointer) throws(BagError) {
        if buffer.count + 4 + line.count > Self.bufferBytes { try flush() }
        withUnsafeBytes(of: UInt32(line.count).littleEndian) { buffer.append(contentsOf: $0) }
        buffer.append(contentsOf: line)
    }

    /// Calls `body` with each line whose record is in `range` (bounds from ``end``) and its
    /// number, from 1, until it returns `false`.
    func lines(in range: Range<Int64>, _ body: (Int, UnsafeRawBufferPointer) throws -> Bool) throws {
        try flush()
        var chunk = [UInt8](repeating: 0, count: Self.bufferBytes)
        var offset = range.lowerBound
        var number = 0
        while offset < range.upperBound {
            // Whole records from `offset`: a record longer than the chunk gets a chunk of its own.
            let length = try read(&chunk, at: offset, count: Int(min(Int64(chunk.count), range.upperBound - offset)))
            var at = 0
            while at + 4 <= length {
                let size = chunk.withUnsafeBytes {
                    Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
                }
                if at + 4 + size > length {
                    if at == 0 { chunk = [UInt8](repeating: 0, count: 4 + size) }
                    break
                }
                number += 1
                let goOn = try chunk.withUnsafeBytes {
                    try body(number, UnsafeRawBufferPointer(rebasing: $0[at + 4..<at + 4 + size]))
                }
                guard goOn else { return }
                at += 4 + size
            }
            guard at > 0 || chunk.count > length else {
                throw BagError(.io, file: nil, "a manifest's lines kept in a temporary file do not read back whole")
            }
            offset += Int64(at)
        }
    }

    private func flush() throws(BagError) {
        var done = 0
        while done < buffer.count {
            let n = buffer.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(written)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw Self.failure(errno) }
            done += n
            written += Int64(n)
        }
        buffer.removeAll(keepingCapacity: true)
    }

    private func read(_ chunk: inout [UInt8], at offset: Int64, count: Int) throws(BagError) -> Int {
        var done = 0
        while done < count {
            let n = chunk.withUnsafeMutableBytes {
                pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
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
        return done
    }

    private static func failure(_ code: Int32) -> BagError {
        BagError(
            .io, file: nil,
            "could not keep a manifest's lines in a temporary file in \(FileManager.default.temporaryDirectory.path): "
                + String(cString: strerror(code)))
    }
}
