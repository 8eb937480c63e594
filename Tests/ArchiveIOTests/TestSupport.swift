import ArchiveIO
import Foundation
import TestScratch
import Testing

/// Committed fixtures (Scripts/make-archive-fixtures.py writes them).
enum Fixtures {
    static let directory: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("TestAssets/archives").path
    }()

    static func path(_ name: String) -> String { directory + "/" + name }

    /// The files of the sample tree stored in every `sample.*` fixture, with their contents.
    /// (Not a `[String: …]` dictionary: `String` keys compare NFC and NFD spellings equal.)
    static let sampleFiles: [(String, [UInt8])] = [
        ("sample/hello.txt", Array("hello, world\n".utf8)),
        ("sample/empty.txt", []),
        ("sample/r\u{e9}sum\u{e9}.txt", Array("NFC name\n".utf8)),
        ("sample/re\u{301}sume\u{301}.txt", Array("NFD name\n".utf8)),
        (cjkFile, cjkData),
        ("sample/emoji \u{1F3A8}.txt", Array("art\n".utf8)),
    ]
    static let cjkFile = "sample/\u{65e5}\u{672c}\u{8a9e}/\u{30c7}\u{30fc}\u{30bf}.bin"
    static let cjkData = Array((0..<16).flatMap { _ in (0...255).map(UInt8.init) })
    static let sampleDirectories = ["sample", "sample/\u{65e5}\u{672c}\u{8a9e}"]
}

/// A fresh directory under the system's temp directory, removed by `cleanup()`.
struct TemporaryDirectory: ~Copyable {
    let path: String

    init() throws {
        var base = NSTemporaryDirectory()
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        var template = Array("\(base)/archiveio-test-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw POSIXError(.EIO)
        }
        path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func sub(_ name: String) -> String { path + "/" + name }

    deinit {
        // Restore write permission first: extraction may have made directories read-only.
        _ = try? ChildProcess("/bin/chmod", ["-R", "u+rwx", path], stdout: .inherit, stderr: .inherit).wait()
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Runs a tool; returns its exit status, stdout and stderr.
@discardableResult
func run(_ tool: String, _ arguments: [String], input: [UInt8]? = nil, environment: [String: String]? = nil)
    throws -> (status: Int32, stdout: [UInt8], stderr: String)
{
    var stdin = ChildProcess.Input.null
    if let input {
        let file = ScratchDirectory.path("stdin").path
        try Data(input).write(to: URL(fileURLWithPath: file))
        stdin = .file(file)
    }
    let run = try ChildProcess(
        "/usr/bin/env", [tool] + arguments, environment: (environment ?? [:]).mapValues { $0 as String? }, stdin: stdin
    ).wait()
    return (run.status, Array(run.stdout), run.stderrText)
}

/// Runs a Python 3 script with arguments; returns stdout as UTF-8 text.
func python(_ script: String, _ arguments: [String] = []) throws -> String {
    let result = try run("python3", ["-c", script] + arguments)
    #expect(result.status == 0, "python3 failed: \(result.stderr)")
    return String(decoding: result.stdout, as: UTF8.self)
}

/// Reads every member of an archive: path (as raw UTF-8 bytes, decoded) → kind, data, link.
struct Member: Equatable {
    var kind: ArchiveEntry.Kind
    var data: [UInt8]
    var linkTarget: String?
}

func readAll(_ reader: ArchiveReader) throws -> [[UInt8]: Member] {
    var members: [[UInt8]: Member] = [:]
    while let entry = try reader.nextEntry() {
        let data = try reader.readContents(maxBytes: 64 << 20)
        var path = entry.path
        while path.hasSuffix("/") { path.removeLast() }
        if path.hasPrefix("./") { path.removeFirst(2) }
        members[Array(path.utf8)] = Member(kind: entry.kind, data: data, linkTarget: entry.linkTarget)
    }
    return members
}

func bytes(_ path: String) -> [UInt8] { Array(path.utf8) }

/// The paths (raw bytes) below `root`, relative, including directories.
func listTree(_ root: String) -> Set<[UInt8]> {
    var result: Set<[UInt8]> = []
    func walk(_ relative: String) {
        let full = relative.isEmpty ? root : root + "/" + relative
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: full) else { return }
        for name in names {
            let child = relative.isEmpty ? name : relative + "/" + name
            result.insert(Array(child.utf8))
            var isDirectory: ObjCBool = false
            let attributes = try? FileManager.default.attributesOfItem(atPath: root + "/" + child)
            if attributes?[.type] as? FileAttributeType == .typeDirectory,
                FileManager.default.fileExists(atPath: root + "/" + child, isDirectory: &isDirectory)
            {
                walk(child)
            }
        }
    }
    walk("")
    return result
}

/// A small SHA-256 (FIPS 180-4) so that tests need no crypto package.
struct SHA256Digest {
    private var state: [UInt32] = [
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19,
    ]
    private var pending: [UInt8] = []
    private var length: UInt64 = 0
    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    mutating func update(_ data: some Sequence<UInt8>) {
        let array = Array(data)
        array.withUnsafeBytes { update($0) }
    }

    mutating func update(_ data: UnsafeRawBufferPointer) {
        var rest = data[...]
        length += UInt64(data.count)
        if !pending.isEmpty {
            let take = min(64 - pending.count, rest.count)
            pending += rest.prefix(take)
            rest = rest.dropFirst(take)
            if pending.count == 64 {
                compress(pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
        while rest.count >= 64 {
            compress(Array(rest.prefix(64)))
            rest = rest.dropFirst(64)
        }
        pending += rest
    }

    mutating func finalize() -> String {
        let bitLength = length * 8
        pending.append(0x80)
        while pending.count % 64 != 56 { pending.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) {
            pending.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
        }
        for start in stride(from: 0, to: pending.count, by: 64) { compress(Array(pending[start..<start + 64])) }
        return state.map { String(format: "%08x", $0) }.joined()
    }

    private mutating func compress(_ block: [UInt8]) {
        var w = [UInt32](repeating: 0, count: 64)
        for i in 0..<16 {
            w[i] =
                UInt32(block[4 * i]) << 24 | UInt32(block[4 * i + 1]) << 16 | UInt32(block[4 * i + 2]) << 8
                | UInt32(block[4 * i + 3])
        }
        func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { x >> n | x << (32 - n) }
        for i in 16..<64 {
            let s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
            let s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
            w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
        }
        var (a, b, c, d, e, f, g, h) = (state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7])
        for i in 0..<64 {
            let t1 = h &+ (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) &+ ((e & f) ^ (~e & g)) &+ Self.k[i] &+ w[i]
            let t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) &+ ((a & b) ^ (a & c) ^ (b & c))
            (h, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
        }
        for (i, v) in [a, b, c, d, e, f, g, h].enumerated() { state[i] = state[i] &+ v }
    }

    static func hex(_ data: some Sequence<UInt8>) -> String {
        var digest = SHA256Digest()
        digest.update(data)
        return digest.finalize()
    }
}

/// Deterministic pseudo-random bytes (xorshift), for content that does not compress.
func pseudoRandomBytes(count: Int, seed: UInt64) -> [UInt8] {
    var x = seed | 1
    var out = [UInt8](repeating: 0, count: count)
    for i in 0..<count {
        x ^= x << 13
        x ^= x >> 7
        x ^= x << 17
        out[i] = UInt8(truncatingIfNeeded: x)
    }
    return out
}

/// One item of a directory tree, as created on disk or expected in an archive.
enum TreeItem: Equatable {
    case directory
    case file([UInt8])
    case symlink(String)
}

/// Creates `items` (paths relative to `root`, parents first) with POSIX calls, so that the
/// exact bytes of each name reach the file system.
func makeTree(_ items: [(String, TreeItem)], at root: String, mtime: Int = 1_700_000_000) throws {
    for (path, item) in items {
        let full = root + "/" + path
        switch item {
        case .directory:
            guard mkdir(full, 0o755) == 0 else { throw POSIXError(.EIO) }
        case .file(let data):
            let fd = open(full, O_WRONLY | O_CREAT | O_EXCL, 0o644)
            guard fd >= 0 else { throw POSIXError(.EIO) }
            _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        case .symlink(let target):
            guard symlink(target, full) == 0 else { throw POSIXError(.EIO) }
        }
    }
    for (path, _) in items.reversed() {
        var times = [timespec(tv_sec: mtime, tv_nsec: 0), timespec(tv_sec: mtime, tv_nsec: 0)]
        utimensat(AT_FDCWD, root + "/" + path, &times, AT_SYMLINK_NOFOLLOW)
    }
}

/// Everything below `root` (raw name bytes, relative) with POSIX calls: no normalisation.
func snapshotTree(_ root: String) -> [[UInt8]: TreeItem] {
    var result: [[UInt8]: TreeItem] = [:]
    func walk(_ relative: [UInt8]) {
        let full = root + (relative.isEmpty ? "" : "/" + String(decoding: relative, as: UTF8.self))
        guard let directory = opendir(full) else { return }
        defer { closedir(directory) }
        while let item = readdir(directory) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            let child = relative.isEmpty ? name : relative + [0x2F] + name
            let childPath = root + "/" + String(decoding: child, as: UTF8.self)
            var info = stat()
            guard lstat(childPath, &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                result[child] = .directory
                walk(child)
            case S_IFLNK:
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = buffer.withUnsafeMutableBytes { readlink(childPath, $0.baseAddress!, 4096) }
                result[child] = .symlink(String(decoding: buffer[0..<max(count, 0)], as: UTF8.self))
            default:
                result[child] = .file(Array((try? Data(contentsOf: URL(fileURLWithPath: childPath))) ?? Data()))
            }
        }
    }
    walk([])
    return result
}
