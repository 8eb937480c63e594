// Ingest by several processes into one catalog: a PostgreSQL catalog (each process its own
// host) beside a SQLite one (one host, whose writers take turns), in one run.
//
//   Scripts/with-postgres.sh swift run -c release --package-path Benchmarks IngestBenchmarks \
//       [--assetcat PATH] [--store postgresql://…] [--processes 1,2,4] [--repeat N] [--work DIR]
//       [--corpus-script PATH] [--tiny N] [--latency MS]
//
// The store is --store, else $ASSETCAT_TEST_POSTGRESQL_URL (Scripts/with-postgres.sh sets it);
// each catalog gets a fresh schema of it. Our side is the release-built `assetcat` binary
// (default .build-bench/release/assetcat; --assetcat or $ASSETCAT for another).
//
// The corpus is the small shape of shared/bench/make_corpus.sh (10,000 files of 1–16 KiB in 100
// folders, d00/e00 … d09/e09, 100 files each), made by that script in --work. For P processes
// it is split into P parts of whole folders (folder i goes to part i mod P, so each part holds
// 10,000 / P files), and each part is given to its own `assetcat add --recursive` (copy mode),
// all P started at once on one fresh catalog: on PostgreSQL with ASSETCAT_HOST_ID=bench-ingest-K
// each (K = 1…P: their own staging), on SQLite as processes of one host. Each child runs under
// `/usr/bin/time -f %M` (its peak RSS). A round is timed from the first spawn to the last exit,
// after a `sync`; the two stores alternate order from round to round, and each figure is the
// best of --repeat rounds (default 3), each peak the largest. Every round is checked: 10,000
// assets, 10,000 files in objects/, no staging left.
//
// --tiny N: the corpus is N tiny files instead (a few bytes each, every content distinct, in the
// same 100 folders), added by reference (`add --reference --recursive`): what costs is the
// catalog's rows, not the copies. Checked: N assets.
//
// --latency MS: PostgreSQL is measured twice, on loopback and through a DelayProxy that holds
// every chunk MS milliseconds each way (0.25: a round trip 0.5 ms longer, as between hosts on
// one network). Each PostgreSQL round also reports the round trips the proxy saw (a request
// answered; on loopback too, through a proxy of no delay) and the server's CPU time (its
// postmaster's own and reaped children's, and its live processes', from /proc).
import BenchSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

func say(_ line: String = "") {
    print(line)
    fflush(nil)
}

// MARK: Options

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().path
let environment = ProcessInfo.processInfo.environment
var assetcat = environment["ASSETCAT"] ?? repositoryRoot + "/.build-bench/release/assetcat"
var store = environment["ASSETCAT_TEST_POSTGRESQL_URL"]
var processCounts = [1, 2, 4]
var repeats = 3
var work = "/tmp"
var corpusScript = "/work/shared/bench/make_corpus.sh"
var tinyFiles: Int?
var latency: Double?

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
            "usage: IngestBenchmarks [--assetcat PATH] [--store postgresql://…] [--processes 1,2,4] [--repeat N] "
                + "[--work DIR] [--corpus-script PATH] [--tiny N] [--latency MS]")
        exit(2)
    }
    while i < arguments.count {
        switch arguments[i] {
        case "--assetcat": assetcat = value()
        case "--store": store = value()
        case "--processes":
            processCounts = value().split(separator: ",").compactMap { Int($0) }
            guard !processCounts.isEmpty, processCounts.allSatisfy({ $0 >= 1 && 100 % $0 == 0 }) else {
                say("--processes: counts that divide 100 folders (1, 2, 4, 5, 10, …)")
                exit(2)
            }
        case "--repeat": repeats = max(1, Int(value()) ?? repeats)
        case "--work": work = value()
        case "--corpus-script": corpusScript = value()
        case "--tiny":
            guard let n = Int(value()), n >= 100, n % 100 == 0 else {
                say("--tiny: a number of files that 100 folders share evenly (100, 10000, 100000, …)")
                exit(2)
            }
            tinyFiles = n
        case "--latency":
            guard let ms = Double(value()), ms >= 0 else {
                say("--latency: milliseconds each way, e.g. 0.25")
                exit(2)
            }
            latency = ms
        default: usage()
        }
        i += 1
    }
}

guard let store, let storeURL = URLComponents(string: store) else {
    say("no PostgreSQL store: give --store postgresql://… or run under Scripts/with-postgres.sh")
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
guard access(corpusScript, R_OK) == 0 else {
    say("no corpus script at \(corpusScript) (--corpus-script PATH): shared/bench/make_corpus.sh makes the corpus")
    exit(2)
}

let base = work + "/ingest-bench-\(getpid())"
let children = ChildProcesses(base: base)
mkdir(base, 0o755)
// The stores' URLs (with their password) are kept per catalog under XDG_CONFIG_HOME: here, for
// this run's children, never in the user's own configuration.
setenv("XDG_CONFIG_HOME", base + "/config", 1)
setenv("LC_ALL", "C", 1)

// MARK: The corpus

let corpus = base + "/corpus"
let folders = (0..<10).flatMap { d in (0..<10).map { e in String(format: "d%02d/e%02d", d, e) } }
let fileCount: Int
if let tinyFiles {
    say("IngestBenchmarks: making \(grouped(tinyFiles)) tiny files")
    children.spawn(
        "/usr/bin/python3",
        [
            "-c",
            """
            import os, sys
            out, n = sys.argv[1], int(sys.argv[2])
            dirs = [f"d{i:02d}/e{j:02d}" for i in range(10) for j in range(10)]
            for d in dirs: os.makedirs(os.path.join(out, d))
            for k in range(n):
                with open(os.path.join(out, dirs[k % 100], f"t{k:07d}.txt"), "w") as f: f.write(f"tiny {k}\\n")
            """,
            corpus, String(tinyFiles),
        ], timed: false)
    fileCount = tinyFiles
} else {
    say("IngestBenchmarks: making the small corpus")
    children.spawn("/bin/bash", [corpusScript, "small", corpus], timed: false)
    fileCount = 10_000
}
for folder in folders {
    precondition(access(corpus + "/" + folder, F_OK) == 0, "the corpus has no \(folder)")
}

// MARK: The server

/// The port of the store's server.
let serverPort = UInt16(storeURL.port ?? 5432)

/// The server's CPU time so far (BenchSupport's ``serverCPU(port:)``).
func serverCPU() -> Double? { BenchSupport.serverCPU(port: serverPort) }

// MARK: Rounds

/// Where a round's catalog keeps its records.
enum Store: Hashable {
    case sqlite
    /// PostgreSQL, on loopback or (`proxied`) through the delaying proxy.
    case postgres(proxied: Bool)

    @MainActor var name: String {
        switch self {
        case .sqlite: "SQLite"
        case .postgres(false): "PostgreSQL"
        case .postgres(true): "PostgreSQL at \(latency ?? 0) ms each way"
        }
    }
    var key: String {
        switch self {
        case .sqlite: "sqlite"
        case .postgres(false): "pg"
        case .postgres(true): "pg-latency"
        }
    }
}

struct Figure {
    var best = Double.infinity
    var peaksKiB: [Int] = []
    /// The round trips and server CPU seconds of the best round.
    var roundTrips: Int?
    var serverSeconds: Double?
}

/// The store URL with schema `name`, through the proxy's port if given.
func schemaURL(_ name: String, port: UInt16? = nil) -> String {
    var url = storeURL
    url.queryItems = (url.queryItems ?? []).filter { $0.name != "schema" } + [URLQueryItem(name: "schema", value: name)]
    if let port { url.port = Int(port) }
    return url.string!
}

struct Round {
    var wall: Double
    var runs: [Run]
    var roundTrips: Int?
    var serverSeconds: Double?
}

/// One round: `parts` processes add their parts into a fresh catalog in `store`.
@MainActor func round(_ parts: Int, store: Store, number: Int) -> Round {
    let name = "\(store.key)-\(parts)-\(number)"
    let catalog = base + "/" + name
    var proxy: DelayProxy?
    switch store {
    case .sqlite:
        children.spawn(assetcat, ["init", catalog], timed: false)
    case .postgres(let proxied):
        if proxied {
            do {
                proxy = try DelayProxy(targetPort: serverPort, delay: .microseconds(Int64((latency ?? 0) * 1000)))
            } catch {
                fatalError("the delaying proxy: \(error)")
            }
        }
        let url = schemaURL("ingest_\(getpid())_\(parts)_\(number)_\(proxied ? "l" : "n")", port: proxy?.port)
        children.spawn(assetcat, ["init", "--store", url, catalog], timed: false)
    }
    sync()
    let commands = (0..<parts).map { k in
        let mine = folders.indices.filter { $0 % parts == k }.map { corpus + "/" + folders[$0] }
        return (
            program: assetcat,
            args: ["add", "--catalog", catalog, "--recursive"] + (tinyFiles == nil ? [] : ["--reference"]) + mine,
            environment: store == .sqlite ? [:] : ["ASSETCAT_HOST_ID": "bench-ingest-\(k + 1)"]
        )
    }
    let tripsBefore = proxy?.roundTrips ?? 0
    let cpuBefore = store == .sqlite ? nil : serverCPU()
    let result = children.spawnAll(commands)
    let cpuAfter = store == .sqlite ? nil : serverCPU()
    let trips = proxy.map { $0.roundTrips - tripsBefore }
    // Checks: every file recorded once and stored once (copy mode), no staging left.
    let statsFile = base + "/stats.json"
    children.spawn(assetcat, ["stats", "--json", "--catalog", catalog], stdout: statsFile, timed: false)
    proxy?.stop()
    let stats =
        (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: statsFile))))
        as? [String: Any] ?? [:]
    precondition(
        stats["assets"] as? Int == fileCount && stats["objectFiles"] as? Int == (tinyFiles == nil ? fileCount : 0),
        "\(name): \(stats["assets"] ?? "?") assets, \(stats["objectFiles"] ?? "?") object files")
    let staged = children.output(
        "find \(quoted(catalog)) -path \(quoted(catalog + "/objects")) -prune -o -type f -print | "
            + "{ grep -v -e '/catalog\\.' -e '/locks/' || true; } | wc -l")
    if staged != "0" { say("   note: \(staged) files outside objects/ after \(name)") }
    children.removeTree(catalog)
    return Round(
        wall: result.wall, runs: result.runs, roundTrips: trips,
        serverSeconds: cpuBefore.flatMap { before in cpuAfter.map { $0 - before } })
}

let stores: [Store] = [.sqlite, .postgres(proxied: false)] + (latency == nil ? [] : [.postgres(proxied: true)])
var figures: [String: Figure] = [:]
say(
    "ingest of \(grouped(fileCount)) \(tinyFiles == nil ? "files (87.6 MB, copied)" : "tiny files (by reference)") "
        + "by 1 … \(processCounts.max()!) processes, best of \(repeats)")
if latency != nil && serverCPU() == nil {
    say("   (the server's CPU is not measured: no postgres -p \(serverPort) here)")
}
for number in 0..<repeats {
    for parts in processCounts {
        // The stores take turns at going first, round after round.
        let order = (0..<stores.count).map { stores[($0 + number) % stores.count] }
        for store in order {
            let result = round(parts, store: store, number: number)
            let key = "\(store.key)-\(parts)"
            var figure = figures[key, default: Figure()]
            if result.wall < figure.best {
                figure.best = result.wall
                figure.roundTrips = result.roundTrips
                figure.serverSeconds = result.serverSeconds
            }
            figure.peaksKiB += result.runs.map(\.peakKiB)
            figures[key] = figure
            var extra = ""
            if let trips = result.roundTrips { extra += ", \(grouped(trips)) round trips" }
            if let cpu = result.serverSeconds { extra += String(format: ", server CPU %.2f s", cpu) }
            say(
                "   round \(number + 1), \(parts) process\(parts == 1 ? "" : "es"), \(store.name): "
                    + String(format: "%.3f s", result.wall) + " (each: "
                    + result.runs.map { String(format: "%.2f s %.0f MB", $0.seconds, Double($0.peakKiB) / 1024) }
                    .joined(separator: ", ") + ")" + extra)
        }
    }
}

// MARK: Table

@MainActor func row(_ parts: Int, _ store: Store) -> String {
    let figure = figures["\(store.key)-\(parts)"]!
    let sqlite = figures["sqlite-\(parts)"]!
    let one = figures["\(store.key)-1"]
    let ratio = store == .sqlite ? "–" : String(format: "%.2f×", figure.best / sqlite.best)
    let hostsGain = one.map { String(format: "%.2f×", $0.best / figure.best) } ?? "–"
    let trips = figure.roundTrips.map { String(format: "%.1f", Double($0) * 1000 / Double(fileCount)) } ?? "–"
    let cpu = figure.serverSeconds.map { String(format: "%.2f s", $0) } ?? "–"
    let who = store == .sqlite ? "SQLite, one host" : "\(store.name), \(parts) host\(parts == 1 ? "" : "s")"
    return "| \(parts) | \(who) | " + String(format: "%.3f s", figure.best) + " | "
        + grouped(Int(Double(fileCount) / figure.best)) + " | \(hostsGain) | \(ratio) | \(trips) | \(cpu) | "
        + String(format: "%.0f MB", Double(figure.peaksKiB.max() ?? 0) / 1024) + " |"
}

say()
say(
    "| processes | store | wall, first spawn → last exit | files/s | files/s ÷ one process's | ÷ SQLite's time "
        + "| round trips per 1,000 files | server CPU | peak RSS per process |")
say("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for parts in processCounts {
    for store in stores { say(row(parts, store)) }
}
children.removeTree(base)
