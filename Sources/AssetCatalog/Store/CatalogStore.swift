import CFileSync
public import Foundation
import Persistence

#if canImport(Glibc)
    import Glibc
#endif

/// The one row that says which catalog a store holds: compared with `catalog.json` at every
/// open, so that a directory is never used with another catalog's store (two directories on
/// one PostgreSQL schema, or a directory pointed at the wrong schema).
///
/// A PostgreSQL catalog gets it from `assetcat init --store`; a SQLite catalog at its first
/// writable open.
final class CatalogInfo: ManagedObject {
    /// Always 1: its uniqueness makes a second row impossible, also when two `init`s race.
    @Attribute(.unique) var slot = 1
    /// The catalog's ID (`catalog.json`'s `id`).
    @Attribute var catalogID = ""
    /// When the catalog was made.
    @Attribute var created = Date(timeIntervalSince1970: 0)
    /// Set on a PostgreSQL store whose catalog `migrate-store --to sqlite` moved back into the
    /// `catalog.sqlite` of this directory: opens through the store are refused, saying so.
    @Attribute var movedTo: String?
}

/// Where a catalog's records are kept when they are not in `catalog.sqlite`: a PostgreSQL
/// schema, named by a `postgresql://` URL.
///
/// The URL is what this host connects with: it may carry a password (from this host's own
/// file, `PerHostStore`); ``redacted`` never does, and is what messages and
/// `catalog.json` show.
public struct CatalogStoreLocation: Sendable, CustomStringConvertible {
    /// The URL this host connects with (it may hold a password).
    let url: URL
    /// The URL without its password.
    public let redacted: URL
    /// The PostgreSQL schema that holds the catalog's tables (`public` unless the URL says).
    public let schema: String
    /// `host:port/database`, for messages.
    public let server: String
    /// Whether ``url`` carries a password.
    let hasPassword: Bool

    /// Reads a `postgresql://` (or `postgres://`) URL.
    ///
    /// - Throws: ``CatalogError/Code/invalidArgument`` for anything else.
    public init(_ text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        guard let components = URLComponents(string: text),
            ["postgresql", "postgres"].contains(components.scheme?.lowercased() ?? ""), let url = components.url
        else {
            throw CatalogError(
                .invalidArgument,
                "A store is named by a URL of the form postgresql://USER@HOST:PORT/DATABASE?schema=NAME; "
                    + "got something else")
        }
        var safe = components
        safe.password = nil
        self.url = url
        redacted = safe.url ?? URL(string: "postgresql://")!
        hasPassword = components.password != nil
        schema = components.queryItems?.first { $0.name == "schema" }?.value ?? "public"
        let host = components.host ?? environment["PGHOST"] ?? "127.0.0.1"
        let port = components.port ?? environment["PGPORT"].flatMap(Int.init) ?? 5432
        let user = components.user ?? environment["PGUSER"] ?? "postgres"
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        server = "\(host):\(port)/\(path.isEmpty ? (environment["PGDATABASE"] ?? user) : path)"
    }

    /// "the store at URL (schema s)", for messages.
    public var description: String { "the store at \(redacted.absoluteString) (schema \(schema))" }

    /// This location without its password.
    var withoutPassword: CatalogStoreLocation {
        get throws { try CatalogStoreLocation(redacted.absoluteString) }
    }

    /// The environment variable that names, for this host, the store of every catalog whose
    /// `catalog.json` names one.
    public static let environmentVariable = "ASSETCAT_STORE"

    /// The store this host uses for the catalog `identity` names (which names a store):
    /// `ASSETCAT_STORE`, else this host's file for the catalog (``PerHostStore``), else
    /// `catalog.json`'s.
    ///
    /// - Throws: ``CatalogError/Code/invalidArgument`` when `ASSETCAT_STORE` carries a
    ///   password (passwords come from this host's own file, `PGPASSWORD` or `~/.pgpass`)
    ///   or is not a store's URL; ``CatalogError/Code/store`` when this host's file cannot
    ///   be used.
    static func resolve(for identity: CatalogIdentity, environment: [String: String]) throws -> CatalogStoreLocation? {
        guard let recorded = identity.store else { return nil }
        if let named = environment[environmentVariable], !named.isEmpty {
            let location = try CatalogStoreLocation(named, environment: environment)
            guard !location.hasPassword else {
                throw CatalogError(
                    .invalidArgument,
                    "\(environmentVariable) must not carry a password (\(location.redacted.absoluteString)): give it "
                        + "through PGPASSWORD or ~/.pgpass, or `assetcat init --join --store URL` for this host")
            }
            return location
        }
        if let own = try PerHostStore.read(for: identity.id, environment: environment) {
            return try CatalogStoreLocation(own, environment: environment)
        }
        return try CatalogStoreLocation(recorded, environment: environment)
    }
}

/// This host's own record of where a catalog's store is:
/// `$XDG_CONFIG_HOME/assetcat/catalogs/<catalog-id>.url` (default `~/.config`), mode 0600,
/// written by `assetcat init --join --store URL` (and by `init --store` when its URL
/// carried a password). It may hold a password; it is never in the catalog's directory.
enum PerHostStore {
    /// The file for catalog `id`.
    static func file(for id: UUID, environment: [String: String]) -> URL {
        let config =
            environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.config")
        return URL(fileURLWithPath: config).appending(path: "assetcat/catalogs/\(id.uuidString.lowercased()).url")
    }

    /// The URL this host recorded for catalog `id`, or `nil`. The file is opened once, then
    /// checked (`fstat`): a plain file only its owner may read.
    static func read(for id: UUID, environment: [String: String]) throws -> String? {
        let path = file(for: id, environment: environment).path
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw CatalogError(.store, "Could not read \(path): \(ContentStore.errnoText())", path: path)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= 65_536 else {
            throw CatalogError(.store, "\(path) is not a store's URL (not a small plain file)", path: path)
        }
        guard info.st_mode & 0o077 == 0 else {
            throw CatalogError(
                .store, "\(path) may be read by others; make it private (chmod 600 \(path))", path: path)
        }
        var bytes: [UInt8] = []
        try ContentStore.readChunks(fd, path: path, size: Int64(info.st_size)) { bytes += $0 }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    /// Records `url` as this host's store for catalog `id`: a temporary file made 0600,
    /// synced, renamed over the old one. Returns its path.
    @discardableResult
    static func write(_ url: URL, for id: UUID, environment: [String: String]) throws -> String {
        let target = file(for: id, environment: environment)
        let folder = target.deletingLastPathComponent().path
        do {
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CatalogError(.io, "Could not make \(folder): \(error.localizedDescription)", path: folder)
        }
        let temporary = folder + "/.\(target.lastPathComponent).new-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw CatalogError(.io, "Could not write \(temporary): \(ContentStore.errnoText())", path: temporary)
        }
        do {
            defer { close(fd) }
            guard fchmod(fd, 0o600) == 0 else {
                throw CatalogError(.io, "Could not write \(temporary): \(ContentStore.errnoText())", path: temporary)
            }
            try Data((url.absoluteString + "\n").utf8).withUnsafeBytes {
                try ContentStore.writeAll(fd, $0, path: temporary)
            }
            guard fsync(fd) == 0, rename(temporary, target.path) == 0 else {
                throw CatalogError(
                    .io, "Could not write \(target.path): \(ContentStore.errnoText())", path: target.path)
            }
        } catch {
            unlink(temporary)
            throw error
        }
        try ContentStore.syncDirectory(folder)
        return target.path
    }
}

/// The host a process runs on, as catalogs shared between hosts name it:
/// `ASSETCAT_HOST_ID`, else `/etc/machine-id`, else the host name.
enum HostIdentity {
    static func current(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let named = environment["ASSETCAT_HOST_ID"], !named.isEmpty { return named }
        if let machine = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines), !machine.isEmpty
        {
            return machine
        }
        return ProcessInfo.processInfo.hostName
    }

    /// A session's label: the host, a space, the process ID.
    static func label(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        "\(current(environment: environment)) \(getpid())"
    }

    /// The host of a session's label.
    static func host(ofLabel label: String) -> String {
        guard let space = label.lastIndex(of: " ") else { return label }
        return String(label[..<space])
    }
}

/// The `catalog.sqlite` of a catalog whose records are in PostgreSQL: a SQLite file that
/// every version of assetcat that knows only SQLite refuses to open and never moves aside
/// or replaces. (Without it, such a version would find `objects/` without a store and offer
/// `recover`, which would start a second store.)
///
/// - Its schema is there (an empty sequence table), so it is not a lost or damaged store.
/// - Its one applied migration, ``marker``, is one no SQLite-only version knows: versions
///   that refuse stores of a newer program say "written by a newer version of assetcat;
///   upgrade to open it. Nothing was changed" before they write anything.
/// - Its header's write version is 3, which SQLite opens read-only: versions before that
///   refusal (release 0.1.0) fail at their first write (making it WAL) with
///   `SQLITE_READONLY`, an error they report and never quarantine for.
enum StoreStub {
    /// The migration the stub records as applied.
    static let marker = "assetcat-store-is-postgresql"

    /// Writes the stub as `root/catalog.sqlite`, unless a file is there: made under a
    /// temporary name, synced, renamed without replacing, the folder synced.
    static func write(in root: URL) throws {
        let target = Catalog.storeURL(in: root).path
        let temporary = root.appending(path: ".catalog.sqlite.new-\(getpid())").path
        unlink(temporary)
        do {
            try SQLiteMarkerStore.write(to: temporary, recording: marker)
            guard cfilesync_rename_noreplace(temporary, target) == 0 || errno == EEXIST else {
                throw CatalogError(.io, "Could not write \(target): \(ContentStore.errnoText())", path: target)
            }
        } catch let error as CatalogError {
            unlink(temporary)
            throw error
        } catch {
            unlink(temporary)
            throw CatalogError(.io, "Could not write \(target): \(error)", path: target, cause: error)
        }
        unlink(temporary)
        try ContentStore.syncDirectory(root.path)
    }

    /// Whether `error`, from opening a SQLite store, is the refusal of a stub.
    static func isStub(_ error: Persistence.PersistenceError) -> Bool {
        error.code == .newerStore && error.message.contains("'\(marker)'")
    }
}
