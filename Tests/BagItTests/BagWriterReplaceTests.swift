import ArchiveIO
import BagIt
import Foundation
import Testing

/// What a bag's path may already hold, and the hidden paths a writer announces before it
/// makes them (for a caller that removes them after a crash).
@Suite struct BagWriterReplaceTests {
    func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "bagit-replace-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func entries(_ path: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    func writeBag(_ path: String, replacing: Bool = false, announce: ((String) throws -> Void)? = nil) throws {
        let bytes = Array("hello\n".utf8)
        var hasher = MultiHasher([.sha256])
        bytes.withUnsafeBytes { hasher.update($0) }
        let writer = try BagWriter(
            path: path, payload: [BagPayloadItem(path: "a.txt", size: 6, sha256: hasher.finalize()[.sha256]!)],
            replacesExisting: replacing, willCreateTemporaryFile: announce)
        try writer.writePayload(0) { write in try bytes.withUnsafeBytes(write) }
        try writer.finish()
    }

    @Test(arguments: ["bag.tar.zst", "bag"])
    func aFileAtThePathIsRefusedUnlessReplacing(name: String) throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = root + "/" + name
        try Data("old".utf8).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: BagError.self) { try writeBag(path) }
        #expect(error?.code == .alreadyExists)
        #expect(error?.description == "\(path): already exists")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data("old".utf8))
        #expect(entries(root) == [name])
        try writeBag(path, replacing: true)
        #expect(entries(root) == [name])
        #expect(try BagReader.read(at: path).problems.isEmpty)
    }

    @Test func aDirectoryBagAnnouncesItsHiddenFolderBeforeMakingIt() throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = root + "/bag"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: path + "/notes.txt"))
        var announced: [String] = []
        try writeBag(path, replacing: true) { hidden in
            #expect(access(hidden, F_OK) != 0)
            announced.append((hidden as NSString).lastPathComponent)
        }
        // The folder under construction, then the replaced folder on its way out: both gone.
        #expect(announced.count == 2)
        #expect(announced.first?.hasPrefix(".bag.partial-") == true)
        #expect(announced.last?.hasPrefix(".bag.replaced-") == true)
        #expect(entries(root) == ["bag"])
        #expect(!entries(path).contains("notes.txt"))
        // An empty folder takes a bag without replacing.
        let empty = root + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        try writeBag(empty)
        #expect(try BagReader.read(at: empty).problems.isEmpty)
    }
}
