import CArchive
import Foundation
import Testing

@testable import ArchiveIO

/// A compressed archive written to a file is compressed on a thread of its own
/// (``CompressionStage``), beside the work that produces its members: what it writes must be
/// the archive the writer made, at the level asked, and a failure must stop the writer.
@Suite struct CompressionStageTests {
    /// Members of several MiB of bytes zstd cannot shrink, so that many blocks wait at once.
    static func payload(_ size: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<size).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
    }

    @Test(arguments: [ArchiveFormat.tarGzip, .tarZstd, .tarXz])
    func aCompressedFileArchiveReadsBackWhole(format: ArchiveFormat) throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a" + format.fileExtension)
        let members = (0..<4).map { ("m\($0).bin", Self.payload((1 << 20) + $0 * 4_099, seed: UInt64($0))) }
        try withArchiveWriter(at: path) { writer in
            for (name, data) in members {
                try writer.writeEntry(ArchiveEntry(path: name, kind: .file), contents: data)
            }
            try writer.writeEntry(ArchiveEntry(path: "small.txt", kind: .file), contents: Array("hi\n".utf8))
        }
        let read = try readAll(try ArchiveReader(path: path))
        #expect(read.count == 5)
        for (name, data) in members { #expect(read[bytes(name)]?.data == data, "\(name)") }
        #expect(read[bytes("small.txt")]?.data == Array("hi\n".utf8))
        let reader = try ArchiveReader(path: path)
        _ = try reader.nextEntry()
        #expect(
            reader.filterNames == [
                ["gzip", "zstd", "xz"][[ArchiveFormat.tarGzip, .tarZstd, .tarXz].firstIndex(of: format)!]
            ])
        #expect(reader.formatName?.contains("pax") == true)
    }

    /// The level reaches the compressing thread's filter: the highest level writes less.
    @Test func theCompressionLevelReachesTheStage() throws {
        let directory = try TemporaryDirectory()
        let text = Array(String(repeating: "the same few words, over and over; ", count: 60_000).utf8)
        var sizes: [Int] = []
        for level in [1, 19] {
            let path = directory.sub("level-\(level).tar.zst")
            try withArchiveWriter(at: path, options: ArchiveWriteOptions(compressionLevel: level)) {
                try $0.writeEntry(ArchiveEntry(path: "t.txt", kind: .file), contents: text)
            }
            sizes.append(try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int)
        }
        #expect(sizes[1] < sizes[0], "\(sizes)")
    }

    /// A compressed archive abandoned part way leaves nothing behind: no archive, no partial file.
    @Test func anAbandonedCompressedArchiveLeavesNothing() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("abandoned.tar.zst")
        struct Stop: Error {}
        #expect(throws: Stop.self) {
            try withArchiveWriter(at: path) { writer in
                try writer.writeEntry(
                    ArchiveEntry(path: "big.bin", kind: .file), contents: Self.payload(3 << 20, seed: 9))
                throw Stop()
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// When the compressed bytes cannot be written, the stage stops: the writer's next block
    /// is refused with the reason, and so is the end.
    @Test func aFailureToWriteTheCompressedBytesStopsTheStage() throws {
        var written = 0
        let sink = ChunkSink { chunk in
            written += chunk.count
            if written > 256 << 10 { throw CocoaError(.fileWriteOutOfSpace) }
        }
        let stage = try CompressionStage(
            filter: archive_write_add_filter_zstd, filterName: "zstd", level: nil, output: sink)
        let outer = try #require(archive_write_new())
        defer { archive_write_free(outer) }
        var refused = false
        for n in 0..<400 where !refused {
            refused = Self.payload(64 << 10, seed: UInt64(n)).withUnsafeBytes { stage.accept(outer, $0) } == -1
            if !refused { usleep(1_000) }  // the compressing thread catches up
        }
        #expect(refused)
        #expect(String(cString: archive_error_string(outer)) == "the chunk sink threw an error")
        let ending = stage.finish()
        #expect(ending?.failure.message == "the chunk sink threw an error")
        #expect(ending?.operation == "archive_write_data" && ending?.isWarning == false)
        #expect(sink.error is CocoaError)
    }
}
