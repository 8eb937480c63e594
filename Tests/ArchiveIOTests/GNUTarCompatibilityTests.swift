import ArchiveIO
import Foundation
import Testing

/// Archives written by GNU tar (every format it writes, with and without sparse files) read
/// to their end without a false "truncated" report, however much of each member is read,
/// and extract completely. Guards the end-of-archive check of ArchiveReader.
@Suite struct GNUTarCompatibilityTests {
    static let formats = ["gnu", "oldgnu", "posix", "ustar", "v7"]

    static func makeArchive(format: String, in directory: borrowing TemporaryDirectory) throws -> String {
        let source = directory.sub("src")
        try FileManager.default.createDirectory(atPath: source + "/dir", withIntermediateDirectories: true)
        for (name, size) in [("empty", 0), ("one", 1), ("b511", 511), ("b512", 512), ("b513", 513), ("big", 100_000)] {
            try Data(pseudoRandomBytes(count: size, seed: UInt64(size + 1))).write(
                to: URL(fileURLWithPath: source + "/dir/" + name))
        }
        // A sparse file: data at 1 MiB, a hole to 3 MiB.
        let fd = open(source + "/dir/sparse", O_WRONLY | O_CREAT, 0o644)
        _ = pwrite(fd, "data", 4, 1 << 20)
        _ = ftruncate(fd, 3 << 20)
        close(fd)
        #expect(link(source + "/dir/one", source + "/dir/hardlink") == 0)
        #expect(symlink("one", source + "/dir/symlink") == 0)
        if format != "v7" && format != "ustar" {
            let long = String(repeating: "long-name-", count: 15)
            try Data("long\n".utf8).write(to: URL(fileURLWithPath: source + "/dir/" + long))
        }
        let archive = directory.sub("\(format).tar")
        let sparse = format == "v7" || format == "ustar" ? [] : ["--sparse"]  // GNU features
        let result = try run("tar", ["--format=\(format)"] + sparse + ["-cf", archive, "-C", source, "dir"])
        #expect(result.status == 0, "\(result.stderr)")
        return archive
    }

    @Test(arguments: formats)
    func readsToTheEndWhateverIsRead(format: String) throws {
        let directory = try TemporaryDirectory()
        let archive = try Self.makeArchive(format: format, in: directory)
        for mode in ["nothing", "skip", "one byte", "all"] {
            let reader = try ArchiveReader(path: archive)
            var count = 0
            var byte = [UInt8](repeating: 0, count: 1)
            while try reader.nextEntry() != nil {
                count += 1
                switch mode {
                case "skip": try reader.skipData()
                case "one byte": _ = try byte.withUnsafeMutableBytes { try reader.read(into: $0) }
                case "all": try reader.readData { _ in }
                default: break
                }
            }
            #expect(count >= 10, "\(format), \(mode)")
        }
    }

    @Test(arguments: formats)
    func extractsCompletely(format: String) throws {
        let directory = try TemporaryDirectory()
        let archive = try Self.makeArchive(format: format, in: directory)
        let root = directory.sub("out")
        try ArchiveReader.extract(archiveAt: archive, to: root)
        let extracted = snapshotTree(root)
        let original = snapshotTree(directory.sub("src"))
        #expect(extracted == original, "\(format)")
    }
}
