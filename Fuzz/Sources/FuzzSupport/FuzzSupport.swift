#if canImport(Glibc)
    import Glibc
#endif

/// The bytes of one fuzz input, taken from the front: a few bytes choose how the rest is
/// read (an algorithm, a version, where to cut it into pieces), the rest is the text.
public struct FuzzInput {
    private var bytes: ArraySlice<UInt8>

    /// The input libFuzzer hands to `LLVMFuzzerTestOneInput`.
    public init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size))[...] } ?? []
    }

    /// The next byte, or 0 once the input has run out.
    public mutating func byte() -> UInt8 { bytes.popFirst() ?? 0 }

    /// One of `choices`, chosen by the next byte.
    public mutating func choose<T>(_ choices: [T]) -> T { choices[Int(byte()) % choices.count] }

    /// Everything not taken yet.
    public mutating func rest() -> [UInt8] {
        defer { bytes = [] }
        return Array(bytes)
    }

    /// Bytes up to (not including) the next `separator`, which is consumed; the rest when
    /// there is none. `nil` once the input has run out.
    public mutating func field(separator: UInt8 = 0xFF) -> [UInt8]? {
        guard !bytes.isEmpty else { return nil }
        guard let end = bytes.firstIndex(of: separator) else { return rest() }
        defer { bytes = bytes[(end + 1)...] }
        return Array(bytes[..<end])
    }
}

/// Cuts `bytes` into pieces whose sizes cycle through 1 + each byte of `seed` (pieces of
/// one byte when it is empty): the cuts a stream could make, chosen by the input.
public func pieces(_ bytes: [UInt8], seed: [UInt8]) -> [ArraySlice<UInt8>] {
    var result: [ArraySlice<UInt8>] = []
    var start = 0
    var turn = 0
    while start < bytes.count {
        let size = seed.isEmpty ? 1 : 1 + Int(seed[turn % seed.count])
        turn += 1
        let end = min(start + size, bytes.count)
        result.append(bytes[start..<end])
        start = end
    }
    return result
}

/// Stops the run, as a crash libFuzzer keeps the input of, when an invariant does not hold.
public func invariant(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID,
    line: UInt = #line
) {
    guard !condition() else { return }
    let text = "invariant broken at \(file):\(line): \(message())\n"
    _ = text.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    abort()
}
