import Locking
import Synchronization

/// Storage slots by key path, read without a lock: the hot accessors (a row's values set by
/// key path, a snapshot's read) look a key path up for every field of every row, and a mutex
/// and a hash of its identity cost more than the rest of the access.
///
/// Key paths written in source are one object for each use, so a key path's identity names
/// it. The table holds each key path it has taken in (an identity is then never reused for
/// another), and only takes entries in: an open-addressed array of atomic pairs (the key
/// path's address, its slot + 1), each pair written once, its key by a compare-and-exchange
/// from 0 and then its slot; a reader that finds the key before its slot is written reads
/// the slot from the locked dictionary instead. Past ``capacity`` / 2 key paths (a very wide
/// entity, or key paths made at run time, each a new object), the rest are looked up in that
/// dictionary under its lock, up to its `limit`; past that, callers resolve them the slow way.
final class SlotTable: @unchecked Sendable {
    /// How many pairs the table has: a power of two.
    static let capacity = 256
    /// The most key paths kept in all.
    let limit: Int
    private let keys: UnsafeMutablePointer<Atomic<Int>>
    private let slots: UnsafeMutablePointer<Atomic<Int>>
    /// Every key path taken in (kept alive), with its slot, under a lock: inserts only.
    private let kept = Locked<(paths: [AnyKeyPath], slots: [ObjectIdentifier: Int])>(([], [:]))
    /// How many pairs are taken (at most half of them, so that a probe always ends). Under `kept`.
    private var pairs = 0

    init(limit: Int) {
        self.limit = limit
        keys = .allocate(capacity: Self.capacity)
        slots = .allocate(capacity: Self.capacity)
        for i in 0..<Self.capacity {
            (keys + i).initialize(to: Atomic(0))
            (slots + i).initialize(to: Atomic(0))
        }
    }

    deinit {
        keys.deinitialize(count: Self.capacity)
        keys.deallocate()
        slots.deinitialize(count: Self.capacity)
        slots.deallocate()
    }

    /// Where a key's probe starts: its address without the low bits that alignment zeroes.
    private static func start(_ key: Int) -> Int { (key >> 4) & (capacity - 1) }

    /// The slot taken in for `keyPath`, or `nil`.
    func slot(for keyPath: AnyKeyPath) -> Int? {
        let key = Int(bitPattern: ObjectIdentifier(keyPath))
        var i = Self.start(key)
        while true {
            let found = keys[i].load(ordering: .acquiring)
            if found == key {
                let slot = slots[i].load(ordering: .acquiring)
                if slot > 0 { return slot - 1 }
                break  // its slot is being written: the dictionary has it
            }
            if found == 0 { break }
            i = (i + 1) & (Self.capacity - 1)
        }
        return kept.withLock { $0.slots[ObjectIdentifier(keyPath)] }
    }

    /// Takes in `slot` for `keyPath` (once; past `limit` key paths, nothing more).
    func insert(_ slot: Int, for keyPath: AnyKeyPath) {
        let identity = ObjectIdentifier(keyPath)
        let takesPair = kept.withLock { kept -> Bool in
            guard kept.slots[identity] == nil, kept.paths.count < limit else { return false }
            kept.paths.append(keyPath)
            kept.slots[identity] = slot
            guard pairs < Self.capacity / 2 else { return false }
            pairs += 1
            return true
        }
        guard takesPair else { return }
        let key = Int(bitPattern: identity)
        var i = Self.start(key)
        while true {
            let (exchanged, found) = keys[i].compareExchange(
                expected: 0, desired: key, ordering: .acquiringAndReleasing)
            if exchanged || found == key { break }
            i = (i + 1) & (Self.capacity - 1)  // never full: at most half the pairs are taken
        }
        slots[i].store(slot + 1, ordering: .releasing)
    }
}
