import ArgumentParser
import AssetCatalog
import CatalogServer
import Foundation

extension AssetCat {
    struct Serve: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "serve",
            abstract: "Serve web pages to browse, search and act on the catalog.",
            discussion: """
                Prints the URL to open as its first line, then serves until Ctrl-C or SIGTERM (exit 0). \
                It listens on 127.0.0.1 unless --host says otherwise; on any other address every request \
                needs a token (--token, or one generated and printed once, in the URL).
                """)

        @OptionGroup var options: CatalogOption
        @Option(help: "The address to listen on; anything but loopback needs a token.")
        var host = "127.0.0.1"
        @Option(help: "The port; 0 picks a free one.")
        var port = 8080
        @Option(help: "The token every request must carry (letters, digits, -._~).")
        var token: String?

        func run(_ catalog: Catalog) async throws {
            let server = try CatalogServer(
                catalog: catalog, configuration: .init(host: host, port: port, token: token),
                logger: options.output.logger)
            try await server.run { url in
                // Unbuffered: whoever started the server reads the URL as soon as it listens.
                FileHandle.standardOutput.write(Data((url.absoluteString + "\n").utf8))
                if server.generatedToken {
                    Terminal.note("note: \(host) is not loopback: requests need the token generated in the URL above")
                }
            }
        }
    }
}
