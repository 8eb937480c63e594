import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Test func ctrlCDuringAddCommitsWhatIsCompleteAndLeavesNoDebris() async throws {
    let t = try TestCatalog()
    try t.create().close()
    let block = Data((0..<(64 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    var paths: [String] = []
    for i in 0..<200 {
        var data = block
        data[0] = UInt8(i)
        data[1] = UInt8(i >> 8)
        paths.append(try t.file("big/f\(String(format: "%03d", i)).bin", data))
    }
    // Each file takes 20 ms longer: the add lasts about two seconds, whatever the machine's load.
    let process = try ChildProcess(
        TestCatalog.executable().path, ["add", "--catalog", t.root.path] + paths,
        environment: ["ASSETCAT_FAULT": "slow-ingest"])
    let staged = try await t.signal(SIGINT, to: process, onceStagingHolds: 10)
    #expect(staged, "the interrupt came before the add staged anything: it tests nothing")
    let run = try await process.finish()
    let stderr = run.stderrText
    #expect(run.termination == .exited(130))
    let catalog = try t.open()
    let recorded = try catalog.assets()
    #expect(recorded.count > 0 && recorded.count < 200)
    #expect(
        stderr
            == "interrupted: added \(recorded.count) of 200 files (0 archive members); nothing was left half-done — "
            + "run the same command again to add the rest\n")
    // In order, complete, and nothing half-done.
    let names = recorded.map(\.name)
    #expect(names == names.sorted())  // recorded in the order given (a cancelled file may leave a gap)
    #expect(Set(names).isSubset(of: paths.map { ($0 as NSString).lastPathComponent }))
    #expect(try await catalog.verify().issues.isEmpty)
    #expect(try catalog.collectGarbage().unreferenced.isEmpty)
    #expect(t.stagingEntries().count == 2)  // only this process's own, empty
    catalog.close()
    #expect(t.stagingEntries().isEmpty)
}

/// Ctrl-C commits the files complete when it came — not always the first ones: a file being
/// read when it came is cancelled, and the files complete after it are recorded too. The
/// same command again says it resumes, skips exactly the files recorded, and adds the
/// rest, gaps included: every file recorded once, in the catalog whole.
@Test func theSameAddAfterCtrlCAddsTheRestOnce() async throws {
    let t = try TestCatalog()
    try t.create().close()
    var paths: [String] = []
    for i in 0..<200 {
        paths.append(try t.file("big/f\(String(format: "%03d", i)).bin", Data(repeating: UInt8(i), count: 32 << 10)))
    }
    let arguments = ["add", "--catalog", t.root.path] + paths
    let process = try ChildProcess(
        TestCatalog.executable().path, arguments, environment: ["ASSETCAT_FAULT": "slow-ingest"])
    let staged = try await t.signal(SIGINT, to: process, onceStagingHolds: 20)
    #expect(staged, "the interrupt came before the add staged anything: it tests nothing")
    let interrupted = try await process.finish()
    #expect(interrupted.termination == .exited(130))
    let first = try t.open().assets().count
    #expect(first > 0 && first < 200)
    let again = try await t.run(["add"] + paths)
    #expect(again.status == 0, "\(again.stderr)")
    #expect(
        again.stdout
            == "resumed an interrupted add of the same paths: skipped \(first) file\(first == 1 ? "" : "s") it had "
            + "recorded\nadded \(200 - first) file\(200 - first == 1 ? "" : "s")\n")
    let catalog = try t.open()
    defer { catalog.close() }
    let recorded = try catalog.assets()
    #expect(recorded.count == 200)
    #expect(Set(recorded.compactMap(\.path)) == Set(paths))
    #expect(try await catalog.verify().issues.isEmpty)
    #expect(try catalog.collectGarbage().unreferenced.isEmpty)
}
