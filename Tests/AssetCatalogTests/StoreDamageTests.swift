import AssetCatalogTestSupport
import Foundation
import Testing

@testable import AssetCatalog

/// Opening a catalog reads its store's header and schema, not every page: damage found
/// later is a clear error naming the file, and `verify` reports it. Nothing is moved.
@Suite struct CatalogStoreDamageTests {
    @Test func damageInTheStoreIsAClearErrorAndVerifyReportsIt() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        // Referenced files with long paths: each asset's row holds its path, so the store
        // outgrows the size an open checks in full.
        let folder = ["a", "b", "c", "d", "e"].map { String(repeating: $0, count: 200) }.joined(separator: "/")
        var files: [String] = []
        for i in 0..<1_500 { files.append(try t.file("\(folder)/file-\(i).txt", "\(i)")) }
        #expect(try await catalog.add(files, options: .init(mode: .reference)).added.count == files.count)
        catalog.close()
        let store = Catalog.storeURL(in: t.root)
        // A clean close leaves no commit in the -wal: the next open is not taken for one after a crash.
        let wal = (try? FileManager.default.attributesOfItem(atPath: store.path + "-wal"))?[.size] as? Int
        #expect(wal ?? 0 == 0)

        // The page of the table that holds one asset's row (its path is in no index).
        var bytes = try Data(contentsOf: store)
        #expect(bytes.count > 1 << 20)  // more than an open checks in full
        let pageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        let offset = try #require(bytes.firstRange(of: Data(files[750].utf8))).lowerBound
        let page = offset / pageSize
        #expect(page > 0)
        bytes.replaceSubrange(page * pageSize..<(page + 1) * pageSize, with: Data(repeating: 0xFF, count: pageSize))
        try bytes.write(to: store)

        let reopened = try t.open()
        defer { reopened.close() }
        let error = #expect(throws: CatalogError.self) { try reopened.assets() }
        #expect(error?.code == .store)
        #expect(
            error?.message
                == "The store \(store.path) is damaged (database disk image is malformed); nothing was changed. "
                + "Run `assetcat verify --store-only` to see the damage, and restore the catalog from a backup")
        #expect(error?.path == store.path)

        let findings = try reopened.verifyStore()
        #expect(!findings.isEmpty)
        let report = try await reopened.verify()
        #expect(report.storeProblems == findings)
        #expect(report.checked == 0)
        #expect(!report.isHealthy)
        // Never moved, never deleted.
        let now = try Data(contentsOf: store)
        #expect(now[page * pageSize..<(page + 1) * pageSize] == Data(repeating: 0xFF, count: pageSize))
        #expect(!FileManager.default.fileExists(atPath: t.root.appending(path: "quarantine").path))
    }

    @Test func verifyOfASoundCatalogFindsNoDamageInTheStore() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("one.txt", "one")])
        #expect(try catalog.verifyStore().isEmpty)
        let report = try await catalog.verify()
        #expect(report.storeProblems.isEmpty && report.isHealthy)
    }
}
