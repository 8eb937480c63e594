// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "AssetCatalog",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Persistence", targets: ["Persistence"]),
        .library(name: "ArchiveIO", targets: ["ArchiveIO"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // libarchive, as a system library (see Sources/CArchive/shim.h).
        .systemLibrary(name: "CArchive", providers: [.apt(["libarchive-dev"])]),
        // Streaming, hostile-input-safe archives. Knows nothing of catalogs.
        .target(name: "ArchiveIO", dependencies: ["CArchive"]),
        // Core Data's object lifecycle over SQLite. Knows nothing of assets.
        .target(
            name: "Persistence",
            dependencies: [
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // `make demo` until the catalog exists: prints each lifecycle event as it fires.
        .executableTarget(name: "PersistenceDemo", dependencies: ["Persistence"]),
        // A separate process for the tests that need two writers or a crash.
        .executableTarget(name: "persistence-fixture", dependencies: ["Persistence"], path: "Tests/PersistenceFixture"),
        .testTarget(name: "PersistenceTests", dependencies: ["Persistence", "persistence-fixture"]),
        .testTarget(name: "ArchiveIOTests", dependencies: ["ArchiveIO"]),
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
