import ArgumentParser
import AssetCatalog
import Foundation

@main
struct AssetCat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "assetcat",
        abstract: "A catalog of file resources: local files and members of archives.",
        discussion: """
            The catalog is chosen by --catalog PATH, else $ASSETCAT_CATALOG, else the nearest \
            .assetcat directory at or above the working directory.
            """,
        version: CatalogVersion.summary,
        subcommands: [
            Init.self, Recover.self, Add.self, List.self, Search.self, Show.self, Cat.self, Remove.self, Tag.self,
            Verify.self,
            CollectGarbage.self, Stats.self, Jobs.self, Export.self, Import.self, Validate.self, MigrateStore.self,
            Serve.self,
            ExitCodes.self,
        ]
    )
}

extension AssetCat {
    /// Parses and runs the command line as ArgumentParser does, refusing an unknown option
    /// with ``OptionCheck``'s message (``parseAndRun(_:)``); `rm`, `tag` and `verify` with
    /// more than ``BulkArguments/parsedWhole`` arguments are checked first, and their
    /// references past the first taken out (``BulkArguments``). Meanwhile the catalog's
    /// entities are described on another thread.
    static func main() async {
        Catalog.describeEntitiesInBackground()  // on the other core, while the arguments are read
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard OptionCheck.hasOptions(arguments) else {
            return await main(BulkArguments.take(from: arguments, valued: [:]))
        }
        // `rm`, `tag` and `verify` with many references are parsed once those past the first
        // are taken out, which needs the names of their options that take a value.
        guard BulkArguments.names(arguments) && arguments.count > BulkArguments.parsedWhole else {
            return await parseAndRun(arguments)
        }
        let root = refuseUnknownOption(in: arguments)
        let valued = root?.subcommands.filter { BulkArguments.commands.contains($0.key) }.mapValues(\.valued)
        await main(BulkArguments.take(from: arguments, valued: valued ?? [:]))
    }

    /// Parses and runs `arguments` as ArgumentParser's `main` does. A command line it reads as
    /// one of this tool's commands has no unknown option (ArgumentParser refuses one, or reads
    /// it as short flags that ask for help): it runs as read, without the check, which
    /// describes the commands typed (1.5 ms of a 20 ms command). The check runs when the parse
    /// fails or asks for help, so that its message is the one given.
    private static func parseAndRun(_ arguments: [String]) async {
        var command: any ParsableCommand
        do {
            command = try await asyncParseAsRoot(arguments)
        } catch  where message(for: error).isEmpty {
            // ArgumentParser has nothing to say: a command's `validate()` said why itself (an
            // `ExitCode` after `search`'s message about its query), and that is the one message.
            exit(withError: error)
        } catch {
            refuseUnknownOption(in: arguments)
            exit(withError: error)
        }
        if !isOwn(type(of: command)) { refuseUnknownOption(in: arguments) }
        do {
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }

    /// Exits with ``OptionCheck``'s message when `arguments` hold an option no command they
    /// name knows; returns the commands it read (`nil` when they cannot be described).
    @discardableResult
    private static func refuseUnknownOption(in arguments: [String]) -> OptionCheck.Command? {
        let root = OptionCheck.commands(of: AssetCat.self, ownOptions: RootOptions.self, naming: arguments)
        if let root, let message = OptionCheck.unknownOption(in: arguments, root: root) {
            Terminal.error(message)
            Foundation.exit(ExitCode.validationFailure.rawValue)
        }
        return root
    }

    /// Whether `command` is one of this tool's (not ArgumentParser's own `help`).
    private static func isOwn(_ command: any ParsableCommand.Type) -> Bool {
        func below(_ parent: any ParsableCommand.Type) -> Bool {
            parent.configuration.subcommands.contains { $0 == command || below($0) }
        }
        return command == AssetCat.self || below(AssetCat.self)
    }
}

/// The root command's own options (help and `--version`) without its subcommands, which
/// ``OptionCheck`` reads instead of describing every command.
struct RootOptions: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "assetcat", version: CatalogVersion.summary)
}

/// The `--catalog` option every command but `init` takes, with `--quiet` and `--verbose`.
struct CatalogOption: ParsableArguments {
    @Option(name: .long, help: "The catalog directory (default: $ASSETCAT_CATALOG, else the nearest .assetcat).")
    var catalog: String?
    @OptionGroup var output: OutputOptions

    /// Opens the catalog to change it: a read-only catalog fails with a message that says so.
    func open() throws -> Catalog {
        try Catalog.open(
            at: CatalogLocator.locate(explicit: catalog), options: .init(logger: output.logger).withTestSwitches())
    }

    /// Opens the catalog for a command that only reads it: writable where it can be (so the
    /// open still finishes an earlier process's work), read-only where it cannot, saying so
    /// when removals an earlier process committed could not be finished.
    func openForReading() throws -> Catalog {
        let catalog = try Catalog.open(
            at: CatalogLocator.locate(explicit: catalog),
            options: .init(access: .readWriteIfPossible, logger: output.logger).withTestSwitches())
        if catalog.openedReadOnlyOnAFullDisk {
            let pending = (try? catalog.pendingRemovalCount()) ?? 0
            Terminal.note(
                "note: the disk is full (\(catalog.fileSystemDescription)): the catalog is open read-only"
                    + (pending > 0
                        ? "; \(plural(pending, "committed removal")) could not be finished (the next command that can "
                            + "write the catalog finishes them)" : ""))
        } else if catalog.isReadOnly, let pending = try? catalog.pendingRemovalCount(), pending > 0 {
            Terminal.note(
                "note: the catalog is read-only; \(plural(pending, "committed removal")) could not be finished "
                    + "(the next command that can write the catalog finishes them)")
        }
        return catalog
    }
}

/// Runs a command body, printing a catalog error as one line on stderr and
/// exiting 1 (argument errors are ArgumentParser's: exit 64).
func reportingErrors(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as CatalogError {
        Terminal.error(error.message)
        throw ExitCode.failure
    }
}

/// How a command opens the catalog.
enum CatalogAccess {
    /// To change it: ``CatalogOption/open()``; a read-only catalog is refused.
    case write
    /// Only to read it: ``CatalogOption/openForReading()``, read-only where it cannot write.
    case read
}

/// A command that works on the catalog `--catalog` (or the environment, or the working
/// directory) names. Its `run()` is written once, here: open the catalog as ``access`` says,
/// run the command on it, close it, and report a catalog error as one line on stderr (exit 1).
protocol CatalogCommand: AsyncParsableCommand {
    /// Whether the command changes the catalog.
    static var access: CatalogAccess { get }
    /// The `--catalog` option.
    var options: CatalogOption { get }
    /// The command's work, on the open catalog (closed when it returns or throws).
    func run(_ catalog: Catalog) async throws
}

extension CatalogCommand {
    func run() async throws {
        options.output.apply(reportOnly: (self as? any ReportsOnStandardOutput)?.reportOnly ?? false)
        try await reportingErrors {
            let catalog = try Self.access == .write ? options.open() : options.openForReading()
            defer { catalog.close() }
            try await run(catalog)
        }
    }
}

extension AssetCat {
    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Create a catalog, or join one whose records are in PostgreSQL.",
            discussion: """
                With --store postgresql://USER@HOST:PORT/DATABASE?schema=NAME, the catalog's records are in \
                that PostgreSQL schema and PATH (new or empty) holds its content, on a file system every host \
                mounts. Passwords come from PGPASSWORD or ~/.pgpass; one given in the URL is kept for this host \
                only (in $XDG_CONFIG_HOME/assetcat/catalogs/, mode 0600), never in PATH. \
                With --join, PATH is such a catalog made on another host: its store is checked, and --store \
                (this host's URL for it) recorded for this host. $ASSETCAT_STORE overrides the store a host uses.
                """)

        @Argument(help: "Where to create it (default: ./.assetcat).")
        var path: String?
        @Option(name: .long, help: "A postgresql:// URL: keep the catalog's records in that PostgreSQL schema.")
        var store: String?
        @Flag(name: .long, help: "Join a catalog whose records are in PostgreSQL, made by `init --store`.")
        var join = false
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply(reportOnly: true)
            try await reportingErrors {
                let directory = URL(fileURLWithPath: path ?? CatalogLocator.directoryName).standardizedFileURL
                let location = try store.map { try CatalogStoreLocation($0) }
                if join {
                    let joined = try Catalog.join(
                        at: directory, store: location, options: .init(logger: output.logger).withTestSwitches())
                    print(
                        "joined catalog \(joined.id.uuidString) (store \(joined.store.server), schema "
                            + "\(joined.store.schema))")
                    return
                }
                guard let location else {
                    let catalog = try Catalog.create(
                        at: directory, options: .init(logger: output.logger).withTestSwitches())
                    catalog.close()
                    print("Created an empty catalog in \(DisplayText.quoted(directory.path))")
                    return
                }
                let created = try Catalog.create(
                    at: directory, store: location, options: .init(logger: output.logger).withTestSwitches())
                created.catalog.close()
                print(
                    "Created an empty catalog in \(DisplayText.quoted(directory.path)), its records in "
                        + "\(location.server) (schema \(location.schema))")
                if let file = created.passwordFile {
                    Terminal.note(
                        "note: the password in the URL was not stored in \(DisplayText.quoted(directory.path)); it "
                            + "was kept for this host only, in \(DisplayText.quoted(file)) (mode 0600). Other hosts "
                            + "give theirs through PGPASSWORD, ~/.pgpass or `assetcat init --join --store URL`")
                }
            }
        }
    }
}

extension AssetCat {
    struct Recover: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "recover",
            abstract: "Start a new store for a catalog whose store is lost, listing the content of objects/.",
            discussion: """
                The last resort when catalog.sqlite is lost or was quarantined as unusable (for a catalog \
                in PostgreSQL: when its schema holds no catalog) and there is no backup of it: every file of objects/ becomes an asset named recovered-<digest>, tagged \
                'recovered'. Names, tags, metadata, references and archive members cannot be recovered from \
                content. A quarantined store stays in quarantine/.
                """)

        @OptionGroup var options: CatalogOption

        func run() async throws {
            options.output.apply(reportOnly: true)
            try await reportingErrors {
                let directory = try CatalogLocator.locate(explicit: options.catalog)
                let (catalog, report) = try Catalog.recover(
                    at: directory, options: .init(logger: options.output.logger).withTestSwitches())
                catalog.close()
                print("started a new store in \(DisplayText.quoted(directory.path))")
                print("recorded \(plural(report.adopted.count, "file")) of objects/ as assets tagged 'recovered'")
            }
        }
    }
}
