import Foundation
import Logging
import Testing

@testable import Persistence

/// ``StoreWatch``: a change calls `onChange` with ``StoreWatch/Wake/changed``; the delay it
/// returns brings a call with ``StoreWatch/Wake/again`` when nothing changes meanwhile, and
/// a change before then calls it at once.
@Suite struct StoreWatchTests {
    /// What the watch called `onChange` with, in order; each call answers with the next of
    /// `delays` (then `nil`).
    final class Calls: @unchecked Sendable {
        private let lock = NSLock()
        private var recorded: [StoreWatch.Wake] = []
        private var delays: [TimeInterval?]
        init(delays: [TimeInterval?]) { self.delays = delays }
        func record(_ wake: StoreWatch.Wake) -> TimeInterval? {
            lock.lock()
            defer { lock.unlock() }
            recorded.append(wake)
            return delays.isEmpty ? nil : delays.removeFirst()
        }
        var wakes: [StoreWatch.Wake] {
            lock.lock()
            defer { lock.unlock() }
            return recorded
        }
    }

    func watched(_ delays: [TimeInterval?]) throws -> (file: FileHandle, watch: StoreWatch, calls: Calls) {
        let path = FileManager.default.temporaryDirectory.appending(path: "watch-\(UUID().uuidString)").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        let calls = Calls(delays: delays)
        let onChange: @Sendable (StoreWatch.Wake) -> Double? = { calls.record($0) }
        let onFailure: @Sendable () -> Void = { Issue.record("the watch failed") }
        let made = StoreWatch(path: path, logger: Logger(label: "test"), onChange: onChange, onFailure: onFailure)
        let watch = try #require(made)
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try FileManager.default.removeItem(atPath: path)  // the watch and the handle keep it
        return (file, watch, calls)
    }

    @Test func aDelayAskedForBringsACallAgain() async throws {
        let (file, watch, calls) = try watched([0.05, nil])
        defer { watch.stop() }
        try file.write(contentsOf: Data("a".utf8))
        #expect(try await eventually { calls.wakes.count == 2 })
        #expect(calls.wakes == [.changed, .again])
    }

    @Test func aChangeDuringADelayCallsAtOnce() async throws {
        let (file, watch, calls) = try watched([600, nil])
        defer { watch.stop() }
        try file.write(contentsOf: Data("a".utf8))
        // Read and reported: the next write is a change of its own (coalesced changes are
        // reported once the coalescing ends, not lost).
        #expect(try await eventually { calls.wakes.count == 1 })
        try file.write(contentsOf: Data("b".utf8))
        // Ten minutes is longer than `eventually` waits.
        #expect(try await eventually { calls.wakes.count == 2 })
        #expect(calls.wakes == [.changed, .changed])
    }
}
