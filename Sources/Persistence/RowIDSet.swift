/// A set of row IDs kept as sorted, disjoint ranges: a run of consecutive IDs costs one
/// range however long it is, so the IDs of a bulk deletion stay small in memory.
///
/// ```swift
/// var gone = RowIDSet()
/// for id in [4, 5, 6, 9] as [Int64] { gone.insert(id) }
/// gone.ranges  // [4..<7, 9..<10]
/// gone.contains(5)  // true
/// ```
public struct RowIDSet: Sendable, Hashable, Sequence {
    /// The IDs, as ascending ranges that neither overlap nor touch.
    public private(set) var ranges: [Range<Int64>] = []
    /// How many IDs the set holds.
    public private(set) var count = 0

    /// An empty set.
    public init() {}

    /// The set of the IDs in `ranges`, in any order, overlapping or not.
    public init(_ ranges: some Sequence<Range<Int64>>) {
        for range in ranges { insert(range) }
    }

    /// Whether the set holds no ID.
    public var isEmpty: Bool { count == 0 }

    /// Whether `id` is in the set.
    public func contains(_ id: Int64) -> Bool {
        let i = firstIndex(endingAfter: id)
        return i < ranges.count && ranges[i].contains(id)
    }

    /// Adds `id`; an ID above every other (the usual case) is added in constant time.
    public mutating func insert(_ id: Int64) {
        precondition(id < Int64.max, "a RowIDSet holds IDs below Int64.max")
        insert(id..<id + 1)
    }

    /// Adds every ID of `range`.
    public mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        if let last = ranges.last, range.lowerBound >= last.lowerBound {
            if range.lowerBound > last.upperBound {
                ranges.append(range)
                count += range.count
            } else if range.upperBound > last.upperBound {
                count += Int(range.upperBound - last.upperBound)
                ranges[ranges.count - 1] = last.lowerBound..<range.upperBound
            }
            return
        }
        // Merge with every range it overlaps or touches.
        let start = range.lowerBound == .min ? 0 : firstIndex(endingAfter: range.lowerBound - 1)
        var end = start
        var merged = range
        while end < ranges.count, ranges[end].lowerBound <= range.upperBound {
            merged =
                Swift.min(
                    merged.lowerBound, ranges[end].lowerBound)..<Swift.max(merged.upperBound, ranges[end].upperBound)
            count -= ranges[end].count
            end += 1
        }
        ranges.replaceSubrange(start..<end, with: [merged])
        count += merged.count
    }

    /// Adds every ID of `other`.
    public mutating func formUnion(_ other: RowIDSet) {
        for range in other.ranges { insert(range) }
    }

    /// The index of the first range whose upper bound is above `id`.
    private func firstIndex(endingAfter id: Int64) -> Int {
        var low = 0
        var high = ranges.count
        while low < high {
            let mid = (low + high) / 2
            if ranges[mid].upperBound <= id { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The IDs in ascending order.
    public func makeIterator() -> FlattenSequence<[Range<Int64>]>.Iterator {
        ranges.joined().makeIterator()
    }
}
