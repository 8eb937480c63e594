// swift-tools-version: 6.1
// libFuzzer targets for our parsers of hostile input: a separate package, so the library's
// own build and tests never pay for them. Built and run from the repository root with
// `make fuzz` (Scripts/fuzz.sh), which passes `-Xswiftc -sanitize=fuzzer,address`:
// libFuzzer supplies `main`, each target only `LLVMFuzzerTestOneInput`.
import PackageDescription

// The targets have no `main` of their own (libFuzzer's is linked in): no top-level code.
let noMain: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "Fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "AssetCatalog", path: "..")
    ],
    targets: [
        // The input cursor and the invariant check the targets share.
        .target(name: "FuzzSupport"),
        // bagit.txt and bag-info.txt (in the encodings bagit.txt may declare), line splitting.
        .executableTarget(
            name: "fuzz-bag-tagfiles",
            dependencies: ["FuzzSupport", .product(name: "BagIt", package: "AssetCatalog")],
            swiftSettings: noMain
        ),
        // Payload and tag manifests: whole, and line by line as a streamed read parses them.
        .executableTarget(
            name: "fuzz-bag-manifest",
            dependencies: ["FuzzSupport", .product(name: "BagIt", package: "AssetCatalog")],
            swiftSettings: noMain
        ),
        // fetch.txt, line by line.
        .executableTarget(
            name: "fuzz-bag-fetch",
            dependencies: ["FuzzSupport", .product(name: "BagIt", package: "AssetCatalog")],
            swiftSettings: noMain
        ),
        // The records file of a bundle (assetcat-records.json), in pieces of any size.
        .executableTarget(
            name: "fuzz-records",
            dependencies: [
                "FuzzSupport", .product(name: "AssetCatalog", package: "AssetCatalog"),
                .product(name: "BagIt", package: "AssetCatalog"),
            ],
            swiftSettings: noMain
        ),
        // ExtractionGuard's checks of members' paths and link targets.
        .executableTarget(
            name: "fuzz-extraction-guard",
            dependencies: ["FuzzSupport", .product(name: "ArchiveIO", package: "AssetCatalog")],
            swiftSettings: noMain
        ),
    ],
    swiftLanguageModes: [.v6]
)
