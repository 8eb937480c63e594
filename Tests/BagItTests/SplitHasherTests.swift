import Testing

@testable import BagIt

/// A split hasher gives the digests one hasher gives, for every set of algorithms, whether it
/// hands its costliest digests to another thread early, late or never.
@Suite struct SplitHasherTests {
    @Test(arguments: [0, 5_000, 1 << 30])
    func everySetOfAlgorithmsGivesTheDigestsOfOneHasher(handOverAfter: Int) {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<300_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let all = ChecksumAlgorithm.allCases
        for mask in 1..<(1 << all.count) {
            let algorithms = Set(all.indices.filter { mask & (1 << $0) != 0 }.map { all[$0] })
            var one = MultiHasher(algorithms)
            let split = SplitHasher(algorithms, handOverAfter: handOverAfter)
            bytes.withUnsafeBytes { whole in
                var start = 0
                var size = 1
                while start < whole.count {
                    // Chunks of growing, odd sizes.
                    let chunk = UnsafeRawBufferPointer(rebasing: whole[start..<min(start + size, whole.count)])
                    one.update(chunk)
                    split.update(chunk)
                    start += chunk.count
                    size = size * 3 + 1
                }
            }
            #expect(split.finalize() == one.finalize(), "\(algorithms.sorted())")
        }
    }
}
