import Foundation
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

/// Records lifecycle events, in order, for one test.
final class HookLog: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [String] = []

    func record(_ event: String) {
        lock.lock()
        storage.append(event)
        lock.unlock()
    }
    var events: [String] {
        lock.lock()
        defer { lock.unlock() }
        return storage
    }
    func count(_ event: String) -> Int { events.filter { $0 == event }.count }
    func clear() {
        lock.lock()
        storage = []
        lock.unlock()
    }
}

struct ValidationMessage: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// An entity that records every lifecycle hook into its context's `userInfo["log"]`.
class LoggedObject: ManagedObject {
    func log(_ event: String) {
        guard let context = managedObjectContext else { return }
        (context.userInfo["log"] as? HookLog)?.record("\(event) \(objectID) @\(context.name ?? "")")
    }
    override func awakeFromInsert() { log("awakeFromInsert") }
    override func awakeFromFetch() { log("awakeFromFetch") }
    override func willSave() { log("willSave") }
    override func didSave() { log("didSave") }
    override func prepareForDeletion() { log("prepareForDeletion") }
    override func willTurnIntoFault() { log("willTurnIntoFault") }
    override func didTurnIntoFault() { log("didTurnIntoFault") }
    override func awakeFromSnapshotEvents(_ events: SnapshotEvents) {
        if events.contains(.undoDeletion) { log("undoDeletion") }
    }
}

final class Folder: LoggedObject {
    @Attribute(.unique) var name = ""
    @ToMany(inverse: \Note.folder, deleteRule: .cascade) var notes: [Note]
    @ToMany(inverse: \Sticker.folder) var stickers: [Sticker]
}

final class Note: LoggedObject {
    @Attribute(.indexed) var title = ""
    @Attribute var body: String?
    @Attribute var created = Date(timeIntervalSince1970: 0)
    @Attribute var modified = Date(timeIntervalSince1970: 0)
    @Attribute var priority = 0
    @ToOne var folder: Folder?

    override func awakeFromInsert() {
        super.awakeFromInsert()
        setPrimitiveValue(Date(), for: \.created)
    }
    override func willSave() {
        super.willSave()
        if !isDeleted { setPrimitiveValue(Date(), for: \.modified) }
    }
    override func validateForInsert() throws { try check() }
    override func validateForUpdate() throws { try check() }
    private func check() throws {
        if title == "invalid" { throw ValidationMessage("title must not be 'invalid'") }
    }
}

final class Sticker: LoggedObject {
    @Attribute var label = ""
    @ToOne var folder: Folder?
}

final class Vault: LoggedObject {
    @Attribute var name = ""
    @ToMany(inverse: \Item.vault, deleteRule: .deny) var items: [Item]
}

final class Item: LoggedObject {
    @Attribute var name = ""
    @ToOne var vault: Vault?
}

/// Its willSave changes a value through the observed setter: a loop.
final class Looper: ManagedObject {
    @Attribute var count = 0
    override func willSave() { count += 1 }
}

/// Its willSave changes a value through the primitive setter: one pass.
final class Stamp: ManagedObject {
    @Attribute var count = 0
    @Attribute var saves = 0
    override func willSave() {
        setPrimitiveValue(primitiveValue(for: \.saves) + 1, for: \.saves)
        (managedObjectContext?.userInfo["log"] as? HookLog)?.record("willSave \(objectID)")
    }
}

/// A row written through save effects (a removal plan).
final class Plan: ManagedObject {
    @Attribute var path = ""
}

/// Plans its clean-up in willSave when deleted, as the catalog does for files.
final class Doc: ManagedObject {
    @Attribute var path = ""

    override func willSave() {
        guard isDeleted, let effects = saveEffects else { return }
        let path = path
        let log = managedObjectContext?.userInfo["log"] as? HookLog
        log?.record("plan \(path) commitsToStore=\(effects.commitsToStore)")
        effects.insert(Plan.self) { $0.path = path }
        effects.afterCommit { log?.record("afterCommit \(path)") }
        if let check = managedObjectContext?.userInfo["afterCommitCheck"] as? () -> Void { effects.afterCommit(check) }
        effects.onFailure { log?.record("onFailure \(path)") }
    }

    /// Logs the rows, refuses a row without a path, and registers `userInfo["beforeCommit"]`.
    override class func willInsertRows(
        _ rows: [ObjectSnapshot], in context: ManagedObjectContext, effects: SaveEffects
    ) throws {
        let paths = rows.map { $0.value(for: \Doc.path) ?? "?" }
        (context.userInfo["log"] as? HookLog)?.record("willInsertRows \(paths.joined(separator: ","))")
        if paths.contains("") { throw ValidationMessage("a doc needs a path") }
        if let check = context.userInfo["beforeCommit"] as? (TransactionReader) throws -> Void {
            effects.beforeCommit(check)
        }
    }

    /// Throws `userInfo["refuseBatchDelete"]` of the deleting context, if set.
    override class func willBatchDelete(_ rows: [ObjectSnapshot], effects: SaveEffects) throws {
        if let refusal = effects.userInfo["refuseBatchDelete"] as? any Error { throw refusal }
        for row in rows {
            let path = row.value(for: \Doc.path) ?? "?"
            effects.insert(Plan.self) { $0.path = path }
            effects.afterCommit { BatchLog.shared.record("afterCommit \(path)") }
        }
    }
}

enum BatchLog {
    static let shared = HookLog()
}

let allEntities: [ManagedObject.Type] = [
    Folder.self, Note.self, Sticker.self, Vault.self, Item.self, Looper.self, Stamp.self, Plan.self, Doc.self,
    Tally.self,
    Checked.self,
]

/// The engines a suite runs on: SQLite always, PostgreSQL when `ASSETCAT_TEST_POSTGRESQL_URL`
/// names a server (`make test` starts one: Scripts/with-postgres.sh). Without it, each
/// PostgreSQL case is cancelled with a one-line reason.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgresql

    var testDescription: String { rawValue }

    /// A new, empty store's URL: a file in `directory`, or a PostgreSQL schema of its own in the
    /// test server's database (cancels the test case when there is no server).
    func newStoreURL(in directory: URL) throws -> URL {
        switch self {
        case .sqlite: return directory.appending(path: "store.sqlite")
        case .postgresql: return try PostgreSQLTestServer.newSchema().url!
        }
    }
}

/// A store in a fresh temporary directory (SQLite) or schema (PostgreSQL), with a hook log
/// on its contexts.
struct TestStore {
    let kind: StoreKind
    let directory: URL
    let container: PersistentContainer
    let log = HookLog()
    let storeURL: URL

    /// A new store; `query`: parameters added to a PostgreSQL store's URL.
    init(_ kind: StoreKind = .sqlite, options: PersistentContainer.Options = .init(), query: [URLQueryItem] = [])
        throws
    {
        self.kind = kind
        directory = ScratchDirectory.path("persistence-tests")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var url = try kind.newStoreURL(in: directory)
        if kind == .postgresql, !query.isEmpty { url.append(queryItems: query) }
        storeURL = url
        container = try PersistentContainer.open(url: storeURL, schema: try Schema(allEntities), options: options)
    }

    /// How the store's messages name it: the file's path, or the URL without its password.
    var storeName: String {
        container.storeURL.isFileURL ? container.storeURL.path : container.storeURL.absoluteString
    }

    /// A new root context that logs hooks.
    func context(_ name: String = "test") -> ManagedObjectContext {
        let context = container.newBackgroundContext(name: name)
        context.userInfo["log"] = log
        return context
    }

    /// A child of `parent` that logs hooks.
    func child(of parent: ManagedObjectContext) -> ManagedObjectContext {
        let child = parent.newChildContext(name: "child")
        child.userInfo["log"] = log
        return child
    }

    /// Reopens the same store in a new container.
    func reopen(options: PersistentContainer.Options = .init()) throws -> PersistentContainer {
        try PersistentContainer.open(url: storeURL, schema: try Schema(allEntities), options: options)
    }

    /// What a fresh context reads from the store.
    func stored<T: ManagedObject>(_ request: FetchRequest<T>) throws -> [T] {
        try container.newBackgroundContext().fetch(request)
    }
}

/// The same entity as the fixture process's (Tests/PersistenceFixture).
final class Tally: ManagedObject {
    @Attribute var writer = ""
    @Attribute var n = 0
}

/// A committed fixture from the top-level TestAssets folder.
func testAsset(_ path: String) -> URL {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "TestAssets").appending(path: path)
}

/// The built `persistence-fixture` executable, beside the test bundle.
func fixtureExecutable() -> URL {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    while !FileManager.default.fileExists(atPath: directory.appending(path: "persistence-fixture").path),
        directory.path != "/"
    {
        directory = directory.deletingLastPathComponent()
    }
    return directory.appending(path: "persistence-fixture")
}

/// Registers `userInfo["beforeCommit"]` as a before-commit check of its saves, and passes
/// its save's effects to `userInfo["effects"]`.
final class Checked: ManagedObject {
    @Attribute var label = ""
    override func willSave() {
        if let check = managedObjectContext?.userInfo["beforeCommit"] as? (TransactionReader) throws -> Void {
            saveEffects?.beforeCommit(check)
        }
        if let body = managedObjectContext?.userInfo["effects"] as? (SaveEffects) -> Void, let saveEffects {
            body(saveEffects)
        }
    }
}
