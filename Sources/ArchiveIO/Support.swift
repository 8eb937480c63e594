import CArchive
import Glibc

/// A C.UTF-8 locale that the calling thread switches to around libarchive calls that
/// convert names (shared/PLATFORM.md trap 1); the thread's own locale is restored after.
final class UTF8LocaleScope {
    private let locale: locale_t?

    init() {
        let made = carchive_utf8_locale()
        locale = carchive_locale_is_null(made) != 0 ? nil : made
    }

    deinit {
        if let locale { carchive_freelocale(locale) }
    }

    /// Runs `body` with the thread's locale switched to C.UTF-8.
    @inline(__always)
    func run<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        guard let locale else { return try body() }
        let previous = carchive_uselocale(locale)
        defer { _ = carchive_uselocale(previous) }
        return try body()
    }
}

/// The pieces of an ``ArchiveError`` that libarchive reports after a failed call.
struct LibarchiveFailure {
    var message: String?
    var errno: Int32

    init(_ handle: OpaquePointer) {
        message = archive_error_string(handle).map { String(cString: $0) }
        errno = archive_errno(handle)
    }
}

/// Formats a member path for a message: control characters escaped, very long names cut.
func displayName(_ path: String) -> String {
    var out = ""
    var count = 0
    for scalar in path.unicodeScalars {
        if count == 120 {
            out += "…"
            break
        }
        switch scalar.value {
        case 0: out += "\\0"
        case 0x01..<0x20, 0x7F: out += "\\u{\(String(scalar.value, radix: 16))}"
        default: out.unicodeScalars.append(scalar)
        }
        count += 1
    }
    return out
}

/// `strerror` as a Swift string.
func systemMessage(_ code: Int32) -> String {
    String(cString: strerror(code))
}

/// Classifies a failed read by libarchive's errno and message.
func readFailureCode(_ failure: LibarchiveFailure) -> ArchiveError.Code {
    let text = failure.message ?? ""
    if failure.errno == ENOMEM { return .outOfMemory }
    if text.hasPrefix("Unrecognized archive format") { return .unrecognizedFormat }
    let lower = text.lowercased()
    if lower.contains("truncated") || lower.contains("premature end") || lower.contains("unexpected end")
        || lower.contains("unexpected eof")
    {
        return .truncatedArchive
    }
    if lower.contains("encrypt") || lower.contains("passphrase") || lower.contains("unsupported") {
        return .unsupportedEntry
    }
    return .corruptArchive
}
