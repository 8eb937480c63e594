import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// `export` makes the folders above the bundle's path, and takes them away again if it fails.
@Suite struct ExportFolderTests {
    @Test(arguments: ["tar", "tar.zst", "zip", "dir"])
    func exportCreatesTheMissingFoldersAboveTheBundle(format: String) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "a\n")])
        let bundle = t.directory.appending(path: "exports/2026/trip" + (format == "dir" ? "" : "." + format)).path
        let result = try await catalog.export(to: bundle)
        #expect(result.assets == 1)
        var isFolder: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: bundle, isDirectory: &isFolder))
        #expect(isFolder.boolValue == (format == "dir"))
        let imported = try TestCatalog()
        let other = try imported.create()
        defer { other.close() }
        #expect(try await other.importBundle(from: bundle).importedCount == 1)
    }

    @Test func aFailedExportRemovesTheFoldersItCreatedAndOnlyThose() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let file = try t.file("later.bin", "bytes")
        _ = try await catalog.add([file], options: .init(mode: .reference, defersHashing: true))  // no digest: refused
        let existing = t.directory.appending(path: "exports").path
        try FileManager.default.createDirectory(atPath: existing, withIntermediateDirectories: false)
        let bundle = existing + "/new/deeper/out.tar"
        await #expect(throws: CatalogError.self) { _ = try await catalog.export(to: bundle) }
        #expect(!FileManager.default.fileExists(atPath: existing + "/new"))
        #expect(FileManager.default.fileExists(atPath: existing))
    }

    @Test func aFolderThatCannotBeCreatedIsNamed() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "a\n")])
        let file = try t.file("plain", "not a folder")
        let bundle = file + "/sub/out.tar"
        let error = await #expect(throws: CatalogError.self) { _ = try await catalog.export(to: bundle) }
        #expect(error?.code == .io)
        #expect(
            error?.message == "Cannot export to \(bundle): could not create the folder \(file)/sub: Not a directory")
        #expect(error?.path == bundle)
    }
}
