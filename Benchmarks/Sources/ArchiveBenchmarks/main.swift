// ArchiveIO against bsdtar, on the same generated data, in the same run.
// (FoundationEssentials only: the child processes start as fast as bsdtar does.)
//
//   swift run -c release --package-path Benchmarks ArchiveBenchmarks [--quick] [--repeat N] [--work DIR]
//
// --work defaults to /dev/shm (tmpfs) when it has room, else /tmp.
//
// Corpora have the shapes of shared/bench/make_corpus.sh (small: 10,000 files of 1–16 KiB in
// 100 folders; large: 20 files of 64 MiB), generated here into a temporary directory and
// deleted afterwards. For each corpus and format (.tar.zst level 3, .zip store) it times
// three operations, each in a child process so that every case has its own peak memory
// (VmHWM of the child, sampled every millisecond: wait4's ru_maxrss would include the
// parent's memory, which the child shares until it calls exec):
//   write    ArchiveWriter.addTree             vs  bsdtar -c
//   read     ArchiveReader.readData, discarded vs  bsdtar -x -O > /dev/null
//   extract  ArchiveReader.extract(to:)        vs  bsdtar -x -C dir
// Both sides are timed the same way (spawn to exit, after `sync`), best of N runs (default 5), in
// alternating order.
import ArchiveIO
import FoundationEssentials
import Glibc

// MARK: Child mode: one operation, then exit.

let arguments = CommandLine.arguments
if arguments.count >= 2 && arguments[1] == "--child" {
    do {
        try runChild(Array(arguments.dropFirst(2)))
        exit(0)
    } catch {
        let message = Array("child failed: \(error)\n".utf8)
        _ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        exit(1)
    }
}

func runChild(_ args: [String]) throws {
    switch args[0] {
    case "write":
        let format: ArchiveFormat = args[1] == "zst" ? .tarZstd : .zip(.store)
        let options = ArchiveWriteOptions(compressionLevel: args[1] == "zst" ? 3 : nil)
        try withArchiveWriter(at: args[3], format: format, options: options) { writer in
            try writer.addTree(at: args[2], as: "")
        }
    case "read":
        var total = 0
        let reader = try ArchiveReader(path: args[1], blockSize: args.count > 2 ? Int(args[2]) ?? 131_072 : 131_072)
        while try reader.nextEntry() != nil {
            try reader.readData { total &+= $0.count }
        }
        if total < 0 { print(total) }
    case "extract":
        try ArchiveReader.extract(archiveAt: args[1], to: args[2])
    default:
        throw ArchiveError(code: .invalidArgument, message: "unknown child operation \(args[0])", archivePath: "")
    }
}

// MARK: Options

var quick = false
var repeats = 5
// tmpfs when there is room (about 6 GB is needed): the benchmark then measures the software,
// not the disk's write-back, which made extraction timings vary tenfold on the test machine.
var work: String = {
    var info = statvfs()
    if statvfs("/dev/shm", &info) == 0, UInt64(info.f_bavail) * UInt64(info.f_frsize) > 8 << 30 { return "/dev/shm" }
    return "/tmp"
}()
var index = 1
while index < arguments.count {
    switch arguments[index] {
    case "--quick": quick = true
    case "--repeat":
        index += 1
        repeats = Int(arguments[index]) ?? 5
    case "--work":
        index += 1
        work = arguments[index]
    default:
        print("usage: ArchiveBenchmarks [--quick] [--repeat N] [--work DIR]")
        exit(2)
    }
    index += 1
}

// MARK: Processes

struct Run {
    var seconds: Double
    var maxRSSKiB: Int
}

/// Runs a program to completion (stdout to /dev/null) and returns its wall time and peak RSS.
func spawn(_ program: String, _ args: [String]) -> Run {
    var pid: pid_t = 0
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    defer { posix_spawn_file_actions_destroy(&actions) }
    let argv: [UnsafeMutablePointer<CChar>?] = ([program] + args).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    let start = now()
    let status = posix_spawnp(&pid, program, &actions, nil, argv, environ)
    guard status == 0 else { fatalError("cannot start \(program): \(String(cString: strerror(status)))") }
    var exitStatus: Int32 = 0
    var peak = 0
    while true {
        let result = waitpid(pid, &exitStatus, WNOHANG)
        if result == pid { break }
        if result < 0 && errno != EINTR { fatalError("waitpid failed") }
        peak = max(peak, highWaterMarkKiB(pid))
        usleep(1000)
    }
    let seconds = now() - start
    guard exitStatus == 0 else { fatalError("\(program) \(args.joined(separator: " ")) failed (\(exitStatus))") }
    return Run(seconds: seconds, maxRSSKiB: peak)
}

func now() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// VmHWM of a running process, in KiB (0 once it has exited).
func highWaterMarkKiB(_ pid: pid_t) -> Int {
    let fd = open("/proc/\(pid)/status", O_RDONLY)
    guard fd >= 0 else { return 0 }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 4096) }
    guard count > 0 else { return 0 }
    let text = String(decoding: buffer[0..<count], as: UTF8.self)
    for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.dropFirst(6).filter(\.isNumber)) ?? 0
    }
    return 0
}

/// `value` with `decimals` digits after the point, right-aligned in `width` characters.
func fixed(_ value: Double, _ decimals: Int, width: Int = 0) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    var text = decimals == 0 ? String(Int(rounded)) : String(rounded)
    if decimals > 0 {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        let fraction = parts.count > 1 ? String(parts[1]) : ""
        text = parts[0] + "." + String((fraction + String(repeating: "0", count: decimals)).prefix(decimals))
    }
    return String(repeating: " ", count: max(0, width - text.count)) + text
}

func padded(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }

let selfPath: String = {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    return String(decoding: buffer[0..<max(count, 0)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}()

func remove(_ path: String) {
    if access(path, F_OK) == 0 { _ = spawn("rm", ["-rf", path]) }
}

// MARK: Corpora (the shapes of shared/bench/make_corpus.sh)

struct Generator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }
    mutating func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        let words = buffer.bindMemory(to: UInt64.self)
        for i in words.indices { words[i] = next() }
    }
}

func writeFile(_ path: String, _ bytes: UnsafeRawBufferPointer) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    precondition(fd >= 0, "cannot create \(path)")
    var offset = 0
    while offset < bytes.count {
        let count = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
        precondition(count > 0)
        offset += count
    }
    close(fd)
}

/// Returns the total payload size.
func makeCorpus(small: Bool, quick: Bool, at root: String) -> Int {
    var rng = Generator(state: small ? 0x5eed_0001 : 0x5eed_0002)
    var total = 0
    mkdir(root, 0o755)
    if small {
        let count = quick ? 1_000 : 10_000
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 << 10, alignment: 8)
        defer { buffer.deallocate() }
        for i in 0..<10 {
            mkdir("\(root)/d\(two(i))", 0o755)
            for j in 0..<10 { mkdir("\(root)/d\(two(i))/e\(two(j))", 0o755) }
        }
        for n in 0..<count {
            let size = 1024 + Int(rng.next() % UInt64(15 * 1024 + 1))
            rng.fill(buffer)
            let directory = n % 100
            let number = String(n)
            let file = "f" + String(repeating: "0", count: max(0, 5 - number.count)) + number + ".bin"
            let name = "\(root)/d\(two(directory / 10))/e\(two(directory % 10))/\(file)"
            writeFile(name, UnsafeRawBufferPointer(rebasing: buffer[0..<size]))
            total += size
        }
    } else {
        let size = quick ? 16 << 20 : 64 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        for n in 0..<(quick ? 4 : 20) {
            rng.fill(buffer)
            writeFile("\(root)/big\(two(n)).bin", UnsafeRawBufferPointer(buffer))
            total += size
        }
    }
    return total
}

// MARK: Cases

struct Row {
    var corpus: String
    var format: String
    var operation: String
    var oursSeconds: Double
    var bsdtarSeconds: Double
    var oursRSS: Int
    var bsdtarRSS: Int
    var megabytes: Double
}

func best(_ runs: [Run]) -> Run {
    Run(seconds: runs.map(\.seconds).min()!, maxRSSKiB: runs.map(\.maxRSSKiB).max()!)
}

let base = work + "/archiveio-bench-\(getpid())"
mkdir(base, 0o755)
defer { remove(base) }
var rows: [Row] = []
var load = [Double](repeating: 0, count: 3)
_ = getloadavg(&load, 3)
print(
    "ArchiveIO \(libarchiveVersion) vs bsdtar; best of \(repeats) runs\(quick ? " (quick corpora)" : ""); "
        + "working in \(work); load average \(fixed(load[0], 2)) on \(sysconf(Int32(_SC_NPROCESSORS_ONLN))) CPUs")

for small in [true, false] {
    let corpus = base + (small ? "/small" : "/large")
    let corpusName =
        small ? "small (\(quick ? "1,000" : "10,000") × 1–16 KiB)" : "large (\(quick ? "4 × 16" : "20 × 64") MiB)"
    print("generating \(corpusName)…")
    let bytes = makeCorpus(small: small, quick: quick, at: corpus)
    let megabytes = Double(bytes) / 1e6
    for format in ["zst", "zip"] {
        let ours = base + "/ours." + (format == "zst" ? "tar.zst" : "zip")
        let theirs = base + "/bsdtar." + (format == "zst" ? "tar.zst" : "zip")
        let bsdtarFormat =
            format == "zst"
            ? ["--zstd", "--options", "zstd:compression-level=3"]
            : ["--format", "zip", "--options", "zip:compression=store"]
        let label = format == "zst" ? ".tar.zst (zstd 3)" : ".zip (store)"
        var write: ([Run], [Run]) = ([], [])
        var read: ([Run], [Run]) = ([], [])
        var extract: ([Run], [Run]) = ([], [])
        // Each timed run starts after `sync`, so that neither side pays for the other's
        // dirty pages; the order alternates between repetitions.
        func timed(_ program: String, _ args: [String], before: () -> Void = {}) -> Run {
            before()
            sync()
            return spawn(program, args)
        }
        for round in 0..<repeats {
            let oursFirst = round % 2 == 0
            for side in oursFirst ? [0, 1] : [1, 0] {
                if side == 0 {
                    write.0.append(
                        timed(selfPath, ["--child", "write", format, corpus, ours]) { remove(ours) })
                } else {
                    write.1.append(
                        timed("bsdtar", ["-c", "-f", theirs] + bsdtarFormat + ["-C", corpus, "."]) { remove(theirs) })
                }
            }
        }
        // Both readers read the same archive: ours.
        for round in 0..<repeats {
            for side in round % 2 == 0 ? [0, 1] : [1, 0] {
                if side == 0 {
                    read.0.append(timed(selfPath, ["--child", "read", ours]))
                } else {
                    read.1.append(timed("bsdtar", ["-x", "-O", "-f", ours]))
                }
            }
        }
        // A fresh directory for every run. Small files are removed only after all runs:
        // deleting 10,000 files keeps the file system busy for seconds, which would slow down
        // whichever run came next. Large files are removed at once, or the page cache fills.
        for round in 0..<repeats {
            for side in round % 2 == 0 ? [0, 1] : [1, 0] {
                let directory = base + "/extracted-\(side)-\(round)"
                if side == 0 {
                    extract.0.append(timed(selfPath, ["--child", "extract", ours, directory]))
                } else {
                    extract.1.append(
                        timed("bsdtar", ["-x", "-f", ours, "-C", directory]) { mkdir(directory, 0o755) })
                }
                if !small { remove(directory) }
            }
        }
        for round in 0..<repeats {
            for side in [0, 1] { remove(base + "/extracted-\(side)-\(round)") }
        }
        for (operation, runs) in [("write", write), ("read", read), ("extract", extract)] {
            let (o, b) = (best(runs.0), best(runs.1))
            let row = Row(
                corpus: corpusName, format: label, operation: operation, oursSeconds: o.seconds,
                bsdtarSeconds: b.seconds, oursRSS: o.maxRSSKiB, bsdtarRSS: b.maxRSSKiB, megabytes: megabytes)
            rows.append(row)
            print(
                "  \(padded(corpusName, 26)) \(padded(label, 18)) \(padded(operation, 8)) ours "
                    + "\(fixed(megabytes / o.seconds, 1, width: 8)) MB/s  bsdtar \(fixed(megabytes / b.seconds, 1, width: 8)) "
                    + "MB/s  time ratio \(fixed(o.seconds / b.seconds, 2))×  peak \(fixed(Double(o.maxRSSKiB) / 1024, 1)) / "
                    + "\(fixed(Double(b.maxRSSKiB) / 1024, 1)) MiB")
        }
        remove(ours)
        remove(theirs)
    }
    remove(corpus)
}

print("")
print(
    "| Corpus | Format | Operation | ArchiveIO MB/s | bsdtar MB/s | Time ratio (ours ÷ bsdtar) | Peak RSS ArchiveIO | Peak RSS bsdtar |"
)
print("|---|---|---|---:|---:|---:|---:|---:|")
for row in rows {
    let cells = [
        row.corpus, row.format, row.operation, fixed(row.megabytes / row.oursSeconds, 0),
        fixed(row.megabytes / row.bsdtarSeconds, 0), fixed(row.oursSeconds / row.bsdtarSeconds, 2) + "×",
        fixed(Double(row.oursRSS) / 1024, 1) + " MiB", fixed(Double(row.bsdtarRSS) / 1024, 1) + " MiB",
    ]
    print("| " + cells.joined(separator: " | ") + " |")
}
let worst = rows.map { $0.oursSeconds / $0.bsdtarSeconds }.max() ?? 0
let peak = rows.map(\.oursRSS).max() ?? 0
print("")
print(
    "worst time ratio \(fixed(worst, 2))× (target ≤ 1.10×); ArchiveIO peak RSS \(fixed(Double(peak) / 1024, 1)) MiB "
        + "(target < 64 MB)")
