/// A manifest line's checksum as the bytes its hex digits spell — 32 for SHA-256, at most 64
/// (SHA-512) — held inline. The read's index keeps it as a blob, half the size of its hex,
/// and a line on its way there costs no allocation for it: a manifest can have millions.
///
/// ```swift
/// let checksum = ManifestChecksum(hex: "9f86d081…")!   // either case
/// checksum.hex                                       // "9f86d081…", lowercase
/// checksum.matches(hex: fileDigest)                  // against a file's lowercase hex
/// ```
struct ManifestChecksum: Sendable, Equatable {
    /// The bytes, in the first ``count`` of these 64.
    private var storage: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    /// The number of bytes.
    private(set) var count = 0

    /// The most bytes a checksum has (SHA-512's).
    static let maxBytes = 64

    /// The bytes that `hex` spells: an even number of at most 128 hex digits, in either case;
    /// `nil` for anything else.
    init?(hex: some Collection<UInt8>) {
        guard hex.count % 2 == 0, hex.count <= 2 * Self.maxBytes else { return nil }
        count = hex.count / 2
        let valid = withUnsafeMutableBytes(of: &storage) { bytes in
            var high: UInt8?
            var i = 0
            for digit in hex {
                guard let value = Self.value(of: digit) else { return false }
                if let first = high {
                    bytes[i] = first << 4 | value
                    i += 1
                    high = nil
                } else {
                    high = value
                }
            }
            return true
        }
        guard valid else { return nil }
    }

    /// The checksum of `hex`, which must be hex digits (a parsed manifest line's checksum).
    init(validHex hex: String) {
        guard let checksum = Self(hex: hex.utf8) else { preconditionFailure("'\(hex)' is not a checksum") }
        self = checksum
    }

    /// A checksum from its bytes (the index's blob): at most ``maxBytes``.
    init(bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count <= Self.maxBytes, "a checksum has at most \(Self.maxBytes) bytes")
        count = bytes.count
        withUnsafeMutableBytes(of: &storage) { storage in
            if let base = bytes.baseAddress { storage.baseAddress!.copyMemory(from: base, byteCount: bytes.count) }
        }
    }

    /// Calls `body` with the bytes.
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: storage) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    /// The checksum in lowercase hex, as a manifest line's checksum is kept once parsed.
    var hex: String {
        withUnsafeBytes { bytes in
            String(unsafeUninitializedCapacity: 2 * bytes.count) { text in
                for (i, byte) in bytes.enumerated() {
                    text[2 * i] = Self.digits[Int(byte >> 4)]
                    text[2 * i + 1] = Self.digits[Int(byte & 0xF)]
                }
                return 2 * bytes.count
            }
        }
    }

    /// Whether `hex`, lowercase hex digits (a file's digest as the read keeps it), spells
    /// these bytes: without making either into the other's form.
    func matches(hex: UnsafeRawBufferPointer) -> Bool {
        guard hex.count == 2 * count else { return false }
        return withUnsafeBytes { bytes in
            for (i, byte) in bytes.enumerated()
            where hex[2 * i] != Self.digits[Int(byte >> 4)] || hex[2 * i + 1] != Self.digits[Int(byte & 0xF)] {
                return false
            }
            return true
        }
    }

    static func == (a: Self, b: Self) -> Bool {
        a.withUnsafeBytes { a in b.withUnsafeBytes { b in a.elementsEqual(b) } }
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// The value of a hex digit (either case), or `nil`.
    private static func value(of digit: UInt8) -> UInt8? {
        switch digit {
        case 0x30...0x39: digit - 0x30
        case 0x61...0x66: digit - 0x61 + 10
        case 0x41...0x46: digit - 0x41 + 10
        default: nil
        }
    }
}
