import Locking

/// The queue's concurrency bound: claimed jobs wait here, in claim order, for one of
/// `limit` numbered slots before their processor runs. A task cancelled while waiting
/// stops waiting at once, without a slot.
final class RunSlots: Sendable {
    private struct State {
        /// The free slots' numbers.
        var free: [Int]
        var nextID: UInt64 = 0
        var waiters: [(id: UInt64, continuation: CheckedContinuation<Int?, Never>)] = []
    }
    private let state: Locked<State>

    init(_ limit: Int) { state = Locked(State(free: Array((0..<limit).reversed()))) }

    /// Waits for a slot and returns its number (`0..<limit`); nil when the task was
    /// cancelled first (then it holds none).
    func acquire() async -> Int? {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
                let granted = state.withLock { s -> Int?? in
                    if Task.isCancelled { return .some(nil) }
                    if !s.free.isEmpty && s.waiters.isEmpty { return s.free.removeLast() }
                    s.waiters.append((id, continuation))
                    return nil
                }
                if let granted { continuation.resume(returning: granted) }
            }
        } onCancel: {
            state.withLock { s -> CheckedContinuation<Int?, Never>? in
                guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: index).continuation
            }?.resume(returning: nil)
        }
    }

    /// Gives slot `slot` back: the longest waiter gets it.
    func release(_ slot: Int) {
        state.withLock { s -> CheckedContinuation<Int?, Never>? in
            if s.waiters.isEmpty {
                s.free.append(slot)
                return nil
            }
            return s.waiters.removeFirst().continuation
        }?.resume(returning: slot)
    }
}
