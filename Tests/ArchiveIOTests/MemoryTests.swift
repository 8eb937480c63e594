import ArchiveIO
import Foundation
import Testing

/// Reading a 1 GiB member in chunks keeps memory bounded.
///
/// The measurement runs in a child process (this test binary, filtered to one test), so that
/// tests running in parallel in this process cannot inflate the peak.
@Suite struct MemoryTests {
    static let childVariable = "ARCHIVEIO_MEMORY_CHILD_RESULT"

    @Test func chunkedReadOfOneGiBStaysBounded() throws {
        let directory = try TemporaryDirectory()
        let resultPath = directory.sub("result")
        let result = try run(
            CommandLine.arguments[0],
            ["--testing-library", "swift-testing", "--filter", "oneGiBChunkedReadInThisProcess"],
            environment: [Self.childVariable: resultPath])
        #expect(result.status == 0, "child failed: \(String(decoding: result.stdout, as: UTF8.self))")
        let fields = try String(contentsOfFile: resultPath, encoding: .utf8).split(separator: " ").compactMap {
            Int($0)
        }
        try #require(fields.count == 4)
        let (total, mismatches, largestChunk, growth) = (fields[0], fields[1], fields[2], fields[3])
        #expect(total == 1 << 30)
        #expect(mismatches == 0)
        #expect(largestChunk <= 1 << 20, "largest chunk \(largestChunk)")
        // Whatever the member's size, the reader holds a few buffers at most.
        #expect(growth < 32 << 20, "peak grew by \(growth >> 20) MiB")
    }

    /// The child's part; runs only when the test above starts it.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childVariable] != nil))
    func oneGiBChunkedReadInThisProcess() throws {
        let resultPath = try #require(ProcessInfo.processInfo.environment[Self.childVariable])
        let directory = try TemporaryDirectory()
        let path = directory.sub("big.tar.zst")
        let size = 1 << 30
        let block = pseudoRandomBytes(count: 1 << 20, seed: 99)
        // Generated as a stream of 1 MiB chunks; zstd keeps the file small.
        var produced = 0
        try withArchiveWriter(at: path, options: ArchiveWriteOptions(compressionLevel: 1)) { writer in
            try writer.writeEntry(ArchiveEntry(path: "big.bin", kind: .file, size: Int64(size))) { () -> [UInt8]? in
                guard produced < size else { return nil }
                produced += block.count
                return block
            }
        }
        let baseline = try #require(Self.resetPeak() ? Self.statusField("VmRSS") : nil)
        var total = 0
        var largestChunk = 0
        var mismatches = 0
        try withArchiveReader(at: path) { reader in
            let entry = try #require(try reader.nextEntry())
            #expect(entry.size == Int64(size))
            try block.withUnsafeBytes { expected in
                try reader.readData { chunk in
                    largestChunk = max(largestChunk, chunk.count)
                    // Compare with the block at this offset (chunks may straddle blocks).
                    var offset = 0
                    while offset < chunk.count {
                        let at = (total + offset) % expected.count
                        let count = min(chunk.count - offset, expected.count - at)
                        if memcmp(chunk.baseAddress! + offset, expected.baseAddress! + at, count) != 0 {
                            mismatches += 1
                        }
                        offset += count
                    }
                    total += chunk.count
                }
            }
        }
        let peak = try #require(Self.statusField("VmHWM"))
        try "\(total) \(mismatches) \(largestChunk) \(peak - baseline)".write(
            toFile: resultPath, atomically: false, encoding: .utf8)
    }

    static func statusField(_ name: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            return line.split(separator: " ").compactMap { Int($0) }.first.map { $0 * 1024 }
        }
        return nil
    }

    /// Resets VmHWM to the current RSS (Linux ≥ 4.0: "5" to /proc/self/clear_refs).
    static func resetPeak() -> Bool {
        (try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)) != nil
    }
}
