import CLibCrypto
import Crypto

/// A checksum algorithm of BagIt manifests (`manifest-<name>.txt`).
///
/// RFC 8493 recommends SHA-256 and SHA-512; MD5, SHA-1, SHA-224 and SHA-384 are accepted
/// when reading bags made by other tools (the algorithms bagit-python accepts).
public enum ChecksumAlgorithm: String, Sendable, Hashable, CaseIterable, Comparable {
    case md5, sha1, sha224, sha256, sha384, sha512

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
        case .sha224: 56
        case .sha256: 64
        case .sha384: 96
        case .sha512: 128
        }
    }

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// Computes several digests of one stream of bytes at once.
public struct MultiHasher {
    private var md5: Insecure.MD5?
    private var sha1: Insecure.SHA1?
    private var sha224: LibCryptoDigest?
    private var sha256: SHA256?
    private var sha384: SHA384?
    private var sha512: SHA512?

    /// A hasher for `algorithms`.
    public init(_ algorithms: Set<ChecksumAlgorithm>) {
        if algorithms.contains(.md5) { md5 = Insecure.MD5() }
        if algorithms.contains(.sha1) { sha1 = Insecure.SHA1() }
        if algorithms.contains(.sha224) { sha224 = LibCryptoDigest(EVP_sha224()) }
        if algorithms.contains(.sha256) { sha256 = SHA256() }
        if algorithms.contains(.sha384) { sha384 = SHA384() }
        if algorithms.contains(.sha512) { sha512 = SHA512() }
    }

    /// Adds bytes to every digest.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        md5?.update(bufferPointer: bytes)
        sha1?.update(bufferPointer: bytes)
        if sha224 != nil {
            if !isKnownUniquelyReferenced(&sha224) { sha224 = sha224?.copy() }
            sha224?.update(bytes)
        }
        sha256?.update(bufferPointer: bytes)
        sha384?.update(bufferPointer: bytes)
        sha512?.update(bufferPointer: bytes)
    }

    /// The digests, lowercase hex, by algorithm.
    public func finalize() -> [ChecksumAlgorithm: String] {
        var result: [ChecksumAlgorithm: String] = [:]
        if let md5 { result[.md5] = hex(md5.finalize()) }
        if let sha1 { result[.sha1] = hex(sha1.finalize()) }
        if let sha224 { result[.sha224] = hex(sha224.finalize()) }
        if let sha256 { result[.sha256] = hex(sha256.finalize()) }
        if let sha384 { result[.sha384] = hex(sha384.finalize()) }
        if let sha512 { result[.sha512] = hex(sha512.finalize()) }
        return result
    }
}

/// A digest of the system's libcrypto (an `EVP_MD`), for the algorithms swift-crypto lacks.
/// A class, so that its context is freed once; ``MultiHasher`` copies it before a write when
/// it is shared, so that the hasher keeps value semantics.
final class LibCryptoDigest {
    private let context: OpaquePointer

    init(_ digest: OpaquePointer?) {
        // Only allocation can fail here: nothing to go on without memory.
        guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, digest, nil) == 1 else {
            fatalError("libcrypto could not start a digest")
        }
        self.context = context
    }

    private init(copying other: LibCryptoDigest) {
        guard let context = EVP_MD_CTX_new(), EVP_MD_CTX_copy_ex(context, other.context) == 1 else {
            fatalError("libcrypto could not copy a digest")
        }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    func copy() -> LibCryptoDigest { LibCryptoDigest(copying: self) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    /// The digest of the bytes so far (the context goes on: it is finished on a copy).
    func finalize() -> [UInt8] {
        let done = copy()
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(done.context, &digest, &length)
        return Array(digest.prefix(Int(length)))
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
