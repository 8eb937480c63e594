import Foundation

/// Hands rows, a batch at a time, to `write` on a serial queue of its own, so that the
/// thread producing them only appends to an array. At most `waiting` batches wait: memory
/// stays bounded however far the producer runs ahead (it waits for a free slot instead).
///
/// The first error `write` throws stops it: later batches are dropped, and the producer's
/// next hand-over (``add(_:)`` that fills a batch, ``flush()``, ``drain()``) throws it.
///
/// ```swift
/// let rows = BackgroundBatches<Int>(label: "squares") { batch in try store(batch) }
/// for i in 0..<1_000_000 { try rows.add(i * i) }
/// try rows.drain()  // every row written, or what stopped the writes
/// ```
package final class BackgroundBatches<Row: Sendable>: @unchecked Sendable {
    private let batchSize: Int
    private let write: ([Row]) throws -> Void
    private let queue: DispatchQueue
    private let slots: DispatchSemaphore
    /// Used by the producing thread only.
    private var batch: [Row] = []
    private let lock = NSLock()
    /// What stopped a write. Guarded by `lock`.
    private var failure: (any Error)?

    /// - Parameters:
    ///   - batchSize: The rows handed over at a time.
    ///   - waiting: The most batches handed over and not written yet.
    ///   - write: Writes a batch, on the queue (never two at once).
    package init(label: String, batchSize: Int = 512, waiting: Int = 16, write: @escaping ([Row]) throws -> Void) {
        self.batchSize = batchSize
        self.write = write
        queue = DispatchQueue(label: label)
        slots = DispatchSemaphore(value: waiting)
        batch.reserveCapacity(batchSize)
    }

    /// Adds a row, handing the batch over once it is full; throws what stopped an earlier
    /// write when it does.
    package func add(_ row: Row) throws {
        batch.append(row)
        if batch.count >= batchSize { try flush() }
    }

    /// Hands the rows added so far to the writing queue; throws what stopped an earlier write.
    package func flush() throws {
        try check()
        guard !batch.isEmpty else { return }
        let rows = batch
        batch = []
        batch.reserveCapacity(batchSize)
        slots.wait()
        queue.async { [self] in
            defer { slots.signal() }
            guard lock.withLock({ failure == nil }) else { return }
            do {
                try write(rows)
            } catch {
                lock.withLock { failure = failure ?? error }
            }
        }
    }

    /// Waits until every row added is written; throws what stopped a write.
    package func drain() throws {
        try flush()
        queue.sync {}
        try check()
    }

    /// Drops the rows not handed over yet and waits for the writes under way, without
    /// throwing (for a producer that failed).
    package func stop() {
        batch = []
        queue.sync {}
    }

    /// Throws what stopped a write, if anything did.
    package func check() throws {
        if let failure = lock.withLock({ failure }) { throw failure }
    }
}
