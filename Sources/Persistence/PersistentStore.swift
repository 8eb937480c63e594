package import Foundation

/// A row as a store returns it: ID, version and values by slot.
package struct StoreRow: Sendable {
    package var id: Int64
    package var version: Int64
    package var values: [StoreValue]

    package init(id: Int64, version: Int64, values: [StoreValue]) {
        self.id = id
        self.version = version
        self.values = values
    }
}

/// The writes of one save, applied by a store in one transaction.
package struct StoreChanges {
    package struct Insert {
        package var entity: EntityDescription
        package var id: Int64
        package var values: [StoreValue]

        package init(entity: EntityDescription, id: Int64, values: [StoreValue]) {
            self.entity = entity
            self.id = id
            self.values = values
        }
    }
    package struct Update {
        package var entity: EntityDescription
        package var id: Int64
        /// The version the change was made against; `nil` to overwrite.
        package var expectedVersion: Int64?
        package var slots: [Int]
        package var values: [StoreValue]
    }
    package struct Delete {
        package var entity: EntityDescription
        package var id: Int64
        package var expectedVersion: Int64?
    }

    /// `updates` grouped by entity, columns and whether they expect a version, wherever they
    /// are among them: each group in their order, the groups in the order of their first
    /// updates. What every store writes with one statement a group (a save that changes rows
    /// of two entities by turns would otherwise take a statement a row).
    package static func groupedByColumns(_ updates: [Update]) -> [[Update]] {
        struct Key: Hashable {
            var entity: ObjectIdentifier
            var slots: [Int]
            var versioned: Bool
        }
        var groups: [Key: [Update]] = [:]
        var order: [Key] = []
        for update in updates {
            let key = Key(
                entity: ObjectIdentifier(update.entity), slots: update.slots, versioned: update.expectedVersion != nil)
            if groups[key] == nil { order.append(key) }
            groups[key, default: []].append(update)
        }
        return order.map { groups[$0]! }
    }

    package var inserts: [Insert] = []
    package var updates: [Update] = []
    package var deletes: [Delete] = []
    /// The rows written and deleted without objects: deletions after `deletes` and
    /// `updates`, insertions after `inserts`.
    package var rows = RowChanges()
    /// Whether an error that is neither the store's nor a hook's (a
    /// ``SaveEffects/beforeCommit(_:)`` check, an injected fault) is reported as a
    /// `PersistenceError` naming the store (a save), or thrown as it is (a batch delete).
    package var wrapsCommitFailures = true
    /// The body of an explicit transaction (``ManagedObjectContext/write(_:)``), run first in
    /// it: it reads, locks and deletes rows itself.
    package var work: ((StoreTransaction) throws -> Void)?

    package var isEmpty: Bool {
        inserts.isEmpty && updates.isEmpty && deletes.isEmpty && rows.isEmpty && work == nil
    }
}

/// Rows inserted and deleted without an object each: the one batch type behind
/// ``ManagedObjectContext/insertRows(_:count:_:)``,
/// ``ManagedObjectContext/insertRows(_:count:batchSize:streaming:)`` and
/// ``ManagedObjectContext/deleteRows(_:pages:)`` (which a context holds until its next
/// save), and ``ManagedObjectContext/batchDelete(_:)`` (written at once, alone).
///
/// A store writes them in the save's transaction in this order: after the objects'
/// deletions and updates, each deletion in the order it was added, a page at a time;
/// after the objects' inserts, each insertion in the order it was added, a batch at a
/// time. A throwing `page`, `rows` or hook aborts the save, and the store throws that
/// error unchanged.
package struct RowChanges {
    /// Rows of one entity with reserved, consecutive IDs: row `i` gets `ids.lowerBound + i`.
    package struct Insertion {
        package var entity: EntityDescription
        package var ids: Range<Int64>
        /// How many rows `rows` is asked for at a time: only one batch is in memory.
        package var batchSize: Int
        /// Whether the save notification names the rows by ID (rows made at the call) or
        /// only by range (rows the save makes).
        package var listedByID: Bool
        /// The values of the rows at `indexes`, in order (one batch).
        package var rows: (_ indexes: Range<Int>) throws -> [[StoreValue]]
    }

    /// Rows of one entity deleted with the schema's delete rules, a page at a time.
    package struct Deletion {
        package enum Selection {
            /// The IDs after `after`, ascending; an empty page ends.
            case pages((_ after: Int64) throws -> [Int64])
            /// The rows a fetch matches when the transaction starts.
            case matching(StoreFetch)
        }
        package var entity: EntityDescription
        package var selection: Selection
    }

    package var insertions: [Insertion] = []
    package var deletions: [Deletion] = []

    package var isEmpty: Bool { insertions.isEmpty && deletions.isEmpty }

    /// The IDs of the rows whose insertion is listed by ID, in order.
    package var listedIDs: [ManagedObjectID] {
        insertions.filter(\.listedByID).flatMap { insertion in
            insertion.ids.map { ManagedObjectID(entityName: insertion.entity.name, rowID: $0) }
        }
    }

    /// The ranges of the rows whose insertion is not listed by ID, by entity name.
    package var streamedRanges: [String: [Range<Int64>]] {
        var ranges: [String: [Range<Int64>]] = [:]
        for insertion in insertions where !insertion.listedByID {
            ranges[insertion.entity.name, default: []].append(insertion.ids)
        }
        return ranges
    }
}

/// What a store's save did beyond the changes it was given.
package struct StoreSaveResult {
    package var versions: [ManagedObjectID: Int64] = [:]
    /// Rows of the deletions of ``StoreChanges/rows`` and what their rules cascaded to, by
    /// entity name.
    package var deletedRows: [String: RowIDSet] = [:]
    /// Members of the context's deleted objects that the transaction's completion of
    /// delete rules removed.
    package var cascadeDeleted: [ManagedObjectID] = []
    package var nullified: [ManagedObjectID] = []

    package init(
        versions: [ManagedObjectID: Int64] = [:], deletedRows: [String: RowIDSet] = [:],
        cascadeDeleted: [ManagedObjectID] = [], nullified: [ManagedObjectID] = []
    ) {
        self.versions = versions
        self.deletedRows = deletedRows
        self.cascadeDeleted = cascadeDeleted
        self.nullified = nullified
    }
}

/// What deletions without objects did inside one transaction.
package struct DeletionTally {
    /// The rows removed, by entity name.
    package var deleted: [String: RowIDSet] = [:]
    /// Rows whose relationship to a removed row was set to `NULL`.
    package var nullified: [ManagedObjectID] = []

    package init() {}

    /// The rows nullified and not deleted after all (by a later page, or a cascade).
    package var clearedAndKept: [ManagedObjectID] {
        nullified.filter { deleted[$0.entityName]?.contains($0.rowID) != true }
    }
}

/// Thrown by a store when rows changed since they were read. The store wrote
/// nothing.
package struct StoreConflict: Error {
    package var objectIDs: [ManagedObjectID]

    package init(objectIDs: [ManagedObjectID]) { self.objectIDs = objectIDs }
}

/// Why a store file could not be opened; the container quarantines the file
/// for the first two.
package enum StoreOpenFailure: Error {
    /// Not a database, a damaged header or schema, fails the `PRAGMA quick_check` an open runs
    /// (``PersistentContainer/Options/checksIntegrityOnOpen``), or holds no schema where one
    /// was expected.
    case unreadable(String, cause: any Error)
    /// A migration or the schema reconciliation failed.
    case migration(String, cause: any Error)
    /// The store could not be opened for a reason outside the file (busy,
    /// locked, permissions, I/O, a read-only open of a store that needs
    /// writing): nothing is moved.
    case unavailable(String, cause: any Error)
    /// There is no store file, and the open may not create one.
    case missing
}

/// How a store opens its file (``SQLiteStore`` is the one engine today).
package struct StoreOpenMode {
    /// Whether a missing file may be created, and a database that holds no
    /// schema (an empty file) given one.
    package var createsSchema = true
    /// Whether the store is opened for reading only: nothing is created,
    /// migrated or written, and every save fails.
    package var readOnly = false
}

/// The contract between the engine-neutral layer (container, contexts, entities) and a
/// storage engine: the seam where a second engine (a server database) plugs in.
///
/// `package`, as are the types it trades in: a store of another target of this package
/// (`PersistencePostgreSQL`'s) implements it and hands it to
/// ``PersistentContainer/init(store:storeURL:schema:options:)``; a program outside the
/// package sees neither. Neither engine's code knows of the other's.
///
/// The container and its contexts talk to a store only through this protocol; the
/// one place that names an engine is ``PersistentContainer``'s initializer, which
/// opens it (and reads a ``StoreOpenFailure`` to decide whether to quarantine the
/// file). Everything the layer hands a store is engine-neutral: entities and their
/// slots (``EntityDescription``), a ``StoreFetch`` whose predicate is a tree
/// (`PredicateNode`), ``StoreChanges`` and ``SaveEffects``; everything it gets back is
/// ``StoreRow``s, IDs and the result types below.
///
/// What a store must provide, whatever its engine:
/// - Row IDs per entity, reserved in blocks that are never handed out twice, across
///   processes (``reserveIDs(entity:count:)``); a reservation's unused tail may be
///   given back (``releaseIDs(entity:unused:)``).
/// - One transaction per ``save(_:effects:)`` (a context's save, and a batch delete: a
///   save of one ``RowChanges`` deletion), in which it applies the changes in the order
///   ``StoreChanges`` and ``RowChanges`` document, completes delete rules (cascade,
///   nullify, deny) for what the context could not see and deletes rows without objects
///   — both through ``DeleteRules`` over its own ``DeletionStatements``, so that every
///   store applies the same rules with the same hooks and messages — calls an
///   insertion's `rows` (which call `willInsertRows`) and the
///   effects' `beforeCommit` work on its writer, checks row
///   versions (optimistic locking: ``StoreConflict``) and writes nothing if anything
///   throws.
/// - Durability of a commit before it returns, and ``externalChangeToken()`` that
///   changes when another connection or process commits.
/// - ``failNextCommit(with:)``, so that the tests of failure paths run on every store.
///
/// What lives only in ``SQLiteStore``, and a second store replaces with its own:
/// GRDB and its connection pool; WAL mode, `synchronous=FULL` and the busy timeout
/// (several processes writing in turn); the checks on open (the header and schema, a
/// bounded `PRAGMA quick_check`, the read-only and immutable opens) and the full check
/// (`PRAGMA integrity_check`) and their mapping to
/// ``StoreOpenFailure``; the SQL: table and index names (`EntitySQL`), the schema's
/// creation and extension, the ID reservation table (`_persistence_sequence`),
/// predicates compiled to `WHERE` clauses, the statements the shared delete-rule engine
/// (``DeleteRules``, over ``DeletionStatements``) runs, and
/// `PRAGMA data_version` behind the change token; and the database a ``Migration``
/// receives (``MigrationDatabase`` runs SQLite SQL).
package protocol PersistentStore: AnyObject, Sendable {
    /// Where the store lives (for messages and the quarantine).
    var url: URL { get }
    /// Reserves `count` consecutive, never reused row IDs for `entity`.
    func reserveIDs(entity: EntityDescription, count: Int) throws -> ClosedRange<Int64>
    /// Gives back the unused tail of a reservation, if no one reserved after it.
    func releaseIDs(entity: EntityDescription, unused: ClosedRange<Int64>)
    /// The rows `fetch` matches, in its order, offset and limit.
    func fetch(_ fetch: StoreFetch) throws -> [StoreRow]
    /// The IDs of the rows `fetch` matches, in its order, offset and limit.
    func fetchIDs(_ fetch: StoreFetch) throws -> [Int64]
    /// How many rows `fetch` matches.
    func count(_ fetch: StoreFetch) throws -> Int
    /// The rows of `entity` with these IDs that exist, in any order.
    func rows(entity: EntityDescription, ids: [Int64]) throws -> [StoreRow]
    /// Throws what a save deleting the rows `ids` of `entity` would refuse for the links
    /// the store holds: a row that points at one through a deny rule, or through a link of
    /// an entity the schema lacks (``ForeignLink``). Reads only.
    func refuseDeletion(entity: EntityDescription, ids: [Int64]) throws
    /// Applies `changes` and the rows of `effects` in one transaction; returns
    /// the new version of every updated row, the rows its row deletions removed,
    /// and the rows the transaction's completion of delete rules removed or
    /// cleared (members that reached a deleted object's to-many relationship
    /// after the context read it).
    /// Throws ``StoreConflict`` when a row's version is not the expected one,
    /// and writes nothing then; the error of an insertion's `rows`, a deletion's `page` or
    /// a `willBatchDelete` hook as it is.
    func save(_ changes: StoreChanges, effects: SaveEffects) throws -> StoreSaveResult
    /// The findings of a full check of the store's file; empty when it is sound.
    func checkIntegrity() throws -> [String]
    /// The counts of the tally `name` of `entity` (``ManagedObject/tallies``), by key.
    func tally(entity: EntityDescription, name: String) throws -> [TallyCount]
    /// Counts every tally again from the rows; with `fix`, replaces those that were wrong.
    func recountTallies(fix: Bool) throws -> [TallyDiscrepancy]
    /// Compares every search index with the rows; with `fix`, makes a wrong one again.
    func checkSearchIndex(fix: Bool) throws -> [SearchIndexDiscrepancy]
    /// A number that changes whenever another connection commits.
    func externalChangeToken() throws -> Int64
    /// Makes the next commit of ``save(_:effects:)`` fail
    /// with `error` after every write ran and before it commits: nothing is written. A
    /// test hook (``PersistentContainer/failNextCommit(with:)``).
    func failNextCommit(with error: any Error & Sendable)
    /// Closes the store's connections (ending its session, if it has one); the store is not
    /// used afterwards.
    func close()
    /// Opens a session (``PersistentContainer/openSession(label:)``); `nil` when the store
    /// has none (the default, SQLite's).
    func openSession(label: String) throws -> StoreSession?
    /// The session ``openSession(label:)`` opened, alive or lost; `nil` after it ended cleanly.
    var currentSession: StoreSession? { get }
    /// Every session the store records (``PersistentContainer/sessions()``).
    func sessions() throws -> [SessionInfo]
    /// Reaps the session `id` (``PersistentContainer/reap(session:cleanup:)``).
    func reap(session id: Int64, cleanup: () throws -> Void) throws -> ReapOutcome
    /// Starts delivering announcements (``SaveEffects/announce(_:payload:)``) of committed
    /// saves to `deliver`, and the re-read marker when some may have been missed; called once,
    /// at a container's first ``PersistentContainer/announcements()``. Returns once the
    /// announcements of saves that commit from then on are delivered (or, when that could not
    /// be set up, after delivering the interruption marker, which the re-read marker follows
    /// once it is). Whenever other containers' announcements cannot be heard, it delivers the
    /// interruption marker (``Announcement/interruption``), and the re-read marker once they
    /// can again. `deliver` must not block. Ends at ``close()``.
    func startAnnouncements(_ deliver: @escaping @Sendable (Announcement) -> Void)
    /// Claims rows (``ManagedObjectContext/claimRows(_:limit:update:)``): in one transaction,
    /// selects the rows `fetch` matches, in its order and limit (on PostgreSQL, `FOR UPDATE
    /// SKIP LOCKED`: rows another transaction holds are passed over), gets the changes of
    /// each from `update` (slots and values, in the rows' order), writes them with `_version`
    /// + 1, and commits. Returns the rows as written.
    func claimRows(_ fetch: StoreFetch, update: ([StoreRow]) -> [RowUpdate]) throws -> [StoreRow]
    /// Runs `body` with a reader of every row that sees one state of the store and keeps
    /// every other writer out until it returns (``PersistentContainer/copyAll(to:progress:beforeCommit:afterCommit:)``).
    func holdingStill<T>(_ body: (any StoreRowSource) throws -> T) throws -> T
    /// Writes the rows of `entities` that `source` reads, with their IDs and versions, into
    /// this store's empty tables in one transaction; sets each entity's next ID to at least
    /// the source's; keeps the tallies exact; calls `progress` with the rows of each page
    /// written and `beforeCommit` before it commits. Writes nothing if anything throws.
    func load(
        _ entities: [EntityDescription], from source: any StoreRowSource, progress: (Int) -> Void,
        beforeCommit: () throws -> Void
    ) throws
    /// The names of the store's tables, its own bookkeeping tables included.
    func tableNames() throws -> [String]
}

/// The change of one row of ``PersistentStore/claimRows(_:update:)``: its values at these slots.
package struct RowUpdate {
    package var slots: [Int]
    package var values: [StoreValue]

    package init(slots: [Int], values: [StoreValue]) {
        self.slots = slots
        self.values = values
    }

    /// `row` with this update applied, at `version`.
    package func applied(to row: StoreRow, version: Int64) -> StoreRow {
        var values = row.values
        for (slot, value) in zip(slots, self.values) { values[slot] = value }
        return StoreRow(id: row.id, version: version, values: values)
    }
}

/// A rule of the store's schema applied once, in order, by ID.
///
/// The schema itself is created and extended (new tables, columns and
/// indexes) from the entity declarations; migrations do what cannot be
/// inferred: rename or drop columns, transform values.
///
/// ```swift
/// let migrations = [
///     Migration("2024-06-rename-body") { db in
///         try db.execute("ALTER TABLE Note RENAME COLUMN text TO body")
///     },
/// ]
/// ```
///
/// Migrations run before the schema is extended, in one transaction with
/// it, unless declared to run after it (``Phase/afterSchema``: to fill a new
/// entity's table from old columns). A new store records them as applied
/// without running them.
///
/// A store that records a migration its program does not declare was written by a
/// newer program: opening it fails with ``PersistenceError/Code/newerStore`` and
/// changes nothing.
public struct Migration: Sendable {
    /// When a migration runs, relative to the extension of the schema.
    public enum Phase: Sendable {
        /// Before new tables, columns and indexes are made: to rename or reshape what is there.
        case beforeSchema
        /// After them, in the same transaction: to move values into new tables.
        case afterSchema
    }

    /// What names the migration in the store's record of applied ones: never reuse it.
    public let id: String
    /// When it runs.
    public let phase: Phase
    package let body: @Sendable (any MigrationDatabase) throws -> Void

    /// A migration named `id` that runs `body` on the store's database, in `phase`.
    public init(
        _ id: String, phase: Phase = .beforeSchema, _ body: @escaping @Sendable (any MigrationDatabase) throws -> Void
    ) {
        self.id = id
        self.phase = phase
        self.body = body
    }
}

/// The SQL a store speaks.
public enum SQLDialect: Sendable {
    /// SQLite's.
    case sqlite
    /// PostgreSQL's.
    case postgresql
}

/// The database as a ``Migration`` sees it.
///
/// A migration states its SQL for the store it runs on: most statements read the same on
/// both (`ALTER TABLE "Journal" RENAME COLUMN "text" TO "body"`); where they differ, it
/// chooses by ``dialect``. Quote table and column names: PostgreSQL folds unquoted names
/// to lower case, and the store's tables are named as their entities are.
/// On PostgreSQL a migration's statements run in the open's transaction (DDL too): a
/// migration that fails leaves the store as it was. A row a migration inserts there names
/// its `"id"` (the store hands IDs out from its own sequence, not the column's), and each
/// ``execute(_:)`` runs one statement.
public protocol MigrationDatabase {
    /// The SQL the store speaks.
    var dialect: SQLDialect { get }
    /// Runs SQL statements.
    func execute(_ sql: String) throws
    /// Whether a table exists.
    func tableExists(_ name: String) throws -> Bool
    /// The column names of a table.
    func columns(of table: String) throws -> [String]
    /// The first column of the first row `sql` selects, as an integer; `nil` when it
    /// selects no row or a `NULL` (to page through a table: `SELECT MAX(id) FROM …`).
    func integer(_ sql: String) throws -> Int64?
}

/// A snapshot of one row, as batch-delete hooks receive it.
public struct ObjectSnapshot: Sendable {
    /// The row's ID.
    public let objectID: ManagedObjectID
    /// The row's entity.
    let entity: EntityDescription
    let values: [StoreValue]

    package init(entity: EntityDescription, row: StoreRow) {
        self.init(entity: entity, id: row.id, values: row.values)
    }

    init(entity: EntityDescription, id: Int64, values: [StoreValue]) {
        self.entity = entity
        objectID = ManagedObjectID(entityName: entity.name, rowID: id)
        self.values = values
    }

    /// The stored value of the property named `name`.
    subscript(name: String) -> StoreValue? {
        entity.property(named: name)?.slot.map { values[$0] }
    }

    /// The value of an attribute, by key path.
    @inlinable
    public func value<Root: ManagedObject, Value: AttributeValue>(for keyPath: KeyPath<Root, Value>) -> Value? {
        // Inlined, so that the caller's module specializes it for `Value` (a hook reads a
        // dozen fields a row: unspecialized, each read looked up `Value?`'s type at run time).
        storedValue(for: keyPath).flatMap { Value(storeValue: $0) }
    }

    /// The stored value of the property `keyPath` names; `nil` when it names none.
    @usableFromInline
    func storedValue(for keyPath: AnyKeyPath) -> StoreValue? {
        entity.slot(for: keyPath).map { values[$0] }
    }

    /// The ID of the destination of a to-one relationship, by key path.
    public func objectID<Root: ManagedObject, Destination: ManagedObject>(
        for keyPath: KeyPath<Root, Destination?>
    ) -> ManagedObjectID? {
        guard let slot = entity.slot(for: keyPath), case .integer(let row) = values[slot] else { return nil }
        return ManagedObjectID(entityName: Destination.entityName, rowID: row)
    }
}

/// The entities of a store and the migrations that bring old stores to them.
public struct Schema: Sendable {
    /// The entities, in the order of the types given.
    package let entities: [EntityDescription]
    /// The migrations, in the order they run.
    package let migrations: [Migration]
    let entityByName: [String: EntityDescription]
    /// The to-one relationships with an `onDestinationDelete` rule, by the name of their
    /// destination entity.
    let incomingLinks: [String: [IncomingLink]]

    /// A to-one relationship whose own rule says what deleting its destination does to
    /// the objects that point at it (``ToOne``'s `onDestinationDelete`).
    package struct IncomingLink {
        /// The entity that holds the relationship: the objects the rule reaches.
        package let source: EntityDescription
        /// The to-one relationship.
        package let property: PropertyDescription
        /// What deleting the destination does to them.
        package let rule: DeleteRule
    }

    /// Builds the schema of `types`, checking every relationship.
    ///
    /// - Throws: ``PersistenceError/Code/misuse`` naming the property when a
    ///   relationship points at an entity that is not in the schema or its
    ///   inverse is not a to-one relationship, when a to-one relationship has both
    ///   an inverse and an `onDestinationDelete` rule, when two types have the same
    ///   entity name in any case (the stores' names ignore case), when an entity's name
    ///   begins with `_`, `sqlite_` or `pg_` or is that of another entity's index, or when
    ///   a ``ManagedObject/compositeIndexes`` names what is not a stored property.
    public init(_ types: [ManagedObject.Type], migrations: [Migration] = []) throws {
        entities = types.map { $0.entityDescription }
        self.migrations = migrations
        var byName: [String: EntityDescription] = [:]
        // SQLite's names, and PostgreSQL's unless quoted, ignore case: one name for the store
        // is one name whatever its case. A table shares its names with the indexes.
        var byFoldedName: [String: EntityDescription] = [:]
        for entity in entities {
            if let other = byFoldedName[entity.name.lowercased()],
                ObjectIdentifier(other.objectType) != ObjectIdentifier(entity.objectType)
            {
                let names =
                    other.name == entity.name
                    ? "named \(entity.name) (\(other.objectType) and \(entity.objectType))"
                    : "named \(other.name) and \(entity.name) (\(other.objectType) and \(entity.objectType)), one "
                        + "name for the store, which ignores case"
                throw PersistenceError(
                    .misuse, "Two entities of the schema are \(names); give one another `entityName`")
            }
            let folded = entity.name.lowercased()
            if let prefix = Self.reservedPrefixes.first(where: { folded.hasPrefix($0) }) {
                throw PersistenceError(
                    .misuse,
                    "The entity \(entity.objectType) cannot be named \(entity.name): names that begin with "
                        + "'\(prefix)' (in any case) are the store's own; give it another `entityName`")
            }
            byName[entity.name] = entity
            byFoldedName[folded] = entity
        }
        entityByName = byName
        for entity in entities {
            for index in try entity.indexNames() {
                guard let table = byFoldedName[index.lowercased()] else { continue }
                throw PersistenceError(
                    .misuse,
                    "The entity \(table.objectType) cannot be named \(table.name): the store names an index of "
                        + "\(entity.name) so; give it another `entityName`")
            }
        }
        var inverses: Set<String> = []
        for entity in entities {
            for property in entity.properties {
                switch property.kind {
                case .attribute: break
                case .toOne(let destination):
                    guard entityByName[destination] != nil else {
                        throw PersistenceError(
                            .misuse,
                            "\(entity.name).\(property.name) points at \(destination), which is not in the schema")
                    }
                case .toMany(let destination):
                    guard entityByName[destination] != nil else {
                        throw PersistenceError(
                            .misuse,
                            "\(entity.name).\(property.name) points at \(destination), which is not in the schema")
                    }
                    inverses.insert("\(destination).\(try entity.inverse(of: property).name)")
                }
            }
        }
        var links: [String: [IncomingLink]] = [:]
        for entity in entities {
            for property in entity.properties {
                guard case .toOne(let destination) = property.kind, let rule = property.destinationDeleteRule else {
                    continue
                }
                guard !inverses.contains("\(entity.name).\(property.name)") else {
                    throw PersistenceError(
                        .misuse,
                        "\(entity.name).\(property.name) has an inverse to-many in \(destination), whose delete rule "
                            + "says what deleting \(destination) does to it: remove its onDestinationDelete rule")
                }
                links[destination, default: []].append(IncomingLink(source: entity, property: property, rule: rule))
            }
        }
        incomingLinks = links
    }

    package func entity(named name: String) -> EntityDescription? { entityByName[name] }

    /// The beginnings of the names of the store's own tables (`_persistence_…`) and of
    /// SQLite's and PostgreSQL's, which no entity's name may have, in any case.
    static let reservedPrefixes = ["_", "sqlite_", "pg_"]

    /// The to-one relationships whose `onDestinationDelete` rule applies when an object of
    /// `entity` is deleted.
    package func incomingLinks(into entity: EntityDescription) -> [IncomingLink] { incomingLinks[entity.name] ?? [] }

    /// The to-many relationships, anywhere in the schema, whose members are
    /// of `entity` — that is, the relationships for which deleting an object
    /// of another entity may reach `entity`.
    func toManyRelationships(into entity: EntityDescription) -> [(
        owner: EntityDescription, property: PropertyDescription
    )] {
        var result: [(EntityDescription, PropertyDescription)] = []
        for owner in entities {
            for p in owner.properties {
                if case .toMany(let destination) = p.kind, destination == entity.name { result.append((owner, p)) }
            }
        }
        return result
    }
}
