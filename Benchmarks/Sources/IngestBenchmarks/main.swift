// Ingest by several processes into one catalog: a PostgreSQL catalog (each process its own
// host) beside a SQLite one (one host, whose writers take turns), in one run.
//
//   Scripts/with-postgres.sh swift run -c release --package-path Benchmarks IngestBenchmarks \
//       [--assetcat PATH] [--store postgresql://…] [--processes 1,2,4] [--repeat N] [--work DIR]
//       [--corpus-script PATH]
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
                + "[--work DIR] [--corpus-script PATH]")
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
    say("  swift build -c release --scratch-path .build-bench --product assetcat")
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

/// The store URL with schema `name`.
func schemaURL(_ name: String) -> String {
    var url = storeURL
    url.queryItems = (url.queryItems ?? []).filter { $0.name != "schema" } + [URLQueryItem(name: "schema", value: name)]
    return url.string!
}

// MARK: The corpus

let corpus = base + "/corpus"
say("IngestBenchmarks: making the small corpus")
children.spawn("/bin/bash", [corpusScript, "small", corpus], timed: false)
let folders = (0..<10).flatMap { d in (0..<10).map { e in String(format: "d%02d/e%02d", d, e) } }
for folder in folders {
    precondition(access(corpus + "/" + folder, F_OK) == 0, "the corpus has no \(folder)")
}
let fileCount = 10_000

// MARK: Rounds

struct Figure {
    var best = Double.infinity
    var peaksKiB: [Int] = []
}

/// One round: `parts` processes add their parts into a fresh catalog on `postgres` or SQLite.
@MainActor func round(_ parts: Int, postgres: Bool, number: Int) -> (wall: Double, runs: [Run]) {
    let name = "\(postgres ? "pg" : "sqlite")-\(parts)-\(number)"
    let catalog = base + "/" + name
    if postgres {
        children.spawn(
            assetcat, ["init", "--store", schemaURL("ingest_\(getpid())_\(parts)_\(number)"), catalog], timed: false)
    } else {
        children.spawn(assetcat, ["init", catalog], timed: false)
    }
    sync()
    let commands = (0..<parts).map { k in
        let mine = folders.indices.filter { $0 % parts == k }.map { corpus + "/" + folders[$0] }
        return (
            program: assetcat, args: ["add", "--catalog", catalog, "--recursive"] + mine,
            environment: postgres ? ["ASSETCAT_HOST_ID": "bench-ingest-\(k + 1)"] : [:]
        )
    }
    let result = children.spawnAll(commands)
    // Checks: every file recorded once and stored once, no staging left.
    let statsFile = base + "/stats.json"
    children.spawn(assetcat, ["stats", "--json", "--catalog", catalog], stdout: statsFile, timed: false)
    let stats =
        (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: statsFile))))
        as? [String: Any] ?? [:]
    precondition(
        stats["assets"] as? Int == fileCount && stats["objectFiles"] as? Int == fileCount,
        "\(name): \(stats["assets"] ?? "?") assets, \(stats["objectFiles"] ?? "?") object files")
    let staged = children.output(
        "find \(quoted(catalog)) -path \(quoted(catalog + "/objects")) -prune -o -type f -print | "
            + "{ grep -v -e '/catalog\\.' -e '/locks/' || true; } | wc -l")
    if staged != "0" { say("   note: \(staged) files outside objects/ after \(name)") }
    children.removeTree(catalog)
    return result
}

var figures: [String: Figure] = [:]
say("ingest of 10,000 files (87.6 MB) by 1 … \(processCounts.max()!) processes, best of \(repeats)")
for number in 0..<repeats {
    for parts in processCounts {
        let order = number % 2 == 0 ? [true, false] : [false, true]
        for postgres in order {
            let (wall, runs) = round(parts, postgres: postgres, number: number)
            let key = "\(postgres ? "pg" : "sqlite")-\(parts)"
            figures[key, default: Figure()].best = min(figures[key, default: Figure()].best, wall)
            figures[key, default: Figure()].peaksKiB += runs.map(\.peakKiB)
            say(
                "   round \(number + 1), \(parts) process\(parts == 1 ? "" : "es"), \(postgres ? "PostgreSQL" : "SQLite"): "
                    + String(format: "%.3f s", wall) + " (each: "
                    + runs.map { String(format: "%.2f s %.0f MB", $0.seconds, Double($0.peakKiB) / 1024) }
                    .joined(separator: ", ") + ")")
        }
    }
}

// MARK: Table

/// `n` with a comma between thousands.
func grouped(_ n: Int) -> String {
    let digits = String(n)
    var out = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { out += "," }
        out.append(c)
    }
    return out
}

@MainActor func row(_ parts: Int, _ postgres: Bool) -> String {
    let figure = figures["\(postgres ? "pg" : "sqlite")-\(parts)"]!
    let sqlite = figures["sqlite-\(parts)"]!
    let ratio = postgres ? String(format: "%.2f×", figure.best / sqlite.best) : "–"
    return "| \(parts) | \(postgres ? "PostgreSQL, \(parts) host\(parts == 1 ? "" : "s")" : "SQLite, one host") | "
        + String(format: "%.3f s", figure.best) + " | "
        + grouped(Int(Double(fileCount) / figure.best)) + " | \(ratio) | "
        + String(format: "%.0f MB", Double(figure.peaksKiB.max() ?? 0) / 1024) + " |"
}

say()
say("| processes | store | wall, first spawn → last exit | files/s | PostgreSQL ÷ SQLite | peak RSS per process |")
say("|---:|---|---:|---:|---:|---:|")
for parts in processCounts {
    say(row(parts, false))
    say(row(parts, true))
}
children.removeTree(base)
