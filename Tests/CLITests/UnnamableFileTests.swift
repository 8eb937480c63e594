import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Makes a file (or a folder) whose name, in `folder`, is the bytes `name` (not UTF-8).
func makeRawEntry(in folder: String, _ name: [UInt8], directory: Bool = false, contents: String = "x\n") throws {
    let path = Array(folder.utf8) + [UInt8(ascii: "/")] + name + [0]
    let made = path.withUnsafeBufferPointer { buffer in
        buffer.withMemoryRebound(to: CChar.self) { raw -> Bool in
            if directory { return mkdir(raw.baseAddress!, 0o755) == 0 }
            let fd = open(raw.baseAddress!, O_WRONLY | O_CREAT | O_EXCL, 0o644)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            return contents.utf8.withContiguousStorageIfAvailable { write(fd, $0.baseAddress, $0.count) }
                == contents.utf8.count
        }
    }
    #expect(made)
}

/// A file whose name is not UTF-8 is never left out without a word:
/// the catalog records names as text, so it is named on stderr (its bytes escaped),
/// the other files are added, and the command exits non-zero, as `cp -r` does.
@Suite struct UnnamableFileTests {
    /// A folder of three good files, `bad\xff\xfe.txt`, and a folder `dir\xff` holding a file.
    static func folder(_ t: TestCatalog) throws -> String {
        for name in ["a.txt", "b.txt", "sub/c.txt"] { try t.file("odd/" + name, "good \(name)\n") }
        let folder = t.sources.appending(path: "odd").path
        try makeRawEntry(in: folder, Array("bad".utf8) + [0xFF, 0xFE] + Array(".txt".utf8))
        try makeRawEntry(in: folder, Array("dir".utf8) + [0xFF], directory: true)
        try makeRawEntry(in: folder + "/sub", Array("caf".utf8) + [0xE9] + Array(".txt".utf8))
        return folder
    }

    static func expectedErrors(_ folder: String) -> String {
        [folder + "/bad\\xff\\xfe.txt", folder + "/dir\\xff", folder + "/sub/caf\\xe9.txt"].map {
            "assetcat: Cannot add \($0): its name is not valid UTF-8, which the catalog cannot record; "
                + "rename it and add it again\n"
        }.joined()
    }

    @Test(arguments: [false, true])
    func addRecursiveNamesTheFileItCannotRecordAndExitsNonZero(reference: Bool) async throws {
        let t = try TestCatalog()
        try t.create().close()
        let folder = try Self.folder(t)
        // The folder with the bad name holds a file: it is named once, with its folder.
        try makeRawEntry(in: folder, Array("dir".utf8) + [0xFF] + Array("/inside.txt".utf8))
        let run = try await t.run(["add", "--recursive"] + (reference ? ["--reference"] : []) + [folder])
        #expect(run.status == 1)
        #expect(run.stdout == "added 3 files\n")
        #expect(run.stderr == Self.expectedErrors(folder))
        let catalog = try t.open()
        defer { catalog.close() }
        #expect(try catalog.assets().map(\.name).sorted() == ["a.txt", "b.txt", "c.txt"])
    }

    @Test func theLibraryListsEachUnnamableFileAsAFailure() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let folder = try Self.folder(t)
        let result = try await catalog.add([folder], options: AddOptions(recursive: true))
        #expect(result.added.map(\.name).sorted() == ["a.txt", "b.txt", "c.txt"])
        #expect(result.filesFound == 3)
        #expect(result.failures.map(\.code) == [.invalidArgument, .invalidArgument, .invalidArgument])
        #expect(
            result.failures.map { "assetcat: " + $0.message + "\n" }.joined() == Self.expectedErrors(folder))
        // Nothing of theirs reached the catalog, and the names it lists are all text.
        #expect(try catalog.collectGarbage().unreferenced.isEmpty)
    }
}
