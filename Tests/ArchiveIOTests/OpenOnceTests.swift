import ArchiveIO
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An archive file is opened once, and what was opened is checked: a
/// FIFO, a device or a directory is refused at once, and everything read — the zip names from
/// the central directory included — comes from the file that was opened, even if its path is
/// replaced meanwhile.
@Suite struct OpenOnceTests {
    func refusal(_ path: String) -> ArchiveError? {
        #expect(throws: ArchiveError.self) { try ArchiveReader(path: path) }
    }

    @Test func aFIFOIsRefusedAtOnce() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("bag.tar")
        #expect(mkfifo(path, 0o644) == 0)
        // Before the fix, each open waited for a writer forever: this one comes, and the test
        // fails on what was read (nothing) instead of hanging.
        let unblocker = FIFOUnblocker(path)
        unblocker.start()
        defer { unblocker.stop() }
        let error = refusal(path)
        #expect(error?.code == .openFailed)
        #expect(error?.message == "Cannot open '\(path)': it is a FIFO, not a regular file")
        #expect(error?.archivePath == path)
        #expect(error?.libarchiveMessage == nil)
        // Through the scoped reader and extraction too.
        #expect(throws: ArchiveError.self) { try withArchiveReader(at: path) { _ in } }
        let extracted = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: path, to: directory.sub("out"))
        }
        #expect(extracted?.message == "Cannot open '\(path)': it is a FIFO, not a regular file")
    }

    @Test func aDirectoryIsRefused() throws {
        let directory = try TemporaryDirectory()
        let error = refusal(directory.path)
        #expect(error?.code == .openFailed)
        #expect(error?.message == "Cannot open '\(directory.path)': it is a directory, not a regular file")
    }

    @Test func aDeviceIsRefused() throws {
        let error = refusal("/dev/null")
        #expect(error?.code == .openFailed)
        #expect(error?.message == "Cannot open '/dev/null': it is a character device, not a regular file")
    }

    @Test func aSymbolicLinkToAnArchiveIsFollowed() throws {
        let directory = try TemporaryDirectory()
        let link = directory.sub("link.tar")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: Fixtures.path("sample.tar"))
        let reader = try ArchiveReader(path: link)
        var files = 0
        try reader.forEachEntry { if $0.kind == .file { files += 1 } }
        #expect(files == Fixtures.sampleFiles.count)
        let target = try FileManager.default.attributesOfItem(atPath: Fixtures.path("sample.tar"))[.size] as! Int
        #expect(reader.fileSize == Int64(target))
    }

    @Test func aSymbolicLinkToAFIFOIsRefusedAsAFIFO() throws {
        let directory = try TemporaryDirectory()
        let fifo = directory.sub("fifo")
        let link = directory.sub("link.tar")
        #expect(mkfifo(fifo, 0o644) == 0)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: fifo)
        let unblocker = FIFOUnblocker(fifo)
        unblocker.start()
        defer { unblocker.stop() }
        #expect(refusal(link)?.message == "Cannot open '\(link)': it is a FIFO, not a regular file")
    }

    /// A zip whose path is replaced after it was opened: its members, and the exact bytes of
    /// their names (read from the central directory), are those of the file opened. Before
    /// the fix the names were read from whatever the path named by then.
    @Test func aZipReplacedAfterItWasOpenedIsReadAsOpened() throws {
        let directory = try TemporaryDirectory()
        let decomposed = "re\u{301}sume\u{301}.txt"  // NFD
        let precomposed = "r\u{e9}sum\u{e9}.txt"  // NFC: canonically equivalent, other bytes
        let opened = directory.sub("bundle.zip")
        let replacement = directory.sub("replacement.zip")
        for (path, name, contents) in [(opened, decomposed, "opened\n"), (replacement, precomposed, "replaced\n")] {
            try withArchiveWriter(at: path, format: .zip(.deflate)) { writer in
                try writer.writeEntry(ArchiveEntry(path: name, kind: .file), contents: Array(contents.utf8))
            }
        }
        let reader = try ArchiveReader(path: opened)
        #expect(rename(replacement, opened) == 0)
        let entry = try #require(try reader.nextEntry())
        #expect(Array(entry.path.utf8) == Array(decomposed.utf8))
        #expect(try reader.readContents() == Array("opened\n".utf8))
        #expect(try reader.nextEntry() == nil)
    }

    /// The size reported is that of the file opened, not of what the path names later.
    @Test func theFileSizeIsTheOpenedFiles() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar")
        try FileManager.default.copyItem(atPath: Fixtures.path("sample.tar"), toPath: path)
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
        let reader = try ArchiveReader(path: path)
        try Data(count: 10).write(to: URL(fileURLWithPath: path + ".new"))
        #expect(rename(path + ".new", path) == 0)
        #expect(reader.fileSize == Int64(size))
        var files = 0
        try reader.forEachEntry { if $0.kind == .file { files += 1 } }
        #expect(files == Fixtures.sampleFiles.count)
        var chunks = [[UInt8]()].makeIterator()
        #expect(try ArchiveReader(name: "stream") { chunks.next() }.fileSize == nil)
    }
}
