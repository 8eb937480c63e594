import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// A catalog whose file system is full: every command that only reads works (SQLite cannot
/// start its log there, a read-only open writes nothing) and says once that the disk is
/// full; a command that changes the catalog fails saying so and naming the file system,
/// with nothing changed; once there is space again, the next command finishes the work an
/// earlier one left.
@Suite struct FullDiskTests {
    @Test func readingCommandsWorkOnAFullDiskAndChangesFailSayingSo() async throws {
        let t = try TestCatalog()
        let disk = t.directory.appending(path: "disk")
        try FileManager.default.createDirectory(at: disk, withIntermediateDirectories: true)
        let catalog = disk.appending(path: "catalog").path
        let cli = TestCatalog.executable().path
        try t.file("a.txt", "alpha\n")
        try t.file("b.txt", "beta\n")
        try t.file("c.txt", "gamma\n")
        // In a mount namespace of its own (as root, or mapped to root in a user namespace):
        // an 8 MB tmpfs holding the catalog, filled once the catalog has its assets and a
        // removal a crash left pending. Everything on it vanishes with the namespace, so the
        // whole story is one script; each command's output is marked with its exit status.
        let script = """
            set -u
            mount -t tmpfs -o size=8m tmpfs "$0" || exit 99
            a() { "\(cli)" "$@" --catalog "\(catalog)"; echo "[exit $?]"; }
            "\(cli)" init "\(catalog)" >/dev/null || exit 98
            "\(cli)" add "\(t.sources.path)/a.txt" "\(t.sources.path)/b.txt" --catalog "\(catalog)" >/dev/null || exit 97
            ASSETCAT_FAULT=after-commit "\(cli)" rm 2 --catalog "\(catalog)" >/dev/null
            [ $? -eq 86 ] || exit 96
            # The crash left SQLite's log, with room in it: fold it into the store and close it,
            # as a clean close does, without finishing the removal.
            python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "\(catalog)/catalog.sqlite" || exit 95
            dd if=/dev/zero of="$0/fill" bs=4k 2>/dev/null
            echo "[full]"
            a ls; a ls --json; a stats; a verify; a show 1; a cat 1; a jobs ls
            echo "[writing]"
            a rm 1; a gc; a add "\(t.sources.path)/c.txt"; a tag 1 --add x
            echo "[after]"
            a ls
            rm "$0/fill"
            echo "[space]"
            a ls
            a rm 1
            """
        let run = try await ChildProcess.run(
            "/usr/bin/unshare",
            (getuid() == 0 ? ["--mount"] : ["--map-root-user", "--mount"]) + ["/bin/sh", "-c", script, disk.path])
        #expect(run.status == 0, "\(run.stderrText)")
        let out = run.stdoutText
        let sections = out.components(separatedBy: "\n[writing]\n")
        try #require(sections.count == 2, "\(out)\n\(run.stderrText)")
        let reading = sections[0]
        #expect(
            reading.split(separator: "\n").filter { $0.hasPrefix("[exit") }
                == Array(repeating: "[exit 0]", count: 7), "\(out)")
        #expect(reading.contains("alpha\n[exit 0]"), "cat read the file")
        #expect(reading.contains("checked 1 asset: 0 missing, 0 damaged\n[exit 0]"), "\(reading)")
        #expect(reading.contains("a.txt"))
        let writing = sections[1].components(separatedBy: "\n[after]\n")[0]
        #expect(
            writing.split(separator: "\n").filter { $0.hasPrefix("[exit") }
                == Array(repeating: "[exit 1]", count: 4), "\(out)")
        let fileSystem = "the file system mounted at \(disk.path) (tmpfs, 0 bytes free)"
        let note =
            "note: the disk is full (\(fileSystem)): the catalog is open read-only; 1 committed removal could not be "
            + "finished (the next command that can write the catalog finishes them)"
        let refusal =
            "assetcat: The disk is full: \(fileSystem) has no space left for the catalog at \(catalog) to write its "
            + "change. Nothing was changed; free space on it, then run the command again (commands that only read "
            + "the catalog still work)"
        #expect(
            run.stderrText
                == Array(repeating: note + "\n", count: 7).joined()
                + Array(repeating: refusal + "\n", count: 4).joined()
                + note + "\n",  // the ls after the refusals
            "\(run.stderrText)")
        // Nothing was changed: asset 1 is still listed on the full disk, and once there is
        // space, the next command finishes the pending removal and the rm works.
        let after = out.components(separatedBy: "\n[after]\n")[1]
        #expect(after.hasPrefix("     ID  KIND"), "\(after)")
        #expect(after.contains("a.txt\n[exit 0]\n[space]\n"))
        let space = out.components(separatedBy: "\n[space]\n")[1]
        #expect(
            space.contains("a.txt\n[exit 0]\nremoved 1  a.txt\nremoved 1 asset and 1 file from objects/\n[exit 0]\n"))
    }
}
