// What a catalog's size costs: each command on a large catalog beside the same command on a
// ten-asset catalog, and the bulk commands beside the floors of the same work — in one run.
//
//   swift run -c release --package-path Benchmarks ScaleBenchmarks \
//       [--assetcat PATH] [--assets N] [--files N] [--repeat N] [--heavy-repeat N] [--work DIR] [--markdown FILE]
//       [--only SECTION,...] [--store postgresql://… | --postgresql]
//
// --store (or --postgresql: the server of $ASSETCAT_TEST_POSTGRESQL_URL, as
// Scripts/with-postgres.sh sets it) moves both catalogs, once built, into fresh schemas of that
// PostgreSQL server with `assetcat migrate-store --to` (timed, with its peak memory: a row of its
// own), then runs the sections that do not read catalog.sqlite themselves: one-asset and stats.
//
// --only runs some of the sections (one-asset, stats, ls, sort, export, add, rm) on the same
// catalogs, for a closer look at a few rows with more repeats.
//
// Our side is the release-built `assetcat` binary, run as a child process, as users run it
// (build it first: `swift build -c release --static-swift-stdlib --scratch-path .build-bench --product assetcat`).
// Every child runs under `/usr/bin/time -f %M` (its peak memory) and is timed wall-clock from
// spawn to exit; each figure is the median of --repeat runs (default 5; --heavy-repeat, default
// 3, for the commands that read or write every asset or many files).
//
// The catalogs:
//   small   ten assets: eight files copied in, tagged, and sample.zip with its members.
//   large   --assets N (default 1,000,000): N − 1,000 − 7 records of referenced files written by the
//           library's row insertion (no files behind them: one-asset commands never read them),
//           1,000 real files copied in and tagged `thousand`, and sample.zip with its members.
//
// Rows and their baselines:
//   one-asset commands   show, cat (of an archive member), tag, rm of one ID, ls --tag with no
//                        match: the same command on the small catalog. Bar: ≤ 1.5×.
//   stats                absolute. Bar: ≤ 0.1 s at 10M.
//   ls --json            every asset, to /dev/null, beside python3: sqlite3 reads the same rows from
//                        catalog.sqlite and json.dumps prints the same fields. Bar: ≤ 1×.
//   first row            `ls --json | head -c 1`: the whole pipeline, so the time to the first byte
//                        plus the exit that the closed pipe causes. Bar: ≤ 50 ms at 10M.
//   ls --sort            every asset by name, size and date added, to /dev/null, beside `ls` by ID
//                        (pages through an index each). Bar: ≤ 1.5×, < 200 MB; and `ls --sort
//                        size | head -c 1`, bar ≤ 50 ms at 10M.
//   serve                `assetcat serve --port 0` on each catalog: curl's time_total of each page
//                        (warm, median), the list's first page and one from its middle, three
//                        search pages and an asset's page, beside the same page of the small
//                        catalog's server; and the large server's peak RSS. Bar: ≤ 200 ms at 10M.
//   export --tag         the 1,000 tagged files into a .tar bundle, beside `tar` of the same files
//                        plus `openssl dgst -sha256` of them (what a bag's manifest costs).
//   add                  `add --reference --recursive` of --files tiny files (default 100,000; the
//                        issue's figure is 1,000,000) into a fresh catalog, untagged and with
//                        `--tag bulk`, beside the hash floor: find | xargs -0 -P2 openssl dgst
//                        -sha256. Bars: ≤ 1.5× untagged, ≤ 2× tagged; peak < 100 MB.
//   rm                   `rm` of 10,000 managed assets in the large catalog (IDs as arguments,
//                        `--from-file`, `--tag`), beside `rm -rf` of a copy of the same files and
//                        `sync`. Bar: ≤ 1.5×.
// Durable job throughput and cross-process cancellation latency are JobBenchmarks' rows.
import AssetCatalog
import BenchSupport
import Foundation
import Persistence

#if canImport(Glibc)
    import Glibc
#endif

func say(_ line: String = "") {
    print(line)
    fflush(nil)
}

// MARK: Child mode: fill a catalog with referenced records through the library's row insertion.

if CommandLine.arguments.count >= 3 && CommandLine.arguments[1] == "--child" && CommandLine.arguments[2] == "populate" {
    // --child populate CATALOG COUNT
    let args = Array(CommandLine.arguments.dropFirst(2))
    guard args.count == 3, args[0] == "populate", let count = Int(args[2]) else { exit(2) }
    let catalog = try Catalog.open(at: URL(fileURLWithPath: args[1]))
    let context = catalog.newContext(name: "populate")
    let chunk = 500_000  // one transaction per chunk; rows made 10,000 at a time within it
    var done = 0
    while done < count {
        let n = min(chunk, count - done)
        let first = done
        try context.performAndWait {
            _ = try context.insertRows(Asset.self, count: n, batchSize: 10_000) { i, row in
                let number = first + i
                row[\.name] = "file-\(number).bin"
                row[\.kind] = "data"
                row[\.storage] = .referenced
                row[\.size] = Int64(number % 4096)
                row[\.sha256] = String(repeating: "0", count: 48) + String(format: "%016x", number)
                row[\.path] = "/nonexistent/scale/file-\(number).bin"
            }
            try context.save()
        }
        done += n
        say("    populated \(done) of \(count)")
    }
    catalog.close()
    exit(0)
}

// MARK: Child mode: the own time of `Catalog.search` (warm, in one process), median of N.

if CommandLine.arguments.count >= 3 && CommandLine.arguments[1] == "--child" && CommandLine.arguments[2] == "search" {
    // --child search CATALOG QUERY TIMES
    let args = Array(CommandLine.arguments.dropFirst(3))
    guard args.count == 3, let times = Int(args[2]) else { exit(2) }
    let catalog = try Catalog.open(at: URL(fileURLWithPath: args[0]), options: .init(access: .readOnly))
    let query = try SearchQuery(parsing: args[1])
    var elapsed: [Double] = []
    for _ in 0...times {  // the first warms the caches
        let start = DispatchTime.now().uptimeNanoseconds
        _ = try catalog.search(query)
        elapsed.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
    }
    let sorted = elapsed.dropFirst().sorted()
    print(sorted[sorted.count / 2])
    catalog.close()
    exit(0)
}

// MARK: Options

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().path
let environment = ProcessInfo.processInfo.environment
var assetcat = environment["ASSETCAT"] ?? repositoryRoot + "/.build-bench/release/assetcat"
var assets = 1_000_000
var files = 100_000
var repeats = 5
var heavyRepeats = 3
var work = "/tmp"
var markdownFile: String?
var store: String?
let sections: Set<String> = ["one-asset", "stats", "ls", "sort", "search", "serve", "export", "add", "rm"]
var only = sections

/// Whether the run includes `section` (`--only`).
@MainActor func wanted(_ section: String) -> Bool { only.contains(section) }

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
            "usage: ScaleBenchmarks [--assetcat PATH] [--assets N] [--files N] [--repeat N] [--heavy-repeat N] "
                + "[--work DIR] [--markdown FILE] [--only \(sections.sorted().joined(separator: ","))] "
                + "[--store postgresql://… | --postgresql]")
        exit(2)
    }
    while i < arguments.count {
        switch arguments[i] {
        case "--assetcat": assetcat = value()
        case "--assets": assets = max(20_000, Int(value()) ?? assets)
        case "--files": files = max(1, Int(value()) ?? files)
        case "--repeat": repeats = max(1, Int(value()) ?? repeats)
        case "--heavy-repeat": heavyRepeats = max(1, Int(value()) ?? heavyRepeats)
        case "--work": work = value()
        case "--markdown": markdownFile = value()
        case "--store": store = value()
        case "--postgresql":
            guard let url = environment["ASSETCAT_TEST_POSTGRESQL_URL"] else {
                say("--postgresql: no ASSETCAT_TEST_POSTGRESQL_URL (run under Scripts/with-postgres.sh)")
                exit(2)
            }
            store = url
        case "--only":
            only = Set(value().split(separator: ",").map(String.init))
            if !only.isSubset(of: sections) { usage() }
        default: usage()
        }
        i += 1
    }
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
setenv("LC_ALL", "C", 1)

let base = work + "/scale-bench-\(getpid())"
let children = ChildProcesses(base: base)
mkdir(base, 0o755)
if store != nil {
    // The stores' URLs (with their password) are kept per catalog under XDG_CONFIG_HOME: here,
    // for this run's children, never in the user's own configuration.
    setenv("XDG_CONFIG_HOME", base + "/config", 1)
    let kept = only.intersection(["one-asset", "stats", "search", "serve"])
    if kept != only { say("on PostgreSQL: only the one-asset, stats, search and serve sections run") }
    only = kept
}
let sampleZip = repositoryRoot + "/TestAssets/archives/sample.zip"

@MainActor @discardableResult
func run(_ args: [String], stdout: String = "/dev/null", timed: Bool = true) -> Run {
    children.spawn(assetcat, args, stdout: stdout, timed: timed)
}

@MainActor @discardableResult
func shell(_ script: String, timed: Bool = true, stdout: String = "/dev/null") -> Run {
    children.shell(script, timed: timed, stdout: stdout)
}

@MainActor func output(_ args: [String], binary: String? = nil, shellScript: String? = nil) -> String {
    let file = base + "/output.txt"
    if let shellScript {
        shell(shellScript, timed: false, stdout: file)
    } else if let binary {
        children.spawn(binary, args, stdout: file, timed: false)
    } else {
        run(args, stdout: file, timed: false)
    }
    return ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
}

/// The records `ls --json` prints for `args`.
@MainActor func records(_ args: [String]) -> [[String: Any]] {
    let file = base + "/records.json"
    run(["ls", "--json"] + args, stdout: file, timed: false)
    let data = (try? Data(contentsOf: URL(fileURLWithPath: file))) ?? Data()
    return (try? JSONSerialization.jsonObject(with: data) as? [[String: Any]]) ?? []
}

/// `count` tiny files (distinct contents) in folders of 1,000 under `root`.
func makeTinyFiles(at root: String, count: Int, prefix: String) {
    mkdir(root, 0o755)
    for n in 0..<count {
        let folder = "\(root)/\(n / 1000)"
        if n % 1000 == 0 { mkdir(folder, 0o755) }
        let bytes = Array("\(prefix) \(n)\n".utf8)
        let fd = open("\(folder)/\(prefix)-\(n).txt", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        precondition(fd >= 0)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

// MARK: Rows

struct Row {
    var name: String
    var ours: Double
    var oursPeakKiB: Int
    var baseline: Double?
    var baselineName: String
    var bar: String
}

var rows: [Row] = []

func seconds(_ value: Double) -> String {
    value < 0.01
        ? String(format: "%.2f ms", value * 1000)
        : value < 1 ? String(format: "%.0f ms", value * 1000) : String(format: "%.2f s", value)
}

@MainActor func report(_ row: Row) {
    rows.append(row)
    let ratio = row.baseline.map { String(format: " (%.2f×)", row.ours / max($0, 1e-9)) } ?? ""
    let against = row.baseline.map { ", \(row.baselineName) \(seconds($0))" } ?? ""
    say("  \(row.name): \(seconds(row.ours))\(against)\(ratio), peak \(row.oursPeakKiB / 1024) MB")
}

/// Median time and largest peak of `times` runs of `body` (with `prepare` before each, untimed).
@MainActor func measure(_ times: Int, prepare: (Int) -> Void = { _ in }, _ body: (Int) -> Run) -> (Double, Int) {
    var runs: [Run] = []
    for round in 0..<times {
        prepare(round)
        sync()
        runs.append(body(round))
    }
    return (median(runs.map(\.seconds)), runs.map(\.peakKiB).max() ?? 0)
}

// MARK: The catalogs

let small = base + "/small"
let large = base + "/large"
let smallFiles = base + "/small-files"
let thousandFiles = base + "/thousand"

say("ScaleBenchmarks: \(assets) assets, \(files) files for add, \(repeats) runs (\(heavyRepeats) for bulk commands)")
say("building the small catalog (ten assets)")
makeTinyFiles(at: smallFiles, count: 8 + repeats, prefix: "small")
run(["init", small], timed: false)
run(["add", "--catalog", small, "--tag", "few"] + (0..<8).map { "\(smallFiles)/0/small-\($0).txt" }, timed: false)
run(["add", "--catalog", small, "--tag", "sample", sampleZip], timed: false)
run(["jobs", "run", "--catalog", small], timed: false)

say("building the large catalog (\(assets) assets)")
let started = now()
run(["init", large], timed: false)
let populateLog = base + "/populate.log"
children.spawn(
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0],
    ["--child", "populate", large, String(assets - 1_007)], stdout: populateLog, timed: false)
makeTinyFiles(at: thousandFiles, count: 1_000, prefix: "thousand")
run(["add", "--catalog", large, "--recursive", "--tag", "thousand", thousandFiles], timed: false)
run(["add", "--catalog", large, "--tag", "sample", sampleZip], timed: false)
run(["jobs", "run", "--catalog", large], timed: false)
say("  built in \(seconds(now() - started))")

// MARK: 0. Both catalogs moved into PostgreSQL (--store)

/// On PostgreSQL: the large catalog's schema, and the server's URL without one.
var largeSchema: String?
var serverURL = ""

if let store {
    guard let storeURL = URLComponents(string: store) else { fatalError("--store: not a URL") }
    func schemaURL(_ name: String) -> String {
        var url = storeURL
        url.queryItems =
            (url.queryItems ?? []).filter { $0.name != "schema" } + [URLQueryItem(name: "schema", value: name)]
        return url.string!
    }
    largeSchema = "scale_\(getpid())_large"
    serverURL = {
        var url = storeURL
        url.queryItems = (url.queryItems ?? []).filter { $0.name != "schema" }
        if url.queryItems?.isEmpty == true { url.queryItems = nil }
        return url.string!
    }()
    say("moving both catalogs into PostgreSQL (migrate-store --to)")
    let smallMove = run(["migrate-store", "--catalog", small, "--to", schemaURL("scale_\(getpid())_small")])
    let largeMove = run(["migrate-store", "--catalog", large, "--to", schemaURL(largeSchema!)])
    report(
        Row(
            name: "migrate-store --to postgresql://… of \(assets) assets", ours: largeMove.seconds,
            oursPeakKiB: largeMove.peakKiB, baseline: nil, baselineName: "", bar: "flat memory (< 200 MB)"))
    report(
        Row(
            name: "migrate-store --to postgresql://… of the ten-asset catalog", ours: smallMove.seconds,
            oursPeakKiB: smallMove.peakKiB, baseline: nil, baselineName: "", bar: "–"))
}

/// An asset of each catalog, by what it is.
@MainActor func ids(_ catalog: String) -> (file: String, member: String) {
    let all = records(["--catalog", catalog, "--tag", catalog == small ? "few" : "thousand"])
    // Through the zip's tag, which its members take: never a listing of every asset.
    let members = records(["--catalog", catalog, "--tag", "sample"]).filter { ($0["storage"] as? String) == "member" }
    let file = all.first.flatMap { $0["id"] as? Int } ?? 1
    let member = members.first.flatMap { $0["id"] as? Int } ?? 1
    return (String(file), String(member))
}

let smallIDs = ids(small)
let largeIDs = ids(large)

// MARK: 1. One-asset commands

if wanted("one-asset") {
    say("one-asset commands, large catalog beside the small one")
    for (name, args) in [
        ("show one asset", { (c: String, id: (file: String, member: String)) in ["show", "--catalog", c, id.file] }),
        ("cat one archive member", { c, id in ["cat", "--catalog", c, id.member] }),
        ("tag one asset", { c, id in ["tag", "--catalog", c, id.file, "--add", "touched"] }),
        ("ls --tag with no match", { c, _ in ["ls", "--catalog", c, "--tag", "no-such-tag"] }),
    ] {
        let (ours, peak) = measure(repeats) { _ in run(args(large, largeIDs)) }
        let (baseline, _) = measure(repeats) { _ in run(args(small, smallIDs)) }
        report(
            Row(
                name: "\(name) (\(args(large, largeIDs)[0]))", ours: ours, oursPeakKiB: peak, baseline: baseline,
                baselineName: "10 assets", bar: "≤ 1.5×"))
    }
}
if wanted("one-asset") {
    // rm of one asset: a different one each round (an added file on the small catalog, so it keeps ten).
    let smallExtra = (0..<repeats).map { "\(smallFiles)/0/small-\(8 + $0).txt" }
    let (ours, peak) = measure(repeats) { round in run(["rm", "--catalog", large, String(1 + round)]) }
    var addedID = ""
    let (baseline, _) = measure(
        repeats,
        prepare: { round in
            run(["add", "--catalog", small, smallExtra[round]], timed: false)
            addedID = String(
                records(["--catalog", small]).compactMap { $0["id"] as? Int }.max() ?? 0)
        }
    ) { _ in run(["rm", "--catalog", small, addedID]) }
    report(
        Row(
            name: "rm of one asset", ours: ours, oursPeakKiB: peak, baseline: baseline, baselineName: "10 assets",
            bar: "≤ 1.5×"))
}

// MARK: 2. stats

if wanted("stats") {
    let (ours, peak) = measure(repeats) { _ in run(["stats", "--catalog", large]) }
    report(Row(name: "stats", ours: ours, oursPeakKiB: peak, baseline: nil, baselineName: "", bar: "≤ 0.1 s at 10M"))
}

// MARK: 3. ls --json of every asset, and its first row

if wanted("ls") {
    let python = """
        import json, sqlite3, sys
        from datetime import datetime, timezone
        db = sqlite3.connect(sys.argv[1])
        cols = [r[1] for r in db.execute("PRAGMA table_info(Asset)")]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        def date(v):
            if v is None: return None
            return datetime.fromtimestamp(v, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out = sys.stdout
        out.write("[")
        first = True
        for r in db.execute("SELECT * FROM Asset ORDER BY id"):
            a = dict(zip(cols, r))
            tags = sorted(t for t in a.get("tagText", "").split("\\n") if t)
            record = {"id": a["id"], "name": a["name"], "kind": a["kind"], "size": a["size"],
                "sha256": a["sha256"], "storage": a["storage"], "path": a["path"], "archive": a.get("archive"),
                "member": a["member"], "tags": tags, "created": date(a["created"]),
                "modified": date(a["modified"]), "metadata": json.loads(a.get("metadataJSON", "{}"))}
            out.write(("\\n" if first else ",\\n") + json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False))
            first = False
        out.write("\\n]\\n")
        """
    let script = base + "/ls.py"
    try! python.write(toFile: script, atomically: true, encoding: .utf8)
    let (ours, peak) = measure(heavyRepeats) { _ in run(["ls", "--json", "--catalog", large]) }
    let (baseline, _) = measure(heavyRepeats) { _ in
        children.spawn("python3", [script, large + "/catalog.sqlite"])
    }
    report(
        Row(
            name: "ls --json of every asset", ours: ours, oursPeakKiB: peak, baseline: baseline,
            baselineName: "python3 sqlite3 + json.dumps", bar: "≤ 1×"))
    let (first, firstPeak) = measure(repeats) { _ in
        shell("set +o pipefail; \(quoted(assetcat)) ls --json --catalog \(quoted(large)) | head -c 1")
    }
    report(
        Row(
            name: "first byte of ls --json, piped to head -c 1", ours: first, oursPeakKiB: firstPeak, baseline: nil,
            baselineName: "", bar: "≤ 50 ms at 10M"))
}

// MARK: 3b. ls --sort: each order of every asset beside ls by ID, and its first row

if wanted("sort") {
    let (byID, idPeak) = measure(heavyRepeats) { _ in run(["ls", "--catalog", large]) }
    report(
        Row(
            name: "ls of every asset (by ID)", ours: byID, oursPeakKiB: idPeak, baseline: nil, baselineName: "",
            bar: "–"))
    for order in ["name", "size", "added"] {
        let (ours, peak) = measure(heavyRepeats) { _ in run(["ls", "--sort", order, "--catalog", large]) }
        report(
            Row(
                name: "ls --sort \(order) of every asset", ours: ours, oursPeakKiB: peak, baseline: byID,
                baselineName: "ls by ID",
                bar: order == "size" ? "< 200 MB (no index: a scan per 50,000)" : "≤ 1.5×, < 200 MB"))
    }
    let (first, firstPeak) = measure(repeats) { _ in
        shell("set +o pipefail; \(quoted(assetcat)) ls --sort name --catalog \(quoted(large)) | head -c 1")
    }
    report(
        Row(
            name: "first byte of ls --sort name, piped to head -c 1", ours: first, oursPeakKiB: firstPeak,
            baseline: nil, baselineName: "", bar: "≤ 50 ms at 10M"))
}

// MARK: 3c. search: a rare word, a phrase and a tag, the first page of a word in every name

if wanted("search") {
    say("search, large catalog: the whole command, and Catalog.search's own time beside sqlite3's for its query")
    let store = large + "/catalog.sqlite"
    let rare = String(assets / 2 + 7)  // the number in one name, file-N.bin
    let cases: [(name: String, query: String, match: String, pgMatch: String, ranked: Bool, bar: String)] = [
        ("a rare word", rare, "\"\(rare)\"", rare, true, "≤ 50 ms"),
        (
            "a phrase and a tag", "\"thousand 5\" tag:thousand", "\"thousand\" + \"5\"", "thousand <-> 5", true,
            "≤ 50 ms"
        ),
        ("first page of a word in every name", "file", "\"file\"", "file", false, "≤ 100 ms"),
    ]
    for c in cases {
        let (ours, peak) = measure(repeats) { _ in run(["search", "--catalog", large, c.query]) }
        let (show, _) = measure(repeats) { _ in run(["show", "--catalog", large, largeIDs.file]) }
        report(
            Row(
                name: "search '\(c.query)' (\(c.name)), whole command", ours: ours, oursPeakKiB: peak, baseline: show,
                baselineName: "show", bar: c.bar))
        // The same statement as the search's page, in sqlite3 (`.timer on`) or psql (`\timing`),
        // warm (the first run dropped), median of its runs.
        let tag =
            c.query.contains("tag:")
            ? " AND \"Asset\".id IN (SELECT asset FROM \"AssetTag\" WHERE tag = 'thousand' AND asset IS NOT NULL)" : ""
        // The page's statement run `loops` times in one process, less the same process running
        // `SELECT 1` as often: its mean time, warm (the timers of sqlite3 and psql count whole
        // milliseconds, or lose a run's start-up in the noise).
        let loops = 100
        let reals: [Double]
        if let largeSchema {
            let query = "to_tsquery('simple', '\(c.pgMatch)')"
            let order = c.ranked ? "ts_rank(s.doc, \(query)) DESC" : "s.id"
            let statement =
                "SELECT \"Asset\".* FROM \"_persistence_search_Asset\" AS s JOIN \"Asset\" ON \"Asset\".id = s.id "
                + "WHERE s.doc @@ \(query)\(tag) ORDER BY \(order) LIMIT 21;"
            func psql(_ line: String) -> Double {
                let script = "SET search_path TO \(largeSchema);\n" + String(repeating: line + "\n", count: loops)
                return shell("printf '%s' \(quoted(script)) | psql -X -q \(quoted(serverURL)) > /dev/null").seconds
            }
            _ = psql(statement)  // warms the server's cache
            reals = (0..<repeats).map { _ in max(0, psql(statement) - psql("SELECT 1;")) / Double(loops) }
        } else {
            let fts = "_persistence_search_Asset"
            let order = c.ranked ? "bm25(\(fts), 10.0, 4.0, 2.0, 1.0)" : "\(fts).rowid"
            let statement =
                "SELECT Asset.* FROM \(fts) CROSS JOIN Asset ON Asset.id = \(fts).rowid WHERE \(fts) MATCH '\(c.match)'"
                + "\(tag) ORDER BY \(order) LIMIT 21;"
            func sqlite3(_ line: String) -> Double {
                let script = String(repeating: line + "\n", count: loops)
                return shell("printf '%s' \(quoted(script)) | sqlite3 -readonly \(quoted(store)) > /dev/null").seconds
            }
            reals = (0..<repeats).map { _ in max(0, sqlite3(statement) - sqlite3("SELECT 1;")) / Double(loops) }
        }
        let own = Double(
            output(["--child", "search", large, c.query, String(loops)], binary: CommandLine.arguments[0]))
        if let own, !reals.isEmpty {
            report(
                Row(
                    name: "Catalog.search '\(c.query)', its own time (warm)", ours: own, oursPeakKiB: 0,
                    baseline: median(reals), baselineName: largeSchema == nil ? "sqlite3" : "psql",
                    bar: "≤ 1.5×"))
        }
    }
}

// MARK: 3d. serve: the pages of `assetcat serve` on the large catalog beside the small one

/// A server of `catalog` (`assetcat serve --port 0`) while `body` runs: its base URL (no
/// token: loopback), and afterwards its peak resident memory, in KiB.
@MainActor func withServer(_ catalog: String, _ body: (String) -> Void) -> Int {
    let out = base + "/serve.out"
    let pidFile = base + "/serve.pid"
    // The background job's redirection is made in its own process, after the shell returns:
    // a file left by the last server would be read as this one's.
    unlink(out)
    unlink(pidFile)
    shell(
        "\(quoted(assetcat)) serve --catalog \(quoted(catalog)) --port 0 > \(quoted(out)) 2> \(quoted(out)).err & "
            + "echo $! > \(quoted(pidFile))", timed: false)
    let deadline = now() + 120
    var url = ""
    while url.isEmpty && now() < deadline {
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        if let line = text.split(separator: "\n", omittingEmptySubsequences: false).first, text.contains("\n") {
            url = String(line)
        } else {
            usleep(20_000)
        }
    }
    let pid =
        Int32(
            ((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "").trimmingCharacters(
                in: .whitespacesAndNewlines)) ?? 0
    guard url.hasPrefix("http://"), pid > 0 else { fatalError("serve did not start: \(url)") }
    body(url.hasSuffix("/") ? String(url.dropLast()) : url)
    let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
    let peak =
        status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
        .flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
    kill(pid, SIGTERM)
    // The shell's child, not ours: polled, not waited for (a zombie no one reaps has ended).
    func ended() -> Bool {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        return kill(pid, 0) != 0 || stat.split(separator: ")").last?.hasPrefix(" Z") == true
    }
    let stopBy = now() + 60
    while !ended() && now() < stopBy { usleep(10_000) }
    return peak
}

/// The time `curl` takes to fetch `url` whole (its `time_total`: connection to last byte),
/// failing the run on an HTTP error.
@MainActor func fetchTime(_ url: String) -> Run {
    let file = base + "/curl.out"
    children.spawn(
        "curl", ["-sS", "-f", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", url], stdout: file, timed: false,
        mayFail: true)
    let text = ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: " ")
    guard text.count == 2, text[0] == "200", let seconds = Double(text[1]) else {
        let err = (try? String(contentsOfFile: base + "/serve.out.err", encoding: .utf8)) ?? ""
        let out = (try? String(contentsOfFile: base + "/serve.out", encoding: .utf8)) ?? ""
        shell("ss -ltnp > \(base)/ss.txt; ps aux | grep '[a]ssetcat serve' >> \(base)/ss.txt || true", timed: false)
        let ss = (try? String(contentsOfFile: base + "/ss.txt", encoding: .utf8)) ?? ""
        fatalError("curl \(url): \(children.lastStderr)\nserve printed: \(out)\nserve said: \(err)\n\(ss)")
    }
    return Run(seconds: seconds, peakKiB: 0)
}

if wanted("serve") {
    say("serve, large catalog beside the small one: a page's time from curl's request to its last byte")
    let rare = String(assets / 2 + 7)
    let pages: [(name: String, path: String)] = [
        ("the first page of the list", "/"),
        ("a page from the middle of the list", "/?after=\(assets / 2)"),
        ("a search page: a rare word", "/?q=\(rare)"),
        ("a search page: a word in every name (first page)", "/?q=file"),
        ("a search page: a word and a tag facet", "/?q=thousand+tag%3Athousand"),
        ("an asset's page", "/assets/\(largeIDs.file)"),
    ]
    var timesLarge: [Double] = []
    var timesSmall: [Double] = []
    let largePeak = withServer(large) { url in
        for page in pages {
            _ = fetchTime(url + page.path)  // warm
            timesLarge.append(median((0..<repeats).map { _ in fetchTime(url + page.path).seconds }))
        }
    }
    _ = withServer(small) { url in
        for page in pages {
            let path = page.path.hasPrefix("/assets/") ? "/assets/\(smallIDs.file)" : page.path
            _ = fetchTime(url + path)
            timesSmall.append(median((0..<repeats).map { _ in fetchTime(url + path).seconds }))
        }
    }
    for (k, page) in pages.enumerated() {
        report(
            Row(
                name: "serve: \(page.name) (GET \(page.path))", ours: timesLarge[k],
                oursPeakKiB: k == pages.count - 1 ? largePeak : 0, baseline: timesSmall[k],
                baselineName: "10 assets", bar: "≤ 200 ms"))
    }
}

// MARK: 4. export --tag of 1,000 assets

if wanted("export") {
    let bundle = base + "/thousand.tar"
    let (ours, peak) = measure(heavyRepeats, prepare: { _ in children.removeTree(bundle) }) { _ in
        run(["export", "--catalog", large, "--tag", "thousand", bundle])
    }
    let copy = base + "/thousand-floor.tar"
    let (baseline, _) = measure(heavyRepeats, prepare: { _ in children.removeTree(copy) }) { _ in
        shell(
            "cd \(quoted(thousandFiles)) && find . -type f -print0 | xargs -0 openssl dgst -sha256 > /dev/null && "
                + "tar -cf \(quoted(copy)) . && sync")
    }
    report(
        Row(
            name: "export --tag of 1,000 assets (.tar)", ours: ours, oursPeakKiB: peak, baseline: baseline,
            baselineName: "openssl dgst + tar + sync", bar: "– (reported)"))
}

// MARK: 5. add of many tiny files, reference mode

if wanted("add") {
    let tiny = base + "/tiny"
    say("making \(files) tiny files for add")
    makeTinyFiles(at: tiny, count: files, prefix: "tiny")
    let fresh = base + "/fresh"
    // Untagged, then tagged (what the README's tour and pipelines do), then the floor.
    func add(_ tags: [String]) -> (Double, Int) {
        measure(
            heavyRepeats,
            prepare: { _ in
                children.removeTree(fresh)
                run(["init", fresh], timed: false)
            }
        ) { _ in run(["add", "--catalog", fresh, "--reference", "--recursive"] + tags + [tiny]) }
    }
    let (ours, peak) = add([])
    let (tagged, taggedPeak) = add(["--tag", "bulk"])
    let (baseline, _) = measure(heavyRepeats) { _ in
        shell("find \(quoted(tiny)) -type f -print0 | xargs -0 -P2 -n 2000 openssl dgst -sha256 > /dev/null")
    }
    report(
        Row(
            name: "add --reference --recursive of \(files) tiny files", ours: ours, oursPeakKiB: peak,
            baseline: baseline, baselineName: "hash floor", bar: "≤ 1.5×, peak < 100 MB"))
    report(
        Row(
            name: "the same with --tag bulk", ours: tagged, oursPeakKiB: taggedPeak, baseline: baseline,
            baselineName: "hash floor", bar: "≤ 2×, peak < 100 MB"))
    children.removeTree(fresh)
    children.removeTree(tiny)
}

// MARK: 6. rm of 10,000 managed assets in the large catalog: by ID arguments, from a file, by tag

if wanted("rm") {
    let doomed = base + "/doomed"
    makeTinyFiles(at: doomed, count: 10_000, prefix: "doomed")
    let idFile = base + "/doomed-ids"
    func rm(_ name: String, _ arguments: @escaping ([String]) -> [String]) {
        var doomedIDs: [String] = []
        let (ours, peak) = measure(
            heavyRepeats,
            prepare: { _ in
                run(["add", "--catalog", large, "--recursive", "--tag", "doomed", doomed], timed: false)
                doomedIDs = records(["--catalog", large, "--tag", "doomed"]).compactMap {
                    ($0["id"] as? Int).map(String.init)
                }
                precondition(doomedIDs.count == 10_000, "\(doomedIDs.count) doomed assets")
                try? Data(doomedIDs.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: idFile))
            }
        ) { _ in run(["rm", "--catalog", large] + arguments(doomedIDs)) }
        let copy = base + "/doomed-copy"
        let (baseline, _) = measure(heavyRepeats, prepare: { _ in shell("cp -r \(quoted(doomed)) \(quoted(copy))") }) {
            _ in
            shell("rm -rf \(quoted(copy)) && sync")
        }
        report(
            Row(
                name: "rm of 10,000 managed assets (\(name))", ours: ours, oursPeakKiB: peak, baseline: baseline,
                baselineName: "rm -rf + sync", bar: "≤ 1.5×"))
    }
    rm("IDs as arguments") { $0 }
    rm("--from-file") { _ in ["--from-file", idFile] }
    rm("--tag") { _ in ["--tag", "doomed"] }
}

// MARK: Table

var table = """
    | \(assets) assets\(store == nil ? "" : ", PostgreSQL") | ours (median) | baseline (median) | ratio | bar | peak RSS |
    |---|---:|---:|---:|---|---:|

    """
for row in rows {
    let baseline = row.baseline.map { "\(seconds($0)) (\(row.baselineName))" } ?? "–"
    let ratio = row.baseline.map { String(format: "%.2f×", row.ours / max($0, 1e-9)) } ?? "–"
    table +=
        "| \(row.name) | \(seconds(row.ours)) | \(baseline) | \(ratio) | \(row.bar) | \(row.oursPeakKiB / 1024) MB |\n"
}
say()
say(table)
if let markdownFile { try! table.write(toFile: markdownFile, atomically: true, encoding: .utf8) }
children.removeTree(base)
