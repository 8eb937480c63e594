import Foundation
import Synchronization
import Testing

@testable import BagIt

/// Rows handed to ``BackgroundBatches`` are written in order, a batch at a time, on its own
/// queue; the first failure stops the writes and reaches the producer.
struct BackgroundBatchesTests {
    struct Failure: Error, Equatable {}

    /// What the writing queue saw, shared with the test.
    final class Written: Sendable {
        let batches = Mutex<[[Int]]>([])
    }

    @Test func rowsAreWrittenInOrderABatchAtATime() throws {
        let written = Written()
        let rows = BackgroundBatches<Int>(label: "test", batchSize: 4, waiting: 2) { batch in
            written.batches.withLock { $0.append(batch) }
        }
        for i in 0..<10 { try rows.add(i) }
        try rows.drain()
        #expect(written.batches.withLock { $0 } == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
        try rows.drain()  // nothing more to write
        #expect(written.batches.withLock { $0.count } == 3)
    }

    @Test func theFirstFailureStopsTheWritesAndReachesTheProducer() throws {
        let written = Written()
        let rows = BackgroundBatches<Int>(label: "test", batchSize: 2) { batch in
            if batch.contains(2) { throw Failure() }
            written.batches.withLock { $0.append(batch) }
        }
        try rows.add(0)
        try rows.add(1)
        try rows.add(2)
        try rows.add(3)  // the failing batch is handed over
        #expect(throws: Failure()) { try rows.drain() }
        try rows.add(4)  // kept: no batch to hand over yet…
        #expect(throws: Failure()) { try rows.add(5) }  // …and none written any more
        #expect(written.batches.withLock { $0 } == [[0, 1]])
    }

    @Test func stopDropsWhatWasNotHandedOver() throws {
        let written = Written()
        let rows = BackgroundBatches<Int>(label: "test", batchSize: 3) { batch in
            written.batches.withLock { $0.append(batch) }
        }
        for i in 0..<4 { try rows.add(i) }
        rows.stop()
        #expect(written.batches.withLock { $0 } == [[0, 1, 2]])
    }
}
