import ArgumentParser
@_spi(Testing) import AssetCatalog
import Foundation

extension AssetCat {
    struct MigrateStore: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "migrate-store",
            abstract: "Move the catalog's records into PostgreSQL, or back into catalog.sqlite.",
            discussion: """
                --to postgresql://USER@HOST:PORT/DATABASE?schema=NAME copies every record of catalog.sqlite into \
                that empty PostgreSQL schema, all or nothing, and makes it the catalog's store; catalog.sqlite is \
                kept as catalog.sqlite.moved-<date>, and versions of assetcat without PostgreSQL then refuse the \
                catalog (they cannot reach its records). --to sqlite copies the records back into catalog.sqlite; \
                the schema keeps its rows and is marked as moved. Content (objects/) stays where it is. Close the \
                catalog everywhere first: it is refused while another process or host has it open. If stopped, \
                run it again: it finishes, or the old store is still in force.
                """)

        @OptionGroup var options: CatalogOption
        @Option(name: .long, help: "postgresql://… (an empty schema), or 'sqlite'.")
        var to: String

        func run() async throws {
            options.output.apply(reportOnly: true)
            try await reportingErrors {
                let directory = try CatalogLocator.locate(explicit: options.catalog)
                let destination: StoreDestination =
                    to == "sqlite" ? .sqlite : .postgresql(try CatalogStoreLocation(to))
                let migration = try Catalog.migrateStore(at: directory, to: destination, testing: .ofCommand) {
                    copied, total in
                    Terminal.progress("copying", done: copied, total: total)
                }
                Terminal.endProgress()
                var line =
                    migration.finishedEarlierRun
                    ? "finished an earlier migrate-store: the catalog's records are in \(migration.to)"
                    : "moved \(plural(migration.rows, "record")) from \(migration.from) to \(migration.to)"
                if let moved = migration.movedAside {
                    line += "; the old store is kept as \(DisplayText.quoted(moved))"
                }
                if case .postgresql = destination {
                    line += "; versions of assetcat without PostgreSQL can no longer open this catalog"
                }
                print(line)
            }
        }
    }
}
