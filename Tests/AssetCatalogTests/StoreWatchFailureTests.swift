import AssetCatalogTestSupport
import Foundation
import Logging
import Persistence
import Synchronization
import TestScratch
import Testing

@_spi(Testing) @testable import AssetCatalog

#if canImport(Glibc)
    import Glibc
#endif

/// The messages logged through it, at every level.
final class LoggedMessages: LogHandler, Sendable {
    private let lines = Mutex<[String]>([])
    var messages: [String] { lines.withLock { $0 } }

    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }
    var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }
    func log(event: LogEvent) { lines.withLock { $0.append("\(event.level): \(event.message)") } }
}

/// The watch on a SQLite store's `-wal` (``StoreWatch``) failing while a queue relies on it.
@Suite struct StoreWatchFailureTests {
    /// The watch's `poll(2)` fails (injected: EIO) as the queue starts listening. The failure
    /// is logged, the queue learns that it hears nothing (the interruption marker) and polls:
    /// a deletion another process commits still stops the run, and a job another process
    /// submits is still claimed, with the queue looking at the store on its own only hourly.
    /// Before, the watch's thread ended silently: the queue took itself for listening and
    /// noticed neither until its hourly look.
    @Test func aFailedWatchIsLoggedAndTheQueuePollsInstead() async throws {
        let t = try TestCatalog()
        for n in 0..<2 { _ = try t.file("d/a\(n).txt", "asset \(n)\n") }
        let made = try t.create()
        let assets = try await made.add(
            [t.sources.appending(path: "d").path], options: AddOptions(mode: .reference, recursive: true)
        ).added.sorted { $0.id < $1.id }
        made.close()
        try #require(assets.count == 2)

        let log = LoggedMessages()
        var options = Catalog.OpenOptions(logger: Logger(label: "test") { _ in log })
        options.testing.jobs.listeningLookInterval = 3_600  // only the watch, or polling, notices
        options.testing.jobs.externalPollInterval = 0.05
        options.testing.jobs.idlePollInterval = .milliseconds(50)
        let catalog = try Catalog.open(at: t.root, options: options)
        defer { catalog.close() }
        let processor = UntilCancelled()
        let counter = RunCounter()
        catalog.jobs.register(processor, as: "until-cancelled")
        catalog.jobs.register(counter, as: "count")
        let running = try catalog.jobs.submit("until-cancelled", for: assets[0].id)
        StoreWatch.$injectedPollFailure.withValue(EIO) { catalog.jobs.start() }
        defer { catalog.jobs.stop() }
        #expect(try await waitUntil { processor.runs.withLock { $0 } == 1 })
        #expect(catalog.jobs.watcher.isWatchingStore)
        #expect(
            try await waitUntil(atMost: .seconds(60)) { !catalog.jobs.watcher.hearsAnnouncements },
            "the queue was not told that the watch failed")
        let wal = t.root.appending(path: "catalog.sqlite").path + "-wal"
        #expect(
            log.messages.contains(
                "error: the watch of \(wal) failed (poll: Input/output error); other connections' commits are "
                    + "polled for instead"), "\(log.messages)")

        let other = try t.open()
        defer { other.close() }
        try other.remove(assets[0].id)  // its commit marks the row cancelled; the run here goes on
        #expect(
            try await waitUntil(atMost: .seconds(60)) { processor.cancellations.withLock { $0 } == 1 },
            "another process's deletion did not stop the run")
        #expect(try await waitUntil { catalog.jobs.runs.tasksInFlight == 0 })
        #expect(try catalog.jobs.job(id: running)?.state == .cancelled)

        other.jobs.register(counter, as: "count")
        let submitted = try other.jobs.submit("count", for: assets[1].id)
        #expect(
            try await waitUntil(atMost: .seconds(60)) { counter.runs.withLock { $0[submitted] } == 1 },
            "a job another process submitted was not claimed")
        #expect(try await waitUntil { try catalog.jobs.job(id: submitted)?.state == .succeeded })
        #expect(catalog.jobs.metrics.externalPolls > 0)
    }
}
