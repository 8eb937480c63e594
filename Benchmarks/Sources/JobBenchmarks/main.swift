// The durable job queue (issue 5), in one run, release mode:
//
//   swift run -c release --package-path Benchmarks JobBenchmarks \
//       [--jobs N] [--samples N] [--cross-samples N] [--idle-seconds N] [--repeat N] [--work DIR]
//       [--store postgresql://… | --postgresql] [--workers N] [--latency MS] [--assetcat PATH]
//       [--only throughput,workers,real,cancel,idle]
//
// --store (or --postgresql: the server of $ASSETCAT_TEST_POSTGRESQL_URL, as
// Scripts/with-postgres.sh sets it) keeps every catalog's records in a fresh schema of that PostgreSQL server (content in
// --work) instead of catalog.sqlite: the same rows, measured on PostgreSQL. This process is then
// host `bench-host-a` (ASSETCAT_HOST_ID) and the deleting child of 2. is `bench-host-b`.
//
// 1. Throughput. N no-op jobs (default 10,000), one per asset of a catalog of N referenced tiny
//    files, submitted in one `submit` call and worked to completion by `runUntilIdle()` — jobs
//    are claimed many per write transaction and their results committed in groups, every
//    transaction committed with the store's `synchronous=FULL`. Baseline: the same count of no-op child
//    tasks in a TaskGroup with the queue's concurrency limit (the core count). Best of --repeat
//    rounds (default 1), each on a fresh catalog.
// 2. Cancel latency under load. A fresh catalog of N assets, one job each (so N queued), the
//    queue running in the background (`start()`); the processor works in 5 ms steps
//    (`Task.sleep`, which throws at cancellation) for up to 2 s. Repeatedly, an asset whose job
//    has done at least two steps is deleted in a catalog context (`ctx.delete` runs
//    `prepareForDeletion`, which cancels the job's task; then `ctx.save()`), and the time from
//    just before `ctx.delete` to the processor catching `CancellationError` (its own clock
//    reading, CLOCK_MONOTONIC) is one sample. Optionally (--cross-samples, default 100; 0 skips)
//    the same through a deletion committed by another process: this binary, spawned with
//    --delete-child, opens the catalog and calls `remove([id])`; the sample runs from just before
//    that call (in the child) to the processor catching the cancellation (in this process).
// 1b. Several workers (--workers N): the same N no-op jobs queued by this process, then worked by
//    N worker processes started at once (this binary with --worker-child: `Catalog.open`,
//    `runUntilIdle()`), each its own host on PostgreSQL (`bench-worker-K`), one host on SQLite.
//    Timed from the first spawn to the last exit, and from the first worker's `runUntilIdle` call
//    to the last one's return (CLOCK_MONOTONIC, printed by each worker). Checked: every job
//    succeeded once (the workers' counts sum to N; N rows `succeeded`). Then the same with real
//    jobs: the built-in digest job, queued by an add with hashing deferred (as in 1c). On
//    PostgreSQL, each round also reports the server's CPU time (BenchSupport's serverCPU); with
//    --latency MS, the workers reach the server through a DelayProxy holding every chunk MS
//    milliseconds each way (ASSETCAT_STORE names the proxy's port), and the round trips it saw
//    are reported per 1,000 jobs.
// 1c. Jobs that do something (--only real): the built-in digest job over the N tiny files,
//    added with hashing deferred (`defersHashing`: the add queues one digest job an asset, which
//    reads the file, hashes it and writes its digest and size onto the asset), and a processor
//    that writes two metadata values onto its asset (what a pipeline's own kinds do), each worked
//    by `runUntilIdle()`. Work floor of the digest row: the same files opened, read and hashed
//    (SHA-256, swift-crypto) in this process by a TaskGroup of the queue's concurrency; the
//    overhead a job is the run's process CPU less the floor's, over N. With --assetcat PATH,
//    also the CLI: `assetcat add --reference --recursive --defer-hash` of the files (untimed),
//    then `assetcat jobs run` timed from spawn to exit. Checked: N jobs succeeded, every asset
//    has its digest (or its metadata).
// 3. Idle cost. A fresh catalog of N assets and no jobs, the queue started (`start()`): this
//    process's CPU time (utime + stime of /proc/self/stat) over --idle-seconds (default 10; 0 skips).
import AssetCatalog
import BenchSupport
import Crypto
import Foundation
import Persistence
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

func say(_ line: String = "") {
    print(line)
    fflush(nil)
}

// MARK: Child mode: delete one asset from another process, print when.

/// This process's peak memory (VmHWM), in MB.
func peakMemoryMB() -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Double(Int(line.dropFirst(6).filter(\.isNumber)) ?? 0) / 1024
    }
    return 0
}

struct NoOp: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput { JobOutput() }
}

// MARK: Child mode: one worker of the several-workers row; prints when it ran and what.

// `--worker-child CATALOG` works no-op jobs; `--worker-child CATALOG digest`, the built-in digest jobs.
if (3...4).contains(CommandLine.arguments.count) && CommandLine.arguments[1] == "--worker-child" {
    let catalog = try Catalog.open(at: URL(fileURLWithPath: CommandLine.arguments[2]))
    if CommandLine.arguments.count == 3 { catalog.jobs.register(NoOp(), as: "noop") }
    catalog.jobs.retention = .keepsEverything  // the parent counts the succeeded rows
    let start = now()
    let summary = try await catalog.jobs.runUntilIdle()
    let end = now()
    catalog.close()
    say("\(start) \(end) \(summary.succeeded) \(summary.failed + summary.cancelled) \(peakMemoryMB())")
    exit(0)
}

if CommandLine.arguments.count == 4 && CommandLine.arguments[1] == "--delete-child" {
    let catalog = try Catalog.open(at: URL(fileURLWithPath: CommandLine.arguments[2]))
    let start = now()
    try catalog.remove(AssetID(Int64(CommandLine.arguments[3])!))
    let end = now()
    say("\(start) \(end)")
    catalog.close()
    exit(0)
}

// MARK: Options

var jobCount = 10_000
var samples = 200
var crossSamples = 100
var repeats = 1
var idleSeconds = 10
var workRoot = NSTemporaryDirectory()
var store: String?
var workers = 0
var latency: Double?
let allSections: Set<String> = ["throughput", "workers", "real", "cancel", "idle"]
var assetcat: String?
var only = allSections
do {
    var args = Array(CommandLine.arguments.dropFirst())
    func value() -> String {
        guard !args.isEmpty else { say("missing value"); exit(2) }
        return args.removeFirst()
    }
    while !args.isEmpty {
        switch args.removeFirst() {
        case "--jobs": jobCount = max(1, Int(value()) ?? jobCount)
        case "--samples": samples = max(1, Int(value()) ?? samples)
        case "--cross-samples": crossSamples = max(0, Int(value()) ?? crossSamples)
        case "--repeat": repeats = max(1, Int(value()) ?? repeats)
        case "--idle-seconds": idleSeconds = max(0, Int(value()) ?? idleSeconds)
        case "--work": workRoot = value()
        case "--store": store = value()
        case "--postgresql":
            guard let url = ProcessInfo.processInfo.environment["ASSETCAT_TEST_POSTGRESQL_URL"] else {
                say("--postgresql: no ASSETCAT_TEST_POSTGRESQL_URL (run under Scripts/with-postgres.sh)")
                exit(2)
            }
            store = url
        case "--workers": workers = max(0, Int(value()) ?? workers)
        case "--latency":
            guard let ms = Double(value()), ms >= 0 else {
                say("--latency: milliseconds each way, e.g. 0.25")
                exit(2)
            }
            latency = ms
        case "--assetcat": assetcat = value()
        case "--only":
            only = Set(value().split(separator: ",").map(String.init))
            guard only.isSubset(of: allSections) else { usage() }
        default: usage()
        }
    }
    func usage() -> Never {
        say(
            "usage: JobBenchmarks [--jobs N] [--samples N] [--cross-samples N (0 skips)] [--idle-seconds N (0 skips)] "
                + "[--repeat N] [--work DIR] [--store postgresql://… | --postgresql] [--workers N] [--latency MS] [--assetcat PATH] "
                + "[--only \(allSections.sorted().joined(separator: ","))]")
        exit(2)
    }
}
if workers == 0 { only.remove("workers") }

let base = workRoot + "/job-bench-\(getpid())"
try? FileManager.default.removeItem(atPath: base)
try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: base) }
// The stores' URLs (with their password) are kept per catalog under XDG_CONFIG_HOME: here, for
// this process and its children, never in the user's own configuration.
setenv("XDG_CONFIG_HOME", base + "/config", 1)
if store != nil {
    setenv("ASSETCAT_HOST_ID", "bench-host-a", 1)
}

/// This process's CPU time (user + system), in seconds.
func cpuTime() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

func fmt(_ value: Double, _ digits: Int = 3) -> String { String(format: "%.\(digits)f", value) }

/// The q-quantile (nearest rank) of `values`.
func quantile(_ values: [Double], _ q: Double) -> Double {
    let sorted = values.sorted()
    let rank = Int((q * Double(sorted.count)).rounded(.up))
    return sorted[min(sorted.count - 1, max(0, rank - 1))]
}

// MARK: Assets

/// `count` tiny files (distinct contents) in 100 folders, named `.dat` (kind `data`: an add
/// queues no jobs of its own for them).
let filesRoot = base + "/files"
do {
    try FileManager.default.createDirectory(atPath: filesRoot, withIntermediateDirectories: true)
    for d in 0..<100 { mkdir("\(filesRoot)/d\(d)", 0o755) }
    for n in 0..<jobCount {
        let path = "\(filesRoot)/d\(n % 100)/a\(n).dat"
        _ = FileManager.default.createFile(atPath: path, contents: Data("job asset \(n)\n".utf8))
    }
}

/// The --store URL with the schema of catalog `name` (a fresh one per catalog), on `port` if
/// given (a DelayProxy's); nil without --store.
@MainActor func storeURL(of name: String, port: UInt16? = nil) -> String? {
    guard let store else { return nil }
    guard var url = URLComponents(string: store) else { fatalError("--store: not a URL: \(store)") }
    url.queryItems =
        (url.queryItems ?? []).filter { $0.name != "schema" } + [
            URLQueryItem(
                name: "schema", value: "job_bench_\(getpid())_\(name.replacingOccurrences(of: "-", with: "_"))")
        ]
    if let port { url.port = Int(port) }
    return url.string!
}

/// A fresh catalog with every file added in reference mode; returns it and the asset IDs.
/// With `defersHashing`, the add queues a digest job an asset.
@MainActor func makeCatalog(_ name: String, defersHashing: Bool = false) async throws -> (Catalog, [AssetID]) {
    let directory = URL(fileURLWithPath: base + "/" + name)
    let catalog: Catalog
    if let url = storeURL(of: name) {
        catalog = try Catalog.create(at: directory, store: CatalogStoreLocation(url)).catalog
    } else {
        catalog = try Catalog.create(at: directory)
    }
    let result = try await catalog.add(
        [filesRoot], options: AddOptions(mode: .reference, recursive: true, defersHashing: defersHashing))
    precondition(result.failures.isEmpty && result.added.count == jobCount, "add: \(result.added.count) assets")
    precondition(
        result.queuedJobs.count == (defersHashing ? jobCount : 0), "add queued \(result.queuedJobs.count) jobs")
    // The checks count the succeeded rows: none pruned (the standard retention keeps 10,000).
    catalog.jobs.retention = .keepsEverything
    return (catalog, result.added.map(\.id))
}

// MARK: 1. Throughput

@inline(never) func noOpWork(_ i: Int) async -> Int { i & 1 | 1 }

/// `n` child tasks running `work` (0 ..< n), at most `limit` at a time; the sum of their results.
func boundedTasks(_ n: Int, limit: Int, _ work: @escaping @Sendable (Int) async -> Int) async -> Int {
    await withTaskGroup(of: Int.self) { group in
        var next = 0
        var done = 0
        while next < min(limit, n) {
            let i = next
            group.addTask { await work(i) }
            next += 1
        }
        for await result in group {
            done += result
            if next < n {
                let i = next
                group.addTask { await work(i) }
                next += 1
            }
        }
        return done
    }
}

/// `n` no-op child tasks, at most `limit` at a time.
func plainTasks(_ n: Int, limit: Int) async -> Int { await boundedTasks(n, limit: limit) { await noOpWork($0) } }

say(
    "JobBenchmarks: \(grouped(jobCount)) jobs, \(ProcessInfo.processInfo.activeProcessorCount) cores, "
        + (store == nil ? "SQLite" : "PostgreSQL") + " catalogs")
var bestSubmit = Double.infinity
var bestRun = Double.infinity
var bestPlain = Double.infinity
var bestRunCPU = 0.0
var concurrency = 0
if only.contains("throughput") { say("1. throughput: no-op jobs through the durable queue vs plain tasks") }
for round in 0..<(only.contains("throughput") ? repeats : 0) {
    let (catalog, ids) = try await makeCatalog("throughput-\(round)")
    concurrency = catalog.jobs.concurrency
    catalog.jobs.register(NoOp(), as: "noop")
    // Plain tasks first on even rounds, last on odd ones.
    func plain() async {
        let t0 = now()
        let done = await plainTasks(jobCount, limit: concurrency)
        let t = now() - t0
        precondition(done == jobCount)
        bestPlain = min(bestPlain, t)
        say("   round \(round + 1): plain TaskGroup \(fmt(t, 4)) s")
    }
    if round % 2 == 0 { await plain() }
    let t0 = now()
    let jobIDs = try catalog.jobs.submit(["noop"], for: ids)
    let t1 = now()
    let cpu0 = cpuTime()
    let summary = try await catalog.jobs.runUntilIdle()
    let t2 = now()
    let runCPU = cpuTime() - cpu0
    precondition(jobIDs.count == jobCount, "submit returned \(jobIDs.count) IDs")
    precondition(
        summary.succeeded == jobCount && summary.failed == 0 && summary.cancelled == 0, "run: \(summary)")
    let succeededRows = try catalog.jobs.list([.succeeded]).count
    precondition(succeededRows == jobCount, "\(succeededRows) job rows succeeded")
    bestSubmit = min(bestSubmit, t1 - t0)
    if t2 - t1 < bestRun { bestRunCPU = runCPU }
    bestRun = min(bestRun, t2 - t1)
    say(
        "   round \(round + 1): submit \(fmt(t1 - t0)) s, runUntilIdle \(fmt(t2 - t1)) s "
            + "(process CPU \(fmt(runCPU)) s)")
    if round % 2 == 1 { await plain() }
    catalog.close()
}
let queueRate = Double(jobCount) / bestRun
let queueRateWithSubmit = Double(jobCount) / (bestSubmit + bestRun)
let plainRate = Double(jobCount) / bestPlain

// MARK: 1b. Several worker processes

/// One round of the several-workers rows: wall time from the first spawn to the last exit, the
/// window from the first `runUntilIdle` call to the last return, each worker's peak memory, and
/// on PostgreSQL the server's CPU time and (through the proxy) the round trips.
struct WorkersRound {
    var wall: Double
    var window: Double
    var peaksMB: [Double]
    var serverSeconds: Double?
    var roundTrips: Int?
}
/// The rounds of each case: kind (`noop`, `digest`) and whether through the proxy.
var workerRounds: [String: [WorkersRound]] = [:]
var workerCheckFailures: [String] = []
/// The kinds the workers run, and the cases (loopback, and through the proxy with --latency).
let workerKinds = ["noop", "digest"]
let workerPaths = [false] + (latency != nil && store != nil ? [true] : [])
func workerCase(_ kind: String, _ proxied: Bool) -> String { kind + (proxied ? "-latency" : "") }
let serverPort = store.flatMap { URLComponents(string: $0)?.port }.map(UInt16.init)
if only.contains("workers") {
    say("1b. throughput: \(grouped(jobCount)) no-op, then digest, jobs worked by \(workers) worker processes")
    let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    for round in 0..<repeats {
        for kind in workerKinds {
            for proxied in workerPaths {
                let name = "workers-\(workerCase(kind, proxied))-\(round)"
                do {
                    let (catalog, ids) = try await makeCatalog(name, defersHashing: kind == "digest")
                    if kind == "noop" {
                        catalog.jobs.register(NoOp(), as: "noop")
                        let jobIDs = try catalog.jobs.submit(["noop"], for: ids)
                        precondition(jobIDs.count == jobCount, "submit returned \(jobIDs.count) IDs")
                    }
                    catalog.close()
                }
                let proxy =
                    proxied
                    ? try DelayProxy(targetPort: serverPort!, delay: .microseconds(Int64(latency! * 1000))) : nil
                let cpuBefore = serverPort.flatMap { serverCPU(port: $0) }
                var children: [(Process, Pipe)] = []
                let t0 = now()
                for k in 0..<workers {
                    let child = Process()
                    child.executableURL = URL(fileURLWithPath: me)
                    child.arguments = ["--worker-child", base + "/" + name] + (kind == "noop" ? [] : [kind])
                    var environment = ProcessInfo.processInfo.environment
                    if store != nil { environment["ASSETCAT_HOST_ID"] = "bench-worker-\(k + 1)" }
                    if let proxy, var url = URLComponents(string: storeURL(of: name, port: proxy.port)!) {
                        // The variable takes no password: PGPASSWORD carries it.
                        environment["PGPASSWORD"] = url.password
                        url.password = nil
                        environment["ASSETCAT_STORE"] = url.string!
                    }
                    child.environment = environment
                    let pipe = Pipe()
                    child.standardOutput = pipe
                    try child.run()
                    children.append((child, pipe))
                }
                var starts: [Double] = []
                var ends: [Double] = []
                var peaks: [Double] = []
                var counts: [Int] = []
                for (child, pipe) in children {
                    let data = pipe.fileHandleForReading.readDataToEndOfFile()
                    child.waitUntilExit()
                    precondition(child.terminationStatus == 0, "worker failed (status \(child.terminationStatus))")
                    let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace)
                        .compactMap { Double($0) }
                    precondition(
                        fields.count == 5 && fields[3] == 0, "worker printed \(String(decoding: data, as: UTF8.self))")
                    starts.append(fields[0])
                    ends.append(fields[1])
                    counts.append(Int(fields[2]))
                    peaks.append(fields[4])
                }
                let wall = now() - t0
                let serverSeconds = cpuBefore.flatMap { before in serverCPU(port: serverPort!).map { $0 - before } }
                let trips = proxy?.roundTrips
                proxy?.stop()
                let catalog = try Catalog.open(at: URL(fileURLWithPath: base + "/" + name))
                let rows = try catalog.jobs.list(JobState.allCases)
                catalog.close()
                let rowStates = Dictionary(grouping: rows, by: \.state).mapValues(\.count)
                let attempts = Dictionary(grouping: rows, by: \.attempts).mapValues(\.count)
                // Every job must have succeeded once, and the workers' summaries must say so; a
                // round that does not is reported (with the table) rather than hidden.
                if counts.reduce(0, +) != jobCount || rowStates != [.succeeded: jobCount] {
                    workerCheckFailures.append(
                        "\(name): the workers' summaries count \(counts) succeeded jobs; the job rows by state: "
                            + "\(rowStates.map { "\($0.key.rawValue) \($0.value)" }.sorted().joined(separator: ", ")); "
                            + "by attempts: \(attempts.map { "\($0.key): \($0.value)" }.sorted().joined(separator: ", "))"
                    )
                    say("   CHECK FAILED, " + workerCheckFailures.last!)
                }
                let window = ends.max()! - starts.min()!
                workerRounds[workerCase(kind, proxied), default: []].append(
                    WorkersRound(
                        wall: wall, window: window, peaksMB: peaks, serverSeconds: serverSeconds, roundTrips: trips))
                say(
                    "   round \(round + 1), \(kind)\(proxied ? " at \(latency!) ms each way" : ""): \(fmt(wall)) s from "
                        + "the first spawn to the last exit, \(fmt(window)) s from the first runUntilIdle to the last "
                        + "return; jobs per worker \(counts.map(String.init).joined(separator: "/")), peaks "
                        + "\(peaks.map { fmt($0, 0) }.joined(separator: "/")) MB"
                        + (serverSeconds.map { ", server CPU \(fmt($0, 2)) s" } ?? "")
                        + (trips.map { ", \(grouped($0)) round trips" } ?? ""))
            }
        }
    }
}

// MARK: 1c. Jobs that do something

/// Writes two metadata values onto its asset: what a pipeline's own job kinds do.
struct WritesMetadata: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput {
        JobOutput(metadata: ["checkedBy": "bench", "nameLength": String(job.asset.name.utf8.count)])
    }
}

/// Opens, reads and hashes each of `paths` (SHA-256), at most `limit` at a time: the digest
/// jobs' own work, without the queue.
func hashFiles(_ paths: [String], limit: Int) async -> Int {
    await boundedTasks(paths.count, limit: limit) { i in
        let fd = open(paths[i], O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[..<n])) }
        }
        return hasher.finalize().withUnsafeBytes { $0.count } == 32 ? 1 : 0
    }
}

/// `runUntilIdle` of `catalog`'s queued jobs, timed: its wall time and this process's CPU,
/// checked to have run `jobCount` jobs, none failed.
@MainActor func timedRun(_ catalog: Catalog, _ what: String) async throws -> (seconds: Double, cpu: Double) {
    let cpu0 = cpuTime()
    let t0 = now()
    let summary = try await catalog.jobs.runUntilIdle()
    let t = now() - t0
    let cpu = cpuTime() - cpu0
    precondition(summary.succeeded == jobCount && summary.failed == 0, "\(what) run: \(summary)")
    return (t, cpu)
}

/// One kind of real job, best of the rounds: its run, the run's process CPU, and the floor.
struct RealRow {
    var run = Double.infinity
    var cpu = 0.0
    var floor = Double.infinity
    var floorCPU = 0.0
}
var digestRow = RealRow()
var metadataRow = RealRow()
var cliDigest: (wall: Double, cpu: Double)?
if only.contains("real") {
    say("1c. jobs that do something: the built-in digest job, and a processor that writes metadata")
    let paths = (0..<jobCount).map { "\(filesRoot)/d\($0 % 100)/a\($0).dat" }
    for round in 0..<repeats {
        // The floor first on even rounds, last on odd ones.
        func floor() async {
            let cpu0 = cpuTime()
            let t0 = now()
            let hashed = await hashFiles(paths, limit: ProcessInfo.processInfo.activeProcessorCount)
            let t = now() - t0
            precondition(hashed == jobCount, "hashed \(hashed) files")
            if t < digestRow.floor { digestRow.floorCPU = cpuTime() - cpu0 }
            digestRow.floor = min(digestRow.floor, t)
            say("   round \(round + 1): hashing the files in this process \(fmt(t, 4)) s")
        }
        if round % 2 == 0 { await floor() }
        do {
            let (catalog, ids) = try await makeCatalog("digest-\(round)", defersHashing: true)
            let (t, cpu) = try await timedRun(catalog, "digest")
            let unhashed = try ids.filter { try catalog.asset($0).sha256.isEmpty }.count
            precondition(unhashed == 0, "\(unhashed) assets without their digest")
            if t < digestRow.run { digestRow.cpu = cpu }
            digestRow.run = min(digestRow.run, t)
            say("   round \(round + 1): digest jobs \(fmt(t)) s (process CPU \(fmt(cpu)) s)")
            catalog.close()
        }
        do {
            let (catalog, ids) = try await makeCatalog("metadata-\(round)")
            catalog.jobs.register(WritesMetadata(), as: "check")
            _ = try catalog.jobs.submit(["check"], for: ids)
            let (t, cpu) = try await timedRun(catalog, "metadata")
            let unwritten = try ids.filter { try catalog.asset($0).metadata["checkedBy"] != "bench" }.count
            precondition(unwritten == 0, "\(unwritten) assets without their metadata")
            if t < metadataRow.run { metadataRow.cpu = cpu }
            metadataRow.run = min(metadataRow.run, t)
            say("   round \(round + 1): metadata-writing jobs \(fmt(t)) s (process CPU \(fmt(cpu)) s)")
            catalog.close()
        }
        if round % 2 == 1 { await floor() }
        if let assetcat, store == nil {
            let directory = base + "/cli-\(round)"
            func run(_ arguments: [String]) throws -> (wall: Double, cpu: Double) {
                let child = Process()
                child.executableURL = URL(fileURLWithPath: assetcat)
                child.arguments = arguments
                child.standardOutput = FileHandle.nullDevice
                let t0 = now()
                try child.run()
                child.waitUntilExit()
                let wall = now() - t0
                precondition(child.terminationStatus == 0, "assetcat \(arguments.joined(separator: " ")) failed")
                var usage = rusage()
                getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
                let cpu =
                    Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
                    + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
                return (wall, cpu)
            }
            _ = try run(["init", directory])
            _ = try run(["add", "--catalog", directory, "-q", "--reference", "--recursive", "--defer-hash", filesRoot])
            let before = try run(["--version"]).cpu  // the children's CPU so far
            let jobs = try run(["jobs", "run", "--catalog", directory, "-q"])
            let result = (wall: jobs.wall, cpu: jobs.cpu - before)
            if cliDigest == nil || result.wall < cliDigest!.wall { cliDigest = result }
            say("   round \(round + 1): `assetcat jobs run` of the digest jobs \(fmt(result.wall)) s")
        }
    }
}

// MARK: 2. Cancel latency under load

final class Tracker: Sendable {
    struct State {
        /// Running jobs' assets and how many steps each has done.
        var running: [Int64: Int] = [:]
        /// When each asset's processor caught its cancellation.
        var observed: [Int64: Double] = [:]
        var finished = 0
    }
    let state = Mutex(State())
}

struct Steps: JobProcessor {
    let tracker: Tracker
    let maxSteps: Int

    func run(_ job: JobContext) async throws -> JobOutput {
        let id = job.asset.id.rawValue
        tracker.state.withLock { $0.running[id] = 0 }
        defer { tracker.state.withLock { _ = $0.running.removeValue(forKey: id) } }
        do {
            for _ in 0..<maxSteps {
                try job.checkCancellation()
                try await Task.sleep(for: .milliseconds(5))
                tracker.state.withLock { $0.running[id]? += 1 }
            }
        } catch is CancellationError {
            let t = now()
            tracker.state.withLock { $0.observed[id] = t }
            throw CancellationError()
        }
        tracker.state.withLock { $0.finished += 1 }
        return JobOutput()
    }
}

let tracker = Tracker()

/// Waits for a running job that has done `minSteps` steps and was not targeted before.
@MainActor func pickRunning(excluding used: Set<Int64>, minSteps: Int = 2) async throws -> Int64 {
    let deadline = now() + 10
    while now() < deadline {
        let target = tracker.state.withLock { s in
            s.running.filter { $0.value >= minSteps && !used.contains($0.key) }.keys.min()
        }
        if let target { return target }
        try await Task.sleep(for: .milliseconds(1))
    }
    fatalError("no job has been running for \(minSteps) steps within 10 s")
}

/// Waits for the processor of `asset` to catch its cancellation; returns when it did.
@MainActor func awaitObserved(_ asset: Int64, timeout: Double = 10) async throws -> Double {
    let deadline = now() + timeout
    while now() < deadline {
        if let t = tracker.state.withLock({ $0.observed[asset] }) { return t }
        try await Task.sleep(for: .microseconds(200))
    }
    fatalError("asset \(asset)'s job did not see its cancellation within \(timeout) s")
}

var idleCPU = 0.0
var local: [Double] = []
var saves: [Double] = []
var beforeCommit = 0
var cross: [Double] = []
var childRemoves: [Double] = []
var stillRunning = 0
var finishedOnTheirOwn = 0
var cancelledRows = 0
if only.contains("cancel") {
    say("2. cancel latency: \(grouped(jobCount)) jobs queued, queue started, deleting assets whose job runs")
    let (catalog, ids) = try await makeCatalog("cancel")
    catalog.jobs.register(Steps(tracker: tracker, maxSteps: 400), as: "steps")
    _ = try catalog.jobs.submit(["steps"], for: ids)
    catalog.jobs.start()

    // Idle cost of the running queue: 2 jobs sleeping in 5 ms steps, nothing else to do.
    let idleCPU0 = cpuTime()
    let idleT0 = now()
    try await Task.sleep(for: .seconds(2))
    idleCPU = (cpuTime() - idleCPU0) / (now() - idleT0)
    say(
        "   process CPU while the queue runs \(concurrency) sleeping jobs and nothing else happens: "
            + "\(fmt(idleCPU * 100, 0))% of a core")

    var used = Set<Int64>()
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<samples {
        let target = try await pickRunning(excluding: used)
        used.insert(target)
        // Land the delete at a random point within a 5 ms step.
        try await Task.sleep(for: .microseconds(Int.random(in: 0..<5000, using: &generator)))
        let context = catalog.newContext()
        let (t0, saved) = context.performAndWait { () -> (Double, Double) in
            let object = try! context.existingObject(
                with: ManagedObjectID(entityName: "Asset", rowID: target))
            let t0 = now()
            context.delete(object)  // prepareForDeletion: cancels the job's task
            try! context.save()
            return (t0, now())
        }
        let observed = try await awaitObserved(target)
        local.append(observed - t0)
        saves.append(saved - t0)
        if observed < saved { beforeCommit += 1 }
    }
    say("   in-process: \(local.count) samples, p50 \(fmt(quantile(local, 0.5) * 1000)) ms")

    if crossSamples > 0 {
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        for _ in 0..<crossSamples {
            let target = try await pickRunning(excluding: used)
            used.insert(target)
            let child = Process()
            child.executableURL = URL(fileURLWithPath: me)
            child.arguments = ["--delete-child", base + "/cancel", String(target)]
            if store != nil {  // another host
                var environment = ProcessInfo.processInfo.environment
                environment["ASSETCAT_HOST_ID"] = "bench-host-b"
                child.environment = environment
            }
            let pipe = Pipe()
            child.standardOutput = pipe
            try child.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            child.waitUntilExit()
            precondition(child.terminationStatus == 0, "delete child failed")
            let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace)
                .compactMap { Double($0) }
            precondition(fields.count == 2, "delete child printed \(String(decoding: data, as: UTF8.self))")
            let observed = try await awaitObserved(target)
            cross.append(observed - fields[0])
            childRemoves.append(fields[1] - fields[0])
        }
        say("   other process: \(cross.count) samples, p50 \(fmt(quantile(cross, 0.5) * 1000)) ms")
    }
    (stillRunning, finishedOnTheirOwn) = tracker.state.withLock { ($0.running.count, $0.finished) }
    catalog.jobs.stop()
    // stop() cancels the worker and the running jobs without waiting for them; closing the store
    // while they still touch it crashed (SIGSEGV in sqlite3, a read on the closed pool), so let
    // them wind down first.
    while tracker.state.withLock({ !$0.running.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
    try await Task.sleep(for: .milliseconds(500))
    cancelledRows = try catalog.jobs.list([.cancelled]).count
    catalog.close()
    precondition(cancelledRows >= local.count + cross.count, "only \(cancelledRows) cancelled job rows")
}

// MARK: 3. Idle cost

/// This process's CPU time (utime + stime of /proc/self/stat), in seconds.
func statCPUTime() -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return 0 }
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let utime = Double(fields[11]), let stime = Double(fields[12]) else { return 0 }
    return (utime + stime) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

var idleWorkerCPU: Double?
if idleSeconds > 0 && only.contains("idle") {
    say("3. idle cost: a started queue with nothing to do, \(idleSeconds) s")
    let (idle, _) = try await makeCatalog("idle")
    idle.jobs.register(NoOp(), as: "noop")
    idle.jobs.start()
    try await Task.sleep(for: .milliseconds(500))  // past the start's first turns
    let cpu0 = statCPUTime()
    let t0 = now()
    try await Task.sleep(for: .seconds(idleSeconds))
    let cpu = statCPUTime() - cpu0
    let elapsed = now() - t0
    idle.jobs.stop()
    idle.close()
    idleWorkerCPU = cpu / elapsed
    say("   \(fmt(cpu)) s of CPU in \(fmt(elapsed)) s")
}

// MARK: Report

say()
say("| measure | durable queue | baseline | ratio |")
say("|---|---:|---|---:|")
if only.contains("throughput") {
    say(
        "| no-op jobs, \(grouped(jobCount)) over \(grouped(jobCount)) assets (1 each), concurrency \(concurrency): "
            + "`runUntilIdle` | \(grouped(Int(queueRate))) jobs/s (\(fmt(bestRun)) s) | plain TaskGroup, same limit: "
            + "\(grouped(Int(plainRate))) tasks/s (\(fmt(bestPlain, 4)) s) | \(fmt(plainRate / queueRate, 0))× slower |"
    )
    say(
        "| the same, including the one `submit` call (\(fmt(bestSubmit)) s) | \(grouped(Int(queueRateWithSubmit))) jobs/s "
            + "| – | – |")
}
for kind in workerKinds {
    for proxied in workerPaths {
        guard let rounds = workerRounds[workerCase(kind, proxied)],
            let best = rounds.min(by: { $0.window < $1.window })
        else { continue }
        let fastestWall = rounds.map(\.wall).min()!
        let peak = rounds.flatMap(\.peaksMB).max()!
        let what = kind == "noop" ? "no-op jobs" : "built-in digest jobs (tiny files)"
        let path = proxied ? ", at \(latency!) ms each way" : ""
        let server =
            (best.serverSeconds.map { "; server CPU \(fmt($0, 2)) s (\(fmt($0 / Double(jobCount) * 1e6, 0)) µs a job)" }
                ?? "")
            + (best.roundTrips.map { "; \(fmt(Double($0) * 1000 / Double(jobCount), 0)) round trips per 1,000 jobs" }
                ?? "")
        say(
            "| \(what), \(grouped(jobCount)) queued, worked by \(workers) worker processes"
                + (store == nil ? " (one host)" : " (\(workers) hosts)\(path)")
                + ": first `runUntilIdle` → last return | "
                + "\(grouped(Int(Double(jobCount) / best.window))) jobs/s (\(fmt(best.window)) s)\(server) | – | – |")
        say(
            "| the same, first spawn → last exit (start-up, open and close included) | "
                + "\(grouped(Int(Double(jobCount) / fastestWall))) jobs/s (\(fmt(fastestWall)) s); peak RSS per worker "
                + "\(fmt(peak, 0)) MB | – | – |")
    }
}
for failure in workerCheckFailures { say("| CHECK FAILED (several workers), \(failure) | – | – | – |") }
if only.contains("real") {
    let overhead = (digestRow.cpu - digestRow.floorCPU) / Double(jobCount) * 1e6
    say(
        "| built-in digest jobs, \(grouped(jobCount)) tiny files added with hashing deferred, concurrency "
            + "\(ProcessInfo.processInfo.activeProcessorCount): `runUntilIdle` | \(grouped(Int(Double(jobCount) / digestRow.run))) "
            + "jobs/s (\(fmt(digestRow.run)) s); process CPU \(fmt(digestRow.cpu / Double(jobCount) * 1e6, 0)) µs a job | "
            + "the files hashed in this process: \(fmt(digestRow.floor, 4)) s, \(fmt(digestRow.floorCPU / Double(jobCount) * 1e6, 0)) "
            + "µs a file | \(fmt(digestRow.run / digestRow.floor, 1))×; overhead \(fmt(overhead, 0)) µs a job |")
    say(
        "| jobs writing two metadata values onto their asset, \(grouped(jobCount)): `runUntilIdle` | "
            + "\(grouped(Int(Double(jobCount) / metadataRow.run))) jobs/s (\(fmt(metadataRow.run)) s); process CPU "
            + "\(fmt(metadataRow.cpu / Double(jobCount) * 1e6, 0)) µs a job | – | – |")
    if let cliDigest {
        say(
            "| the digest jobs through `assetcat jobs run` (spawn → exit) | \(grouped(Int(Double(jobCount) / cliDigest.wall))) "
                + "jobs/s (\(fmt(cliDigest.wall)) s); CPU \(fmt(cliDigest.cpu / Double(jobCount) * 1e6, 0)) µs a job | – | – |"
        )
    }
}
if only.contains("cancel") {
    say(
        "| cancel latency, delete in this process (`ctx.delete` → processor catches `CancellationError`), "
            + "n = \(local.count) | p50 \(fmt(quantile(local, 0.5) * 1000, 2)) ms, p99 \(fmt(quantile(local, 0.99) * 1000, 2)) ms, "
            + "max \(fmt(local.max()! * 1000, 2)) ms | – | – |")
    say(
        "| (the delete's `save()` in the same samples) | p50 \(fmt(quantile(saves, 0.5) * 1000, 2)) ms, "
            + "p99 \(fmt(quantile(saves, 0.99) * 1000, 2)) ms | – | – |")
    if !cross.isEmpty {
        say(
            "| cancel latency, delete committed by another process (`remove([id])` called → processor catches it), "
                + "n = \(cross.count) | p50 \(fmt(quantile(cross, 0.5) * 1000, 1)) ms, p99 \(fmt(quantile(cross, 0.99) * 1000, 1)) ms, "
                + "max \(fmt(cross.max()! * 1000, 1)) ms | – | – |")
        say(
            "| (the child's `remove` call itself, same samples) | p50 \(fmt(quantile(childRemoves, 0.5) * 1000, 1)) ms, "
                + "p99 \(fmt(quantile(childRemoves, 0.99) * 1000, 1)) ms | – | – |")
    }
    say(
        "| process CPU while the started queue has \(concurrency) jobs sleeping in 5 ms steps (2 s, nothing else "
            + "happening) | \(fmt(idleCPU * 100, 0))% of a core | – | – |")
}
if let idleWorkerCPU {
    say(
        "| process CPU of a started queue with nothing to do (utime + stime over \(idleSeconds) s) | "
            + "\(fmt(idleWorkerCPU * 100, 2))% of a core | – | – |")
}
if only.contains("throughput") {
    say(
        "| process CPU per job in the throughput run | \(fmt(bestRunCPU / Double(jobCount) * 1e6, 0)) µs "
            + "(\(fmt(bestRunCPU)) s in \(fmt(bestRun)) s) | – | – |")
}
say()
say(
    "In-process cancellations seen before the delete's save() returned: \(beforeCommit) of \(local.count). "
        + "Jobs that finished their 400 steps instead: \(finishedOnTheirOwn); running at stop: \(stillRunning); "
        + "cancelled job rows: \(cancelledRows). Peak memory (VmHWM): \(fmt(peakMemoryMB(), 0)) MB.")
