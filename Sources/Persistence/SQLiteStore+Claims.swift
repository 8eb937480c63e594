import Foundation
import GRDB
import GRDBSQLite

/// Claims: rows selected and updated in one write transaction.
extension SQLiteStore {
    /// Claims rows in one write transaction. Its `BEGIN IMMEDIATE` holds the store's one
    /// write lock, so no other transaction holds a row it selects: "skip locked" has nothing
    /// to skip, and a second claim selects after the first committed.
    func claimRows(_ fetch: StoreFetch, update: ([StoreRow]) -> [RowUpdate]) throws -> [StoreRow] {
        let entitySQL = sql[fetch.entity]
        let (query, arguments) = select(entitySQL.selectList, fetch)
        return try mapErrors(nil) {
            try writing { db in
                let rows = try Self.readRows(db, query, arguments, entitySQL)
                guard !rows.isEmpty else { return [] }
                let updates = update(rows)
                var claimed: [StoreRow] = []
                claimed.reserveCapacity(rows.count)
                for (row, change) in zip(rows, updates) {
                    let (statement, arguments) = entitySQL.update(
                        slots: change.slots, values: change.values, id: row.id, expectedVersion: nil)
                    let id = ManagedObjectID(entityName: fetch.entity.name, rowID: row.id)
                    let version = try mapErrors(id) {
                        try Self.query(db, statement, arguments) { sqlite3_column_int64($0, 0) }
                    }
                    claimed.append(change.applied(to: row, version: version.first ?? row.version + 1))
                }
                try runInjectedFault()
                return claimed
            }
        }
    }
}
