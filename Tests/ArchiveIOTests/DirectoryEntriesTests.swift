import ArchiveIO
import Foundation
import Glibc
import Testing

/// `forEachDirectoryEntry` gives every name but `.` and `..`, byte for byte, whatever its
/// length (up to the 255 bytes Linux allows) and whether or not it is UTF-8. (That it reads
/// no byte past the entry `readdir` returned is what `make sanitize` checks.)
@Test func directoryEntriesAreReadAsTheBytesTheFileSystemHolds() throws {
    let folder = FileManager.default.temporaryDirectory.appending(path: "entries-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: folder) }
    let names: [[UInt8]] = [
        Array("a".utf8), Array(repeating: UInt8(ascii: "x"), count: 255), [0x62, 0x61, 0x64, 0xFF, 0xFE],
        Array("caf\u{E9}".utf8), Array("cafe\u{301}".utf8), Array("..hidden".utf8),
    ]
    let fd = open(folder.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    #expect(fd >= 0)
    for name in names {
        let made = (name + [0]).withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) {
                openat(fd, $0.baseAddress!, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            }
        }
        #expect(made >= 0)
        close(made)
    }
    let directory = try #require(fdopendir(fd))
    defer { closedir(directory) }
    var seen: [[UInt8]] = []
    let failure = forEachDirectoryEntry(in: directory) { seen.append(Array($0)) }
    #expect(failure == 0)
    #expect(Set(seen) == Set(names))
    #expect(seen.count == names.count)
}
