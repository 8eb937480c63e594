public import Foundation

/// An error of the persistence layer: a save that was refused, a store that
/// could not be opened, a misuse of the API.
///
/// The ``message`` names the object (`"Note 42"`) or the store path and says
/// what happened; ``code`` lets a program react without parsing the message.
/// A save that fails for several reasons at once (validation) lists every
/// reason in ``underlyingErrors``.
public struct PersistenceError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. Extensible: match on the static members.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        public var description: String { name }

        /// One or more objects refused the save (`validateFor…`, a deny rule).
        public static let validation = Code(name: "validation")
        /// The store rejected the write (unique or not-null constraint).
        public static let constraint = Code(name: "constraint")
        /// The row changed in the store since the object was read; the merge
        /// policy refused to resolve it.
        public static let conflict = Code(name: "conflict")
        /// `willSave` kept changing objects through observed setters.
        public static let willSaveLoop = Code(name: "willSaveLoop")
        /// The store could not be opened, read or written.
        public static let io = Code(name: "io")
        /// The store file is not a usable database; see ``PersistentContainer/storeWasResetOnLoad``.
        public static let storeUnreadable = Code(name: "storeUnreadable")
        /// A read or write of an open store found its file damaged (a page that is not what
        /// SQLite wrote). Nothing was written and nothing is moved: the store stays where it
        /// is for ``PersistentContainer/checkIntegrity()`` and a restore from a backup.
        public static let storeDamaged = Code(name: "storeDamaged")
        /// The store was opened read-only (``PersistentContainer/Options/readOnly``), or its
        /// file cannot be written: nothing was changed.
        public static let readOnly = Code(name: "readOnly")
        /// The file system holding the store has no space left for what the store must
        /// write (SQLite's "database or disk is full", from an open whose log cannot start,
        /// or a save): nothing was changed. A read-only open still reads the store.
        public static let diskFull = Code(name: "diskFull")
        /// The store could not be migrated to the current schema.
        public static let migration = Code(name: "migration")
        /// The store records a ``Migration`` this program does not declare: a newer version
        /// of the program wrote it. Nothing was changed or moved; open it with that version.
        public static let newerStore = Code(name: "newerStore")
        /// No object with that ID exists.
        public static let notFound = Code(name: "notFound")
        /// The API was used in a way it does not allow.
        public static let misuse = Code(name: "misuse")
        /// The store's engine cannot do this (yet): the message names what. Nothing was
        /// changed.
        public static let unsupported = Code(name: "unsupported")
        /// This process's session with the store (``StoreSession``) has ended — another
        /// process reaped it, or its connection was lost — so its container saves nothing
        /// more: nothing of the save was committed. Open the store again.
        public static let sessionEnded = Code(name: "sessionEnded")
    }

    /// What kind of failure this is.
    public var code: Code
    /// One line naming the object or path, saying what happened.
    public var message: String
    /// The objects the error is about (empty when it is about the store).
    public var objectIDs: [ManagedObjectID]
    /// For a save refused for several reasons: each of them.
    public var underlyingErrors: [PersistenceError]
    /// The error that caused this one (a SQLite error, a thrown validation error).
    public var cause: (any Error)?
    /// For a store found unusable when it was opened: where it was moved, and why.
    public var quarantine: Quarantine?

    /// Where an unusable store was moved, and why.
    public struct Quarantine: Sendable, Hashable {
        /// The folder of `quarantine/` that holds the store file and its `-wal` and `-shm`.
        public var folder: URL
        /// What was wrong with it, in a few words (`nil` when an earlier open moved it).
        public var reason: String?

        init(folder: URL, reason: String?) {
            self.folder = folder
            self.reason = reason
        }
    }

    package init(
        _ code: Code, _ message: String, objectIDs: [ManagedObjectID] = [],
        underlyingErrors: [PersistenceError] = [], cause: (any Error)? = nil
    ) {
        self.code = code
        self.message = message
        self.objectIDs = objectIDs
        self.underlyingErrors = underlyingErrors
        self.cause = cause
    }

    public var description: String { message }

    /// A row or object this save writes points, through `property`, at one it deletes.
    static func pointsAtDeleted(_ id: ManagedObjectID, _ property: PropertyDescription, _ target: ManagedObjectID)
        -> PersistenceError
    {
        PersistenceError(
            .validation, "\(id).\(property.name) points at \(target), which is being deleted", objectIDs: [id])
    }

    /// `target` cannot be deleted: `member` points at it through `property`, a to-one
    /// relationship whose `onDestinationDelete` rule is deny.
    package static func linkDenial(
        _ target: ManagedObjectID, _ member: ManagedObjectID, _ property: PropertyDescription
    )
        -> PersistenceError
    {
        PersistenceError(
            .validation,
            "\(target) cannot be deleted: \(member) points at it through \(member.entityName).\(property.name) "
                + "(deny rule)", objectIDs: [target])
    }

    /// The row `id` of `entity` cannot be deleted: its `property` has members and its delete
    /// rule is deny. Thrown by contexts and stores alike.
    static func denial(_ entity: EntityDescription, _ id: Int64, _ property: PropertyDescription) -> PersistenceError {
        let objectID = ManagedObjectID(entityName: entity.name, rowID: id)
        return PersistenceError(
            .validation, "\(objectID) cannot be deleted: its relationship '\(property.name)' is not empty (deny rule)",
            objectIDs: [objectID])
    }
}
