// Persistence benchmarks (DESIGN.md §8, issue 2): each figure next to raw
// GRDB doing the same work in the same run, so the ratio holds on a noisy
// machine. Release mode only: `make bench`.
import Foundation
import GRDB
import Persistence

final class BenchItem: ManagedObject {
    @Attribute(.indexed) var key = 0
    @Attribute var name = ""
    @Attribute var size = 0
    @Attribute var created = Date(timeIntervalSince1970: 0)
    @Attribute var score = 0.0
}

struct Row5: Codable, FetchableRecord {
    var id: Int64
    var key: Int
    var name: String
    var size: Int
    var created: Double
    var score: Double
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

/// Resets the kernel's peak-RSS counter of this process (Linux `clear_refs`).
func resetPeakMemory() { try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8) }

/// Peak resident memory since the last reset, in MB (`VmHWM`).
func peakMemoryMB() -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? 0
        return kb / 1024
    }
    return 0
}

func temporaryStore(_ name: String) throws -> URL {
    let directory = FileManager.default.temporaryDirectory.appending(path: "persistence-bench-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory.appending(path: "\(name).sqlite")
}

func grdbPool(_ url: URL) throws -> DatabasePool {
    var config = Configuration()
    config.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
    let pool = try DatabasePool(path: url.path, configuration: config)
    try pool.write { db in
        try db.execute(
            sql: """
                CREATE TABLE item (id INTEGER PRIMARY KEY, _version INTEGER NOT NULL DEFAULT 1, key INTEGER NOT NULL,
                name TEXT NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL, score REAL NOT NULL);
                CREATE INDEX item_key ON item (key);
                """)
    }
    return pool
}

struct Result {
    let name: String
    let ours: Double
    let baseline: Double
    let unit: String
    let peakMB: Double?
    var ratio: Double { unit == "s" || unit == "ms" ? ours / baseline : baseline / ours }
}

var results: [Result] = []
var openLines: [String] = []
let n = Int(ProcessInfo.processInfo.environment["BENCH_ROWS"] ?? "") ?? 100_000
let bigN = Int(ProcessInfo.processInfo.environment["BENCH_BIG_ROWS"] ?? "") ?? 1_000_000
let epoch = Date(timeIntervalSince1970: 1_700_000_000)

// 1. Insert + save n objects with 5 attributes, one save, against raw GRDB
//    with one reused prepared statement in one transaction.
do {
    let grdbURL = try temporaryStore("grdb")
    let pool = try grdbPool(grdbURL)
    var start = now()
    try pool.write { db in
        let statement = try db.makeStatement(
            sql: "INSERT INTO item (id, key, name, size, created, score) VALUES (?, ?, ?, ?, ?, ?)")
        for i in 0..<n {
            try statement.execute(arguments: [
                i + 1, i, "item \(i)", i * 3, epoch.timeIntervalSince1970 + Double(i), Double(i) / 7,
            ])
        }
    }
    let grdbTime = now() - start

    let url = try temporaryStore("ours")
    let container = try PersistentContainer(storeURL: url, schema: try Schema([BenchItem.self]))
    let context = container.newBackgroundContext()
    resetPeakMemory()
    start = now()
    try context.performAndWait {
        for i in 0..<n {
            let item = BenchItem(context: context)
            item.key = i
            item.name = "item \(i)"
            item.size = i * 3
            item.created = epoch.addingTimeInterval(Double(i))
            item.score = Double(i) / 7
        }
        try context.save()
    }
    let ourTime = now() - start
    let peak = peakMemoryMB()
    results.append(
        Result(name: "insert + save \(n) objects", ours: ourTime, baseline: grdbTime, unit: "s", peakMB: peak))

    // 2. Fetch all n objects (materialised), against GRDB decoding records.
    let reader = container.newBackgroundContext()
    start = now()
    let all = try reader.performAndWait { try reader.fetch(FetchRequest<BenchItem>()) }
    let ourFetch = now() - start
    precondition(all.count == n)
    start = now()
    let rows = try pool.read { try Row5.fetchAll($0, sql: "SELECT id, key, name, size, created, score FROM item") }
    let grdbFetch = now() - start
    precondition(rows.count == n)
    results.append(Result(name: "fetch all \(n) objects", ours: ourFetch, baseline: grdbFetch, unit: "s", peakMB: nil))
    container.close()
}

// 3. Fetch one object by an indexed attribute in a bigN-row store.
do {
    let url = try temporaryStore("big")
    let container = try PersistentContainer(storeURL: url, schema: try Schema([BenchItem.self]))
    let setup = container.newBackgroundContext()
    try setup.performAndWait {
        try setup.insertRows(BenchItem.self, count: bigN) { i, row in
            row[\.key] = i
            row[\.name] = "item \(i)"
            row[\.size] = i
            row[\.score] = Double(i)
        }
        try setup.save()
    }
    let lookups = 2_000
    var generator = SystemRandomNumberGenerator()
    let keys = (0..<lookups).map { _ in Int.random(in: 0..<bigN, using: &generator) }
    var start = now()
    try setup.performAndWait {
        for key in keys {
            let context = container.newBackgroundContext()  // cold: nothing registered
            let found = try context.fetch(FetchRequest<BenchItem>(predicate: \.key == key, limit: 1))
            precondition(found.first?.key == key)
        }
    }
    let ours = (now() - start) / Double(lookups) * 1000
    container.close()
    let pool = try DatabasePool(path: url.path)
    start = now()
    try pool.read { db in
        let statement = try db.makeStatement(
            sql: "SELECT id, key, name, size, created, score FROM BenchItem WHERE key = ? LIMIT 1")
        for key in keys {
            let row = try Row5.fetchOne(statement, arguments: [key])
            precondition(row?.key == key)
        }
    }
    let grdb = (now() - start) / Double(lookups) * 1000
    results.append(
        Result(name: "fetch 1 by indexed key in \(bigN) rows", ours: ours, baseline: grdb, unit: "ms", peakMB: nil))
    try pool.close()

    // 4. Open the bigN-row store (issue 19): an open reads the header and the schema, against
    //    the open that runs `PRAGMA quick_check` over every page (what every open did before).
    func medianOpen(_ url: URL, _ options: PersistentContainer.Options = .init()) throws -> Double {
        var times: [Double] = []
        for _ in 0..<5 {
            let start = now()
            let container = try PersistentContainer(
                storeURL: url, schema: try Schema([BenchItem.self]), options: options)
            times.append((now() - start) * 1000)
            container.close()
        }
        return times.sorted()[2]
    }
    func megabytes(_ url: URL) throws -> Double {
        Double((try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0) / 1e6
    }
    var fullCheck = PersistentContainer.Options()
    fullCheck.checksIntegrityOnOpen = true
    let checked = try medianOpen(url, fullCheck)
    let opened = try medianOpen(url)
    openLines.append(
        String(
            format:
                "open a %d-row store (%.0f MB), median of 5: %.2f ms; with the full check every open ran before: %.1f ms",
            bigN, try megabytes(url), opened, checked))
    // The bound: a store just under the size an open still checks in full, and a tiny one.
    for rows in [10, 20_000] {
        let small = try temporaryStore("small")
        let container = try PersistentContainer(storeURL: small, schema: try Schema([BenchItem.self]))
        let context = container.newBackgroundContext()
        try context.performAndWait {
            try context.insertRows(BenchItem.self, count: rows) { i, row in
                row[\.key] = i
                row[\.name] = "item \(i)"
            }
            try context.save()
        }
        container.close()
        openLines.append(
            String(
                format: "open a %d-row store (%.1f MB, limit %.1f MB), median of 5: %.2f ms", rows,
                try megabytes(small), Double(PersistentContainer.Options.smallStoreCheckLimit) / 1e6,
                try medianOpen(small)))
    }
}

print("| case | Persistence | raw GRDB | ratio | peak memory |")
print("|---|---:|---:|---:|---:|")
for r in results {
    let fmt = r.unit == "ms" ? "%.3f ms" : "%.3f s"
    print(
        "| \(r.name) | \(String(format: fmt, r.ours)) | \(String(format: fmt, r.baseline)) | "
            + "\(String(format: "%.2f×", r.ratio)) | \(r.peakMB.map { String(format: "%.0f MB", $0) } ?? "–") |")
}
for line in openLines { print(line) }
