import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `assetcat import` and `validate` given a FIFO as the bundle: refused
/// at once, naming what it is. The ``FIFOUnblocker`` only matters without the fix: it lets the
/// child's open return, so that the test fails on the output instead of hanging.
@Suite struct ArchivePathCLITests {
    func fifo(_ t: TestCatalog, _ name: String) -> (path: String, unblocker: FIFOUnblocker) {
        let path = t.directory.appending(path: name).path
        precondition(mkfifo(path, 0o644) == 0)
        let unblocker = FIFOUnblocker(path)
        unblocker.start()
        return (path, unblocker)
    }

    @Test func importOfAFIFOIsRefusedAtOnce() async throws {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let (path, unblocker) = fifo(t, "bundle.tar")
        defer { unblocker.stop() }
        let run = try await t.run(["import", path])
        #expect(run.status == 1)
        #expect(run.stdout == "")
        #expect(
            run.stderr
                == "assetcat: \(path) is not a valid bag, nothing was imported: Cannot open '\(path)': it is a FIFO, "
                + "not a regular file\n")
        #expect(try await t.run(["ls", "--json"]).stdout == "[]\n")
    }

    @Test func validateOfAFIFOIsRefusedAtOnce() async throws {
        let t = try TestCatalog()
        let (path, unblocker) = fifo(t, "bundle.zip")
        defer { unblocker.stop() }
        let run = try await t.run(["validate", path], namesCatalog: false)
        #expect(run.status == 1)
        #expect(run.stdout == "Cannot open '\(path)': it is a FIFO, not a regular file\n")
        #expect(run.stderr == "\(path) is not a valid bag: 1 problem\n")
    }
}
