// swift-tools-version: 6.1
// The benchmark suite: a separate package, so the library's own build and
// tests never pay for it. Run from the repository root with `make bench`
// (release mode; each figure is printed beside its baseline from the same run).
import PackageDescription

let package = Package(
    name: "Benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "AssetCatalog", path: ".."),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
    ],
    targets: [
        // Child processes timed with their peak memory, for the suites that run `assetcat`.
        .target(name: "BenchSupport"),
        // Persistence against raw GRDB (inserts, fetches, indexed lookups).
        .executableTarget(
            name: "PersistenceBenchmarks",
            dependencies: [
                .product(name: "Persistence", package: "AssetCatalog"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // ArchiveIO against bsdtar on generated corpora (.tar.zst level 3, .zip store).
        .executableTarget(
            name: "ArchiveBenchmarks",
            dependencies: [.product(name: "ArchiveIO", package: "AssetCatalog")]
        ),
        // `assetcat add` / `rm` / `ls --json` (the release binary, as a child process) against
        // the hashing and copying floors, dvc, rm -rf and python3 (issue 4).
        .executableTarget(
            name: "CatalogBenchmarks",
            dependencies: ["BenchSupport", .product(name: "AssetCatalog", package: "AssetCatalog")]
        ),
        // `assetcat add` of one corpus by 1, 2, 4 processes at once into one catalog: PostgreSQL
        // (a host each) against SQLite (one host).
        .executableTarget(name: "IngestBenchmarks", dependencies: ["BenchSupport"]),
        // `assetcat export` / `import` of BagIt bundles (the release binary, as a child process)
        // against bsdtar + openssl dgst -sha256, with each run's peak memory.
        .executableTarget(name: "BundleBenchmarks", dependencies: ["BenchSupport"]),
        // The durable job queue: no-op throughput against plain tasks, and cancel latency of a
        // deleted asset's running job, in this process and from another (issue 5).
        .executableTarget(
            name: "JobBenchmarks",
            dependencies: [
                "BenchSupport",
                .product(name: "AssetCatalog", package: "AssetCatalog"),
                .product(name: "Persistence", package: "AssetCatalog"),
                // The work floor of the digest jobs: the same files hashed in this process.
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // What a catalog's size costs: one-asset commands on a large catalog against a ten-asset
        // one, and the bulk commands against their floors (issue 19).
        .executableTarget(
            name: "ScaleBenchmarks",
            dependencies: [
                "BenchSupport",
                .product(name: "AssetCatalog", package: "AssetCatalog"),
                .product(name: "Persistence", package: "AssetCatalog"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
