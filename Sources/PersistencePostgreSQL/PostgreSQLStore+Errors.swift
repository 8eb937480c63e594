import Foundation
import Persistence
import PostgresNIO

/// How the server's errors become ``PersistenceError``s, with SQLite's messages.
extension PostgreSQLStore {
    /// Turns driver errors into ``PersistenceError``s naming the object.
    func mapErrors<T>(_ id: ManagedObjectID?, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch let error as PSQLError {
            throw mapped(error, id)
        }
    }

    func mapped(_ error: any Error, _ id: ManagedObjectID?) -> PersistenceError {
        let what = id.map { "Could not save \($0)" } ?? "The store at \(url.absoluteString) failed"
        var message = PostgreSQLConnection.describe(error)
        let ids = id.map { [$0] } ?? []
        let info = (error as? PSQLError)?.serverInfo
        let state = PostgreSQLConnection.sqlState(error)
        if state == "23505", let name = info?[.constraintName], let columns = uniqueColumns[name] {
            message = "UNIQUE constraint failed: \(columns)"
        } else if state == "23502", let table = info?[.tableName], let column = info?[.columnName] {
            message = "NOT NULL constraint failed: \(table).\(column)"
        }
        switch state {
        case let state? where state.hasPrefix("23"):
            return PersistenceError(.constraint, "\(what): \(message)", objectIDs: ids, cause: error)
        case "25006":
            return PersistenceError(.readOnly, "\(what): \(message)", objectIDs: ids, cause: error)
        default:
            return PersistenceError(.io, "\(what): \(message)", objectIDs: ids, cause: error)
        }
    }
}
