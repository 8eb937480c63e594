import CVips
import Glibc
import Locking

/// A small picture of an image: WebP bytes within ``Thumbnailer/defaultSide`` pixels a side.
public struct Thumbnail: Sendable, Hashable {
    /// The WebP file's bytes.
    public var bytes: [UInt8]
    /// Its size in pixels.
    public var width: Int
    public var height: Int
    /// The size in pixels of the image it was made from.
    public var sourceWidth: Int
    public var sourceHeight: Int

    /// The media type of ``bytes``.
    public static let mediaType = "image/webp"
}

/// Why an image has no thumbnail.
public struct ThumbnailError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: Sendable, Hashable {
        /// Not an image of a kind thumbnails are made of (or not an image at all).
        case unsupported
        /// More pixels than ``Thumbnailer/maximumPixels``: a decompression bomb, or an image
        /// too large to decode in bounded memory.
        case tooLarge
        /// An image whose data is damaged or cut short.
        case damaged
    }

    public var code: Code
    /// One line, for a person: what is wrong with the image.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// Makes thumbnails of untrusted image files with libvips, in bounded memory.
///
/// Only the common formats are read — JPEG, PNG, WebP, GIF and TIFF — by libvips's own
/// loaders; every loader libvips marks untrusted (ImageMagick, PDF, SVG…) is blocked. An image
/// is sized from its header before any pixel is decoded:
///
/// - Baseline JPEG, non-interlaced PNG and WebP are decoded a few rows at a time (JPEG shrunk
///   as it loads): up to ``maximumPixels``, whatever the size, a thumbnail takes tens of
///   megabytes (a 100-megapixel PNG: 48 MB).
/// - GIF, TIFF, interlaced PNG and progressive JPEG are decoded whole by their libraries
///   (measured: 3.6 to 6 bytes a pixel): up to ``maximumDecodedBytes`` of pixels.
///
/// A larger image — most often a decompression bomb, a few kilobytes claiming billions of
/// pixels — is refused before its decode starts.
///
/// Thumbnails are made one at a time in a process: libvips reports errors through one buffer
/// for the whole process, and one decode at a time keeps the memory bound a bound.
///
/// ```swift
/// let file = open("beach.jpg", O_RDONLY)
/// defer { close(file) }
/// let thumbnail = try Thumbnailer.make(fromDescriptor: file)
/// ```
public enum Thumbnailer {
    /// The longest side of a thumbnail, in pixels.
    public static let defaultSide = 256
    /// The most pixels an image decoded a few rows at a time may have: 100 megapixels (a
    /// large panorama; Pillow warns from 89).
    public static let maximumPixels = 100_000_000
    /// The most bytes of pixels an image decoded whole may have: 64 MiB (a 21-megapixel RGB
    /// progressive JPEG, a 16-megapixel GIF).
    public static let maximumDecodedBytes = 64 << 20

    /// The libvips loaders a thumbnail is made with, and the name of their format.
    static let loaders: [String: String] = [
        "VipsForeignLoadJpegSource": "JPEG", "VipsForeignLoadPngSource": "PNG", "VipsForeignLoadWebpSource": "WebP",
        "VipsForeignLoadNsgifSource": "GIF", "VipsForeignLoadTiffSource": "TIFF",
    ]
    /// The formats whose loader decodes the whole image, whatever its layout.
    static let decodedWhole: Set = ["GIF", "TIFF"]

    /// Makes the thumbnail of the image file open at `descriptor` (read from its start; the
    /// caller keeps and closes the descriptor), within `side` × `side` pixels.
    ///
    /// - Throws: ``ThumbnailError``: ``ThumbnailError/Code/unsupported`` for a file that is
    ///   not an image of a supported kind, ``ThumbnailError/Code/tooLarge`` for one over the
    ///   limits, ``ThumbnailError/Code/damaged`` for one that cannot be decoded.
    public static func make(fromDescriptor descriptor: Int32, side: Int = defaultSide) throws(ThumbnailError)
        -> Thumbnail
    {
        try libvips.withLock { start throws(ThumbnailError) in
            try Self.started(&start).get()
            defer { cvips_error_clear() }
            let format = try format(of: descriptor)
            let header = try header(of: descriptor, format)
            try checkSize(header, format)
            return try thumbnail(of: descriptor, format, side: side, header)
        }
    }

    /// What an image's header says of its size.
    struct Header {
        var width: Int
        var height: Int
        var pixelBytes: Int
        var isInterlaced: Bool
    }

    /// Refuses an image that would take more memory to decode than the limits allow.
    static func checkSize(_ header: Header, _ format: String) throws(ThumbnailError) {
        let (pixels, overflow) = header.width.multipliedReportingOverflow(by: header.height)
        let whole = decodedWhole.contains(format) || header.isInterlaced
        let (bytes, bytesOverflow) = pixels.multipliedReportingOverflow(by: header.pixelBytes)
        let what =
            "the \(header.isInterlaced ? "interlaced " : "")\(format) image is \(header.width) × \(header.height) pixels"
        if overflow || pixels > maximumPixels {
            throw ThumbnailError(
                .tooLarge, "\(what), more than the \(maximumPixels / 1_000_000) megapixels a thumbnail is made of")
        }
        if whole && (bytesOverflow || bytes > maximumDecodedBytes) {
            throw ThumbnailError(
                .tooLarge,
                "\(what), which its decoder holds whole: more than the \(maximumDecodedBytes >> 20) MiB of pixels "
                    + "a thumbnail is made of")
        }
    }

    // MARK: - Steps

    /// The name of the image's format, from its first bytes.
    private static func format(of descriptor: Int32) throws(ThumbnailError) -> String {
        let source = try openSource(descriptor)
        defer { cvips_release_source(source) }
        guard let loader = cvips_find_load_source(source).map({ String(cString: $0) }) else {
            throw ThumbnailError(.unsupported, "not an image: its first bytes are those of no image format")
        }
        guard let format = loaders[loader] else {
            let name = loader.trimmingPrefix("VipsForeignLoad").replacing(#/Source$/#, with: "").uppercased()
            throw ThumbnailError(
                .unsupported, "an image in \(name), which no thumbnail is made of (only JPEG, PNG, WebP, GIF and TIFF)")
        }
        return format
    }

    /// The image's size, from its header alone.
    private static func header(of descriptor: Int32, _ format: String) throws(ThumbnailError) -> Header {
        let source = try openSource(descriptor)
        defer { cvips_release_source(source) }
        guard let image = cvips_header(source) else { throw damaged(format) }
        defer { cvips_release_image(image) }
        return Header(
            width: Int(cvips_width(image)), height: Int(cvips_height(image)),
            pixelBytes: cvips_pixel_bytes(image), isInterlaced: cvips_interlaced(image) != 0)
    }

    /// The thumbnail, decoded and encoded.
    private static func thumbnail(
        of descriptor: Int32, _ format: String, side: Int, _ header: Header
    ) throws(ThumbnailError) -> Thumbnail {
        let source = try openSource(descriptor)
        defer { cvips_release_source(source) }
        var image: OpaquePointer?
        guard cvips_thumbnail(source, &image, Int32(clamping: side)) == 0, let image else { throw damaged(format) }
        defer { cvips_release_image(image) }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        // The pixels are decoded here, as the encoder pulls them.
        guard cvips_webp(image, &buffer, &length) == 0, let buffer else { throw damaged(format) }
        defer { cvips_free(buffer) }
        return Thumbnail(
            bytes: Array(UnsafeRawBufferPointer(start: buffer, count: length)),
            width: Int(cvips_width(image)), height: Int(cvips_height(image)),
            sourceWidth: header.width, sourceHeight: header.height)
    }

    /// A libvips source reading the file from its start (through a descriptor of its own).
    private static func openSource(_ descriptor: Int32) throws(ThumbnailError) -> OpaquePointer {
        guard lseek(descriptor, 0, SEEK_SET) == 0, let source = cvips_source_new_from_descriptor(descriptor) else {
            throw ThumbnailError(.damaged, "could not be read: \(String(cString: strerror(errno)))")
        }
        return source
    }

    /// The error of a failed decode: the first line libvips gave.
    private static func damaged(_ format: String) -> ThumbnailError {
        let reason =
            String(cString: cvips_error_buffer())
            .split(separator: "\n").first.map { String($0.trimmingPrefix(#/[a-z_]+: /#)) } ?? "no reason given"
        return ThumbnailError(.damaged, "the \(format) image could not be decoded: \(reason)")
    }

    // MARK: - libvips, once

    /// How libvips's start went (`nil` until the first thumbnail), behind the lock that makes
    /// thumbnails one at a time. (A lock of a value, not of `()`: ThreadSanitizer takes an
    /// access to a zero-sized value for one to the lock beside it.)
    private static let libvips = Locked<Result<Void, ThumbnailError>?>(nil)

    /// libvips loaded and started, once for the process.
    private static func started(_ start: inout Result<Void, ThumbnailError>?) -> Result<Void, ThumbnailError> {
        if let start { return start }
        let result = Self.start(library: nil)
        start = result
        return result
    }

    /// Loads `library` (libvips's, when `nil`) and starts it. Called once for the process
    /// (tests call it with a library that does not load).
    static func start(library: String?) -> Result<Void, ThumbnailError> {
        guard cvips_start(library) == 0 else {
            return .failure(
                ThumbnailError(
                    .unsupported,
                    "libvips could not be loaded, so no thumbnail is made: \(String(cString: cvips_start_error())) "
                        + "(install libvips42)"))
        }
        return .success(())
    }
}
