import Glibc

/// Calls `body` with the name of each entry of `directory` (a `DIR *` from `opendir` or
/// `fdopendir`) but `.` and `..`, as the bytes the file system holds, without the
/// terminating NUL. The bytes are valid only inside `body`.
///
/// The name is read through a pointer to the entry's `d_name`, never copied out of it: a
/// `dirent` that `readdir` returns is only `d_reclen` bytes long, so copying its 256-byte
/// `d_name` array (`withUnsafeBytes(of: entry.pointee.d_name)`) reads past the buffer the
/// C library allocated.
///
/// - Returns: `0` at the end of the directory, or the `errno` of a `readdir` that failed.
public func forEachDirectoryEntry(
    in directory: OpaquePointer, _ body: (_ name: UnsafeRawBufferPointer) throws -> Void
) rethrows -> Int32 {
    let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
    while true {
        errno = 0  // readdir's NULL is the end, or an error
        guard let entry = readdir(directory) else { return errno }
        let start = UnsafeRawPointer(entry) + offset
        let name = UnsafeRawBufferPointer(start: start, count: strlen(start.assumingMemoryBound(to: CChar.self)))
        if name.elementsEqual([0x2E]) || name.elementsEqual([0x2E, 0x2E]) { continue }
        try body(name)
    }
}
