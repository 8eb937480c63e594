import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A killed or interrupted export leaves nothing at or beside its target (after the next
/// command at the latest), and an export never replaces what is at its path unless told to
/// (`--force`).
@Suite struct KilledExportTests {
    /// A catalog of 60 small assets, and an empty folder `out/` for bundles.
    static func populated() async throws -> (TestCatalog, String) {
        let t = try TestCatalog()
        try t.create().close()
        for i in 0..<60 { try t.file("many/f\(String(format: "%02d", i)).txt", "content \(i)\n") }
        let add = try await t.run(["add", "--recursive", t.sources.appending(path: "many").path])
        #expect(add.status == 0, "\(add.stderr)")
        let out = t.directory.appending(path: "out").path
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        return (t, out)
    }

    static func entries(_ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
    }

    /// `bundle` in `out/`, the fault points, the n-th reach, and whether the dead process
    /// leaves a hidden file or folder (for the next command to remove): an archive written
    /// to an unnamed file leaves none; a directory bag under construction, or an archive
    /// on a file system without unnamed files (`named-export-file`), does.
    @Test(arguments: [
        ("b.tar.zst", "after-export-payload", 1, false), ("b.tar.zst", "after-export-payload", 40, false),
        ("b.tar.zst", "before-export-publish", 1, false), ("b.zip", "named-export-file,after-export-payload", 1, true),
        ("b.zip", "named-export-file,before-export-publish", 1, true), ("b", "after-export-payload", 1, true),
        ("b", "before-export-publish", 1, true),
    ])
    func killedExportLeavesNothingBesideItsTarget(bundle: String, faults: String, at count: Int, leaves: Bool)
        async throws
    {
        let (t, out) = try await Self.populated()
        let run = try await t.run(
            ["export", out + "/" + bundle], environment: ["ASSETCAT_FAULT": faults, "ASSETCAT_FAULT_AT": String(count)])
        #expect(run.status == 86, "\(run.stderr)")  // died at the fault point
        let left = Self.entries(out)
        #expect(left.count == (leaves ? 1 : 0), "\(left)")
        #expect(left.allSatisfy { $0.hasPrefix("." + bundle + ".partial-") }, "\(left)")
        // The next command, whatever it is, removes what the dead export left.
        #expect(try await t.run(["stats"]).status == 0)
        #expect(Self.entries(out) == [])
        // And the export then works.
        #expect(try await t.run(["export", out + "/" + bundle]).status == 0)
        #expect(Self.entries(out) == [bundle])
    }

    /// An export into folders that do not exist yet (`out/new/deeper/`), killed once it made
    /// them, at each point up to its publish: the next command removes them with what the
    /// export left inside, and nothing is left in `out/`. Before, the folders stayed.
    @Test(arguments: [
        ("b.tar.zst", "after-export-folders"), ("b.tar.zst", "after-export-payload"),
        ("b.tar.zst", "before-export-publish"), ("b.zip", "named-export-file,after-export-payload"),
        ("b", "after-export-folders"), ("b", "before-export-publish"),
    ])
    func killedExportLeavesNoFolderItMade(bundle: String, faults: String) async throws {
        let (t, out) = try await Self.populated()
        let path = out + "/new/deeper/" + bundle
        let run = try await t.run(["export", path], environment: ["ASSETCAT_FAULT": faults])
        #expect(run.status == 86, "\(run.stderr)")  // died at the fault point
        #expect(Self.entries(out) == ["new"])
        #expect(Self.entries(out + "/new") == ["deeper"])
        #expect(try await t.run(["stats"]).status == 0)
        #expect(Self.entries(out) == [])
        // The export then works, and its folders stay with the bundle in them, after any command.
        #expect(try await t.run(["export", path]).status == 0)
        #expect(try await t.run(["stats"]).status == 0)
        #expect(Self.entries(out + "/new/deeper") == [bundle])
    }

    /// A folder above the bundle that someone else fills meanwhile is theirs too: the next
    /// command leaves it, and what is in it, alone (it removes only the empty ones).
    @Test func killedExportLeavesAFolderThatHoldsSomethingElse() async throws {
        let (t, out) = try await Self.populated()
        let run = try await t.run(
            ["export", out + "/new/deeper/b.tar.zst"], environment: ["ASSETCAT_FAULT": "after-export-folders"])
        #expect(run.status == 86, "\(run.stderr)")
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: out + "/new/notes.txt"))
        #expect(try await t.run(["stats"]).status == 0)
        #expect(Self.entries(out) == ["new"])
        #expect(Self.entries(out + "/new") == ["notes.txt"])
    }

    /// Killed while replacing a bundle (`--force`): the old bundle stays whole, nothing beside it.
    @Test(arguments: ["b.tar.zst", "b"])
    func killedForcedExportKeepsTheOldBundle(bundle: String) async throws {
        let (t, out) = try await Self.populated()
        let path = out + "/" + bundle
        #expect(try await t.run(["export", path, "1"]).status == 0)
        let run = try await t.run(
            ["export", "--force", path], environment: ["ASSETCAT_FAULT": "before-export-publish"])
        #expect(run.status == 86)
        #expect(try await t.run(["stats"]).status == 0)
        #expect(Self.entries(out) == [bundle])
        let validate = try await t.run(["validate", path], namesCatalog: false)
        #expect(validate.stdout.hasSuffix("is valid: BagIt 1.0, 1 payload file, 10 B\n"), "\(validate.stdout)")
    }

    /// SIGTERM and SIGINT stop an export and remove what it wrote before the process exits.
    @Test(arguments: [
        ("b.tar.zst", SIGTERM, false), ("b.zip", SIGTERM, true), ("b", SIGTERM, false), ("b.tar.zst", SIGINT, false),
        ("b", SIGINT, false),
    ])
    func interruptedExportRemovesItsFileBeforeExiting(bundle: String, signal: Int32, named: Bool) async throws {
        let (t, out) = try await Self.populated()
        let faults = named ? "slow-export,named-export-file" : "slow-export"
        let process = try ChildProcess(
            TestCatalog.executable().path, ["export", "--catalog", t.root.path, out + "/" + bundle],
            environment: ["ASSETCAT_FAULT": faults])
        // Interrupted once the bundle is under way: a hidden file or folder in out/ (a
        // directory bag, a named file), or a descriptor of the unnamed file the process holds
        // there (`out/#inode (deleted)`).
        let pid = process.pid
        let opened = try await offThePool { () -> Bool in
            func started() -> Bool {
                if !Self.entries(out).isEmpty { return true }
                let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
                return fds.contains { fd in
                    let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")
                    return link?.hasPrefix(out + "/") == true
                }
            }
            // Only a hang meets it: under ASan, in a busy suite, a child takes long to get there.
            let deadline = Date().addingTimeInterval(120)
            while Date() < deadline, !started() { usleep(1000) }
            // Judged before the signal: once it has it, the process removes what it began.
            let seen = started()
            process.signal(signal)
            return seen
        }
        #expect(opened)
        let run = try await process.finish()
        let stderr = run.stderrText
        #expect(run.termination == .exited(128 + signal))
        #expect(stderr == "interrupted: no bundle was written\n")
        #expect(Self.entries(out) == [])  // before any other command
    }

    @Test func exportOverAFileIsRefusedUnlessForced() async throws {
        let (t, out) = try await Self.populated()
        let path = out + "/b.tar"
        try Data("old\n".utf8).write(to: URL(fileURLWithPath: path))
        let run = try await t.run(["export", path])
        #expect(run.status == 1)
        #expect(run.stdout == "")
        #expect(run.stderr == "assetcat: Cannot export to \(path): it already exists; use --force to replace it\n")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "old\n")
        #expect(Self.entries(out) == ["b.tar"])
        let forced = try await t.run(["export", "--force", path])
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(Self.entries(out) == ["b.tar"])
        #expect(try await t.run(["validate", path], namesCatalog: false).status == 0)
        // A second export over the bundle is refused as well.
        #expect(try await t.run(["export", path]).status == 1)
    }

    @Test func directoryBagOverANonEmptyFolderIsRefusedUnlessForced() async throws {
        let (t, out) = try await Self.populated()
        let path = out + "/bag"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: path + "/notes.txt"))
        let run = try await t.run(["export", path])
        #expect(run.status == 1)
        #expect(run.stderr == "assetcat: Cannot export to \(path): it already exists; use --force to replace it\n")
        #expect(Self.entries(path) == ["notes.txt"])
        #expect(Self.entries(out) == ["bag"])
        // An archive over a folder is refused too, even an empty one.
        try FileManager.default.createDirectory(atPath: out + "/empty.tar", withIntermediateDirectories: true)
        #expect(try await t.run(["export", out + "/empty.tar"]).status == 1)
        // --force replaces the folder by the bag.
        let forced = try await t.run(["export", "--force", path])
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(
            Self.entries(path) == [
                "assetcat-records.json", "bag-info.txt", "bagit.txt", "data",
                "manifest-sha256.txt", "tagmanifest-sha256.txt",
            ])
        #expect(Self.entries(out) == ["bag", "empty.tar"])
        // An empty folder takes a bag without --force.
        let empty = out + "/fresh"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        #expect(try await t.run(["export", empty]).status == 0)
        #expect(try await t.run(["validate", empty], namesCatalog: false).status == 0)
    }

    @Test func theLibraryRefusesToReplaceUnlessTold() async throws {
        let (t, out) = try await Self.populated()
        let catalog = try t.open()
        defer { catalog.close() }
        let path = out + "/b.tar.gz"
        try Data("old\n".utf8).write(to: URL(fileURLWithPath: path))
        let error = await #expect(throws: CatalogError.self) { try await catalog.export(to: path) }
        #expect(error?.code == .exists)
        #expect(error?.message == "Cannot export to \(path): it already exists; use --force to replace it")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "old\n")
        let result = try await catalog.export(to: path, options: ExportOptions(replacesExisting: true))
        #expect(result.assets == 60)
        #expect(Self.entries(out) == ["b.tar.gz"])
    }
}
