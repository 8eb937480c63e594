import AssetCatalog
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Output helpers: errors on stderr, a progress bar only on a terminal (and not with `--quiet`).
enum Terminal {
    static let isInteractive = isatty(STDERR_FILENO) == 1

    /// `assetcat: message` on stderr, one line whatever names the message holds.
    static func error(_ message: String) {
        FileHandle.standardError.write(Data("assetcat: \(DisplayText.escapingControls(message))\n".utf8))
    }

    /// A line on stderr, one line whatever names it holds.
    static func note(_ message: String) {
        FileHandle.standardError.write(Data("\(DisplayText.escapingControls(message))\n".utf8))
    }

    /// Whether ``progress(_:done:total:bytes:endsLine:)`` draws anything: on a terminal, without
    /// `--quiet`. Work that only measures itself for the bar can be spared otherwise.
    static var drawsProgress: Bool { isInteractive && !isQuiet }

    /// Draws `[#####-----] 50%  3/6 files  12.0 MB` over itself on stderr. The line ends
    /// when `done` reaches `total`, unless `endsLine` is false: a later bar (the next phase
    /// of the same work) is then drawn over it, or ``endProgress()`` ends it.
    static func progress(_ label: String, done: Int, total: Int, bytes: Int64? = nil, endsLine: Bool = true) {
        guard drawsProgress, total > 0 else { return }
        let width = 30
        let filled = min(width, done * width / total)
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let size = bytes.map { "  " + formatBytes($0) } ?? ""
        FileHandle.standardError.write(
            Data("\r\(label) [\(bar)] \(done * 100 / total)%  \(done)/\(total)\(size)\u{1B}[K".utf8))
        progressLineOpen.store(true, ordering: .relaxed)
        if done == total && endsLine { endProgress() }
    }

    /// Ends the line of a progress bar still drawn (on a terminal), so that what follows
    /// starts on a line of its own.
    static func endProgress() {
        if progressLineOpen.exchange(false, ordering: .relaxed) { FileHandle.standardError.write(Data("\n".utf8)) }
    }

    static func formatBytes(_ bytes: Int64) -> String {
        let units = ["B", "KB", "MB", "GB", "TB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1000 && unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    static func json<T: Encodable>(_ value: T) throws {
        try output(try encoder.encode(value) + Data("\n".utf8))
    }

    /// Writes to stdout; a failure (a full disk, a closed pipe) is an error, not a crash.
    static func output(_ data: Data) throws {
        do {
            try FileHandle.standardOutput.write(contentsOf: data)
        } catch {
            throw CatalogError(.io, "Could not write to standard output: \(error.localizedDescription)", cause: error)
        }
    }
}

/// Whether a progress bar's line is drawn and not ended yet.
private let progressLineOpen = Atomic<Bool>(false)
