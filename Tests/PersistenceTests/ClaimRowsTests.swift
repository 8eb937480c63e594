import Foundation
import GRDB
import Logging
@_spi(Testing) import Persistence
import PostgresNIO
import Testing

@testable import PersistencePostgreSQL

/// Claims (``ManagedObjectContext/claimRows(_:limit:update:)``): concurrent claimers get
/// disjoint rows and every row, without a conflict; the request's predicate and the limit
/// hold; a row another transaction changes meanwhile is not claimed by mistake.
@Suite struct ClaimRowsTests {
    static let unclaimed = FetchRequest<Tally>(predicate: \.writer == "")

    /// Four containers on one store (four hosts) claim from 10,000 rows at once.
    @Test(arguments: StoreKind.allCases) func concurrentClaimsAreDisjointCompleteAndAnnounced(_ kind: StoreKind)
        async throws
    {
        let store = try TestStore(kind, options: .patient)
        var containers = [store.container]
        for _ in 1..<4 { containers.append(try store.reopen(options: .patient)) }
        defer { for container in containers.dropFirst() { container.close() } }
        let count = 10_000
        let loader = store.context()
        let all = try loader.insertRows(Tally.self, count: count) { i, row in row[\.n] = i }
        try loader.save()
        let noted = containers.map { NotedUpdates($0) }
        defer { for note in noted { note.stop() } }

        let claimers = containers.enumerated().map { k, container in
            OnThread { () throws -> [Int64] in
                let context = container.newBackgroundContext(name: "claimer \(k)")
                var mine: [Int64] = []
                while true {
                    let rows = try context.performAndWait {
                        try context.claimRows(Self.unclaimed, limit: 97) { row, change in
                            #expect(row.value(for: \Tally.writer) == "")
                            change[\.writer] = "c\(k)"
                        }
                    }
                    guard !rows.isEmpty else { return mine }
                    #expect(rows.allSatisfy { $0.value(for: \Tally.writer) == "c\(k)" })
                    mine += rows.map(\.objectID.rowID)
                }
            }
        }
        var claimed: [[Int64]] = []
        for claimer in claimers { claimed.append(try await claimer.result()) }  // none threw a conflict

        #expect(claimed.map(\.count).reduce(0, +) == count)  // disjoint …
        #expect(Set(claimed.joined()) == Set(all.map(\.rowID)))  // … and complete
        let stored = try store.stored(FetchRequest<Tally>())
        var owner: [Int64: String] = [:]
        for (k, ids) in claimed.enumerated() { for id in ids { owner[id] = "c\(k)" } }
        #expect(stored.allSatisfy { owner[$0.objectID.rowID] == $0.writer })
        #expect(Set(try versions(of: store).values) == [2])
        for (k, ids) in claimed.enumerated() {  // each container's notifications name its claims
            #expect(try await eventually { noted[k].ids.count >= ids.count })
            #expect(noted[k].ids == Set(ids.map { ManagedObjectID(entityName: "Tally", rowID: $0) }))
        }
    }

    @Test(arguments: StoreKind.allCases) func thePredicateAndTheLimitHold(_ kind: StoreKind) throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try context.insertRows(Tally.self, count: 10) { i, row in row[\.n] = i }
        try context.save()
        let request = FetchRequest<Tally>(predicate: \.writer == "" && \.n >= 5)
        let claim = { (limit: Int) in
            try context.claimRows(request, limit: limit) { _, change in change[\.writer] = "w" }
                .map { $0.value(for: \Tally.n) ?? -1 }
        }
        #expect(try claim(3) == [5, 6, 7])
        #expect(try claim(3) == [8, 9])
        #expect(try claim(3) == [])
        let versions = try versions(of: store)
        for (i, id) in ids.enumerated() { #expect(versions[id.rowID] == (i >= 5 ? 2 : 1), "row \(i)") }
        #expect(
            try store.stored(FetchRequest<Tally>(sortBy: [.init(\.n)])).map(\.writer)
                == Array(repeating: "", count: 5) + Array(repeating: "w", count: 5))
        // The request's own limit caps the claim's; an offset, a limit under 1 are refused.
        #expect(
            try context.claimRows(FetchRequest<Tally>(predicate: \.writer == "", limit: 1), limit: 3) { _, _ in }
                .count == 1)
        #expect(
            refusal {
                try context.claimRows(FetchRequest<Tally>(predicate: \.writer == "", offset: 1), limit: 3) { _, _ in }
            }
                == "A claim takes the first rows that match: its request has no offset")
        #expect(
            refusal { try context.claimRows(Self.unclaimed, limit: 0) { _, _ in } }
                == "A claim's limit must be at least 1, not 0")
        #expect(
            refusal { try context.newChildContext().claimRows(Self.unclaimed, limit: 1) { _, _ in } }
                == "Claims write to the store; claim rows in a context without a parent")
    }

    /// A claim whose commit fails claims nothing: the rows keep their values and versions,
    /// no notification names them, and the next claim takes them.
    @Test(arguments: StoreKind.allCases) func aClaimWhoseCommitFailsClaimsNothing(_ kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = store.context()
        let ids = try context.insertRows(Tally.self, count: 3) { i, row in row[\.n] = i }
        try context.save()
        let noted = NotedUpdates(store.container)
        defer { noted.stop() }
        store.container.failNextCommit(with: ValidationMessage("the disk is gone"))
        #expect(throws: (any Error).self) {
            try context.claimRows(Self.unclaimed, limit: 3) { _, change in change[\.writer] = "lost" }
        }
        #expect(Set(try versions(of: store).values) == [1])
        #expect(try store.stored(FetchRequest<Tally>()).allSatisfy { $0.writer == "" })
        let claimed = try context.claimRows(Self.unclaimed, limit: 3) { _, change in change[\.writer] = "kept" }
        #expect(claimed.map(\.objectID) == ids)
        #expect(try await eventually { noted.ids.count == 3 })
        #expect(noted.ids == Set(ids))
    }

    /// A save changes a row so that it no longer matches, and is parked before its commit
    /// holding it. On PostgreSQL a claim meanwhile passes the row over (it is locked) without
    /// waiting; on SQLite it waits for the save. Either way the row is not claimed, and the
    /// save commits without a conflict.
    @Test(arguments: StoreKind.allCases) func aRowAnotherTransactionChangesIsNotClaimed(_ kind: StoreKind)
        async throws
    {
        let store = try TestStore(kind, options: .patient)
        let other = try store.reopen(options: .patient)
        defer { other.close() }
        let loader = store.context()
        let ids = try loader.insertRows(Tally.self, count: 3) { i, row in row[\.n] = i }
        try loader.save()
        let gate = Gate()
        defer { gate.open() }
        let saver = store.context("saver")
        let taken = try #require(try saver.fetch(FetchRequest<Tally>(predicate: .objectIDs([ids[1]]))).first)
        taken.writer = "saver"
        Checked(context: saver).label = "parked"
        saver.userInfo["beforeCommit"] = { (_: TransactionReader) in try gate.park() }
        let saving = Saving(saver)
        #expect(try await eventually { gate.isParked })

        let claimer = other.newBackgroundContext(name: "claimer")
        let claiming = OnThread {
            try claimer.performAndWait {
                try claimer.claimRows(Self.unclaimed, limit: 3) { _, change in change[\.writer] = "claimer" }
                    .map(\.objectID)
            }
        }
        if kind == .postgresql {  // not waited for: the claim returns while the save is parked
            #expect(try await eventually { claiming.isDone })
            #expect(!saving.isDone)
        }
        gate.open()
        try await saving.result()
        #expect(try await claiming.result() == [ids[0], ids[2]])
        #expect(
            try store.stored(FetchRequest<Tally>(sortBy: [.init(\.n)])).map(\.writer) == [
                "claimer", "saver", "claimer",
            ])
    }

    /// The message of the misuse error `body` throws.
    func refusal(_ body: () throws -> some Any) -> String? {
        do {
            _ = try body()
            return nil
        } catch let error as Persistence.PersistenceError {
            return error.code == .misuse ? error.message : "\(error)"
        } catch {
            return "\(error)"
        }
    }

    /// Every row's `_version`, read from the store's table.
    func versions(of store: TestStore) throws -> [Int64: Int64] {
        switch store.kind {
        case .sqlite:
            let queue = try DatabaseQueue(path: store.storeURL.path)
            return try queue.read { db in
                Dictionary(
                    uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, _version FROM \"Tally\"").map {
                        ($0[0] as Int64, $0[1] as Int64)
                    })
            }
        case .postgresql:
            let connection = try PostgreSQLConnection(
                try PostgreSQLLocation(store.storeURL), logger: Logger(label: "test"))
            defer { connection.close() }
            return Dictionary(
                uniqueKeysWithValues: try connection.run("SELECT id, \"_version\" FROM \"Tally\"", []).rows.map {
                    try $0.decode((Int64, Int64).self)
                })
        }
    }
}

/// Work run on a thread of its own (it may block on a lock), awaited without blocking the
/// concurrency pool.
final class OnThread<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var outcome: Result<T, any Error>?

    init(_ body: @escaping () throws -> T) {
        let body = Unchecked(body)
        Thread { [self] in
            let result = Result { try body.value() }
            lock.withLock { outcome = result }
        }.start()
    }

    var isDone: Bool { lock.withLock { outcome != nil } }

    func result() async throws -> T {
        guard try await eventually({ isDone }) else { throw ValidationMessage("the work never ended") }
        return try lock.withLock { outcome! }.get()
    }
}

/// The object IDs the save notifications of a container name as updated.
final class NotedUpdates: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: Set<ManagedObjectID> = []
    private var task: Task<Void, Never>?

    init(_ container: PersistentContainer) {
        let stream = container.saveNotifications()
        task = Task { [weak self] in
            for await note in stream { self?.add(note.updatedObjectIDs) }
        }
    }

    private func add(_ ids: Set<ManagedObjectID>) { lock.withLock { storage.formUnion(ids) } }

    var ids: Set<ManagedObjectID> { lock.withLock { storage } }

    func stop() { task?.cancel() }
}
