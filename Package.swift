// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "AssetCatalog",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Persistence", targets: ["Persistence"]),
        .library(name: "PersistencePostgreSQL", targets: ["PersistencePostgreSQL"]),
        .library(name: "ArchiveIO", targets: ["ArchiveIO"]),
        .library(name: "BagIt", targets: ["BagIt"]),
        .library(name: "Thumbnails", targets: ["Thumbnails"]),
        .library(name: "AssetCatalog", targets: ["AssetCatalog"]),
        .library(name: "CatalogServer", targets: ["CatalogServer"]),
        .executable(name: "assetcat", targets: ["assetcat"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/vapor/postgres-nio", exact: "1.33.2"),
        // Named for the event loops postgres-nio runs on (the version postgres-nio resolves).
        .package(url: "https://github.com/apple/swift-nio", from: "2.81.0"),
        // TLS to PostgreSQL (the version postgres-nio resolves).
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // `swift package generate-documentation` (`make docs`): a command plugin, resolved but
        // never built by `swift build`.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // `assetcat serve`: the HTTP server of CatalogServer.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        // HTTP's fields and statuses, as Hummingbird names them (the version it resolves).
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
    ],
    targets: [
        // libarchive, as a system library (see Sources/CArchive/shim.h).
        .systemLibrary(name: "CArchive", providers: [.apt(["libarchive-dev"])]),
        // Streaming, hostile-input-safe archives. Knows nothing of catalogs.
        .target(name: "ArchiveIO", dependencies: ["CArchive", "CFileSync"]),
        // OpenSSL's libcrypto, as a system library: the digests swift-crypto lacks (SHA-224).
        .systemLibrary(name: "CLibCrypto", providers: [.apt(["libssl-dev"])]),
        // sqlite3_db_config, which Swift cannot call (variadic), for Persistence's writer.
        .systemLibrary(name: "CSQLiteConfig"),
        // A lock ThreadSanitizer sees, for the state threads share (Synchronization.Mutex it does not).
        .target(name: "Locking"),
        // Core Data's object lifecycle over SQLite. Knows nothing of assets.
        .target(
            name: "Persistence",
            dependencies: [
                "Locking", "CSQLiteConfig",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A second store for Persistence: PostgreSQL, through postgres-nio. Knows nothing of
        // assets; Persistence knows nothing of it (it implements Persistence's package-level
        // `PersistentStore`).
        .target(
            name: "PersistencePostgreSQL",
            dependencies: [
                "Persistence", "Locking",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // BagIt (RFC 8493) bags: streaming writer, reader and validator over ArchiveIO.
        // Knows nothing of catalogs. A read keeps its per-file state in a temporary SQLite
        // database (BagIndex), through GRDB.
        .target(
            name: "BagIt",
            dependencies: [
                "ArchiveIO", "CFileSync", "CLibCrypto", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        // libvips, loaded when the first thumbnail is made rather than linked (see
        // Sources/CVips/include/cvips.h); Debian's libvips42 at run time.
        .target(name: "CVips"),
        // Thumbnails of untrusted images, through libvips, in bounded memory. Knows nothing of
        // catalogs.
        .target(name: "Thumbnails", dependencies: ["CVips", "Locking"]),
        // syncfs(2), O_TMPFILE and renameat2(2), which Swift's Glibc module does not import.
        .target(name: "CFileSync"),
        // Assets, file resources, lifecycle-safe removal: the library's front door.
        .target(
            name: "AssetCatalog",
            dependencies: [
                "Persistence", "ArchiveIO", "BagIt", "CFileSync", "Locking", "Thumbnails",
                // A catalog whose records are in PostgreSQL (`assetcat init --store`).
                "PersistencePostgreSQL",
                // For the temporary databases of an export's selection (ExportScratch) and of
                // an import's entries and plan (ImportScratch).
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // `assetcat serve`: pages to browse, search and act on a catalog, over HTTP. Knows catalogs
        // through AssetCatalog's public API only.
        .target(
            name: "CatalogServer",
            dependencies: [
                "AssetCatalog",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The CLI: parses, calls AssetCatalog, prints. No logic of its own.
        .executableTarget(
            name: "assetcat",
            dependencies: [
                "AssetCatalog", "BagIt", "CatalogServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // Swift's static standard library links executables with `-export-dynamic`, which put
            // every symbol of the package and its dependencies (49,761) into the dynamic symbol
            // table; at every start the runtime's `dladdr` scanned it, and the loader's look-ups
            // searched it: 1.3–1.5 ms of each command. Nothing looks a symbol of `assetcat` up
            // by name.
            linkerSettings: [.unsafeFlags(["-Xlinker", "--no-export-dynamic"])]
        ),
        // Temporary directories for the tests, removed when the test process exits.
        .target(name: "TestScratch"),
        // Temporary catalogs, fixtures and crash helpers for the tests.
        .target(
            name: "AssetCatalogTestSupport", dependencies: ["AssetCatalog", "BagIt", "Persistence", "TestScratch"]),
        // `make demo` until the catalog exists: prints each lifecycle event as it fires.
        .executableTarget(name: "PersistenceDemo", dependencies: ["Persistence"]),
        // A separate process for the tests that need two writers or a crash.
        .executableTarget(
            name: "persistence-fixture", dependencies: ["Persistence", "PersistencePostgreSQL"],
            path: "Tests/PersistenceFixture"),
        .testTarget(
            name: "PersistenceTests",
            dependencies: [
                "Persistence", "PersistencePostgreSQL", "persistence-fixture", "TestScratch",
                // To damage stores as a user's mistake would (tables dropped, a schema gone).
                .product(name: "GRDB", package: "GRDB.swift"),
                // To ask the PostgreSQL server what it sees of a connection (TLS).
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // To word the network's errors as postgres-nio passes them on.
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(name: "ArchiveIOTests", dependencies: ["ArchiveIO", "TestScratch"]),
        // libvips's and GLib's own headers, for ThumbnailsTests to check the constants CVips
        // declares against them.
        .systemLibrary(
            name: "CVipsHeaders", path: "Tests/CVipsHeaders", pkgConfig: "vips", providers: [.apt(["libvips-dev"])]),
        .testTarget(
            name: "ThumbnailsTests", dependencies: ["Thumbnails", "CVips", "CVipsHeaders", "TestScratch"],
            // Made from make-png.py at test time, or committed (a JPEG and a GIF, a few KB).
            exclude: ["Fixtures"]),
        .testTarget(name: "BagItTests", dependencies: ["BagIt", "ArchiveIO", "TestScratch"]),
        .testTarget(
            name: "AssetCatalogTests",
            dependencies: [
                "AssetCatalog", "AssetCatalogTestSupport", "Persistence", "ArchiveIO", "Locking", "TestScratch",
                "assetcat",
                // To run the catalog's migrations on a PostgreSQL store.
                "PersistencePostgreSQL",
                // To ask the PostgreSQL server which connections wait for a lock.
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // To read what the catalog logs.
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "CatalogServerTests",
            dependencies: [
                "CatalogServer", "AssetCatalog", "AssetCatalogTestSupport", "BagIt", "TestScratch",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CLITests", dependencies: ["AssetCatalog", "AssetCatalogTestSupport", "TestScratch", "assetcat"]),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system {
    target.swiftSettings =
        (target.swiftSettings ?? []) + [
            .enableUpcomingFeature("ExistentialAny"),
            .enableUpcomingFeature("InternalImportsByDefault"),
            .enableUpcomingFeature("MemberImportVisibility"),
        ]
}
