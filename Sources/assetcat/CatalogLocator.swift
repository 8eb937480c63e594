import AssetCatalog
import Foundation

/// Finds the catalog a command should use: `--catalog`, else `$ASSETCAT_CATALOG`, else the nearest `.assetcat`.
enum CatalogLocator {
    /// The name of a catalog directory found by walking up from the working directory.
    static let directoryName = ".assetcat"
    /// The environment variable that names a catalog.
    static let environmentVariable = "ASSETCAT_CATALOG"

    /// The catalog directory: `explicit` if given, else `$ASSETCAT_CATALOG`,
    /// else the nearest `.assetcat` directory at or above `workingDirectory`.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` with what to do when none is found.
    static func locate(
        explicit: String?, environment: [String: String] = ProcessInfo.processInfo.environment,
        workingDirectory: URL = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    ) throws -> URL {
        if let explicit { return URL(fileURLWithPath: explicit).standardizedFileURL }
        if let named = environment[environmentVariable], !named.isEmpty {
            return URL(fileURLWithPath: named).standardizedFileURL
        }
        var directory = workingDirectory.standardizedFileURL
        while true {
            let candidate = directory.appending(path: directoryName)
            if Catalog.exists(at: candidate) { return candidate }
            let parent = directory.deletingLastPathComponent()
            if parent.path == directory.path { break }
            directory = parent
        }
        throw CatalogError(
            .notFound,
            "No catalog here: no .assetcat directory in \(workingDirectory.path) or above; run `assetcat init`, "
                + "or pass --catalog PATH or set ASSETCAT_CATALOG")
    }
}
