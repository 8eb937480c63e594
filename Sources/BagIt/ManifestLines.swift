/// Counts the lines of a stream of bytes, chunk by chunk (ended by LF, CR or CR LF, as
/// ``LineSplitter`` splits them), to refuse one that is too long as soon as it is.
struct LineCount {
    /// The line being read, from 1.
    private(set) var number = 1
    private var length = 0
    private var afterCR = false

    /// Counts `chunk`'s bytes; throws `tooLong(number)` once a line has more than `limit`.
    mutating func count(
        _ chunk: UnsafeRawBufferPointer, limit: Int, tooLong: (Int) -> BagError
    ) throws(BagError) {
        for byte in chunk {
            switch byte {
            case 0x0A:
                if !afterCR { number += 1 }  // after CR, the CR ended the line
                afterCR = false
                length = 0
            case 0x0D:
                number += 1
                afterCR = true
                length = 0
            default:
                afterCR = false
                length += 1
                if length > limit { throw tooLong(number) }
            }
        }
    }
}

/// The lines of a manifest that comes in chunks: its bytes as they are or, when it begins
/// with a UTF-16 byte-order mark, its text turned into UTF-8 as it streams. UTF-16 with an
/// unpaired surrogate, or an odd number of bytes, is ``failure``: no line follows it.
struct ManifestStream {
    private var lines = LineSplitter()
    /// The first byte, while only one has come: the byte-order mark takes two.
    private var head: [UInt8] = []
    private var decided = false
    private var utf16: UTF16Units?
    /// Whether the manifest began with a UTF-16 byte-order mark.
    var isUTF16: Bool { utf16 != nil }
    /// Why the manifest's UTF-16 cannot be read, naming `file`.
    private(set) var failure: BagError?
    /// The bytes of the line not yet ended.
    var pendingBytes: Int { lines.pendingBytes }
    let file: String

    init(file: String) { self.file = file }

    /// Calls `line` with each line that `chunk` ends, and whether the manifest is in UTF-16.
    mutating func split(
        _ chunk: UnsafeRawBufferPointer, _ line: (UnsafeRawBufferPointer, _ isUTF16: Bool) throws -> Void
    ) rethrows {
        guard failure == nil else { return }
        if !decided {
            guard head.count + chunk.count >= 2 else {
                head += chunk
                return
            }
            decided = true
            let start = head + chunk.prefix(2 - head.count)
            if TagFile.Encoding.hasUTF16Mark(start) { utf16 = UTF16Units() }
            if !head.isEmpty {
                let first = head
                head = []
                try first.withUnsafeBytes { try take($0, line) }
            }
        }
        try take(chunk, line)
    }

    /// Calls `line` with the last line, if it had no end.
    mutating func finish(_ line: (UnsafeRawBufferPointer, _ isUTF16: Bool) throws -> Void) rethrows {
        guard failure == nil else { return }
        if !decided {
            decided = true
            let first = head
            head = []
            try first.withUnsafeBytes { try take($0, line) }
        }
        // An odd byte, or a high surrogate its pair never followed.
        if let utf16, !utf16.isComplete || !utf16.units.isEmpty {
            failure = BagError(.malformedTagFile, file: file, "is not valid UTF-16")
            return
        }
        let isUTF16 = self.isUTF16
        try lines.finish { try line($0, isUTF16) }
    }

    private mutating func take(
        _ chunk: UnsafeRawBufferPointer, _ line: (UnsafeRawBufferPointer, _ isUTF16: Bool) throws -> Void
    ) rethrows {
        guard utf16 != nil else {
            try lines.split(chunk) { try line($0, false) }
            return
        }
        utf16!.append(chunk)
        guard let text = String(validating: utf16!.takeWhole(), as: UTF16.self) else {
            failure = BagError(.malformedTagFile, file: file, "is not valid UTF-16")
            lines = LineSplitter()
            return
        }
        try Array(text.utf8).withUnsafeBytes { bytes in try lines.split(bytes) { try line($0, true) } }
    }
}

/// Splits a stream of bytes, chunk by chunk, into lines ended by LF, CR or CR LF (as
/// ``TagFile`` splits text); a last line without an end counts.
struct LineSplitter {
    /// The start of a line that the last chunk did not end.
    private var partial: [UInt8] = []
    /// The bytes of that line so far.
    var pendingBytes: Int { partial.count }
    /// The last chunk ended with CR: an LF that begins the next one ends nothing.
    private var afterCR = false

    /// Calls `line` with each line that `chunk` ends.
    mutating func split(_ chunk: UnsafeRawBufferPointer, _ line: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        var start = 0
        if afterCR, chunk.first == 0x0A { start = 1 }
        afterCR = false
        var i = start
        while i < chunk.count {
            let byte = chunk[i]
            guard byte == 0x0A || byte == 0x0D else {
                i += 1
                continue
            }
            let piece = UnsafeRawBufferPointer(rebasing: chunk[start..<i])
            if partial.isEmpty {
                try line(piece)
            } else {
                partial.append(contentsOf: piece)
                try partial.withUnsafeBytes { try line($0) }
                partial.removeAll(keepingCapacity: true)
            }
            i += 1
            if byte == 0x0D {
                if i < chunk.count {
                    if chunk[i] == 0x0A { i += 1 }
                } else {
                    afterCR = true
                }
            }
            start = i
        }
        partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[start...]))
    }

    /// Calls `line` with the last line, if it had no end.
    mutating func finish(_ line: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        if !partial.isEmpty { try partial.withUnsafeBytes { try line($0) } }
        partial = []
    }
}
