/// The tag files of a bag: `bagit.txt`, `bag-info.txt` and the manifests, as
/// RFC 8493 defines them (sections 2.1.1, 2.2.2, 2.1.3 and 2.2.1).
public enum TagFile {
    /// The versions this reader accepts: 1.0 and the drafts before it
    /// (bagit-python writes 0.97).
    public static let supportedVersions: Set<String> = ["0.93", "0.94", "0.95", "0.96", "0.97", "1.0"]

    /// Splits text into lines ended by LF, CR or CR LF; a last line without an end counts.
    static func lines(_ text: String) -> [Substring] {
        // By UTF-8 code units: CR and LF are ASCII, so every cut falls between scalars (and
        // no grapheme joins a CR or LF to what follows: Unicode always breaks after them).
        let utf8 = text.utf8
        var result: [Substring] = []
        var start = utf8.startIndex
        var index = utf8.startIndex
        while index < utf8.endIndex {
            let byte = utf8[index]
            guard byte == 0x0A || byte == 0x0D else {
                utf8.formIndex(after: &index)
                continue
            }
            result.append(text[start..<index])
            utf8.formIndex(after: &index)
            if byte == 0x0D, index < utf8.endIndex, utf8[index] == 0x0A { utf8.formIndex(after: &index) }
            start = index
        }
        if start < utf8.endIndex { result.append(text[start...]) }
        return result
    }

    /// The character encodings of tag files that a bag may declare in `bagit.txt`
    /// (`Tag-File-Character-Encoding`) and this reader reads: UTF-8, which RFC 8493 asks for,
    /// and the two that bags of earlier drafts were made in (the BagIt conformance suite has
    /// both). `bagit.txt` itself is always UTF-8.
    public enum Encoding: String, Sendable, Hashable {
        case utf8 = "UTF-8"
        case latin1 = "ISO-8859-1"
        /// With a byte-order mark, or big-endian without one.
        case utf16 = "UTF-16"

        /// The encoding a declaration names, in any case and with or without its hyphens.
        init?(declared name: String) {
            switch String(name.uppercased().filter { $0 != "-" && $0 != "_" }) {
            case "UTF8": self = .utf8
            case "ISO88591", "LATIN1": self = .latin1
            case "UTF16": self = .utf16
            default: return nil
            }
        }

        /// Whether `bytes` begin with a UTF-16 byte-order mark.
        static func hasUTF16Mark(_ bytes: some Collection<UInt8>) -> Bool {
            bytes.starts(with: [0xFE, 0xFF]) || bytes.starts(with: [0xFF, 0xFE])
        }
    }

    /// Decodes a tag file's bytes as UTF-8, refusing invalid bytes and a byte-order mark.
    static func decode(_ bytes: [UInt8], file: String) throws(BagError) -> String {
        try decode(bytes, file: file, encoding: .utf8)
    }

    /// Decodes a tag file's bytes in `encoding`: UTF-8 refusing invalid bytes and a
    /// byte-order mark, ISO-8859-1 a byte a character, UTF-16 by its byte-order mark
    /// (big-endian without one) refusing an unpaired surrogate.
    static func decode(_ bytes: [UInt8], file: String, encoding: Encoding) throws(BagError) -> String {
        switch encoding {
        case .utf8:
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
                throw BagError(
                    .malformedTagFile, file: file, "begins with a byte-order mark, which BagIt does not allow")
            }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw BagError(.malformedTagFile, file: file, "is not valid UTF-8")
            }
            return text
        case .latin1:
            return String(String.UnicodeScalarView(bytes.lazy.map { Unicode.Scalar($0) }))
        case .utf16:
            var units = UTF16Units()
            units.append(bytes[...])
            guard units.isComplete, let text = String(validating: units.units, as: UTF16.self) else {
                throw BagError(.malformedTagFile, file: file, "is not valid UTF-16")
            }
            return text
        }
    }

    /// Parses `Label: value` lines; a line that begins with a space or tab continues the
    /// value before it. Labels keep their order and may repeat.
    public static func parseFields(_ bytes: [UInt8], file: String) throws(BagError) -> [(label: String, value: String)]
    {
        try parseFields(bytes, file: file, encoding: .utf8)
    }

    /// ``parseFields(_:file:)`` of a tag file in `encoding`.
    static func parseFields(
        _ bytes: [UInt8], file: String, encoding: Encoding
    ) throws(BagError) -> [(label: String, value: String)] {
        let text = try decode(bytes, file: file, encoding: encoding)
        var fields: [(label: String, value: String)] = []
        // By UTF-8 code units (the colon, space and tab are ASCII): by Character, a colon or a
        // space followed by a combining mark would be no colon and no space.
        for (number, line) in lines(text).enumerated() {
            if line.isEmpty { continue }
            if line.utf8.first == 0x20 || line.utf8.first == 0x09 {
                guard !fields.isEmpty else {
                    throw BagError(.malformedTagFile, file: file, "line \(number + 1) continues no field")
                }
                fields[fields.count - 1].value += " " + line.trimmingBlankBytes(end: false)
                continue
            }
            guard let colon = line.utf8.firstIndex(of: 0x3A) else {
                throw BagError(.malformedTagFile, file: file, "line \(number + 1) is not 'Label: value'")
            }
            let label = line[..<colon].trimmingBlankBytes()
            guard !label.isEmpty else {
                throw BagError(.malformedTagFile, file: file, "line \(number + 1) has an empty label")
            }
            fields.append((String(label), String(line[line.utf8.index(after: colon)...].trimmingBlankBytes())))
        }
        return fields
    }

    /// Formats fields as a tag file, one `Label: value` line each.
    public static func formatFields(_ fields: [(label: String, value: String)]) -> [UInt8] {
        var text = ""
        for (label, value) in fields { text += "\(label): \(value.replacingNewlines())\n" }
        return Array(text.utf8)
    }

    /// The declaration `bagit.txt` of a BagIt 1.0 bag in UTF-8.
    public static let declaration: [UInt8] = Array("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".utf8)

    /// Reads `bagit.txt` and returns the bag's version.
    ///
    /// - Throws: `malformedTagFile` unless it holds exactly the two fields, in order;
    ///   `unsupportedVersion` for a version or encoding this reader does not support.
    public static func parseDeclaration(_ bytes: [UInt8]) throws(BagError) -> String {
        try parseDeclarationAndEncoding(bytes).version
    }

    /// ``parseDeclaration(_:)``, and the encoding of the bag's other tag files.
    static func parseDeclarationAndEncoding(_ bytes: [UInt8]) throws(BagError) -> (version: String, encoding: Encoding)
    {
        let file = "bagit.txt"
        let fields = try parseFields(bytes, file: file)
        // RFC 8493 2.1.1: each line is the label, then the colon (other tag files may pad labels;
        // the declaration may not: the conformance suite's `bagit-with-invalid-whitespace`).
        for (number, line) in lines(try decode(bytes, file: file)).enumerated() {
            guard let colon = line.utf8.firstIndex(of: 0x3A), let last = line[..<colon].utf8.last,
                last == 0x20 || last == 0x09
            else { continue }
            throw BagError(
                .malformedTagFile, file: file,
                "line \(number + 1) has a space before its colon; bagit.txt must hold 'BagIt-Version: M.N' and "
                    + "'Tag-File-Character-Encoding: ENCODING' exactly")
        }
        guard fields.count == 2, fields[0].label == "BagIt-Version", fields[1].label == "Tag-File-Character-Encoding"
        else {
            throw BagError(
                .malformedTagFile, file: file,
                "must hold exactly 'BagIt-Version: M.N' and 'Tag-File-Character-Encoding: UTF-8'")
        }
        let version = fields[0].value
        guard supportedVersions.contains(version) else {
            let known = supportedVersions.sorted().joined(separator: ", ")
            throw BagError(.unsupportedVersion, file: file, "BagIt version \(version) is not supported (only \(known))")
        }
        guard let encoding = Encoding(declared: fields[1].value) else {
            throw BagError(
                .unsupportedVersion, file: file,
                "tag files in \(fields[1].value) are not supported (only UTF-8, ISO-8859-1 and UTF-16)")
        }
        return (version, encoding)
    }

    // MARK: Manifests

    /// Encodes a path for a manifest line: in BagIt 1.0, `%`, LF and CR are percent-encoded.
    public static func encodePath(_ path: String) -> String {
        guard path.utf8.contains(where: { $0 == 0x25 || $0 == 0x0A || $0 == 0x0D }) else { return path }
        var result = ""
        for scalar in path.unicodeScalars {
            switch scalar {
            case "%": result += "%25"
            case "\n": result += "%0A"
            case "\r": result += "%0D"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Decodes a manifest path. BagIt 1.0 decodes `%25`, `%0A` and `%0D`; earlier
    /// versions only `%0A` and `%0D` (they left `%` as it is, as bagit-python does).
    public static func decodePath(_ path: String, version: String) -> String {
        guard path.unicodeScalars.contains("%") else { return path }
        let decodesPercent = version == "1.0"
        // By scalars: a combining mark right after `%0A` must not hide the escape in one Character.
        let scalars = Array(path.unicodeScalars)
        var result = String.UnicodeScalarView()
        var i = 0
        while i < scalars.count {
            if scalars[i] == "%", i + 2 < scalars.count {
                let code = String(String.UnicodeScalarView(scalars[(i + 1)...(i + 2)])).uppercased()
                let decoded: Unicode.Scalar? =
                    switch code {
                    case "0A": "\n"
                    case "0D": "\r"
                    case "25" where decodesPercent: "%"
                    default: nil
                    }
                if let decoded {
                    result.append(decoded)
                    i += 3
                    continue
                }
            }
            result.append(scalars[i])
            i += 1
        }
        return String(result)
    }

    /// Parses a manifest (`checksum path` lines) into path → checksum (lowercased).
    ///
    /// - Throws: `malformedManifest` naming the manifest and the line for a line that is not
    ///   `checksum path`, a checksum of the wrong length, a path that is absolute, has a `..`
    ///   component, or is listed twice.
    public static func parseManifest(
        _ bytes: [UInt8], file: String, algorithm: ChecksumAlgorithm, version: String
    ) throws(BagError) -> [String: String] {
        try parseManifestCountingMarkers(bytes, file: file, algorithm: algorithm, version: version).entries
    }

    /// ``parseManifest(_:file:algorithm:version:)``, and how many lines marked their file
    /// with md5sum's binary-mode `*` (read as the path without it).
    static func parseManifestCountingMarkers(
        _ bytes: [UInt8], file: String, algorithm: ChecksumAlgorithm, version: String, encoding: Encoding = .utf8
    ) throws(BagError) -> (entries: [String: String], binaryMarkers: Int) {
        let text = try decode(bytes, file: file, encoding: encoding)
        var entries: [String: String] = [:]
        var binaryMarkers = 0
        entries.reserveCapacity(bytes.count / (algorithm.hexLength + 16))
        for (number, line) in lines(text).enumerated() {
            guard
                let parsed = try parseManifestLine(
                    line, number: number + 1, file: file, algorithm: algorithm, version: version)
            else { continue }
            if parsed.marksBinary { binaryMarkers += 1 }
            guard entries.updateValue(parsed.checksum, forKey: parsed.path) == nil else {
                throw duplicateManifestLine(parsed.path, number: number + 1, file: file)
            }
        }
        return (entries, binaryMarkers)
    }

    /// A manifest line, parsed.
    struct ManifestLine {
        /// The path, decoded and normalised.
        var path: String
        /// The checksum, lowercased.
        var checksum: String
        /// Whether the path came after md5sum's binary-mode marker (`checksum *path`).
        var marksBinary: Bool
    }

    /// Parses one line of a manifest, `number` counting from 1: the path (decoded and
    /// normalised) and the checksum (lowercased); `nil` for a blank line. A path after one
    /// space and a `*` is read without the `*`: md5sum and its kin write `checksum *path`
    /// for a file read in binary mode (the BagIt conformance suite's
    /// `made-with-md5sum-tools`), and a file name that begins with `*` would be listed
    /// after two spaces, as BagIt tools write every line.
    static func parseManifestLine(
        _ line: Substring, number: Int, file: String, algorithm: ChecksumAlgorithm, version: String
    ) throws(BagError) -> ManifestLine? {
        // By UTF-8 code units: the separators and the checksum's digits are ASCII.
        let isBlank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
        let utf8 = line.utf8
        if utf8.allSatisfy(isBlank) { return nil }
        guard let gap = utf8.firstIndex(where: isBlank) else {
            throw BagError(.malformedManifest, file: file, "line \(number) is not 'checksum path'")
        }
        let checksum = line[..<gap].lowercased()
        guard var pathStart = utf8[gap...].firstIndex(where: { !isBlank($0) }) else {
            throw BagError(.malformedManifest, file: file, "line \(number) names no file")
        }
        let marksBinary = utf8.index(after: gap) == pathStart && utf8[gap] == 0x20 && utf8[pathStart] == 0x2A
        if marksBinary {
            pathStart = utf8.index(after: pathStart)
            guard pathStart < utf8.endIndex else {
                throw BagError(.malformedManifest, file: file, "line \(number) names no file")
            }
        }
        guard checksum.utf8.count == algorithm.hexLength, checksum.utf8.allSatisfy(Self.isHexDigit) else {
            throw BagError(
                .malformedManifest, file: file, "line \(number): '\(checksum)' is not a \(algorithm.rawValue) checksum")
        }
        let path = try normalizedPath(
            decodePath(String(line[pathStart...]), version: version), file: file, line: number)
        // No file name holds a NUL; and the index's look-ups would end the path there.
        guard !path.utf8.contains(0) else {
            throw BagError(.malformedManifest, file: file, "line \(number) names a path with a NUL byte")
        }
        return ManifestLine(path: path, checksum: checksum, marksBinary: marksBinary)
    }

    /// ``parseManifestLine(_:number:file:algorithm:version:)`` of a line that needs none of its
    /// care, parsed from its bytes — ASCII only, no NUL, a checksum of `algorithm`'s length in
    /// hex digits, a path with no `%` (nothing to decode) that is relative, without an empty,
    /// `.` or `..` component (nothing to normalise): what that function returns for it. `nil`
    /// for any other line (blank, malformed, or one of those cares), which that function
    /// parses or refuses. For the millions of lines a payload manifest can have.
    static func parseASCIIManifestLine(_ line: UnsafeRawBufferPointer, algorithm: ChecksumAlgorithm) -> ManifestLine? {
        scanASCIIManifestLine(line, algorithm: algorithm).map {
            ManifestLine(
                path: String(decoding: $0.path, as: UTF8.self), checksum: $0.checksum.hex, marksBinary: $0.marksBinary)
        }
    }

    /// ``parseASCIIManifestLine(_:algorithm:)`` without making strings: the checksum's bytes,
    /// and the path's bytes in `line` — what a read indexes a line by, a line at a time.
    static func scanASCIIManifestLine(
        _ line: UnsafeRawBufferPointer, algorithm: ChecksumAlgorithm
    ) -> (checksum: ManifestChecksum, path: UnsafeRawBufferPointer, marksBinary: Bool)? {
        let isBlank = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        let count = line.count
        var gap = 0
        while gap < count, !isBlank(line[gap]) { gap += 1 }
        guard gap == algorithm.hexLength, gap < count else { return nil }
        var start = gap + 1
        while start < count, isBlank(line[start]) { start += 1 }
        guard start < count else { return nil }
        let marksBinary = start == gap + 1 && line[gap] == 0x20 && line[start] == 0x2A
        if marksBinary { start += 1 }
        let path = UnsafeRawBufferPointer(rebasing: line[start...])
        guard !path.isEmpty, path.allSatisfy({ $0 != 0 && $0 < 0x80 && $0 != 0x25 }), isNormal(bytes: path),
            let checksum = ManifestChecksum(hex: UnsafeRawBufferPointer(rebasing: line[0..<gap]))
        else { return nil }
        return (checksum, path, marksBinary)
    }

    /// Parses one line of `fetch.txt` (RFC 8493 2.2.3: `url length path`), `number` counting
    /// from 1: the path, decoded as a manifest's and normalised; `nil` for a blank line.
    ///
    /// - Throws: `malformedTagFile` naming the line for a line that is not `url length path`,
    ///   a length that is neither a count of bytes (digits only) nor `-`, and a path that is absolute, has a `..`
    ///   component or is not under `data/`.
    static func parseFetchLine(_ line: Substring, number: Int, version: String) throws(BagError) -> String? {
        let file = "fetch.txt"
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        if line.allSatisfy(isBlank) { return nil }
        var rest = line.drop(while: isBlank)
        let url = rest.prefix { !isBlank($0) }
        rest = rest.dropFirst(url.count).drop(while: isBlank)
        let length = rest.prefix { !isBlank($0) }
        rest = rest.dropFirst(length.count).drop(while: isBlank)
        guard !url.isEmpty, !length.isEmpty, !rest.isEmpty else {
            throw BagError(.malformedTagFile, file: file, "line \(number) is not 'url length path'")
        }
        // Digits only: Int64 alone would take "-5" and "+5".
        guard length == "-" || length.utf8.allSatisfy({ (0x30...0x39).contains($0) }) && Int64(length) != nil else {
            throw BagError(.malformedTagFile, file: file, "line \(number): '\(length)' is not a length (bytes, or -)")
        }
        let path: String
        do {
            path = try normalizedPath(decodePath(String(rest), version: version), file: file, line: number)
        } catch {
            throw BagError(.malformedTagFile, file: file, error.reason)
        }
        guard path.hasBytePrefix("data/"), !path.utf8.contains(0) else {
            throw BagError(.malformedTagFile, file: file, "line \(number) lists \(path), which is not under data/")
        }
        return path
    }

    /// The error for a manifest line that lists a path again.
    static func duplicateManifestLine(_ path: String, number: Int, file: String) -> BagError {
        BagError(.malformedManifest, file: file, "line \(number) lists \(path) a second time")
    }

    /// Formats a manifest, sorted by path.
    public static func formatManifest(_ entries: [(path: String, checksum: String)]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(entries.count * 100)
        for (path, checksum) in entries.sorted(by: { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }) {
            bytes += checksum.utf8
            bytes += [0x20, 0x20]
            bytes += encodePath(path).utf8
            bytes.append(0x0A)
        }
        return bytes
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte)
    }

    /// A manifest path with `.` components dropped; refuses empty, absolute and `..` paths.
    static func normalizedPath(_ path: String, file: String, line: Int) throws(BagError) -> String {
        if isNormal(path) { return path }
        if path.utf8.first == 0x2F {
            throw BagError(.malformedManifest, file: file, "line \(line) names an absolute path, \(path)")
        }
        var components: [Substring] = []
        for bytes in path.utf8.split(separator: 0x2F, omittingEmptySubsequences: true) {
            let component = Substring(bytes)
            if bytes.elementsEqual([0x2E]) { continue }
            if bytes.elementsEqual([0x2E, 0x2E]) {
                throw BagError(.malformedManifest, file: file, "line \(line) names a path with '..', \(path)")
            }
            components.append(component)
        }
        guard !components.isEmpty else { throw BagError(.malformedManifest, file: file, "line \(line) names no file") }
        return components.joined(separator: "/")
    }

    /// Whether a path is already relative and has no empty, `.` or `..` component.
    package static func isNormal(_ path: String) -> Bool { isNormal(bytes: path.utf8) }

    /// Whether a path, by its UTF-8 bytes, is already relative and has no empty, `.` or `..`
    /// component.
    static func isNormal(bytes path: some Sequence<UInt8>) -> Bool {
        var componentLength = 0
        var dots = 0
        for byte in path {
            if byte == 0x2F {
                if componentLength == 0 || componentLength == dots && dots <= 2 { return false }
                componentLength = 0
                dots = 0
            } else {
                componentLength += 1
                if byte == 0x2E { dots += 1 }
            }
        }
        return componentLength > 0 && !(componentLength == dots && dots <= 2)
    }
}

extension Substring {
    /// Without the spaces and tabs at its start (and at its end, unless `end` is false), by
    /// UTF-8 code units: a space followed by a combining mark is still a space.
    func trimmingBlankBytes(end: Bool = true) -> Substring {
        let utf8 = self.utf8
        let isBlank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
        guard let first = utf8.firstIndex(where: { !isBlank($0) }) else { return self[endIndex...] }
        guard end, let last = utf8.lastIndex(where: { !isBlank($0) }) else { return self[first...] }
        // After the last byte that is not blank comes a blank (ASCII) or the end: a scalar boundary.
        return self[first..<utf8.index(after: last)]
    }
}

/// UTF-16 code units from bytes that come in chunks: the byte order is taken from a
/// byte-order mark at the start (dropped), big-endian without one.
struct UTF16Units {
    private(set) var units: [UInt16] = []
    private var bigEndian = true
    private var started = false
    private var odd: UInt8?

    /// Whether every byte so far belongs to a whole code unit.
    var isComplete: Bool { odd == nil }

    /// Takes the next bytes; whole code units go to ``units``.
    mutating func append(_ bytes: some Collection<UInt8>) {
        for byte in bytes {
            guard let first = odd else {
                odd = byte
                continue
            }
            odd = nil
            if !started {
                started = true
                if first == 0xFE && byte == 0xFF { continue }
                if first == 0xFF && byte == 0xFE {
                    bigEndian = false
                    continue
                }
            }
            units.append(Self.unit(first, byte, bigEndian: bigEndian))
        }
    }

    /// Takes out the code units so far but a high surrogate at their end, which waits for its
    /// pair (the state of the stream stays). An unpaired surrogate among them stays one: the
    /// decoding that follows replaces it.
    mutating func takeWhole() -> [UInt16] {
        var whole = units
        units = []
        if let last = whole.last, UTF16.isLeadSurrogate(last) {
            units = [last]
            whole.removeLast()
        }
        return whole
    }

    static func unit(_ a: UInt8, _ b: UInt8, bigEndian: Bool) -> UInt16 {
        bigEndian ? UInt16(a) << 8 | UInt16(b) : UInt16(b) << 8 | UInt16(a)
    }
}
