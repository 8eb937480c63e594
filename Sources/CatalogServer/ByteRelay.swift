import Dispatch
import Foundation
import NIOCore

/// Hands the chunks a synchronous reader produces (`Catalog.read`, a
/// file descriptor's `read(2)`) to a response body that writes them asynchronously, holding
/// at most ``depth`` chunks: the reader, on a thread of its own, waits while the client is
/// slower, so a download's memory stays bounded whatever its size. When the body stops (the
/// client went away), ``cancel()`` makes the reader's next ``push(_:)`` throw, which ends the
/// read.
final class ByteRelay: @unchecked Sendable {
    /// How many chunks wait at most between the reader and the client.
    static let depth = 4

    // All state below is guarded by `condition`.
    private let condition = NSCondition()
    private var queue: [ByteBuffer] = []
    private var end: Result<Void, any Error>?
    private var waiter: CheckedContinuation<ByteBuffer?, any Error>?
    private var cancelled = false

    /// The reader gave up because the client went away.
    struct Cancelled: Error {}

    /// Runs `produce` on a thread outside Swift's cooperative pool (it blocks: on the disk,
    /// on the store, on a slow client), then ends the relay with its outcome.
    func start(_ produce: @escaping @Sendable (ByteRelay) throws -> Void) {
        DispatchQueue.global().async {
            do {
                try produce(self)
                self.finish(.success(()))
            } catch {
                self.finish(.failure(error))
            }
        }
    }

    /// The reader's side: a copy of `bytes` for the client. Waits while ``depth`` chunks
    /// wait already.
    ///
    /// - Throws: ``Cancelled`` once the client has gone away.
    func push(_ bytes: UnsafeRawBufferPointer) throws {
        guard !bytes.isEmpty else { return }
        let buffer = ByteBuffer(bytes: bytes)
        condition.lock()
        while queue.count >= Self.depth && !cancelled { condition.wait() }
        if cancelled {
            condition.unlock()
            throw Cancelled()
        }
        if let waiting = waiter {
            waiter = nil
            condition.unlock()
            waiting.resume(returning: buffer)
            return
        }
        queue.append(buffer)
        condition.unlock()
    }

    /// The client's side: the next chunk, or `nil` at the end.
    ///
    /// - Throws: the reader's error.
    func next() async throws -> ByteBuffer? {
        try await withCheckedThrowingContinuation { continuation in
            condition.lock()
            if !queue.isEmpty {
                let buffer = queue.removeFirst()
                condition.signal()
                condition.unlock()
                continuation.resume(returning: buffer)
            } else if let end {
                condition.unlock()
                continuation.resume(with: end.map { _ -> ByteBuffer? in nil })
            } else {
                waiter = continuation
                condition.unlock()
            }
        }
    }

    /// The client's side: no more chunks are wanted; the reader stops at its next push.
    func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }

    private func finish(_ result: Result<Void, any Error>) {
        condition.lock()
        end = result
        let waiting = waiter
        waiter = nil
        condition.unlock()
        waiting?.resume(with: result.map { _ -> ByteBuffer? in nil })
    }
}

/// Runs `body`, which blocks (a read of the store or of a file), on a thread outside Swift's
/// cooperative pool, so that a slow store does not hold up the server's other requests.
func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result(catching: body)) }
    }
}
