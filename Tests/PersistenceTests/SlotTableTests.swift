import Dispatch
import Locking
import Testing

@testable import Persistence

/// The key path → storage slot table the hot accessors read without a lock (``SlotTable``).
@Suite struct SlotTableTests {
    /// Distinct key path objects, as many as asked (a subscript's key path with a run-time
    /// argument is a new object each time).
    static func keyPaths(_ count: Int) -> [AnyKeyPath] { (0..<count).map { \[Int].[$0] as AnyKeyPath } }

    /// Past the lock-free pairs (half of ``SlotTable/capacity``), key paths are still found,
    /// in the locked dictionary; past the table's limit, they are not kept.
    @Test func everyKeyPathTakenInIsFoundUpToTheLimit() {
        let table = SlotTable(limit: 4096)
        let paths = Self.keyPaths(table.limit + 10)
        #expect(table.slot(for: paths[0]) == nil)
        for (slot, path) in paths.enumerated() { table.insert(slot, for: path) }
        for (slot, path) in paths.enumerated().prefix(table.limit) {
            #expect(table.slot(for: path) == slot)
        }
        #expect(paths.suffix(10).allSatisfy { table.slot(for: $0) == nil })
        table.insert(99, for: paths[0])  // taken in once: the first slot stays
        #expect(table.slot(for: paths[0]) == 0)
        #expect(table.slot(for: \[Int].count) == nil)
    }

    /// Threads that take key paths in while others look them up see each one either not yet
    /// or with its slot, never another's (run under `--sanitize=thread` too).
    @Test func lookupsWhileOtherThreadsInsertSeeTheRightSlotOrNone() {
        let table = SlotTable(limit: 4096)
        nonisolated(unsafe) let paths = Self.keyPaths(200)  // key paths from source are immutable and shared
        let wrong = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for round in 0..<50 {
                for (slot, path) in paths.enumerated() {
                    if (slot + round) % 8 == worker { table.insert(slot, for: path) }
                    if let found = table.slot(for: path), found != slot { wrong.withLock { $0 += 1 } }
                }
            }
        }
        #expect(wrong.withLock { $0 } == 0)
        #expect(paths.enumerated().allSatisfy { table.slot(for: $1) == $0 })
    }
}
