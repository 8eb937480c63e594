import Testing

@testable import BagIt

/// The lines of a payload manifest that need none of the whole parse's care are parsed from
/// their bytes, and read exactly as the whole parse reads them; every other line is left to it.
@Suite struct ASCIIManifestLineTests {
    static let sha = String(repeating: "ab", count: 32)

    /// What the whole parse makes of `line`, or its error.
    func parsed(_ line: String, _ algorithm: ChecksumAlgorithm) -> String {
        do {
            guard
                let parsed = try TagFile.parseManifestLine(
                    Substring(line), number: 1, file: "manifest.txt", algorithm: algorithm, version: "1.0")
            else { return "blank" }
            return "\(parsed.checksum) [\(parsed.path)] \(parsed.marksBinary)"
        } catch {
            return "\(error)"
        }
    }

    /// What the parse of bytes makes of `line`, if it takes it.
    func fast(_ line: String, _ algorithm: ChecksumAlgorithm) -> String? {
        Array(line.utf8).withUnsafeBytes { bytes in
            TagFile.parseASCIIManifestLine(bytes, algorithm: algorithm).map {
                "\($0.checksum) [\($0.path)] \($0.marksBinary)"
            }
        }
    }

    @Test func theLinesItTakesReadAsTheWholeParseReadsThem() {
        let upper = Self.sha.uppercased()
        let taken = [
            "\(Self.sha)  data/a.txt", "\(upper)  data/a.txt", "\(Self.sha)\tdata/a b.txt", "\(Self.sha) *data/a.txt",
            "\(Self.sha)  *star.txt", "\(Self.sha) \t data/trailing  ", "\(Self.sha)  .hidden/x",
            "\(Self.sha)  a/...", "\(Self.sha)  data/a.txt\t",
        ]
        let left = [
            "", "   ", "\t", "\(Self.sha)", "\(Self.sha)  ", "\(Self.sha) *", "\(Self.sha)data/a.txt",
            "\(Self.sha.dropLast())  data/a.txt", "\(Self.sha)0  data/a.txt", "\(Self.sha.dropLast())g  data/a.txt",
            " \(Self.sha)  data/a.txt", "\(Self.sha)  data/50%25.txt", "\(Self.sha)  data/a%0Ab",
            "\(Self.sha)  ./data/a.txt", "\(Self.sha)  data//a.txt", "\(Self.sha)  data/../a.txt",
            "\(Self.sha)  data/.", "\(Self.sha)  data/", "\(Self.sha)  /etc/passwd", "\(Self.sha)  data/a\u{0}b",
            "\(Self.sha)  data/caf\u{E9}.txt", "\u{FEFF}\(Self.sha)  data/a.txt", "\(Self.sha)\u{A0} data/a.txt",
        ]
        for line in taken {
            #expect(fast(line, .sha256) != nil, "\(line)")
            #expect(fast(line, .sha256) == parsed(line, .sha256), "\(line)")
        }
        for line in left {
            #expect(fast(line, .sha256) == nil, "\(line)")
        }
        // A checksum of another algorithm's length is left to the whole parse, which refuses it.
        #expect(fast("\(Self.sha)  data/a.txt", .sha512) == nil)
        #expect(fast(String(repeating: "0", count: 32) + "  data/a.txt", .md5) != nil)
    }
}
