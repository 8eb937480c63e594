import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// A catalog on a read-only file system (an archive disk, a read-only share, a
/// backup) can be read by every command that only reads; a command that would
/// change it says the catalog is read-only.
@Suite struct ReadOnlyCatalogTests {
    /// Runs `script` (sh) in a mount namespace of its own where `folder` is mounted
    /// read-only over itself, as a read-only mount of the catalog would be. Its output is
    /// returned; the mount vanishes with the namespace.
    func onReadOnlyMount(_ folder: URL, _ script: String) async throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        // As root a mount namespace is enough; otherwise a user namespace maps us to root in it.
        let run = try await ChildProcess.run(
            "/usr/bin/unshare",
            (getuid() == 0 ? ["--mount"] : ["--map-root-user", "--mount"]) + [
                "/bin/sh", "-c",
                "mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\" || exit 99\n" + script, folder.path,
            ])
        return (run.status, run.stdoutText, run.stderrText)
    }

    /// The files of `folder`, with sizes and modification times; not the store's `-shm`,
    /// the shared memory of SQLite's WAL, which every reader of the store writes.
    func snapshot(_ folder: URL) throws -> [String: [FileAttributeKey: AnyHashable]] {
        var result: [String: [FileAttributeKey: AnyHashable]] = [:]
        for path in FileManager.default.subpaths(atPath: folder.path) ?? [] where !path.hasSuffix("-shm") {
            let attributes = try FileManager.default.attributesOfItem(atPath: folder.appending(path: path).path)
            result[path] = [
                .size: attributes[.size] as? AnyHashable,
                .modificationDate: attributes[.modificationDate] as? AnyHashable,
            ].compactMapValues { $0 }
        }
        return result
    }

    @Test func readingCommandsWorkOnAReadOnlyMountAndWritingOnesSaySo() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let added = try await catalog.add([try t.file("a.txt", "alpha\n"), try t.file("b.txt", "beta\n")]).added
        catalog.close()
        // A removal committed whose file a crash kept: pending, as a copy taken at that moment would hold it.
        let rm = try await t.run(["rm", "\(added[1].id)"], environment: ["ASSETCAT_FAULT": "after-commit"])
        #expect(rm.status == 86)
        let cli = TestCatalog.executable().path
        let catalogPath = t.root.path
        let run = try await onReadOnlyMount(
            t.root,
            """
            a() { "\(cli)" "$@" --catalog "\(catalogPath)"; echo "[exit $?]"; }
            a ls; a show 1; a cat 1; a verify; a stats; a jobs ls; a rm 1; a add "\(t.sources.path)/a.txt"; a tag 1 --add x
            """)
        #expect(run.status == 0)
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.filter { $0.hasPrefix("[exit") } == Array(repeating: "[exit 0]", count: 6)
                + Array(repeating: "[exit 1]", count: 3))
        #expect(run.stdout.contains("alpha\n[exit 0]"))
        #expect(run.stdout.contains("checked 1 asset: 0 missing, 0 damaged\n[exit 0]"))
        let note =
            "note: the catalog is read-only; 1 committed removal could not be finished (the next command that can "
            + "write the catalog finishes them)"
        let refusal =
            "assetcat: The catalog at \(catalogPath) is read-only (Read-only file system): this command changes it. "
            + "Commands that only read it (ls, show, cat, verify, stats) still work"
        #expect(
            run.stderr == Array(repeating: note + "\n", count: 6).joined()
                + Array(repeating: refusal + "\n", count: 3).joined())
        // Once writable again, the next command finishes the removal.
        #expect(t.hasObject(added[1].sha256))
        let ls = try await t.run(["ls"])
        #expect(ls.status == 0)
        #expect(ls.stderr.isEmpty)
        #expect(!t.hasObject(added[1].sha256))
    }

    @Test func aReadOnlyOpenWritesNothingAndRefusesChanges() async throws {
        let t = try TestCatalog()
        do {
            let catalog = try t.create()
            _ = try await catalog.add([try t.file("a.txt", "alpha")])
            catalog.close()
        }
        // Closed by another process, as a catalog at rest is.
        #expect(try await t.run(["ls"]).status == 0)
        let before = try snapshot(t.root)
        let catalog = try Catalog.open(at: t.root, options: .init(access: .readOnly))
        #expect(catalog.isReadOnly)
        #expect(try catalog.assets().map(\.name) == ["a.txt"])
        let refusal = "The catalog at \(t.root.path) is open read-only: it cannot be changed"
        let add = await #expect(throws: CatalogError.self) { try await catalog.add([try t.file("b.txt", "beta")]) }
        #expect(add?.code == .readOnly)
        #expect(add?.message == refusal)
        let remove = #expect(throws: CatalogError.self) { try catalog.remove(1) }
        #expect(remove?.code == .readOnly)
        #expect(remove?.message == refusal)
        catalog.close()
        #expect(try snapshot(t.root) == before)
    }
}
