import ArgumentParser
import AssetCatalog
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `--quiet` and `--verbose`, which every command takes (through ``CatalogOption``, or on its
/// own for `init` and `validate`).
struct OutputOptions: ParsableArguments {
    @Flag(name: [.customShort("q"), .long], help: "No progress bars and no summary lines (errors still go to stderr).")
    var quiet = false
    @Flag(name: [.customShort("v"), .long], help: "Log what the catalog does to stderr (debug level).")
    var verbose = false

    func validate() throws {
        if quiet && verbose { throw ValidationError("Give --quiet or --verbose, not both.") }
    }

    /// Where the catalog logs, on stderr: its warnings and errors as `warning: …` lines (its
    /// errors only with `--quiet`); with `--verbose`, everything down to debug, timestamped.
    var logger: Logger {
        guard verbose else {
            var logger = Logger(label: "AssetCatalog", factory: { _ in WarningLogHandler() })
            logger.logLevel = quiet ? .error : .warning
            return logger
        }
        var logger = Logger(label: "AssetCatalog", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = .debug
        return logger
    }

    /// Makes the options hold for the rest of the process: with `--quiet`, no progress bar is
    /// drawn and, when `reportOnly` (the command's standard output is a report of what it did,
    /// not data asked for), standard output goes to `/dev/null`.
    func apply(reportOnly: Bool) {
        guard quiet else { return }
        Terminal.quiet.store(true, ordering: .relaxed)
        if reportOnly { Terminal.silenceStandardOutput() }
    }
}

/// The catalog's warnings on stderr as a command's own are printed: `warning: MESSAGE`
/// (`error:` for errors), one line each, its metadata after it as `key=value`.
struct WarningLogHandler: LogHandler {
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        let details = all.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        let level = event.level >= .error ? "error" : "warning"
        FileHandle.standardError.write(Data("\(level): \(event.message)\(details)\n".utf8))
    }
}

extension Terminal {
    /// Whether `--quiet` was given: no progress bar is drawn.
    static let quiet = Atomic<Bool>(false)

    /// Whether `--quiet` was given.
    static var isQuiet: Bool { quiet.load(ordering: .relaxed) }

    /// Sends what the process writes to standard output from now on to `/dev/null`.
    static func silenceStandardOutput() {
        fflush(nil)  // what was written before goes where it was going
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        guard null >= 0 else { return }
        dup2(null, STDOUT_FILENO)
        close(null)
    }
}

/// Whether a command's standard output is only a report of what it did (`added 3 files`,
/// `removed 2 …`), which `--quiet` silences; data a command was asked for (`ls`, `show`,
/// `cat`, `stats`, `jobs ls`, `validate`'s verdict, `verify`'s problems, `--json`) is printed
/// whatever `--quiet` says.
protocol ReportsOnStandardOutput {
    var reportOnly: Bool { get }
}

extension AssetCat.Add: ReportsOnStandardOutput { var reportOnly: Bool { true } }
extension AssetCat.Remove: ReportsOnStandardOutput { var reportOnly: Bool { true } }
extension AssetCat.Tag: ReportsOnStandardOutput { var reportOnly: Bool { true } }
extension AssetCat.CollectGarbage: ReportsOnStandardOutput { var reportOnly: Bool { true } }
extension AssetCat.Export: ReportsOnStandardOutput { var reportOnly: Bool { !json } }
extension AssetCat.Import: ReportsOnStandardOutput { var reportOnly: Bool { !json } }
extension AssetCat.Jobs.Run: ReportsOnStandardOutput { var reportOnly: Bool { true } }
extension AssetCat.Jobs.Cancel: ReportsOnStandardOutput { var reportOnly: Bool { true } }
extension AssetCat.Jobs.Retry: ReportsOnStandardOutput { var reportOnly: Bool { true } }

/// The exit statuses of every command, and what each prints: one table, printed by
/// `assetcat exit-codes` and `assetcat help exit-codes`, and in docs/CLI.md.
enum ExitStatus {
    /// Each status and what it means, in order.
    static let table: [(code: Int32, meaning: String)] = [
        (0, "Success."),
        (
            1,
            "Failure: the command could not do what was asked. One line on stderr, `assetcat: MESSAGE`, naming the "
                + "path or ID and saying what to do (no catalog found, no such asset, a file that cannot be read, "
                + "a read-only or damaged catalog, a catalog written by a newer version). Also: `verify` found "
                + "something missing, damaged or unused; `validate` found an invalid bag; `add` could not add a "
                + "file, or stopped at a store error (what it recorded stays); `add` or `import` ran a job that "
                + "failed (what they added stays); `jobs run` had a job that failed."
        ),
        (
            64,
            "Usage error: an unknown command or option, a missing or invalid argument or value. `Error: MESSAGE` "
                + "and the command's usage on stderr (an unknown option: `assetcat: unknown option …`; a search "
                + "query that cannot be read: `assetcat: search: column N: …`). Nothing was done."
        ),
        (
            130,
            "Interrupted by Ctrl-C (SIGINT): what was complete is committed, nothing is left half-done, and a "
                + "line on stderr says how far it got (`jobs run --watch` runs until Ctrl-C: it exits 0)."
        ),
        (143, "Stopped by SIGTERM (`timeout`, `kill`, systemd): as for Ctrl-C."),
    ]

    /// The table as text: each status, then its meaning wrapped and indented.
    static var text: String {
        table.map { entry in
            let code = String(entry.code)
            return code + String(repeating: " ", count: 5 - code.count) + wrap(entry.meaning, width: 74, indent: 5)
        }.joined(separator: "\n")
    }

    /// `text` in lines of at most `width` characters, every line after the first indented.
    static func wrap(_ text: String, width: Int, indent: Int) -> String {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        if !line.isEmpty { lines.append(line) }
        return lines.joined(separator: "\n" + String(repeating: " ", count: indent))
    }
}

extension AssetCat {
    struct ExitCodes: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "exit-codes",
            abstract: "Print the exit statuses of every command and what each prints.",
            discussion: "Every command exits with one of these statuses:\n\n" + ExitStatus.text)

        func run() throws {
            print(ExitStatus.text)
        }
    }
}
