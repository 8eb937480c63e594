import Crypto

/// A checksum algorithm of BagIt manifests (`manifest-<name>.txt`).
///
/// RFC 8493 recommends SHA-256 and SHA-512; MD5 and SHA-1 are accepted when
/// reading bags made by other tools.
public enum ChecksumAlgorithm: String, Sendable, Hashable, CaseIterable, Comparable {
    case md5, sha1, sha256, sha512

    /// The algorithm named in a manifest's file name (`manifest-sha256.txt` → `.sha256`).
    public init?(manifestName name: String, prefix: String) {
        guard name.hasPrefix(prefix), name.hasSuffix(".txt") else { return nil }
        let algorithm = name.dropFirst(prefix.count).dropLast(4).lowercased()
        self.init(rawValue: algorithm)
    }

    /// The length of a digest in hex digits.
    public var hexLength: Int {
        switch self {
        case .md5: 32
        case .sha1: 40
        case .sha256: 64
        case .sha512: 128
        }
    }

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// Computes several digests of one stream of bytes at once.
public struct MultiHasher {
    private var md5: Insecure.MD5?
    private var sha1: Insecure.SHA1?
    private var sha256: SHA256?
    private var sha512: SHA512?

    /// A hasher for `algorithms`.
    public init(_ algorithms: Set<ChecksumAlgorithm>) {
        if algorithms.contains(.md5) { md5 = Insecure.MD5() }
        if algorithms.contains(.sha1) { sha1 = Insecure.SHA1() }
        if algorithms.contains(.sha256) { sha256 = SHA256() }
        if algorithms.contains(.sha512) { sha512 = SHA512() }
    }

    /// Adds bytes to every digest.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        md5?.update(bufferPointer: bytes)
        sha1?.update(bufferPointer: bytes)
        sha256?.update(bufferPointer: bytes)
        sha512?.update(bufferPointer: bytes)
    }

    /// The digests, lowercase hex, by algorithm.
    public func finalize() -> [ChecksumAlgorithm: String] {
        var result: [ChecksumAlgorithm: String] = [:]
        if let md5 { result[.md5] = hex(md5.finalize()) }
        if let sha1 { result[.sha1] = hex(sha1.finalize()) }
        if let sha256 { result[.sha256] = hex(sha256.finalize()) }
        if let sha512 { result[.sha512] = hex(sha512.finalize()) }
        return result
    }
}

private let hexDigits = Array("0123456789abcdef".utf8)

/// Lowercase hex of a digest's bytes (shared with the catalog's content store).
package func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(128)
    for byte in digest {
        bytes.append(hexDigits[Int(byte >> 4)])
        bytes.append(hexDigits[Int(byte & 0xf)])
    }
    return String(decoding: bytes, as: UTF8.self)
}
