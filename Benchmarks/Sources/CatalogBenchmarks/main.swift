// The catalog against its floors and against DVC (issue 4), in one run.
//
//   swift run -c release --package-path Benchmarks CatalogBenchmarks \
//       [--assetcat PATH] [--dvc PATH] [--repeat N] [--work DIR] [--skip-large] [--skip-dvc]
//
// Our side is the release-built `assetcat` binary, run as a child process, as users run it
// (build it first: `swift build -c release --static-swift-stdlib --scratch-path .build-bench --product assetcat`).
// Every child — ours and each baseline — runs under `/usr/bin/time -f %M`, so its peak memory
// is the kernel's ru_maxrss of that child (for a shell pipeline: of its largest process), and
// is timed wall-clock from spawn to exit. Each timed run starts after `sync`, with the corpus in
// the page cache (it was just written; nothing drops the cache), and the sides of a comparison
// alternate order from round to round; each figure is the best of N rounds (default 3), each
// peak the largest of the N.
//
// Corpora are the shapes of shared/bench/make_corpus.sh (small: 10,000 files of 1–16 KiB in 100
// folders; large: 20 × 64 MiB random bytes), made by that script when it is there (else by an
// equivalent generator here) in a temporary directory that is deleted at the end.
//
// Floors:
//   hash        find | xargs -0 -P2 openssl dgst -sha256: two openssl processes, each over half
//               of the files (the catalog hashes on both cores, so the floor does too).
//   hash + copy the hash floor plus `cp -r` of the corpus into a fresh directory on the same
//               file system followed by `sync` (copy mode syncs every file it stores, so the copy
//               floor pays for durability too). The two times are measured separately and summed.
//   dvc         `dvc add DIR` on a copy of the small corpus in a fresh `git init` + `dvc init`.
//   rm          `rm -rf` of a copy of the 10,000 files, then `sync` (our removal syncs too).
//   ls --json   python3: sqlite3 reads the same rows from catalog.sqlite and json.dumps prints
//               the same fields (indented, keys sorted, dates ISO 8601), to /dev/null.
import AssetCatalog
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

// MARK: Child mode: one in-process library call, then exit (timed and measured like the CLI).

if CommandLine.arguments.count >= 2 && CommandLine.arguments[1] == "--child" {
    // --child add-copy CONCURRENCY CATALOG CORPUS
    let args = Array(CommandLine.arguments.dropFirst(2))
    guard args.count == 4, args[0] == "add-copy", let concurrency = Int(args[1]) else { exit(2) }
    let catalog = try Catalog.open(at: URL(fileURLWithPath: args[2]))
    let result = try await catalog.add(
        [args[3]], options: AddOptions(mode: .copy, recursive: true, concurrency: concurrency))
    catalog.close()
    exit(result.failures.isEmpty && !result.wasCancelled ? 0 : 1)
}

// MARK: Options

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().path
let environment = ProcessInfo.processInfo.environment
var assetcat = environment["ASSETCAT"] ?? repositoryRoot + "/.build-bench/release/assetcat"
var dvcPath: String? = environment["DVC"]
var repeats = 3
var work = "/tmp"
var skipLarge = false
var skipDVC = false
var corpusScript = "/work/shared/bench/make_corpus.sh"

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
            "usage: CatalogBenchmarks [--assetcat PATH] [--dvc PATH] [--repeat N] [--work DIR] [--corpus-script PATH] "
                + "[--skip-large] [--skip-dvc]")
        exit(2)
    }
    while i < arguments.count {
        switch arguments[i] {
        case "--assetcat": assetcat = value()
        case "--dvc": dvcPath = value()
        case "--repeat": repeats = max(1, Int(value()) ?? 3)
        case "--work": work = value()
        case "--corpus-script": corpusScript = value()
        case "--skip-large": skipLarge = true
        case "--skip-dvc": skipDVC = true
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

guard access(assetcat, X_OK) == 0 else {
    say("no assetcat at \(assetcat); build it first:")
    say("  swift build -c release --package-path . --scratch-path .build-bench --product assetcat")
    exit(2)
}
guard access("/usr/bin/time", X_OK) == 0 else {
    say("/usr/bin/time is missing (it measures each child's peak memory): apt-get install -y time")
    exit(2)
}
for tool in ["openssl", "python3", "cp", "find", "xargs"] where which(tool) == nil {
    say("\(tool) is missing")
    exit(2)
}
if dvcPath == nil { dvcPath = which("dvc") }
if skipDVC { dvcPath = nil }
setenv("DVC_NO_ANALYTICS", "1", 1)
setenv("LC_ALL", "C", 1)

// MARK: Processes

let base = work + "/catalog-bench-\(getpid())"
let children = ChildProcesses(base: base)

@discardableResult
func spawn(_ program: String, _ args: [String], stdout: String = "/dev/null", timed: Bool = true) -> Run {
    children.spawn(program, args, stdout: stdout, timed: timed)
}

@discardableResult
func shell(_ script: String, timed: Bool = true, stdout: String = "/dev/null") -> Run {
    children.shell(script, timed: timed, stdout: stdout)
}

func output(_ script: String) -> String { children.output(script) }

func removeTree(_ path: String) { children.removeTree(path) }

/// Regular files under `directory`.
func fileCount(_ directory: String) -> Int {
    Int(output("find \(quoted(directory)) -type f | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
}

func assetCount(_ catalog: String) -> Int { rowCount(catalog, table: "Asset") }

/// Rows of the `Job` table. The corpora are `.bin` and `.txt` files (kind `data`, `text`), so an
/// add queues no archive-indexing or metadata jobs: the checks require none, so that the timed
/// add is the same work as the floors' (no `queued N jobs` line, no job rows written).
func jobCount(_ catalog: String) -> Int { rowCount(catalog, table: "Job") }

func rowCount(_ catalog: String, table: String) -> Int {
    let script =
        "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM \(table)').fetchone()[0])"
    return Int(
        output("python3 -c \(quoted(script)) \(quoted(catalog + "/catalog.sqlite"))")
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
}

// MARK: Memory of this process (the in-process case)

func resetPeakMemory() { try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8) }

func peakMemoryKiB() -> Int {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.dropFirst(6).filter(\.isNumber)) ?? 0
    }
    return 0
}

// MARK: Corpora

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

func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }

/// Makes a corpus with make_corpus.sh (deterministic), or with the same shape here.
@MainActor func makeCorpus(_ kind: String, at root: String) {
    if access(corpusScript, R_OK) == 0 {
        shell("bash \(quoted(corpusScript)) \(kind) \(quoted(root))", timed: false)
        return
    }
    var rng = Generator(state: kind == "small" ? 0x5eed_0001 : 0x5eed_0002)
    mkdir(root, 0o755)
    if kind == "small" {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 << 10, alignment: 8)
        defer { buffer.deallocate() }
        for i in 0..<10 {
            mkdir("\(root)/d\(two(i))", 0o755)
            for j in 0..<10 { mkdir("\(root)/d\(two(i))/e\(two(j))", 0o755) }
        }
        for n in 0..<10_000 {
            let size = 1024 + Int(rng.next() % UInt64(15 * 1024 + 1))
            rng.fill(buffer)
            let directory = n % 100
            let number = String(n)
            let file = "f" + String(repeating: "0", count: max(0, 5 - number.count)) + number + ".bin"
            writeFile(
                "\(root)/d\(two(directory / 10))/e\(two(directory % 10))/\(file)",
                UnsafeRawBufferPointer(rebasing: buffer[0..<size]))
        }
    } else {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 20, alignment: 8)
        defer { buffer.deallocate() }
        for n in 0..<20 {
            rng.fill(buffer)
            writeFile("\(root)/big\(two(n)).bin", UnsafeRawBufferPointer(buffer))
        }
    }
}

/// 100,000 tiny files (distinct contents) in 100 folders, for the `ls` catalog.
func makeTinyCorpus(at root: String, count: Int) {
    mkdir(root, 0o755)
    for d in 0..<100 { mkdir("\(root)/t\(two(d))", 0o755) }
    for n in 0..<count {
        let bytes = Array("tiny asset \(n)\n".utf8)
        bytes.withUnsafeBytes { writeFile("\(root)/t\(two(n % 100))/a\(n).txt", $0) }
    }
}

// MARK: Rounds

/// One side of a comparison: untimed preparation, then the timed run (after `sync`).
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
            sync()
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

// MARK: Rows

struct Row {
    var name: String
    var ours: Run
    /// The baseline's time (a sum for hash + copy).
    var baseline: Double
    var baselineName: String
    var baselinePeakKiB: Int?
    /// Largest acceptable ours ÷ baseline time ratio (nil: no time target).
    var maxRatio: Double?
    var targetText: String
    var oursLabel: String = "assetcat"
    var ratio: Double { ours.seconds / baseline }
    var memoryMet: Bool { Double(ours.peakKiB) / 1024 < 200 }
    var timeMet: Bool { maxRatio.map { ratio <= $0 } ?? true }
}

var rows: [Row] = []
var notes: [String] = []
mkdir(base, 0o755)
defer { removeTree(base) }

@MainActor func catalogInit(_ catalog: String) {
    removeTree(catalog)
    spawn(assetcat, ["init", catalog], timed: false)
}

func hashFloor(_ corpus: String, files: Int) -> Run {
    // Two openssl processes at once, each over half of the files.
    let half = (files + 1) / 2
    return shell(
        "find \(quoted(corpus)) -type f -print0 | xargs -0 -P2 -n \(half) -s 1900000 openssl dgst -sha256 > /dev/null")
}

@MainActor func addCase(corpusName: String, corpus: String, files: Int, megabytes: Double, isLarge: Bool) -> (
    reference: Run, copy: Run
) {
    let catalog = base + "/catalog"
    let copyTarget = base + "/copy"
    say("  \(corpusName): \(files) files, \(String(format: "%.1f", megabytes)) MB")
    let runs = measure(
        repeats,
        [
            Side(name: "hash floor (2× openssl dgst -sha256)", run: { hashFloor(corpus, files: files) }),
            Side(
                name: "copy floor (cp -r + sync)", prepare: { removeTree(copyTarget) },
                run: { shell("cp -r \(quoted(corpus)) \(quoted(copyTarget)) && sync") },
                check: { removeTree(copyTarget) }),
            Side(
                name: "assetcat add --reference", prepare: { catalogInit(catalog) },
                run: { spawn(assetcat, ["add", "--catalog", catalog, "--reference", "--recursive", corpus]) },
                check: {
                    precondition(assetCount(catalog) == files, "reference add: wrong asset count")
                    precondition(jobCount(catalog) == 0, "reference add: queued jobs")
                    removeTree(catalog)
                }),
            Side(
                name: "assetcat add (copy)", prepare: { catalogInit(catalog) },
                run: { spawn(assetcat, ["add", "--catalog", catalog, "--recursive", corpus]) },
                check: {
                    precondition(assetCount(catalog) == files, "copy add: wrong asset count")
                    precondition(jobCount(catalog) == 0, "copy add: queued jobs")
                    precondition(fileCount(catalog + "/objects") == files, "copy add: wrong object count")
                    removeTree(catalog)
                }),
        ])
    let (hash, copy, reference, managed) = (runs[0], runs[1], runs[2], runs[3])
    rows.append(
        Row(
            name: "add \(corpusName), reference mode", ours: reference, baseline: hash.seconds,
            baselineName: "hash floor", baselinePeakKiB: hash.peakKiB, maxRatio: isLarge ? 1 / 0.9 : nil,
            targetText: isLarge ? "≥ 90% of floor (≤ 1.11×)" : "– (reported)"))
    rows.append(
        Row(
            name: "add \(corpusName), copy mode", ours: managed, baseline: hash.seconds + copy.seconds,
            baselineName: "hash + copy floor", baselinePeakKiB: max(hash.peakKiB, copy.peakKiB), maxRatio: 1.5,
            targetText: "≤ 1.50×"))
    notes.append(
        "\(corpusName): hash floor \(String(format: "%.3f s (%.0f MB/s)", hash.seconds, megabytes / hash.seconds)), "
            + "cp -r + sync \(String(format: "%.3f s", copy.seconds)); assetcat --reference "
            + "\(String(format: "%.0f MB/s", megabytes / reference.seconds)), copy "
            + "\(String(format: "%.0f MB/s", megabytes / managed.seconds))")
    return (reference, managed)
}

say("assetcat: \(assetcat)")
say("best of \(repeats) rounds; work directory \(base)")

// MARK: 1. Add, small corpus (+ dvc)

let small = base + "/small"
say("generating the small corpus…")
makeCorpus("small", at: small)
let smallMB = Double(output("du -sb \(quoted(small)) | cut -f1").trimmingCharacters(in: .whitespacesAndNewlines))! / 1e6
let smallFiles = fileCount(small)
say("add, small corpus")
let smallAdds = addCase(
    corpusName: "small (10,000 × 1–16 KiB)", corpus: small, files: smallFiles, megabytes: smallMB, isLarge: false)

if let dvc = dvcPath {
    let version = output("\(quoted(dvc)) --version").trimmingCharacters(in: .whitespacesAndNewlines)
    say("dvc \(version) add, small corpus")
    let repo = base + "/dvc-repo"
    let dvcRun = measure(
        repeats,
        [
            Side(
                name: "dvc add",
                prepare: {
                    removeTree(repo)
                    shell(
                        "mkdir \(quoted(repo)) && cd \(quoted(repo)) && git init -q && \(quoted(dvc)) init -q && "
                            + "cp -r \(quoted(small)) data", timed: false)
                },
                run: { shell("cd \(quoted(repo)) && \(quoted(dvc)) add -q data") },
                check: {
                    precondition(access(repo + "/data.dvc", F_OK) == 0, "dvc add wrote no data.dvc")
                    removeTree(repo)
                })
        ])[0]
    for (mode, ours) in [("copy", smallAdds.copy), ("reference", smallAdds.reference)] {
        rows.append(
            Row(
                name: "add small, \(mode) mode vs dvc add", ours: ours, baseline: dvcRun.seconds,
                baselineName: "dvc add (\(version))", baselinePeakKiB: dvcRun.peakKiB, maxRatio: 0.2,
                targetText: "≥ 5× faster (≤ 0.20×)"))
    }
} else {
    say("dvc: not found (pip install dvc, or --dvc PATH); its rows are skipped")
    notes.append("dvc was not available: the dvc rows were skipped")
}

// MARK: 1b. What if: the library's add (copy mode) with more files in flight than cores

say("library add, copy mode, small corpus: concurrency 2 (the default here) vs 16 (what if)")
do {
    let catalog = base + "/catalog-what-if"
    let selfPath = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    func side(_ concurrency: Int) -> Side {
        Side(
            name: "Catalog.add copy, concurrency \(concurrency)", prepare: { catalogInit(catalog) },
            run: { spawn(selfPath, ["--child", "add-copy", String(concurrency), catalog, small]) },
            check: {
                precondition(fileCount(catalog + "/objects") == smallFiles, "what-if add: wrong object count")
                removeTree(catalog)
            })
    }
    let runs = measure(repeats, [side(2), side(16)])
    rows.append(
        Row(
            name: "what if: library add small, copy mode, concurrency 16 (vs the same at 2)", ours: runs[1],
            baseline: runs[0].seconds, baselineName: "concurrency 2", baselinePeakKiB: runs[0].peakKiB, maxRatio: nil,
            targetText: "– (diagnostic)", oursLabel: "concurrency 16"))
}

// MARK: 2. rm of 10,000 assets (copy mode, files removed)

say("rm of every asset, small corpus added in copy mode")
do {
    let catalog = base + "/catalog-rm"
    let copyTarget = base + "/copy-rm"
    var ids: [String] = []
    let runs = measure(
        repeats,
        [
            Side(
                name: "assetcat rm (10,000 IDs)",
                prepare: {
                    catalogInit(catalog)
                    spawn(assetcat, ["add", "--catalog", catalog, "--recursive", small], timed: false)
                    let json = output("\(quoted(assetcat)) ls --json --catalog \(quoted(catalog))")
                    let list = try! JSONSerialization.jsonObject(with: Data(json.utf8)) as! [[String: Any]]
                    ids = list.map { String(($0["id"] as! NSNumber).int64Value) }
                    precondition(ids.count == smallFiles && fileCount(catalog + "/objects") == smallFiles)
                },
                run: { spawn(assetcat, ["rm", "--catalog", catalog] + ids) },
                check: {
                    precondition(fileCount(catalog + "/objects") == 0, "rm left files in objects/")
                    precondition(assetCount(catalog) == 0, "rm left assets")
                }),
            Side(
                name: "rm -rf + sync",
                prepare: {
                    removeTree(copyTarget)
                    shell("cp -r \(quoted(small)) \(quoted(copyTarget))", timed: false)
                },
                run: { shell("rm -rf \(quoted(copyTarget)) && sync") }),
            Side(
                name: "Catalog.removeAll(AssetQuery()) in-process",
                prepare: {
                    catalogInit(catalog)
                    spawn(assetcat, ["add", "--catalog", catalog, "--recursive", small], timed: false)
                    precondition(fileCount(catalog + "/objects") == smallFiles)
                },
                run: {
                    resetPeakMemory()
                    let start = now()
                    let opened = try! Catalog.open(at: URL(fileURLWithPath: catalog))
                    let deleted = try! opened.removeAll(AssetQuery())
                    opened.close()
                    let seconds = now() - start
                    precondition(deleted == smallFiles)
                    return Run(seconds: seconds, peakKiB: peakMemoryKiB())
                },
                check: {
                    precondition(fileCount(catalog + "/objects") == 0, "removeAll left files in objects/")
                    precondition(assetCount(catalog) == 0, "removeAll left assets")
                }),
        ])
    rows.append(
        Row(
            name: "rm 10,000 assets + their files (CLI)", ours: runs[0], baseline: runs[1].seconds,
            baselineName: "rm -rf + sync", baselinePeakKiB: runs[1].peakKiB, maxRatio: nil, targetText: "– (reported)"))
    rows.append(
        Row(
            name: "removeAll 10,000 assets + their files (library, in-process)", ours: runs[2],
            baseline: runs[1].seconds, baselineName: "rm -rf + sync", baselinePeakKiB: runs[1].peakKiB, maxRatio: nil,
            targetText: "– (reported)", oursLabel: "Catalog.removeAll"))
    removeTree(catalog)
}

// MARK: 3. ls --json of 100,000 assets

say("ls --json of 100,000 assets (100,000 tiny files added in reference mode)")
do {
    let count = 100_000
    let tiny = base + "/tiny"
    let catalog = base + "/catalog-ls"
    makeTinyCorpus(at: tiny, count: count)
    catalogInit(catalog)
    sync()
    let hash = hashFloor(tiny, files: count)
    sync()
    let add = spawn(assetcat, ["add", "--catalog", catalog, "--reference", "--recursive", tiny])
    precondition(assetCount(catalog) == count && jobCount(catalog) == 0)
    say(
        "    add of 100,000 tiny files: \(String(format: "%.3f s", add.seconds)), hash floor "
            + "\(String(format: "%.3f s", hash.seconds)) (one run)")
    rows.append(
        Row(
            name: "add 100,000 tiny files, reference mode (1 run, setup of ls)", ours: add, baseline: hash.seconds,
            baselineName: "hash floor", baselinePeakKiB: hash.peakKiB, maxRatio: nil, targetText: "– (reported)"))
    // The same rows and fields as AssetRecord's JSON, printed by Python.
    let python = """
        import json, sqlite3, sys
        from datetime import datetime, timezone
        db = sqlite3.connect(sys.argv[1])
        cols = [r[1] for r in db.execute("PRAGMA table_info(Asset)")]
        def date(v):
            if v is None: return None
            return datetime.fromtimestamp(v, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out = []
        for r in db.execute("SELECT * FROM Asset ORDER BY id"):
            a = dict(zip(cols, r))
            out.append({"id": a["id"], "name": a["name"], "kind": a["kind"], "size": a["size"],
                "sha256": a["sha256"], "storage": a["storage"], "path": a["path"], "archive": a.get("archive"),
                "member": a["member"], "tags": sorted(t for t in a["tagText"].split("\\n") if t),
                "created": date(a["created"]), "modified": date(a["modified"]),
                "metadata": json.loads(a["metadataJSON"])})
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=True, ensure_ascii=False))
        sys.stdout.write("\\n")
        """
    let script = base + "/ls.py"
    try! python.write(toFile: script, atomically: true, encoding: .utf8)
    // Same shape check, once: both print 100,000 records with the same keys.
    let oursJSON = base + "/ours.json"
    let theirsJSON = base + "/python.json"
    spawn(assetcat, ["ls", "--json", "--catalog", catalog], stdout: oursJSON, timed: false)
    spawn("python3", [script, catalog + "/catalog.sqlite"], stdout: theirsJSON, timed: false)
    for file in [oursJSON, theirsJSON] {
        let list =
            try! JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as! [[String: Any]]
        precondition(list.count == count, "\(file): \(list.count) records")
        precondition(
            Set(list[0].keys) == [
                "id", "name", "kind", "size", "sha256", "storage", "path", "archive",
                "member", "tags", "created", "modified", "metadata",
            ], "\(file): keys \(list[0].keys.sorted())")
    }
    removeTree(oursJSON)
    removeTree(theirsJSON)
    let runs = measure(
        repeats,
        [
            Side(name: "assetcat ls --json", run: { spawn(assetcat, ["ls", "--json", "--catalog", catalog]) }),
            Side(
                name: "python3 sqlite3 + json.dumps", run: { spawn("python3", [script, catalog + "/catalog.sqlite"]) }),
        ])
    rows.append(
        Row(
            name: "ls --json, 100,000 assets", ours: runs[0], baseline: runs[1].seconds,
            baselineName: "python3 sqlite3 + json.dumps", baselinePeakKiB: runs[1].peakKiB, maxRatio: nil,
            targetText: "– (reported)"))
    removeTree(catalog)
    removeTree(tiny)
}

// MARK: 4. Add, large corpus

if !skipLarge {
    let large = base + "/large"
    say("generating the large corpus…")
    makeCorpus("large", at: large)
    let largeMB =
        Double(output("du -sb \(quoted(large)) | cut -f1").trimmingCharacters(in: .whitespacesAndNewlines))! / 1e6
    say("add, large corpus")
    _ = addCase(
        corpusName: "large (20 × 64 MiB)", corpus: large, files: fileCount(large), megabytes: largeMB, isLarge: true)
    removeTree(large)
}
removeTree(small)

// MARK: Table

func seconds(_ s: Double) -> String { String(format: "%.3f s", s) }
func mb(_ kib: Int) -> String { String(format: "%.0f MB", Double(kib) / 1024) }

say("")
say("| case | assetcat | baseline | ratio (assetcat ÷ baseline) | target | met? | peak memory (assetcat / baseline) |")
say("|---|---:|---|---:|---|---|---:|")
for row in rows {
    let met: String
    if row.maxRatio == nil {
        met = row.memoryMet ? "memory yes" : "**memory NO**"
    } else {
        met =
            row.timeMet && row.memoryMet
            ? "yes" : "**NO**" + (row.timeMet ? " (memory)" : row.memoryMet ? "" : " (time, memory)")
    }
    let ours = (row.oursLabel == "assetcat" ? "" : row.oursLabel + " ") + seconds(row.ours.seconds)
    say(
        "| \(row.name) | \(ours) | \(row.baselineName) \(seconds(row.baseline)) | \(String(format: "%.2f×", row.ratio)) | "
            + "\(row.targetText); < 200 MB | \(met) | \(mb(row.ours.peakKiB)) / \(row.baselinePeakKiB.map(mb) ?? "–") |"
    )
}
say("")
for note in notes { say("- \(note)") }
let worst = rows.max { $0.ours.peakKiB < $1.ours.peakKiB }!
say("- largest peak memory of ours: \(mb(worst.ours.peakKiB)) (\(worst.name)); target < 200 MB")
