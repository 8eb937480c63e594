import Dispatch

/// Computes several digests of one stream of bytes, the costliest on a thread of their own
/// once the stream is long: a tag file read before any tag manifest is hashed with all six
/// algorithms, and a payload file before any manifest with SHA-256 and SHA-512, where one
/// thread would spend most of a read hashing. A short stream is hashed on the caller's
/// thread alone (handing chunks over would cost more than it saves).
///
/// ```swift
/// let hasher = SplitHasher([.md5, .sha256, .sha512])
/// hasher.update(chunk)  // as the bytes come
/// let digests = hasher.finalize()
/// ```
final class SplitHasher: @unchecked Sendable {
    /// The digests computed on the caller's thread.
    private var here: MultiHasher
    /// The others: on the caller's thread until ``handedOver``, then on ``queue`` only (its
    /// chunks in order), until ``finalize()`` waits for it.
    private var there: MultiHasher
    private let hasThere: Bool
    private var queue: DispatchQueue?
    /// Bounds the chunks handed over and not hashed yet (their copies' memory).
    private let slots = DispatchSemaphore(value: 8)
    private var bytes = 0
    private let handOverAfter: Int

    /// What hashing a byte costs, relative to SHA-256 with the SHA extensions (OpenSSL's
    /// `speed` on this project's machines: MD5 and SHA-512 have no such instructions).
    private static let cost: [ChecksumAlgorithm: Double] = [
        .md5: 2.4, .sha1: 1, .sha224: 1, .sha256: 1, .sha384: 2.7, .sha512: 2.7,
    ]

    /// - Parameter handOverAfter: The bytes after which the costliest digests move to a
    ///   thread of their own.
    init(_ algorithms: Set<ChecksumAlgorithm>, handOverAfter: Int = 1 << 20) {
        // The costliest first, each to the lighter side; the other thread takes the heavier.
        var sides: [(algorithms: Set<ChecksumAlgorithm>, cost: Double)] = [([], 0), ([], 0)]
        for algorithm in algorithms.sorted(by: { (Self.cost[$0]!, $0.rawValue) > (Self.cost[$1]!, $1.rawValue) }) {
            let lighter = sides[0].cost <= sides[1].cost ? 0 : 1
            sides[lighter].algorithms.insert(algorithm)
            sides[lighter].cost += Self.cost[algorithm]!
        }
        sides.sort { $0.cost < $1.cost }
        here = MultiHasher(sides[0].algorithms)
        there = MultiHasher(sides[1].algorithms)
        hasThere = !sides[1].algorithms.isEmpty && !sides[0].algorithms.isEmpty
        self.handOverAfter = handOverAfter
    }

    /// Adds bytes to every digest.
    func update(_ chunk: UnsafeRawBufferPointer) {
        bytes += chunk.count
        if queue == nil && hasThere && bytes > handOverAfter {
            queue = DispatchQueue(label: "BagIt.SplitHasher")
        }
        if let queue {
            let copy = [UInt8](chunk)
            slots.wait()
            queue.async { [self] in
                copy.withUnsafeBytes { there.update($0) }
                slots.signal()
            }
        } else {
            there.update(chunk)
        }
        here.update(chunk)
    }

    /// The digests, lowercase hex, by algorithm.
    func finalize() -> [ChecksumAlgorithm: String] {
        queue?.sync {}
        return here.finalize().merging(there.finalize()) { first, _ in first }
    }
}
