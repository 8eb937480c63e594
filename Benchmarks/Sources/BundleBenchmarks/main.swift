// BagIt bundle export and import (`assetcat export` / `assetcat import`) against bsdtar +
// openssl, in one run.
//
//   swift build -c release --static-swift-stdlib --scratch-path .build-bench --product assetcat
//   ASSETCAT=$PWD/.build-bench/release/assetcat \
//       swift run -c release --package-path Benchmarks BundleBenchmarks \
//       [--assetcat PATH] [--repeat N] [--work DIR] [--corpus-script PATH] [--skip-small] [--skip-large]
//
// Our side is the release-built `assetcat` binary, run as a child process, as users run it. Every
// child — ours and each baseline step — runs under `/usr/bin/time -f %M`, so its peak memory is the
// kernel's ru_maxrss of that child (for a shell pipeline: of its largest process), and it is timed
// wall-clock from spawn to exit. Each timed run starts after `sync`, with its input in the page
// cache; the two sides of a comparison alternate order from round to round; each figure is the
// best of N rounds (default 3), each peak the largest of the N.
//
// Corpora are made by shared/bench/make_corpus.sh (small: 10,000 files of 1–16 KiB in 100
// folders; large: 20 × 64 MiB random bytes), found beside the repository
// (`../shared/bench/make_corpus.sh`) or given with --corpus-script; without it the benchmark stops.
// They, the catalogs and the bundles live in a temporary directory under --work (default
// /dev/shm when it has room, else /tmp), deleted at the end. Each corpus is added to a catalog
// (`assetcat add --recursive`, copy mode; not timed), then:
//
//   export  `assetcat export --catalog C OUT.tar.zst` (zstd 3) and `OUT.zip` (deflate 6), against
//           `bsdtar --zstd -cf` / `bsdtar -a -cf x.zip` of the corpus directory, then
//           `openssl dgst -sha256` over its files (export re-hashes every byte): the two baseline
//           steps run one after the other and their times are summed. Target ≤ 1.2×.
//   import  `assetcat import --catalog EMPTY BUNDLE` of that export, against `bsdtar -xf BUNDLE`
//           into an empty directory, then `openssl dgst -sha256` over the extracted files.
//           Target ≤ 1.3×.
//   memory  peak RSS of every assetcat export and import < 64 MB, whatever the bundle's size.
//
// Then hostile tag files (--skip-hostile leaves them out, --hostile-only runs
// only them, --hostile-filter TEXT only those whose name contains TEXT): directory bags generated
// here — a 30 MB and a 100 MB `bag-info.txt` of short lines, a `manifest-sha256.txt` of 1,000,000
// lines naming files the bag lacks, a 100 MB `bagit.txt` — each as a directory and as a .tar,
// given to `assetcat validate` and `assetcat import` (which refuse them: non-zero exit); and
// `manifest-sha256.txt`s of 100,000 and 1,000,000 lines of distinct digests naming files the bag
// lacks (`data/missing/NNNNNNN.bin`), as a directory, a .tar and a .tar.gz, the manifest before
// the payload as `assetcat export` writes them, imported into an empty catalog and into one with
// content (whose import looks payload digests up as they stream). Printed: each run's exit status, peak RSS and time,
// and its first line of output, beside a floor for the manifests: reading the manifest out of the
// bundle and counting its lines (`wc -l`, through `bsdtar -xOf` for an archive). Target < 200 MB
// each; for the manifests of distinct digests, `import` well under a second and `validate` within
// a few times the floor. (Give --assetcat a build from before the limits to see what they changed.)
//
// Durability is not in the baselines (bsdtar does not sync; export fsyncs its bundle, import
// syncs the catalog's file system twice). The `sync` column is how long a `sync` right after the
// baseline's bsdtar step took: on tmpfs nothing; on a disk, what the baseline would pay to be as
// durable (plus whatever else the machine had dirty).
import BenchSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Prints a line and flushes, so that progress shows up in a log as it happens.
func say(_ line: String = "") {
    print(line)
    fflush(nil)
}

// MARK: Options

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().path
let environment = ProcessInfo.processInfo.environment
var assetcat = environment["ASSETCAT"] ?? repositoryRoot + "/.build-bench/release/assetcat"
var repeats = 3
var corpusScript = URL(fileURLWithPath: repositoryRoot + "/../shared/bench/make_corpus.sh").standardizedFileURL.path
var skipSmall = false
var skipLarge = false
var skipHostile = false
var hostileFilter: String?
// tmpfs when it has room (the large case needs about 8 GB at its peak): the benchmark then
// measures the software, not the disk's write-back.
var work: String = {
    var info = statvfs()
    if statvfs("/dev/shm", &info) == 0, UInt64(info.f_bavail) * UInt64(info.f_frsize) > 10 << 30 { return "/dev/shm" }
    return "/tmp"
}()

do {
    let arguments = CommandLine.arguments
    var i = 1
    func value() -> String {
        i += 1
        guard i < arguments.count else { usage() }
        return arguments[i]
    }
    func usage() -> Never {
        say(
            "usage: BundleBenchmarks [--assetcat PATH] [--repeat N] [--work DIR] [--corpus-script PATH] "
                + "[--skip-small] [--skip-large] [--skip-hostile] [--hostile-only] [--hostile-filter TEXT]")
        exit(2)
    }
    while i < arguments.count {
        switch arguments[i] {
        case "--assetcat": assetcat = value()
        case "--repeat": repeats = max(1, Int(value()) ?? 3)
        case "--work": work = value()
        case "--corpus-script": corpusScript = value()
        case "--skip-small": skipSmall = true
        case "--skip-large": skipLarge = true
        case "--skip-hostile": skipHostile = true
        case "--hostile-filter": hostileFilter = value()
        case "--hostile-only":
            skipSmall = true
            skipLarge = true
        default: usage()
        }
        i += 1
    }
}

func which(_ name: String) -> String? {
    for directory in (environment["PATH"] ?? "").split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    return nil
}

guard (skipSmall && skipLarge) || access(corpusScript, R_OK) == 0 else {
    say("no corpus generator at \(corpusScript).")
    say("This benchmark makes its corpora with shared/bench/make_corpus.sh, from beside the repository")
    say("(../shared/bench/make_corpus.sh); give its path with --corpus-script PATH.")
    exit(2)
}
guard access(assetcat, X_OK) == 0 else {
    say("no assetcat at \(assetcat); build it first:")
    say("  swift build -c release --static-swift-stdlib --scratch-path .build-bench --product assetcat")
    exit(2)
}
guard access("/usr/bin/time", X_OK) == 0 else {
    say("/usr/bin/time is missing (it measures each child's peak memory): apt-get install -y time")
    exit(2)
}
for tool in ["bsdtar", "openssl", "python3", "bash", "find", "xargs"] where which(tool) == nil {
    say("\(tool) is missing")
    exit(2)
}
setenv("LC_ALL", "C", 1)
var workIsDirectory: ObjCBool = false
guard FileManager.default.fileExists(atPath: work, isDirectory: &workIsDirectory), workIsDirectory.boolValue else {
    say("--work \(work): no such directory")
    exit(2)
}

// MARK: Processes

let base = work + "/bundle-bench-\(getpid())"
let children = ChildProcesses(base: base)

@discardableResult
func spawn(
    _ program: String, _ args: [String], stdout: String = "/dev/null", timed: Bool = true, mayFail: Bool = false
) -> Run {
    children.spawn(program, args, stdout: stdout, timed: timed, mayFail: mayFail)
}

@discardableResult
func shell(_ script: String, timed: Bool = true, stdout: String = "/dev/null") -> Run {
    children.shell(script, timed: timed, stdout: stdout)
}

func output(_ script: String) -> String { children.output(script) }

func removeTree(_ path: String) { children.removeTree(path) }

/// Regular files under `directory`.
func fileCount(_ directory: String) -> Int { Int(output("find \(quoted(directory)) -type f | wc -l")) ?? -1 }

func byteCount(_ path: String) -> Int64 { Int64(output("du -sb \(quoted(path)) | cut -f1")) ?? -1 }

/// Rows of the catalog's `Asset` table.
func assetCount(_ catalog: String) -> Int {
    let script =
        "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM Asset').fetchone()[0])"
    return Int(output("python3 -c \(quoted(script)) \(quoted(catalog + "/catalog.sqlite"))")) ?? -1
}

/// `openssl dgst -sha256` over every regular file under `directory`: one openssl at a time, as
/// export and import hash on one thread.
func hashFiles(_ directory: String) -> Run {
    shell("find \(quoted(directory)) -type f -print0 | xargs -0 -s 1900000 openssl dgst -sha256 > /dev/null")
}

// MARK: Rounds

/// One side of a comparison: untimed preparation, then the timed run.
struct Side {
    var name: String
    var prepare: () -> Void = {}
    var run: () -> Run
    var check: () -> Void = {}
}

/// Best time and largest peak of each side over `rounds` rounds, the order rotating each round.
func measure(_ rounds: Int, _ sides: [Side]) -> [Run] {
    var runs = Array(repeating: [Run](), count: sides.count)
    for round in 0..<rounds {
        for k in 0..<sides.count {
            let index = (k + round) % sides.count
            let side = sides[index]
            side.prepare()
            let run = side.run()
            side.check()
            runs[index].append(run)
            say(
                "    round \(round + 1) \(side.name): \(String(format: "%.3f s", run.seconds)), "
                    + "peak \(String(format: "%.1f MB", Double(run.peakKiB) / 1024))")
        }
    }
    return runs.map { Run(seconds: $0.map(\.seconds).min()!, peakKiB: $0.map(\.peakKiB).max()!) }
}

/// The baseline: two steps, each after `sync`, timed separately and summed; the `sync` after
/// the first is timed on its own (reported, not counted).
struct Baseline {
    var tar: Run
    var sync: Double
    var hash: Run
    var total: Run { Run(seconds: tar.seconds + hash.seconds, peakKiB: max(tar.peakKiB, hash.peakKiB)) }
}

func timedSync() -> Double {
    let start = now()
    sync()
    return now() - start
}

// MARK: Rows

struct Row {
    var corpus: String
    var format: String
    var operation: String
    var ours: Run
    var baseline: Baseline
    var maxRatio: Double
    var ratio: Double { ours.seconds / baseline.total.seconds }
    var peakMB: Double { Double(ours.peakKiB) / 1024 }
    var timeMet: Bool { ratio <= maxRatio }
    var memoryMet: Bool { peakMB < 64 }
}

var rows: [Row] = []
mkdir(base, 0o755)
defer { removeTree(base) }

@MainActor func catalogInit(_ catalog: String) {
    removeTree(catalog)
    spawn(assetcat, ["init", catalog], timed: false)
}

/// The fastest baseline run (its parts as measured in that run), with the largest peak of all.
func best(_ runs: [Baseline]) -> Baseline {
    var fastest = runs.min { $0.total.seconds < $1.total.seconds }!
    let peak = runs.map(\.total.peakKiB).max()!
    fastest.tar.peakKiB = max(fastest.tar.peakKiB, peak)
    return fastest
}

/// Export and import of one corpus, in both formats.
@MainActor func bundleCase(kind: String, label: String) {
    let corpus = base + "/corpus-" + kind
    say("generating the \(kind) corpus (\(corpusScript))…")
    shell("bash \(quoted(corpusScript)) \(kind) \(quoted(corpus))", timed: false)
    let files = fileCount(corpus)
    let megabytes = Double(byteCount(corpus)) / 1e6
    say("  \(label): \(files) files, \(String(format: "%.1f", megabytes)) MB")

    let catalog = base + "/catalog-" + kind
    say("  assetcat add --recursive (copy mode, not timed)…")
    catalogInit(catalog)
    spawn(assetcat, ["add", "--catalog", catalog, "--recursive", corpus], timed: false)
    precondition(assetCount(catalog) == files, "add: wrong asset count")

    for (format, formatLabel, bsdtarCreate) in [
        ("tar.zst", ".tar.zst (zstd 3)", ["--zstd", "-cf"]), ("zip", ".zip (deflate 6)", ["-a", "-cf"]),
    ] {
        let ours = base + "/ours." + format
        let theirs = base + "/bsdtar." + format
        var baselineRuns: [Baseline] = []

        say("  export \(formatLabel)")
        let export = measure(
            repeats,
            [
                Side(
                    name: "assetcat export",
                    prepare: {
                        removeTree(ours)
                        sync()
                    },
                    run: { spawn(assetcat, ["export", "--catalog", catalog, ours]) }),
                Side(
                    name: "bsdtar -c + openssl dgst -sha256",
                    prepare: {
                        removeTree(theirs)
                        sync()
                    },
                    run: {
                        let tar = spawn("bsdtar", bsdtarCreate + [theirs, "-C", corpus, "."])
                        let synced = timedSync()
                        let hash = hashFiles(corpus)
                        baselineRuns.append(Baseline(tar: tar, sync: synced, hash: hash))
                        say(
                            "      (bsdtar \(String(format: "%.3f s", tar.seconds)), sync \(String(format: "%.3f s", synced)), "
                                + "openssl \(String(format: "%.3f s", hash.seconds)))")
                        return baselineRuns.last!.total
                    }),
            ])[0]
        say(
            "    sizes: ours \(String(format: "%.1f MB", Double(byteCount(ours)) / 1e6)), "
                + "bsdtar \(String(format: "%.1f MB", Double(byteCount(theirs)) / 1e6))")
        removeTree(theirs)
        rows.append(
            Row(
                corpus: label, format: formatLabel, operation: "export", ours: export,
                baseline: best(baselineRuns), maxRatio: 1.2))

        // Both sides read our bundle.
        say("  import \(formatLabel)")
        let target = base + "/imported"
        let extracted = base + "/extracted"
        baselineRuns = []
        let imported = measure(
            repeats,
            [
                Side(
                    name: "assetcat import",
                    prepare: {
                        catalogInit(target)
                        sync()
                    },
                    run: { spawn(assetcat, ["import", "--catalog", target, ours]) },
                    check: {
                        precondition(assetCount(target) == files, "import: wrong asset count")
                        precondition(fileCount(target + "/objects") == files, "import: wrong object count")
                        removeTree(target)
                    }),
                Side(
                    name: "bsdtar -x + openssl dgst -sha256",
                    prepare: {
                        removeTree(extracted)
                        mkdir(extracted, 0o755)
                        sync()
                    },
                    run: {
                        let tar = spawn("bsdtar", ["-xf", ours, "-C", extracted])
                        let synced = timedSync()
                        let hash = hashFiles(extracted)
                        baselineRuns.append(Baseline(tar: tar, sync: synced, hash: hash))
                        say(
                            "      (bsdtar \(String(format: "%.3f s", tar.seconds)), sync \(String(format: "%.3f s", synced)), "
                                + "openssl \(String(format: "%.3f s", hash.seconds)))")
                        return baselineRuns.last!.total
                    },
                    check: {
                        precondition(fileCount(extracted) >= files, "bsdtar -x: too few files")
                        removeTree(extracted)
                    }),
            ])[0]
        rows.append(
            Row(
                corpus: label, format: formatLabel, operation: "import", ours: imported,
                baseline: best(baselineRuns), maxRatio: 1.3))
        removeTree(ours)
    }
    removeTree(catalog)
    removeTree(corpus)
}

var load = [Double](repeating: 0, count: 3)
_ = getloadavg(&load, 3)
say("assetcat: \(assetcat)")
say(
    "best of \(repeats) rounds; work directory \(base); load average \(String(format: "%.2f", load[0])) on "
        + "\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) CPUs")
if !skipSmall { bundleCase(kind: "small", label: "small (10,000 × 1–16 KiB)") }
if !skipLarge { bundleCase(kind: "large", label: "large (20 × 64 MiB)") }

// MARK: Hostile tag files

/// One refused run of a hostile bag: its peak, time, exit status and first line of output.
struct HostileRow {
    var bag: String
    /// `dir` or `tar`.
    var form: String
    var command: String
    var run: Run
    var status: Int32
    var message: String
    /// For a manifest: reading it out of the bundle and counting its lines.
    var floor: Run?
    var peakMB: Double { Double(run.peakKiB) / 1024 }
}

/// Writes `head`, then `line(0)`, `line(1)`, … to `path`: `bytes` bytes in all (the last line
/// cut short), or `lines` lines.
func writeRepeated(_ path: String, _ head: String, line: (Int) -> String, bytes: Int = .max, lines: Int = .max) {
    guard let file = fopen(path, "w") else { fatalError("cannot write \(path)") }
    defer { fclose(file) }
    let count = bytes
    var written = 0
    var buffer = [UInt8](head.utf8)
    var i = 0
    while written + buffer.count < count && i < lines {
        buffer += line(i).utf8
        i += 1
        if buffer.count >= 1 << 20 {
            let n = min(buffer.count, count - written)
            fwrite(buffer, 1, n, file)
            written += n
            buffer.removeAll(keepingCapacity: true)
        }
    }
    fwrite(buffer, 1, min(buffer.count, count - written), file)
}

/// Writes `text` to a new file at `path`.
func writeText(_ path: String, _ text: String) {
    precondition(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)), "cannot write \(path)")
}

/// A directory bag of one payload file, with `tag` (a name) written by `write`.
func hostileBag(_ name: String, tag: String, write: (String) -> Void) -> String {
    let bag = base + "/hostile-" + name
    removeTree(bag)
    mkdir(bag, 0o755)
    mkdir(bag + "/data", 0o755)
    let payload = "payload\n"
    writeText(bag + "/data/a.txt", payload)
    let sha = output("printf 'payload\\n' | sha256sum | cut -c1-64")
    writeText(bag + "/bagit.txt", "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
    writeText(bag + "/manifest-sha256.txt", "\(sha)  data/a.txt\n")
    write(bag + "/" + tag)
    return bag
}

/// Writes a `manifest-sha256.txt` that lists `data/a.txt` (what ``hostileBag(_:tag:write:)``
/// holds), then `lines` files the bag lacks, `data/missing/NNNNNNN.bin`, each with a digest
/// of its own (64 hex digits of a mixed counter: none repeats).
func writeAbsentManifest(_ path: String, lines: Int) {
    let sha = output("printf 'payload\\n' | sha256sum | cut -c1-64")
    let hex = Array("0123456789abcdef".utf8)
    var line = [UInt8](repeating: 0, count: 64) + Array("  data/missing/0000000.bin\n".utf8)
    writeRepeated(
        path, "\(sha)  data/a.txt\n",
        line: { i in
            // splitmix64 of the line number and three more: 64 distinct-looking hex digits.
            for word in 0..<4 {
                var z = UInt64(i) &* 4 &+ UInt64(word) &+ 0x9E37_79B9_7F4A_7C15
                z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                z ^= z >> 31
                for k in 0..<16 { line[word * 16 + k] = hex[Int((z >> (60 - 4 * UInt64(k))) & 0xF)] }
            }
            var n = i
            for k in stride(from: 64 + 21, through: 64 + 15, by: -1) {
                line[k] = UInt8(0x30 + n % 10)
                n /= 10
            }
            return String(decoding: line, as: UTF8.self)
        }, lines: lines)
}

@MainActor func hostileCases() -> [HostileRow] {
    var result: [HostileRow] = []
    // The manifests of distinct digests are also given as a .tar.gz, and have a floor.
    let cases: [(name: String, tag: String, write: (String) -> Void, isManifest: Bool)] = [
        (
            "bag-info 30 MB of short lines", "bag-info.txt",
            { writeRepeated($0, "", line: { "L\($0 % 10): v\n" }, bytes: 30_000_000) }, false
        ),
        (
            "bag-info 100 MB of short lines", "bag-info.txt",
            { writeRepeated($0, "", line: { "L\($0 % 10): v\n" }, bytes: 100_000_000) }, false
        ),
        (
            "manifest-sha256 of 1,000,000 absent files", "manifest-sha256.txt",
            { path in
                writeRepeated(
                    path, "",
                    line: { String(repeating: "0", count: 56) + String(format: "%08x", $0) + "  data/f\($0)\n" },
                    lines: 1_000_000)
            }, false
        ),
        (
            "manifest-sha256, 100,000 absent files, distinct digests", "manifest-sha256.txt",
            { writeAbsentManifest($0, lines: 100_000) }, true
        ),
        (
            "manifest-sha256, 1,000,000 absent files, distinct digests", "manifest-sha256.txt",
            { writeAbsentManifest($0, lines: 1_000_000) }, true
        ),
        (
            "bagit.txt 100 MB", "bagit.txt",
            {
                writeRepeated(
                    $0, "BagIt-Version: 1.0\n", line: { _ in "Tag-File-Character-Encoding: UTF-8\n" },
                    bytes: 100_000_000)
            }, false
        ),
    ]
    for hostile in cases where hostileFilter.map(hostile.name.contains) ?? true {
        say("hostile bag: \(hostile.name)")
        let bag = hostileBag(String(result.count), tag: hostile.tag, write: hostile.write)
        say(
            "  \(hostile.tag): \(byteCount(bag + "/" + hostile.tag)) bytes, \(output("wc -l < \(quoted(bag + "/" + hostile.tag))")) lines"
        )
        // The same bag as a directory and as a .tar (and a .tar.gz): tag files first, then the
        // payload, as `assetcat export` writes a bag.
        let name = (bag as NSString).lastPathComponent
        var order = ["bagit.txt"]
        for member in [hostile.tag, "manifest-sha256.txt", "data"] where !order.contains(member) {
            order.append(member)
        }
        let members = order.map { quoted(name + "/" + $0) }.joined(separator: " ")
        let tar = bag + ".tar"
        let tgz = bag + ".tar.gz"
        shell("bsdtar -cf \(quoted(tar)) -C \(quoted(base)) \(members)", timed: false)
        if hostile.isManifest { shell("bsdtar -czf \(quoted(tgz)) -C \(quoted(base)) \(members)", timed: false) }
        for (form, bundle) in [("dir", bag), ("tar", tar)] + (hostile.isManifest ? [("tar.gz", tgz)] : []) {
            // The floor: the manifest read out of the bundle, its lines counted.
            let floor =
                !hostile.isManifest
                ? nil
                : form == "dir"
                    ? shell("wc -l < \(quoted(bag + "/" + hostile.tag))")
                    : shell("bsdtar -xOf \(quoted(bundle)) \(quoted(name + "/" + hostile.tag)) | wc -l")
            if let floor {
                say(
                    "  floor (\(form)): manifest read and its lines counted, \(String(format: "%.3f s", floor.seconds)), "
                        + "peak \(String(format: "%.1f MB", Double(floor.peakKiB) / 1024))")
            }
            // An import into an empty catalog, and (for the manifests) into one with content, whose
            // import looks payload digests up in the manifest as it streams.
            for command in ["validate", "import"] + (hostile.isManifest ? ["import (catalog with content)"] : []) {
                let catalog = base + "/hostile-catalog"
                catalogInit(catalog)
                if command != "import" && command != "validate" {
                    writeText(base + "/kept.txt", "kept\n")
                    spawn(assetcat, ["add", "--catalog", catalog, base + "/kept.txt"], timed: false)
                }
                sync()
                let log = base + "/hostile-stdout.txt"
                let run =
                    command == "validate"
                    ? spawn(assetcat, ["validate", bundle], stdout: log, mayFail: true)
                    : spawn(assetcat, ["import", "--catalog", catalog, bundle], stdout: log, mayFail: true)
                let status = children.lastExitStatus
                let stdout = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                let firstLine =
                    (stdout.isEmpty ? children.lastStderr : stdout).split(separator: "\n").first.map(String.init) ?? ""
                let lines = stdout.split(separator: "\n").count
                say(
                    "  assetcat \(command) (\(form)): exit \(status), \(String(format: "%.3f s", run.seconds)), "
                        + "peak \(String(format: "%.1f MB", Double(run.peakKiB) / 1024)), \(lines) lines of output")
                say("    \(firstLine.prefix(200))")
                // (A refusal is expected of this code; a build from before the limits may accept them.)
                if command != "validate" { say("    assets recorded: \(assetCount(catalog))") }
                result.append(
                    HostileRow(
                        bag: hostile.name, form: form, command: command, run: run, status: status,
                        message: String(firstLine), floor: floor))
                removeTree(catalog)
            }
        }
        removeTree(bag)
        removeTree(tar)
        removeTree(tgz)
    }
    return result
}

let hostileRows = skipHostile ? [] : hostileCases()

// MARK: Table

func s(_ seconds: Double) -> String { String(format: "%.3f", seconds) }

say("")
say(
    "| corpus | format | operation | assetcat s | baseline s (bsdtar + openssl) | ratio | target | sync s | "
        + "assetcat peak MB | baseline peak MB | target met |")
say("|---|---|---|---:|---:|---:|---|---:|---:|---:|---|")
for row in rows {
    let met =
        row.timeMet && row.memoryMet
        ? "yes" : "**NO**" + (row.timeMet ? " (memory)" : row.memoryMet ? " (time)" : " (time, memory)")
    let b = row.baseline
    say(
        "| \(row.corpus) | \(row.format) | \(row.operation) | \(s(row.ours.seconds)) | "
            + "\(s(b.total.seconds)) (\(s(b.tar.seconds)) + \(s(b.hash.seconds))) | "
            + "\(String(format: "%.2f×", row.ratio)) | ≤ \(String(format: "%.1f", row.maxRatio))×, < 64 MB | "
            + "\(s(b.sync)) | \(String(format: "%.1f", row.peakMB)) | "
            + "\(String(format: "%.1f", Double(b.total.peakKiB) / 1024)) | \(met) |")
}
if let worst = rows.max(by: { $0.ours.peakKiB < $1.ours.peakKiB }) {
    say("")
    say(
        "largest assetcat peak: \(String(format: "%.1f MB", worst.peakMB)) (\(worst.corpus), \(worst.format), "
            + "\(worst.operation)); target < 64 MB")
}

if !hostileRows.isEmpty {
    say("")
    say(
        "| hostile bag | form | command | exit | seconds | floor s (read the manifest) | ratio | assetcat peak MB "
            + "| target < 200 MB met |")
    say("|---|---|---|---:|---:|---:|---:|---:|---|")
    for row in hostileRows {
        let floor = row.floor.map { (s($0.seconds), String(format: "%.1f×", row.run.seconds / $0.seconds)) }
        say(
            "| \(row.bag) | \(row.form) | \(row.command) | \(row.status) | \(s(row.run.seconds)) | "
                + "\(floor?.0 ?? "–") | \(floor?.1 ?? "–") | "
                + "\(String(format: "%.1f", row.peakMB)) | \(row.peakMB < 200 ? "yes" : "**NO**") |")
    }
}
