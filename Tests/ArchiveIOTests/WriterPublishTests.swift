import ArchiveIO
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// How a file archive reaches its path: from an unnamed file that nothing can see (and
/// that dies with the process), or from a hidden named file announced before it exists;
/// never over an existing file unless ``ArchiveWriteOptions/replacesExisting``.
@Suite struct WriterPublishTests {
    static func entries(_ directory: borrowing TemporaryDirectory) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
    }

    @Test func anUnfinishedArchiveHasNoNameInItsFolder() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar.zst")
        let writer = try ArchiveWriter(path: path) { _ in Issue.record("no named file on a file system with O_TMPFILE")
        }
        try writer.writeEntry(ArchiveEntry(path: "a", kind: .file), contents: Array(repeating: 7, count: 100_000))
        #expect(try Self.entries(directory) == [])
        try writer.finish()
        #expect(try Self.entries(directory) == ["a.tar.zst"])
        let reader = try ArchiveReader(path: path)
        #expect(try readAll(reader).count == 1)
    }

    @Test func aNamedTemporaryIsAnnouncedBeforeItExists() throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.zip")
        var announced: [String] = []
        let writer = try ArchiveWriter(path: path, options: ArchiveWriteOptions(usesUnnamedFile: false)) { temporary in
            #expect(access(temporary, F_OK) != 0)  // not made yet
            announced.append(temporary)
        }
        let name = try #require(announced.first)
        #expect(announced.count == 1)
        #expect((name as NSString).deletingLastPathComponent == directory.path)
        #expect((name as NSString).lastPathComponent.hasPrefix(".a.zip.partial-"))
        #expect(try Self.entries(directory) == [(name as NSString).lastPathComponent])
        try writer.finish()
        #expect(try Self.entries(directory) == ["a.zip"])
    }

    @Test(arguments: [true, false])
    func anExistingFileIsKeptUnlessReplacing(unnamed: Bool) throws {
        let directory = try TemporaryDirectory()
        let path = directory.sub("a.tar")
        try Data("old".utf8).write(to: URL(fileURLWithPath: path))
        do {
            let keep = try ArchiveWriter(
                path: path, options: ArchiveWriteOptions(replacesExisting: false, usesUnnamedFile: unnamed))
            try keep.writeEntry(ArchiveEntry(path: "a", kind: .file), contents: [1])
            let error = #expect(throws: ArchiveError.self) { try keep.finish() }
            #expect(error?.code == .alreadyExists)
            #expect(error?.message == "Cannot write '\(path)': a file of that name already exists")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("old".utf8))
        #expect(try Self.entries(directory) == ["a.tar"])

        let replace = try ArchiveWriter(path: path, options: ArchiveWriteOptions(usesUnnamedFile: unnamed))
        try replace.writeEntry(ArchiveEntry(path: "b", kind: .file), contents: [2])
        try replace.finish()
        #expect(try Self.entries(directory) == ["a.tar"])
        #expect(try readAll(ArchiveReader(path: path)).keys.map { String(decoding: $0, as: UTF8.self) } == ["b"])
    }
}
