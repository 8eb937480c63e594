import Foundation
import Persistence
import PostgresNIO

/// Claims: rows selected `FOR UPDATE SKIP LOCKED` and updated in one transaction.
extension PostgreSQLStore {
    /// The rows of an insertion, one batch at a time, each followed by the rows its hooks
    /// planned.
    /// Claims rows in one transaction on the writer: `SELECT … FOR UPDATE SKIP LOCKED` (rows
    /// another transaction holds locked — another claim's, a save's — are passed over;
    /// under `READ COMMITTED` a row changed by a transaction that committed meanwhile is
    /// checked again against the predicate, and left if it no longer matches), then one
    /// `UPDATE … FROM (VALUES …)` for the rows that change the same slots, with `_version` + 1.
    /// Fenced and counted as a save is.
    func claimRows(_ fetch: StoreFetch, update: ([StoreRow]) -> [RowUpdate]) throws -> [StoreRow] {
        try requireWritable()
        try refuseIfSessionLost()
        let statements = sql[fetch.entity]
        var (query, arguments) = select(statements.selectList, fetch)
        query += " FOR UPDATE SKIP LOCKED"
        do {
            return try writer.withLock {
                try transaction(writer) {
                    // A claim takes the first few of many candidates: walked along an index in
                    // the fetch's order, it stops at the limit. A planner without statistics (a
                    // table just filled: autovacuum analyzes it only after its nap) reads every
                    // candidate instead, with a bitmap, and sorts them all: each claim then costs
                    // as much as the queue is long. This transaction alone (`is_local`) turns
                    // sorting and bitmap scans off, so the claim walks the index that gives its
                    // order: the primary key's, or a partial index of the candidates' row IDs
                    // (``CompositeIndex/init(rowIDsWhere:is:)``). Set by the fence's statement:
                    // a round trip fewer a claim.
                    try fenceSave(
                        countingCommit: true,  // counted even if it claims nothing: rare
                        alsoSelecting:
                            "set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)")
                    let rows = try statements.decode(try writer.run(query, arguments).rows)
                    guard !rows.isEmpty else { return [] }
                    let updates = update(rows)
                    var versions: [Int64: Int64] = [:]
                    var groups: [[Int]: [Int]] = [:]  // the rows' indexes, by the slots they change
                    for (i, change) in updates.enumerated() { groups[change.slots, default: []].append(i) }
                    for (slots, indexes) in groups.sorted(by: { $0.value[0] < $1.value[0] }) {
                        let chunk = max(1, 60_000 / (slots.count + 1))  // the server's limit: 65,535 arguments
                        for start in stride(from: 0, to: indexes.count, by: chunk) {
                            let part = indexes[start..<min(start + chunk, indexes.count)]
                            let claimed = part.map {
                                (id: rows[$0].id, expected: Int64?.none, values: updates[$0].values)
                            }
                            let written = try mapErrors(nil) {
                                try updateFromValues(statements, slots: slots, rows: claimed, versioned: false)
                            }
                            for (id, version) in written { versions[id] = version }
                        }
                    }
                    try injectedFault.run()
                    return zip(rows, updates).map { row, change in
                        change.applied(to: row, version: versions[row.id] ?? row.version + 1)
                    }
                }
            }
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw mapped(error, nil)
        }
    }
}
