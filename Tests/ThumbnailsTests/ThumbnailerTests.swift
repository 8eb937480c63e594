import CVips
import CVipsHeaders
import Foundation
import TestScratch
import Testing

@testable import Thumbnails

/// Thumbnails of images, and of files that only claim to be: each refused with one line.
@Suite struct ThumbnailerTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    /// A PNG of `width` × `height` made by Fixtures/make-png.py, with its `options`.
    static func png(_ width: Int, _ height: Int, _ options: [String] = []) async throws -> String {
        let path = try ScratchDirectory.make("thumbnail").appendingPathComponent("image.png").path
        let outcome = try await ChildProcess.run(
            "/usr/bin/env",
            ["python3", fixtures.appendingPathComponent("make-png.py").path, "\(width)", "\(height)", path] + options)
        #expect(outcome.status == 0, "\(outcome.stderrText)")
        return path
    }

    /// A file of `bytes`.
    static func file(_ bytes: String, _ name: String) throws -> String {
        let path = try ScratchDirectory.make("thumbnail").appendingPathComponent(name).path
        try Data(bytes.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The thumbnail of the file at `path`.
    static func thumbnail(_ path: String) throws(ThumbnailError) -> Thumbnail {
        let fd = open(path, O_RDONLY)
        precondition(fd >= 0, "no \(path)")
        defer { close(fd) }
        return try Thumbnailer.make(fromDescriptor: fd)
    }

    static func isWebP(_ bytes: [UInt8]) -> Bool {
        bytes.count > 12 && bytes[0..<4] == [0x52, 0x49, 0x46, 0x46] && bytes[8..<12] == [0x57, 0x45, 0x42, 0x50]
    }

    @Test func aPNGIsShrunkToFitKeepingItsShape() async throws {
        let thumbnail = try Self.thumbnail(try await Self.png(640, 480))
        #expect(Self.isWebP(thumbnail.bytes))
        #expect((thumbnail.width, thumbnail.height) == (256, 192))
        #expect((thumbnail.sourceWidth, thumbnail.sourceHeight) == (640, 480))
        #expect(thumbnail.bytes.count < 16_384)
    }

    @Test(arguments: [("photo.jpg", 640, 480, 256, 192), ("small.gif", 64, 48, 64, 48)])
    func aJPEGAndAGIFGiveWebP(name: String, width: Int, height: Int, thumbWidth: Int, thumbHeight: Int) throws {
        let thumbnail = try Self.thumbnail(Self.fixtures.appendingPathComponent(name).path)
        #expect(Self.isWebP(thumbnail.bytes))
        #expect((thumbnail.sourceWidth, thumbnail.sourceHeight) == (width, height))
        // Never enlarged.
        #expect((thumbnail.width, thumbnail.height) == (thumbWidth, thumbHeight))
    }

    /// The format comes from the bytes, not the name.
    @Test func aJPEGNamedPNGIsReadAsAJPEG() throws {
        let path = try ScratchDirectory.make("thumbnail").appendingPathComponent("photo.png").path
        try FileManager.default.copyItem(atPath: Self.fixtures.appendingPathComponent("photo.jpg").path, toPath: path)
        #expect(try Self.thumbnail(path).sourceWidth == 640)
    }

    /// A decompression bomb: a few bytes that claim 2.5 billion pixels are refused from the
    /// header, before a pixel is decoded.
    @Test func aBombIsRefusedFromItsHeader() async throws {
        let path = try await Self.png(50_000, 50_000, ["--header-only"])
        #expect(
            throws: ThumbnailError(
                .tooLarge, "the PNG image is 50000 × 50000 pixels, more than the 100 megapixels a thumbnail is made of")
        ) { try Self.thumbnail(path) }
    }

    @Test func aTruncatedPNGFailsAsDamaged() async throws {
        let path = try await Self.png(640, 480, ["--truncate", "3000"])
        let error = #expect(throws: ThumbnailError.self) { try Self.thumbnail(path) }
        #expect(error?.code == .damaged)
        #expect(
            error?.message.hasPrefix("the PNG image could not be decoded: ") == true, "\(String(describing: error))")
    }

    @Test func textIsNotAnImage() throws {
        let path = try Self.file("hello, world\n", "hello.png")
        #expect(throws: ThumbnailError(.unsupported, "not an image: its first bytes are those of no image format")) {
            try Self.thumbnail(path)
        }
    }

    /// SVG (and every loader libvips marks untrusted: ImageMagick, PDF…) is never read.
    @Test func anSVGIsNotRead() throws {
        let path = try Self.file(
            #"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>"#,
            "drawing.svg")
        #expect(
            throws: ThumbnailError(
                .unsupported, "an image in SVG, which no thumbnail is made of (only JPEG, PNG, WebP, GIF and TIFF)")
        ) { try Self.thumbnail(path) }
    }

    /// Images decoded whole are held to a limit on their bytes; those decoded a few rows at a
    /// time, to one on their pixels.
    /// The constants the loader passes to libvips and GLib, which it declares itself (it
    /// includes no header of theirs), are those of their headers.
    @Test func theLoadersConstantsAreLibvipssOwn() {
        #expect(CVIPS_ACCESS_SEQUENTIAL == Int32(VIPS_ACCESS_SEQUENTIAL.rawValue))
        #expect(CVIPS_SIZE_DOWN == Int32(VIPS_SIZE_DOWN.rawValue))
        #expect(CVIPS_LOG_LEVEL_WARNING == Int32(G_LOG_LEVEL_WARNING.rawValue))
        #expect(CVIPS_LOG_LEVEL_MESSAGE == Int32(G_LOG_LEVEL_MESSAGE.rawValue))
        #expect(CVIPS_LOG_LEVEL_INFO == Int32(G_LOG_LEVEL_INFO.rawValue))
        #expect(CVIPS_LIBRARY == "libvips.so.\(VIPS_LIBRARY_CURRENT - VIPS_LIBRARY_AGE)")
    }

    /// Without libvips, a thumbnail fails saying so and what to install; nothing else does.
    @Test func aLibvipsThatDoesNotLoadIsNamed() throws {
        let result = Thumbnailer.start(library: "libvips-absent.so.42")
        #expect(
            result.failure
                == ThumbnailError(
                    .unsupported,
                    "libvips could not be loaded, so no thumbnail is made: libvips-absent.so.42: cannot open shared "
                        + "object file: No such file or directory (install libvips42)"))
    }

    @Test func theLimitsFollowHowAnImageIsDecoded() throws {
        typealias Header = Thumbnailer.Header
        // 96 megapixels of baseline JPEG: streamed, within the limit.
        try Thumbnailer.checkSize(Header(width: 12_000, height: 8_000, pixelBytes: 3, isInterlaced: false), "JPEG")
        // The same progressive: decoded whole, 288 MB.
        #expect(
            throws: ThumbnailError(
                .tooLarge,
                "the interlaced JPEG image is 12000 × 8000 pixels, which its decoder holds whole: more than the 64 MiB "
                    + "of pixels a thumbnail is made of")
        ) {
            try Thumbnailer.checkSize(Header(width: 12_000, height: 8_000, pixelBytes: 3, isInterlaced: true), "JPEG")
        }
        // A 16-megapixel GIF passes, a 17-megapixel one does not.
        try Thumbnailer.checkSize(Header(width: 4_096, height: 4_096, pixelBytes: 4, isInterlaced: false), "GIF")
        #expect(throws: ThumbnailError.self) {
            try Thumbnailer.checkSize(Header(width: 4_096, height: 4_200, pixelBytes: 4, isInterlaced: false), "GIF")
        }
        // Sizes whose product overflows.
        #expect(throws: ThumbnailError.self) {
            try Thumbnailer.checkSize(Header(width: .max, height: 3, pixelBytes: 3, isInterlaced: false), "PNG")
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
