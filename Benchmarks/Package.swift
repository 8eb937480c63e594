// swift-tools-version: 6.1
// Benchmarks, in their own package so that the library's build stays lean.
// Run in release mode: swift run -c release --package-path Benchmarks ArchiveBenchmarks
import PackageDescription

let package = Package(
    name: "Benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "AssetCatalog", path: "..")
    ],
    targets: [
        // ArchiveIO against bsdtar on generated corpora (.tar.zst level 3, .zip store).
        .executableTarget(
            name: "ArchiveBenchmarks",
            dependencies: [.product(name: "ArchiveIO", package: "AssetCatalog")]
        )
    ],
    swiftLanguageModes: [.v6]
)
