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
    // Interrupt once files are being staged (they reach objects/ with their
    // batch), watching from a thread of its own: the test's tasks share the
    // concurrency pool with the whole suite and could notice too late.
    let staging = t.root.appending(path: "staging").path
    let staged = try await offThePool {
        // Only a hang meets it: under ASan, in a busy suite, a child takes long to get there.
        let deadline = Date().addingTimeInterval(120)
        let staged = { (try? FileManager.default.subpathsOfDirectory(atPath: staging).count) ?? 0 >= 10 }
        while Date() < deadline, !staged() { usleep(1000) }
        process.signal(SIGINT)
        return staged()
    }
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
