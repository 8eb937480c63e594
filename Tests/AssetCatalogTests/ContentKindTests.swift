import Testing

@testable import AssetCatalog

/// A file's kind comes from its name. ASCII names take a path through the bytes (an add
/// classifies every file it reads); every name must get the kind the Unicode-aware rule
/// (lower-casing, archive suffixes, `NSString.pathExtension`) gives.
@Suite struct ContentKindTests {
    @Test func namesGetTheirKinds() {
        let expected: [(String, String)] = [
            ("photo.JPG", "image"), ("a.tar.gz", "archive"), ("A.TAR.GZ", "archive"), (".tar", "archive"),
            ("notes.txt", "text"), ("dir/song.Flac", "audio"), ("dir.zip/readme", "data"), ("README", "data"),
            (".txt", "data"), ("trailing.", "data"), ("x.tgz", "archive"), ("movie.mKv", "video"),
            ("movie.m\u{212A}v", "video"),  // KELVIN SIGN lower-cases to k
            ("x.zip\u{301}", "data"), ("ﬁle.PDF", "document"), ("a.gz", "data"),
        ]
        for (name, kind) in expected {
            #expect(ContentKind.of(name) == kind, "\(name.debugDescription)")
        }
    }

    /// Names built from the pieces that matter (dots, slashes, case, known extensions and
    /// archive suffixes): the byte path and the Unicode rule agree on every one.
    @Test func theASCIIPathAgreesWithTheUnicodeRule() {
        let pieces = [
            ".", "/", "//", "a", "Z", "tar", "TaR", "gz", "zip", "ZIP", "7z", "iso", "png", "JPEG", "txt", "md", "x",
            "..", "tar.", "t", "zst", "tzst", "yml", "", "1", " ", "mkv", "K",
        ]
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        for _ in 0..<20_000 {
            let name = (0..<(1 + next(6))).map { _ in pieces[next(pieces.count)] }.joined()
            #expect(ContentKind.of(name) == ContentKind.unicodeKind(name), "\(name.debugDescription)")
        }
    }
}
