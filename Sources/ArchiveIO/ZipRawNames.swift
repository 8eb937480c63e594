import CArchive
import Glibc

/// The exact bytes of a zip file's non-ASCII member names, read from its central directory.
///
/// libarchive reads a zip name flagged as UTF-8 through a conversion that normalises it to
/// NFC on Linux, so a decomposed (NFD) name would not come back byte for byte. When reading a
/// zip file, the reader takes each member's name from here instead, after checking that it is
/// canonically equivalent to libarchive's. libarchive visits members in the order of their
/// local headers; the names are only used when the central directory lists them in that
/// order too (as every common writer does).
struct ZipRawNames {
    /// Member index (in local-header order) → raw name, for names with a non-ASCII byte.
    private(set) var names: [Int: [UInt8]] = [:]

    /// Parses the central directory of the zip file open at `fd` (the reader's own descriptor,
    /// so the names are those of the file it reads; positioned reads leave its offset alone);
    /// `nil` if it cannot be read or is not in local-header order.
    static func read(fd: Int32) -> ZipRawNames? {
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size >= 22 else { return nil }
        var file = BufferedFile(fd: fd, size: Int64(info.st_size))
        // Hostile counts (negative once converted) or offsets simply end the parse.
        guard let (count, offset) = file.centralDirectory(), count >= 0, offset >= 0 else { return nil }
        var result = ZipRawNames()
        var position = offset
        var previousOffset: Int64 = -1
        for index in 0..<count {
            guard let header = file.bytes(at: position, count: 46), header.u32(0) == 0x0201_4b50 else { return nil }
            let nameLength = Int(header.u16(28))
            let extraLength = Int(header.u16(30))
            let commentLength = Int(header.u16(32))
            guard let name = file.bytes(at: position + 46, count: nameLength),
                let extra = file.bytes(at: position + 46 + Int64(nameLength), count: extraLength)
            else { return nil }
            var localOffset = Int64(header.u32(42))
            if localOffset == 0xFFFF_FFFF {
                guard let wide = Self.zip64Offset(extra, header: header) else { return nil }
                localOffset = wide
            }
            guard localOffset > previousOffset else { return nil }
            previousOffset = localOffset
            if name.contains(where: { $0 >= 0x80 }) { result.names[index] = name }
            position += 46 + Int64(nameLength + extraLength + commentLength)
        }
        return result
    }

    /// The local-header offset from a zip64 extended-information extra field.
    private static func zip64Offset(_ extra: [UInt8], header: [UInt8]) -> Int64? {
        var at = 0
        while at + 4 <= extra.count {
            let id = extra.u16(at)
            let size = Int(extra.u16(at + 2))
            guard at + 4 + size <= extra.count else { return nil }
            if id == 0x0001 {
                var field = at + 4
                if header.u32(24) == 0xFFFF_FFFF { field += 8 }  // uncompressed size
                if header.u32(20) == 0xFFFF_FFFF { field += 8 }  // compressed size
                guard field + 8 <= at + 4 + size else { return nil }
                return Int64(bitPattern: extra.u64(field))
            }
            at += 4 + size
        }
        return nil
    }
}

/// Positioned reads with a small cache, so that the central directory is never held whole.
private struct BufferedFile {
    let fd: Int32
    let size: Int64
    private var cache: [UInt8] = []
    private var cacheStart: Int64 = 0

    init(fd: Int32, size: Int64) {
        self.fd = fd
        self.size = size
    }

    mutating func bytes(at offset: Int64, count: Int) -> [UInt8]? {
        guard offset >= 0, count >= 0, offset + Int64(count) <= size else { return nil }
        if count == 0 { return [] }
        let cacheEnd = cacheStart + Int64(cache.count)
        if offset < cacheStart || offset + Int64(count) > cacheEnd {
            let length = Int(min(size - offset, Int64(max(count, 64 << 10))))
            var buffer = [UInt8](repeating: 0, count: length)
            let read = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(offset)) }
            guard read == length else { return nil }
            cache = buffer
            cacheStart = offset
        }
        let start = Int(offset - cacheStart)
        return Array(cache[start..<start + count])
    }

    /// The number of entries and the offset of the central directory.
    mutating func centralDirectory() -> (Int, Int64)? {
        let tailLength = Int(min(size, 22 + 65_535))
        guard let tail = bytes(at: size - Int64(tailLength), count: tailLength) else { return nil }
        var at = tail.count - 22
        while at >= 0 && tail.u32(at) != 0x0605_4b50 { at -= 1 }
        guard at >= 0 else { return nil }
        var count = Int(tail.u16(at + 10))
        var offset = Int64(tail.u32(at + 16))
        if count == 0xFFFF || offset == 0xFFFF_FFFF {
            // zip64: the locator sits just before the end-of-central-directory record.
            let locatorOffset = size - Int64(tailLength) + Int64(at) - 20
            guard let locator = bytes(at: locatorOffset, count: 20), locator.u32(0) == 0x0706_4b50,
                let record = bytes(at: Int64(bitPattern: locator.u64(8)), count: 56), record.u32(0) == 0x0606_4b50
            else { return nil }
            count = Int(truncatingIfNeeded: record.u64(32))
            offset = Int64(bitPattern: record.u64(48))
        }
        return (count, offset)
    }
}

extension [UInt8] {
    fileprivate func u16(_ at: Int) -> UInt16 { UInt16(self[at]) | UInt16(self[at + 1]) << 8 }
    fileprivate func u32(_ at: Int) -> UInt32 { UInt32(u16(at)) | UInt32(u16(at + 2)) << 16 }
    fileprivate func u64(_ at: Int) -> UInt64 { UInt64(u32(at)) | UInt64(u32(at + 4)) << 32 }
}
