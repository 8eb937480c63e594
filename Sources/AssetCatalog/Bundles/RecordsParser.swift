import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a records file (``BundleRecords``) as its bytes come, in pieces of any size, and
/// hands its entries on in batches — so that memory does not grow with the number of assets.
///
/// The file is one JSON object whose `assets` list holds the entries. The parser finds where
/// each value begins and ends (strings, escapes, nesting), and `JSONDecoder` decodes the
/// entries, a batch at a time, and the other values; what `JSONDecoder` would refuse in the
/// whole file, one of these steps refuses. Keys other than `format`, `version` and `assets`
/// are checked and ignored, as the decoder of the whole file ignored them.
struct RecordsParser {
    /// The most bytes one entry (or another top-level value) may have.
    static let maxValueBytes = 1 << 24
    /// Entries decoded at a time.
    static let batchSize = 1_000

    private enum Expect {
        case objectStart, firstKey, key, colon, value, commaOrEnd
        case listStart, firstElement, element, elementCommaOrEnd, trailing
    }

    /// Where a value being scanned has got to (it may span pieces).
    private struct ValueScan {
        var depth = 0
        var inString = false
        var escaped = false
        /// Hex digits still to come of a `\u` escape, and the code unit so far.
        var hexLeft = 0
        var unit: UInt16 = 0
        /// A `\u` escape of a high surrogate ended: its low surrogate's escape must follow.
        var expectsLow = false
    }

    private var expect = Expect.objectStart
    /// Bytes not consumed yet: a value that has begun, or nothing.
    private var buffer: [UInt8] = []
    private var position = 0
    private var valueStart: Int?
    private var scan = ValueScan()
    private var key: String?
    /// Whether the current top-level value is the `assets` list.
    private var inAssets = false
    private(set) var format: String?
    private(set) var version: Int?
    private var sawAssets = false
    /// `[` and the encoded entries of the batch being gathered, comma-separated.
    private var batch: [UInt8] = [0x5B]
    private var batchCount = 0
    /// Entries handed on so far.
    private(set) var count = 0
    private let emit: ([BundleRecords.Entry]) throws -> Void
    private let decoder = BundleRecords.decoder()

    /// `emit` takes the entries, a batch at a time, in the file's order.
    init(emit: @escaping ([BundleRecords.Entry]) throws -> Void) {
        self.emit = emit
    }

    /// Takes the next bytes of the file.
    mutating func feed(_ bytes: UnsafeRawBufferPointer) throws {
        buffer.append(contentsOf: bytes)
        try advance()
        // Keep only what a value still needs.
        let keep = valueStart ?? position
        if keep > 0 {
            buffer.removeSubrange(0..<keep)
            position -= keep
            if valueStart != nil { valueStart = 0 }
        }
    }

    /// The file has ended: hands on the last batch and checks the format and version.
    mutating func finish() throws {
        guard expect == .trailing else {
            throw Self.failure(expect == .objectStart && buffer.isEmpty ? "it is empty" : "it ends too early")
        }
        try flush()
        guard let format, let version else { throw Self.failure("it has no \"format\" and \"version\"") }
        guard sawAssets else { throw Self.failure("it has no \"assets\" list") }
        guard format == BundleRecords.formatName, version == 1 else {
            throw BagError(
                .unsupportedVersion, file: BundleRecords.fileName,
                "is \(format) version \(version); this assetcat reads \(BundleRecords.formatName) version 1")
        }
    }

    private static func failure(_ reason: String) -> BagError {
        BagError(.malformedTagFile, file: BundleRecords.fileName, "cannot be read: \(reason)")
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    private mutating func advance() throws {
        while position < buffer.count {
            let byte = buffer[position]
            if valueStart == nil && Self.isSpace(byte) {
                position += 1
                continue
            }
            switch expect {
            case .objectStart:
                guard byte == 0x7B else { throw Self.failure("it is not a JSON object") }  // {
                position += 1
                expect = .firstKey
            case .firstKey, .key:
                if valueStart == nil {
                    if expect == .firstKey && byte == 0x7D {  // }
                        position += 1
                        expect = .trailing
                        continue
                    }
                    guard byte == 0x22 else { throw Self.failure("a key is not a string") }
                }
                guard let bytes = try scanValue() else { return }
                key = try decodeValue(String.self, bytes)
                expect = .colon
            case .colon:
                guard byte == 0x3A else { throw Self.failure("a key is not followed by ':'") }
                position += 1
                if key == "assets" {
                    guard !sawAssets else { throw Self.failure("it has two \"assets\" lists") }
                    sawAssets = true
                    expect = .listStart
                } else {
                    expect = .value
                }
            case .value:
                guard let bytes = try scanValue() else { return }
                switch key {
                case "format": format = try decodeValue(String.self, bytes)
                case "version": version = try decodeValue(Int.self, bytes)
                default: try checkValue(bytes)
                }
                expect = .commaOrEnd
            case .commaOrEnd:
                position += 1
                if byte == 0x2C {  // ,
                    expect = .key
                } else if byte == 0x7D {  // }
                    expect = .trailing
                } else {
                    throw Self.failure("a value is not followed by ',' or '}'")
                }
            case .listStart:
                guard byte == 0x5B else { throw Self.failure("\"assets\" is not a list") }  // [
                position += 1
                expect = .firstElement
            case .firstElement, .element:
                inAssets = true
                if valueStart == nil && expect == .firstElement && byte == 0x5D {  // ]
                    position += 1
                    expect = .commaOrEnd
                    continue
                }
                guard let bytes = try scanValue() else { return }
                if batchCount > 0 { batch.append(0x2C) }
                batch.append(contentsOf: bytes)
                batchCount += 1
                if batchCount == Self.batchSize { try flush() }
                expect = .elementCommaOrEnd
            case .elementCommaOrEnd:
                position += 1
                if byte == 0x2C {
                    expect = .element
                } else if byte == 0x5D {
                    inAssets = false
                    expect = .commaOrEnd
                } else {
                    throw Self.failure("entry \(count + batchCount) is not followed by ',' or ']'")
                }
            case .trailing:
                throw Self.failure("there is more after the end of its JSON object")
            }
        }
    }

    /// Scans the value that begins at ``valueStart`` (or at the current byte); returns its
    /// bytes once it is complete, `nil` while more are needed.
    private mutating func scanValue() throws -> ArraySlice<UInt8>? {
        if valueStart == nil {
            valueStart = position
            scan = ValueScan()
        }
        let start = valueStart!
        while position < buffer.count {
            let byte = buffer[position]
            if scan.inString {
                // JSON escapes them; `JSONDecoder` lets them through.
                if byte < 0x20 { throw Self.failure("\(subject) holds a control character that is not escaped") }
                if scan.hexLeft > 0 {
                    try scanHexDigit(byte)
                } else if scan.escaped {
                    // Checked here too: `JSONDecoder` decodes only the last of a key's values.
                    scan.escaped = false
                    if byte == 0x75 {  // u
                        scan.hexLeft = 4
                        scan.unit = 0
                    } else if scan.expectsLow || !Self.escapes.contains(byte) {
                        throw Self.failure(
                            scan.expectsLow
                                ? "\(subject) holds an unpaired surrogate escape"
                                : "\(subject) holds an escape that JSON does not have")
                    }
                } else if scan.expectsLow && byte != 0x5C {
                    throw Self.failure("\(subject) holds an unpaired surrogate escape")
                } else if byte == 0x5C {  // \
                    scan.escaped = true
                } else if byte == 0x22 {
                    scan.inString = false
                    if scan.depth == 0 { return try take(start, end: position + 1) }
                }
            } else {
                // Outside strings JSON has no control characters but its blanks (`JSONDecoder`
                // reads a number through NULs).
                if byte < 0x20 && byte != 0x09 && byte != 0x0A && byte != 0x0D {
                    throw Self.failure("\(subject) holds a control character outside a string")
                }
                switch byte {
                case 0x22: scan.inString = true
                case 0x7B, 0x5B: scan.depth += 1
                case 0x7D, 0x5D:
                    // A scalar ends before the bracket that closes what holds it.
                    if scan.depth == 0 { return try take(start, end: position) }
                    scan.depth -= 1
                    if scan.depth == 0 { return try take(start, end: position + 1) }
                case 0x2C, 0x20, 0x0A, 0x0D, 0x09:
                    if scan.depth == 0 { return try take(start, end: position) }
                default: break
                }
            }
            position += 1
            if position - start > Self.maxValueBytes {
                throw Self.failure(
                    inAssets
                        ? "entry \(count + batchCount + 1) is longer than \(Self.maxValueBytes) bytes"
                        : "a value is longer than \(Self.maxValueBytes) bytes")
            }
        }
        return nil
    }

    /// The characters JSON escapes with a backslash, but for `u` (RFC 8259): `"\/bfnrt`.
    private static let escapes: Set<UInt8> = [0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74]

    /// Takes a hex digit of a `\u` escape; once it has four, checks that surrogates pair.
    private mutating func scanHexDigit(_ byte: UInt8) throws {
        let digit: UInt8
        switch byte {
        case 0x30...0x39: digit = byte - 0x30
        case 0x41...0x46: digit = byte - 0x41 + 10
        case 0x61...0x66: digit = byte - 0x61 + 10
        default: throw Self.failure("\(subject) holds a \\u escape without four hex digits")
        }
        scan.unit = scan.unit << 4 | UInt16(digit)
        scan.hexLeft -= 1
        guard scan.hexLeft == 0 else { return }
        let isLow = UTF16.isTrailSurrogate(scan.unit)
        if scan.expectsLow != isLow { throw Self.failure("\(subject) holds an unpaired surrogate escape") }
        scan.expectsLow = UTF16.isLeadSurrogate(scan.unit)
    }

    /// The value from `start` to `end`, once it is complete: UTF-8, as JSON is (RFC 8259).
    /// `JSONDecoder` decodes some bytes that are not as U+FFFD, and would rename an asset.
    private mutating func take(_ start: Int, end: Int) throws -> ArraySlice<UInt8> {
        position = end
        valueStart = nil
        let value = buffer[start..<end]
        guard Self.isUTF8(value) else { throw Self.failure("\(subject) is not valid UTF-8") }
        return value
    }

    /// What the value being scanned is, for an error.
    private var subject: String {
        switch expect {
        case .firstKey, .key: "a key"
        case .firstElement, .element: "entry \(count + batchCount + 1)"
        default: "the value of \"\(key ?? "")\""
        }
    }

    private static func isUTF8(_ bytes: ArraySlice<UInt8>) -> Bool {
        if bytes.allSatisfy({ $0 < 0x80 }) { return true }
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    /// Decodes the batch gathered and hands it on.
    private mutating func flush() throws {
        guard batchCount > 0 else { return }
        batch.append(0x5D)
        let first = count + 1
        let entries: [BundleRecords.Entry]
        do {
            entries = try batch.withUnsafeBytes { buffer in
                try decoder.decode(
                    [BundleRecords.Entry].self,
                    from: Data(
                        bytesNoCopy: UnsafeMutableRawPointer(mutating: buffer.baseAddress!), count: buffer.count,
                        deallocator: .none))
            }
        } catch {
            throw Self.failure(Self.describe(error, firstEntry: first))
        }
        count += entries.count
        batch.removeAll(keepingCapacity: true)
        batch.append(0x5B)
        batchCount = 0
        try emit(entries)
    }

    private func decodeValue<T: Decodable>(_ type: T.Type, _ bytes: ArraySlice<UInt8>) throws -> T {
        do {
            return try decoder.decode(type, from: Data(bytes))
        } catch {
            throw Self.failure(Self.describe(error, firstEntry: nil))
        }
    }

    /// A value of a key this reader ignores must still be JSON.
    private func checkValue(_ bytes: ArraySlice<UInt8>) throws {
        do {
            _ = try JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed)
        } catch {
            throw Self.failure("the value of \"\(key ?? "")\" is not JSON")
        }
    }

    /// What went wrong, in a line: which entry, which field, why.
    static func describe(_ error: any Error, firstEntry: Int?) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        let context: DecodingError.Context
        var reason: String
        switch error {
        case .keyNotFound(let key, let c):
            context = c
            reason = "has no \"\(key.stringValue)\""
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .dataCorrupted(let c):
            context = c
            reason = c.debugDescription
        @unknown default:
            return "\(error)"
        }
        var path = context.codingPath
        var subject = ""
        if let firstEntry, let index = path.first?.intValue {
            subject = "entry \(firstEntry + index)"
            path.removeFirst()
        }
        let field = path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        if !field.isEmpty { subject += (subject.isEmpty ? "" : " ") + String(field.drop { $0 == "." }) }
        if case .keyNotFound = error { return subject.isEmpty ? "it \(reason)" : "\(subject) \(reason)" }
        return subject.isEmpty ? reason : "\(subject): \(reason)"
    }
}

/// Our records file as a bag read streams it (``BagReader/read(at:options:sink:tagFileRead:tagSink:progress:isCancelled:)``):
/// written to an unnamed temporary file — created, then unlinked at once, so that nothing
/// stays behind, even after a crash — and read from there into an ``ImportScratch``, on
/// another thread, while the payload that follows is read.
final class RecordsFile: BagPayloadSink, @unchecked Sendable {
    /// The file's path in the bundle.
    let path: String
    private let fd: Int32
    private var buffer: [UInt8] = []
    private let finished: (RecordsFile) -> Void

    init(path: String, directory: String, finished: @escaping (RecordsFile) -> Void) throws {
        self.path = path
        self.finished = finished
        var template = Array((directory + "/records-XXXXXX").utf8CString)
        fd = mkstemp(&template)
        guard fd >= 0 else {
            throw CatalogError(
                .io, "Could not create a temporary file in \(directory): \(ContentStore.errnoText())", path: directory)
        }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }  // the file lives on through fd only
        buffer.reserveCapacity(1 << 16)
    }

    deinit { close(fd) }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 16 { try flush() }
    }

    func finish(digests: [ChecksumAlgorithm: String]) throws {
        try flush()
        finished(self)
    }

    private func flush() throws {
        try buffer.withUnsafeBytes { try ContentStore.writeAll(fd, $0, path: "a temporary copy of \(path)") }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Reads the file's entries into `scratch`, a batch at a time, and seals it. Throws
    /// ``BagError`` when the file is not a records file this catalog reads.
    func load(into scratch: ImportScratch, isCancelled: () -> Bool) throws {
        var parser = RecordsParser { try scratch.add($0) }
        var chunk = [UInt8](repeating: 0, count: 1 << 18)
        var offset: off_t = 0
        while true {
            if isCancelled() { throw CatalogError(.cancelled, "The import was stopped; nothing was imported") }
            let count = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            guard count >= 0 else {
                if errno == EINTR { continue }
                throw CatalogError(.io, "Could not read a temporary copy of \(path): \(ContentStore.errnoText())")
            }
            if count == 0 { break }
            offset += off_t(count)
            try chunk.withUnsafeBytes { try parser.feed(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        }
        try parser.finish()
        try scratch.seal()
    }

    /// Gives a bag read a ``RecordsFile`` for the first records file it meets, and keeps it.
    final class Tap: @unchecked Sendable {
        let directory: String
        /// Called on the reading thread once the file is read.
        private let read: (RecordsFile) -> Void
        private(set) var file: RecordsFile?

        init(directory: String, read: @escaping (RecordsFile) -> Void) {
            self.directory = directory
            self.read = read
        }

        /// A `tagSink` for the bag read.
        func sink(_ name: String, _ path: String) throws -> (any BagPayloadSink)? {
            guard name == BundleRecords.fileName, file == nil else { return nil }
            file = try RecordsFile(path: path, directory: directory, finished: read)
            return file
        }
    }
}
