import ArchiveIO
import Foundation
import Testing

@Suite struct WriterTests {
    @Test func formatFromFileExtension() {
        let table: [(String, ArchiveFormat?)] = [
            ("a.tar", .tar), ("a.TAR.GZ", .tarGzip), ("a.tgz", .tarGzip), ("x/y.tar.zst", .tarZstd),
            ("a.tzst", .tarZstd), ("a.tar.xz", .tarXz), ("a.txz", .tarXz), ("a.zip", .zip(.deflate)),
            ("a.gz", nil), ("a.7z", nil), ("tar", nil),
        ]
        for (name, format) in table { #expect(ArchiveFormat(fileExtensionOf: name) == format, "\(name)") }
        for format in ArchiveFormat.allCases where format != .zip(.store) {
            #expect(ArchiveFormat(fileExtensionOf: "x" + format.fileExtension) == format)
        }
    }

    @Test func unknownExtensionIsRefused() throws {
        let error = #expect(throws: ArchiveError.self) { try ArchiveWriter(path: "/tmp/out.rar") }
        #expect(error?.code == .invalidArgument)
        #expect(
            error?.message == "Cannot write '/tmp/out.rar': its extension names no archive format "
                + "(use .tar, .tar.gz, .tgz, .tar.zst, .tzst, .tar.xz, .txz or .zip)")
    }

    @Test func compressionLevelOutOfRange() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar.zst")
        let options = ArchiveWriteOptions(compressionLevel: 23)
        let error = #expect(throws: ArchiveError.self) { try ArchiveWriter(path: path, options: options) }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message == "Cannot write '\(path)': compression level 23 is not valid for tar.zst (use 1–22)")
        let tar = #expect(throws: ArchiveError.self) {
            try ArchiveWriter(path: directory.sub("a.tar"), options: ArchiveWriteOptions(compressionLevel: 1))
        }
        #expect(
            tar?.message.hasSuffix("compression level 1 is not valid for tar (it has no compression level)") == true)
        // A refused writer leaves no temporary file behind.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    @Test(arguments: [ArchiveFormat.tarGzip, .tarZstd, .tarXz, .zip(.deflate)])
    func compressionLevelIsApplied(format: ArchiveFormat) throws {
        let text = Array((0..<20_000).map { "line \($0 % 977) of some repetitive text\n" }.joined().utf8)
        func size(level: Int) throws -> Int {
            var count = 0
            let options = ArchiveWriteOptions(compressionLevel: level)
            let writer = try ArchiveWriter(format: format, options: options) { count += $0.count }
            try writer.writeEntry(ArchiveEntry(path: "t.txt", kind: .file), contents: text)
            try writer.finish()
            return count
        }
        let range = try #require(format.compressionLevels)
        #expect(try size(level: range.lowerBound) > size(level: range.upperBound))
    }

    @Test func chunksMustMatchTheDeclaredSize() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("out.tar")
        let writer = try ArchiveWriter(path: path)
        var sent = false
        let error = #expect(throws: ArchiveError.self) {
            try writer.writeEntry(ArchiveEntry(path: "short.bin", kind: .file, size: 10)) { () -> [UInt8]? in
                defer { sent = true }
                return sent ? nil : [1, 2, 3, 4, 5]
            }
        }
        #expect(error?.code == .invalidArgument)
        #expect(
            error?.message == "Cannot write member 'short.bin' to '\(path)': its header declares 10 bytes but its "
                + "chunks hold 5")
        // The writer is now failed: finishing reports the same error and writes nothing.
        let again = #expect(throws: ArchiveError.self) { try writer.finish() }
        #expect(again?.message == error?.message)
        #expect(!FileManager.default.fileExists(atPath: path))

        let long = try ArchiveWriter(format: .tar) { _ in }
        let tooMuch = #expect(throws: ArchiveError.self) {
            try long.writeEntry(ArchiveEntry(path: "long.bin", kind: .file, size: 3)) { [1, 2, 3, 4] }
        }
        #expect(
            tooMuch?.message == "Cannot write member 'long.bin' to '<stream>': its header declares 3 bytes but its "
                + "chunks hold at least 4")
    }

    @Test func regularFileNeedsItsSize() throws {
        let writer = try ArchiveWriter(format: .tar) { _ in }
        let error = #expect(throws: ArchiveError.self) {
            try writer.writeEntry(ArchiveEntry(path: "x", kind: .file)) { nil }
        }
        #expect(error?.code == .invalidArgument)
        #expect(
            error?.message == "Cannot write member 'x' to '<stream>': a regular file needs its size before its data")
    }

    @Test func sinkErrorsCarryTheCause() throws {
        struct DiskFull: Error, CustomStringConvertible { var description: String { "disk full" } }
        let writer = try ArchiveWriter(format: .tar, name: "upload.tar") { _ in throw DiskFull() }
        let error = #expect(throws: ArchiveError.self) {
            try writer.writeEntry(
                ArchiveEntry(path: "big", kind: .file), contents: [UInt8](repeating: 1, count: 1 << 20))
            try writer.finish()
        }
        #expect(error?.code == .callbackFailed)
        #expect(error?.cause is DiskFull)
        #expect(error?.message.hasPrefix("Cannot write 'upload.tar'") == true)
        #expect(error?.message.hasSuffix(": the chunk sink threw: disk full") == true)
    }

    @Test func chunkSourceErrorsFailTheWriter() throws {
        struct Broken: Error, CustomStringConvertible { var description: String { "source broke" } }
        let writer = try ArchiveWriter(format: .tarGzip, name: "out.tgz") { _ in }
        let error = #expect(throws: ArchiveError.self) {
            try writer.writeEntry(ArchiveEntry(path: "x.bin", kind: .file, size: 10)) { throw Broken() }
        }
        #expect(error?.code == .callbackFailed)
        #expect(error?.cause is Broken)
        #expect(error?.message == "Cannot write 'out.tgz', member 'x.bin': the chunk source threw: source broke")
        #expect(throws: ArchiveError.self) { try writer.finish() }
    }

    @Test func failedBodyLeavesTheOldFileAndNoTemporaryFile() throws {
        struct Stop: Error {}
        let directory = try TemporaryDirectory()
        let path = directory.sub("bundle.zip")
        try Data("old".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: Stop.self) {
            try withArchiveWriter(at: path) { writer in
                try writer.writeEntry(ArchiveEntry(path: "a", kind: .file), contents: [1])
                throw Stop()
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["bundle.zip"])
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("old".utf8))
    }

    @Test func archiveFileGetsTheUsualMode() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar")
        // The process's umask, read without changing it (tests run in parallel).
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Umask:") })
        let mask = try #require(mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8))
        try withArchiveWriter(at: path) { _ in }
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o666 & ~mask)
    }

    @Test func unwritableDirectoryIsAnIOError() throws {
        let path = "/proc/archiveio-cannot-write-here.tar"
        let error = #expect(throws: ArchiveError.self) { try ArchiveWriter(path: path) }
        #expect(error?.code == .io)
        #expect(error?.message.hasPrefix("Cannot write '\(path)': cannot create a file in '/proc': ") == true)
    }

    @Test func finishingTwiceIsMisuse() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar.gz")
        let writer = try ArchiveWriter(path: path, options: ArchiveWriteOptions(synchronizesOnFinish: true))
        try writer.finish()
        let error = #expect(throws: ArchiveError.self) { try writer.finish() }
        #expect(error?.code == .misuse)
        #expect(error?.message == "Cannot write to '\(path)': the archive is already finished")
        #expect(throws: ArchiveError.self) { try writer.writeEntry(ArchiveEntry(path: "late", kind: .directory)) }
        // An empty archive is still a valid one.
        #expect(try withArchiveReader(at: path) { try $0.nextEntry() } == nil)
    }

    @Test func addingAMissingFileIsAnIOError() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar")
        let missing = directory.sub("missing.txt")
        let writer = try ArchiveWriter(path: path)
        let error = #expect(throws: ArchiveError.self) { try writer.addFile(at: missing, as: "m.txt") }
        #expect(error?.code == .io)
        #expect(error?.message == "Cannot write '\(path)': lstat '\(missing)' failed: No such file or directory")
    }

    @Test func fifosCannotBeAdded() throws {
        let directory = try TemporaryDirectory()
        let fifo = directory.sub("pipe")
        #expect(mkfifo(fifo, 0o644) == 0)
        let writer = try ArchiveWriter(format: .tar) { _ in }
        let error = #expect(throws: ArchiveError.self) { try writer.addFile(at: fifo, as: "pipe") }
        #expect(error?.code == .unsupportedEntry)
        #expect(
            error?.message == "Cannot add '\(fifo)' to '<stream>': it is a device, FIFO or socket; only regular "
                + "files, directories and symbolic links can be added")
    }

    @Test func entryTypeTheFormatCannotHoldFailsThatEntryOnly() throws {
        var output: [UInt8] = []
        let writer = try ArchiveWriter(format: .zip(.deflate), name: "z.zip") { output += $0 }
        let error = #expect(throws: ArchiveError.self) {
            try writer.writeEntry(ArchiveEntry(path: "dev", kind: .characterDevice))
        }
        #expect(error?.code == .unsupportedEntry)
        #expect(error?.operation == "archive_write_header")
        #expect(error?.message.hasPrefix("Cannot write 'z.zip', member 'dev': archive_write_header failed: ") == true)
        // The archive goes on.
        try writer.writeEntry(ArchiveEntry(path: "ok.txt", kind: .file), contents: Array("ok".utf8))
        try writer.finish()
        var chunks = [output].makeIterator()
        let reader = try ArchiveReader(name: "z.zip") { chunks.next() }
        #expect(try reader.nextEntry()?.path == "ok.txt")
        #expect(try reader.readContents() == Array("ok".utf8))
        #expect(try reader.nextEntry() == nil)
    }

    @Test(arguments: ArchiveFormat.allCases)
    func longNamesAndLinksRoundTrip(format: ArchiveFormat) throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("long" + format.fileExtension)
        let longName = (0..<30).map { "segment-\($0)-\u{e9}" }.joined(separator: "/")
        try withArchiveWriter(at: path, format: format) { writer in
            try writer.writeEntry(ArchiveEntry(path: longName, kind: .file), contents: Array("long".utf8))
            try writer.writeEntry(ArchiveEntry(path: "s", kind: .symlink, linkTarget: longName))
        }
        // From a file: a zip's link types live in its central directory, which a streamed
        // zip reader never sees.
        let reader = try ArchiveReader(path: path)
        let first = try #require(try reader.nextEntry())
        #expect(first.hasPath(longName) && first.size == 4)
        #expect(try reader.readContents() == Array("long".utf8))
        let link = try #require(try reader.nextEntry())
        #expect(link.kind == .symlink && link.linkTarget == longName)
    }
}
