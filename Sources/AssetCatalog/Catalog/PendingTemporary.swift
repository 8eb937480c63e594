import Foundation
import Logging
import Persistence

#if canImport(Glibc)
    import Glibc
#endif

/// A hidden file or folder that a command is about to create outside the catalog (a
/// directory bag under construction, an archive bundle on a file system without unnamed
/// files, a replaced bundle on its way out), or a missing folder above an export's target
/// that it is about to create (``createdFolderRow(_:)``), recorded before it exists.
///
/// The command deletes the row once the path is gone (published under its final name, or
/// removed), or, for a folder it created, once its bundle is published in it or the folder
/// removed. Should its process die first, the next sweep of any process removes the path
/// and the row, once the row's ``owner`` is gone (``OwnerLiveness``) — a created folder
/// only if it is empty, after the hidden files inside it: a killed export leaves
/// nothing at, beside or above its target after the next command. On a catalog that several hosts share,
/// only a process of the row's ``host`` does: the path is on that host's file system.
final class PendingTemporary: ManagedObject {
    /// The process that made the path (``OwnerLiveness/owner``).
    @Attribute var owner = ""
    /// The host of that process (``HostIdentity``); rows made before hosts were recorded get
    /// the host of the first process that opened the catalog since (``hostOfEarlierRows``).
    @Attribute var host = ""
    /// The absolute path.
    @Attribute var path = ""
    @Attribute var created = Date(timeIntervalSince1970: 0)

    override func awakeFromInsert() {
        setPrimitiveValue(Date(), for: \.created)
    }

    /// Gives the rows made before ``host`` existed the host of the process that opens the
    /// catalog first since then. They were made when a catalog was used from one host at a
    /// time (a SQLite catalog, or one in PostgreSQL before hosts shared it), most likely by
    /// this one; without a host, no process of a shared catalog would ever remove them.
    static func hostOfEarlierRows(_ host: @escaping @Sendable () -> String = { HostIdentity.current() }) -> Migration {
        Migration("2026-11-pending-temporary-host", phase: .afterSchema) { db in
            let literal = "'" + host().replacingOccurrences(of: "'", with: "''") + "'"
            try db.execute(#"UPDATE "PendingTemporary" SET "host" = \#(literal) WHERE "host" = ''"#)
        }
    }

    /// For a bundle moved aside to be replaced (`/…/.name.replaced-N`), the path it had.
    static func replacedOriginal(_ path: String) -> String? {
        guard isTemporaryName(path) else { return nil }
        let (folder, name) = split(path)
        guard let dash = name.lastIndex(of: "-"), name[..<dash].hasSuffix(".replaced") else { return nil }
        let original = name.dropFirst().prefix(upTo: dash).dropLast(".replaced".count)
        guard !original.isEmpty else { return nil }
        return folder + "/" + original
    }

    /// A path's folder and last component, split at its last `/` by bytes (NSString's path
    /// functions take `/` followed by a combining mark for no `/`).
    private static func split(_ path: String) -> (folder: String, name: String) {
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) ?? path.utf8.startIndex
        return (String(Substring(path.utf8[..<slash])), String(Substring(path.utf8[path.utf8.index(after: slash)...])))
    }

    /// The row's ``path`` for `folder`, an absolute path, which an export is about to
    /// create above its bundle: `folder` followed by `/` (a name no writer's temporary has,
    /// which versions before it leave alone). Carried out only by `rmdir(2)`: never
    /// anything that is in it.
    static func createdFolderRow(_ folder: String) -> String { folder + "/" }

    /// The folder a row of ``createdFolderRow(_:)`` names; `nil` for any other row.
    static func createdFolder(_ path: String) -> String? {
        let bytes = path.utf8
        guard bytes.count > 2, bytes.first == UInt8(ascii: "/"), bytes.last == UInt8(ascii: "/"),
            bytes.dropLast().last != UInt8(ascii: "/")
        else { return nil }
        return String(Substring(bytes.dropLast()))
    }

    /// Whether `path` is one that a writer makes (`/…/.name.partial-N`, `.replaced-N`,
    /// `.replacing-N`): a row whose path is not is never carried out.
    static func isTemporaryName(_ path: String) -> Bool {
        guard path.hasPrefix("/") else { return false }
        let name = split(path).name
        guard name.hasPrefix("."), let dash = name.lastIndex(of: "-") else { return false }
        let number = name[name.index(after: dash)...]
        guard !number.isEmpty, number.allSatisfy(\.isASCII), UInt32(number) != nil else { return false }
        let head = name[..<dash]
        return [".partial", ".replaced", ".replacing"].contains { head.hasSuffix($0) }
    }
}

extension Catalog {
    /// Records `path` as a temporary of this process (``PendingTemporary``), committed
    /// before the caller creates it; returns the row's ID.
    func recordTemporary(_ path: String) throws -> Int64 {
        try recordTemporaries([path])[0]
    }

    /// Records `paths` as temporaries of this process, in one transaction; returns the
    /// rows' IDs, in the order of `paths`.
    func recordTemporaries(_ paths: [String]) throws -> [Int64] {
        try storeErrors {
            try withContext { context in
                let rows = paths.map { path in
                    let row = PendingTemporary(context: context)
                    row.owner = runtime.liveness.owner
                    row.host = runtime.liveness.sharedHost ?? HostIdentity.current()
                    row.path = path
                    return row
                }
                try context.save()
                return rows.map(\.objectID.rowID)
            }
        }
    }

    /// Forgets temporaries whose paths are gone (published or removed).
    func forgetTemporaries(_ rows: [Int64]) {
        guard !rows.isEmpty else { return }
        do {
            try storeErrors {
                try withContext { context in
                    let ids = rows.map { ManagedObjectID(entityName: PendingTemporary.entityName, rowID: $0) }
                    _ = try context.batchDelete(FetchRequest<PendingTemporary>(predicate: .objectIDs(ids)))
                }
            }
        } catch {
            runtime.logger.warning("the record of a temporary file stays until the next sweep: \(error)")
        }
    }
}

extension CatalogRuntime {
    /// Removes the temporaries of processes that are gone, and their rows: on a catalog that
    /// several hosts share, only this host's (``OwnerLiveness/sharedHost``). Returns the
    /// first error met (the other rows are still carried out).
    func removeAbandonedTemporaries(in context: ManagedObjectContext) throws -> (any Error)? {
        try removeAbandonedTemporaries(in: context, FetchRequest<PendingTemporary>())
    }

    /// ``removeAbandonedTemporaries(in:)`` for the rows of `owner`, gone, only: a reaper's.
    func removeAbandonedTemporaries(of owner: String) throws -> (any Error)? {
        guard let container else { return nil }
        let context = container.newBackgroundContext(name: "reaper")
        context[CatalogRuntime.self] = self
        return try context.performAndWait {
            try removeAbandonedTemporaries(in: context, FetchRequest<PendingTemporary>(predicate: \.owner == owner))
        }
    }

    private func removeAbandonedTemporaries(
        in context: ManagedObjectContext, _ request: FetchRequest<PendingTemporary>
    ) throws -> (any Error)? {
        var firstError: (any Error)?
        let host = liveness.sharedHost
        // The folders exports created go last, the innermost first: the hidden files of a
        // killed export are inside them, and each is removed only once it is empty.
        let rows = try context.fetch(request)
        let folders = rows.filter { PendingTemporary.createdFolder($0.path) != nil }
            .sorted { $0.path.utf8.count > $1.path.utf8.count }
        for row in rows.filter({ PendingTemporary.createdFolder($0.path) == nil }) + folders
        where host == nil || row.host == host {
            guard !liveness.isAlive(row.owner) else { continue }
            if let folder = PendingTemporary.createdFolder(row.path) {
                // Only if empty: a bundle published in it, or anything put there since, keeps it.
                let code = rmdir(folder) == 0 ? 0 : errno
                if ![0, ENOENT, ENOTEMPTY, EEXIST, ENOTDIR].contains(code) {
                    let reason = String(cString: strerror(code))
                    firstError = firstError ?? CatalogError(.io, "Could not remove \(folder): \(reason)", path: folder)
                    continue  // stays recorded: the next sweep tries again
                }
            } else if PendingTemporary.isTemporaryName(row.path) {
                var info = stat()
                do {
                    if lstat(row.path, &info) != 0 {
                        // Gone already: published, or removed by its process.
                    } else if let original = PendingTemporary.replacedOriginal(row.path), lstat(original, &info) != 0,
                        errno == ENOENT
                    {
                        // A bundle moved aside to be replaced, whose replacement never took its
                        // place (killed between the two renames): it goes back.
                        if rename(row.path, original) != 0 {
                            throw CatalogError(
                                .io, "Could not put \(row.path) back as \(original): \(ContentStore.errnoText())",
                                path: row.path)
                        }
                    } else {
                        try FileManager.default.removeItem(atPath: row.path)
                    }
                } catch {
                    firstError = firstError ?? error  // stays recorded: the next sweep tries again
                    continue
                }
            }
            context.delete(row)
            do {
                try context.save()
            } catch {
                context.rollback()
                firstError = firstError ?? error
            }
        }
        return firstError
    }
}
