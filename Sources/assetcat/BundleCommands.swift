import ArgumentParser
import AssetCatalog
import BagIt
import Foundation

/// A progress bar for bundle work, drawn on a terminal only.
private func drawBundleProgress(_ label: String) -> @Sendable (BundleProgress) -> Void {
    { p in
        guard p.bytesTotal > 0 else { return }
        let percent = Int(p.bytesDone * 100 / p.bytesTotal)
        Terminal.progress(label, done: percent, total: 100, bytes: p.bytesDone)
    }
}

extension AssetCat {
    struct Export: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "export",
            abstract: "Write assets as a BagIt bag: .tar, .tar.gz, .tar.zst, .zip, or a directory.",
            discussion: """
                Selects every asset unless IDs (or names), --tag or --kind narrow it; an archive brings its \
                members. Every byte is re-hashed on the way out: a missing or damaged asset stops the export \
                (no partial bundle is left) unless --skip-damaged leaves it out and lists it. Payload paths \
                are written in NFC; names that differ only by letter case get numbered paths of their own, so \
                that the bag extracts on case-insensitive file systems (a warning says so); the bag's records \
                keep every name.
                """)

        @OptionGroup var options: CatalogOption
        @Argument(help: "The bundle to write (its extension picks the format; none: a directory).") var bundle: String
        @Argument(help: "IDs or names of the assets to export (default: all).") var assets: [String] = []
        @Option(help: "tar, tar.gz, tar.zst, tar.xz, zip or dir (default: from the bundle's extension).")
        var format: String?
        @Option(name: .customLong("tag"), help: "Only assets with this tag (repeatable: all of them).")
        var tags: [String] = []
        @Option(name: .customLong("not-tag"), help: "Only assets without this tag (repeatable: none of them).")
        var notTags: [String] = []
        @Option(help: "Only assets of this kind.") var kind: String?
        @Option(
            help: "gzip, xz and zip 0–9, zstd 1–22 (default: the format's; xz 6 takes about 140 MB, 2 about 60 MB).")
        var compressionLevel: Int?
        @Flag(help: "Leave out missing or damaged assets (listed on stderr) instead of stopping.") var skipDamaged =
            false
        @Flag(
            name: [.customShort("f"), .long],
            help: "Replace a file, or a folder that is not empty, at the bundle's path.")
        var force = false
        @Flag(help: "Print a JSON summary.") var json = false

        func validate() throws {
            if let format, BagFormat(name: format) == nil {
                throw ValidationError("Unknown format '\(format)': use tar, tar.gz, tar.zst, tar.xz, zip or dir")
            }
        }

        func run(_ catalog: Catalog) async throws {
            let selection = try ExportSelection(
                ids: assets.isEmpty ? nil : AssetReference.resolve(assets, in: catalog),
                query: AssetQuery(tags: tags, excludingTags: notTags, kind: kind))
            let exportOptions = ExportOptions(
                format: format.flatMap(BagFormat.init(name:)), skipsDamaged: skipDamaged,
                compressionLevel: compressionLevel, replacesExisting: force)
            let path = URL(fileURLWithPath: bundle).standardizedFileURL.path
            let result: ExportResult
            do {
                result = try await Interrupt().run {
                    try await catalog.export(
                        to: path, selection: selection, options: exportOptions, progress: drawBundleProgress("export"))
                }
            } catch is CancellationError {
                Terminal.note("interrupted: no bundle was written")
                throw Interrupt.exitCode
            }
            for skip in result.skipped {
                Terminal.note("left out \(skip.id) \(DisplayText.quoted(skip.name)): \(skip.reason)")
            }
            if let first = result.apartByCase.items.first {
                // Always: a bag's layout must not depend on where it will be extracted.
                let one = result.apartByCase.count == 1
                Terminal.note(
                    "warning: \(plural(result.apartByCase.count, "asset name")) \(one ? "differs" : "differ") from "
                        + "another only by letter case: the bag holds \(one ? "it" : "them") at other paths, such as "
                        + "\(DisplayText.quoted(first.name)) at \(DisplayText.quoted(first.payload)), so that it extracts "
                        + "on case-insensitive file systems; its records keep the names")
            }
            if json { return try Terminal.json(result) }
            print(
                "exported \(plural(result.assets, "asset")) (\(Terminal.formatBytes(result.bytes))) to "
                    + DisplayText.quoted(result.path)
                    + (result.skipped.isEmpty ? "" : "; left out \(result.skipped.count) missing or damaged"))
        }
    }
}

extension AssetCat {
    struct Import: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "import",
            abstract: "Import a BagIt bag (a directory or any archive), all or nothing.",
            discussion: """
                Every payload file is checked against every manifest before one transaction adopts them all; \
                an invalid or hostile bag changes nothing. A name the catalog already has (with other content) \
                is a conflict: --on-conflict skip (the default) keeps the catalog's, replace deletes it, \
                keep-both imports the bundle's as 'name (2)'.

                A bag from another tool has no records: its archives get indexing jobs and its images metadata \
                jobs, as an add would, and import runs them before it returns (a job that fails is named on stderr, \
                exit 1; Ctrl-C leaves them queued for `assetcat jobs run`). With --queue-only it queues them and returns.
                """)

        @OptionGroup var options: CatalogOption
        @Argument(help: "The bag: a directory, or a .tar, .tar.gz, .tar.zst, .zip, … archive.") var bundle: String
        @Option(name: .customLong("on-conflict"), help: "skip, replace or keep-both.") var onConflict = "skip"
        @Flag(help: "Print a JSON summary.") var json = false
        @Flag(help: "Queue the jobs for a foreign bag's assets and return without running them.")
        var queueOnly = false

        func validate() throws {
            guard ConflictPolicy(rawValue: onConflict) != nil else {
                throw ValidationError("Unknown --on-conflict '\(onConflict)': use skip, replace or keep-both")
            }
        }

        func run(_ catalog: Catalog) async throws {
            let path = URL(fileURLWithPath: bundle).standardizedFileURL.path
            let result: ImportResult
            let jobs: QueuedJobs.Outcome?
            let runsJobs = !queueOnly
            do {
                // One interruptible task: the import, then the jobs it queued.
                (result, jobs) = try await Interrupt().run { () async throws -> (ImportResult, QueuedJobs.Outcome?) in
                    let result = try await catalog.importBundle(
                        from: path, options: ImportOptions(onConflict: ConflictPolicy(rawValue: onConflict)!),
                        progress: drawBundleProgress("import"))
                    guard runsJobs else { return (result, nil) }
                    let queued = QueuedJobs(ids: result.queuedJobIDs, count: result.queuedJobCount)
                    return (result, try await queued.run(in: catalog))
                }
            } catch let error as CatalogError where error.code == .cancelled {
                Terminal.note("interrupted: nothing was imported")
                throw Interrupt.exitCode
            }
            if let jobs, jobs.wasInterrupted {
                Terminal.note(
                    "interrupted: imported \(plural(result.importedCount, "asset")); the jobs not finished for them "
                        + "are queued again — `assetcat jobs run` finishes them")
                throw Interrupt.exitCode
            }
            if json {
                try Terminal.json(result)
                fflush(nil)
                if let jobs { QueuedJobs.report(jobs, in: catalog) }
                if let jobs, jobs.failedCount > 0 { throw ExitCode.failure }
                return
            }
            var parts = ["imported \(plural(result.importedCount, "asset")) from \(DisplayText.quoted(path))"]
            if !result.alreadyPresent.isEmpty { parts.append("\(result.alreadyPresent.count) already present") }
            if !result.skipped.isEmpty { parts.append("\(result.skipped.count) skipped (name conflicts)") }
            if !result.replaced.isEmpty { parts.append("\(result.replaced.count) replaced") }
            if !result.renamed.isEmpty { parts.append("\(result.renamed.count) renamed") }
            print(parts.joined(separator: "; "))
            if jobs == nil { printQueued(result.queuedJobCount) }
            for skip in result.skipped.items {
                Terminal.note("skipped \(DisplayText.quoted(skip.name)): \(skip.reason)")
            }
            noteOmitted(result.skipped, "skipped")
            for rename in result.renamed.items {
                Terminal.note("renamed \(DisplayText.quoted(rename.from)) -> \(DisplayText.quoted(rename.to))")
            }
            noteOmitted(result.renamed, "renamed")
            for name in result.storedAsManaged.items {
                Terminal.note(
                    "stored \(DisplayText.quoted(name)) in the catalog: its referenced file is not on this machine")
            }
            noteOmitted(result.storedAsManaged, "stored in the catalog")
            guard let jobs else { return }
            fflush(nil)
            QueuedJobs.report(jobs, in: catalog)
            if jobs.failedCount > 0 { throw ExitCode.failure }
        }
    }
}

/// Says how many of a result's list its notes left out.
private func noteOmitted(_ list: CappedList<some Any>, _ what: String) {
    if list.omitted > 0 { Terminal.note("and \(list.omitted) more \(what)") }
}

extension AssetCat {
    struct Validate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "validate",
            abstract: "Check a BagIt bag (a directory or an archive) without importing it.",
            discussion:
                "Exit 0 for a valid bag; otherwise its problems, one per line naming the file (the first 1,000, then "
                + "how many more), and exit 1. What a valid bag does that other tools accept (an md5sum '*' marker, a "
                + "path listed twice with the same checksum, a missing .DS_Store) is printed first, one line each, "
                + "prefixed 'warning:'.")

        @Argument(help: "The bag: a directory or an archive.") var bundle: String
        @Flag(help: "Print a JSON report.") var json = false
        @OptionGroup var output: OutputOptions

        func run() async throws {
            output.apply(reportOnly: false)
            try await reportingErrors {
                let report = try Catalog.validateBundle(at: bundle, progress: drawBundleProgress("validate"))
                if !json {
                    for warning in report.warnings { print("warning: " + DisplayText.escapingControls(warning)) }
                    let omitted = report.warningCount - report.warnings.count
                    if omitted > 0 { print("warning: … and \(plural(omitted, "more warning"))") }
                }
                if json {
                    try Terminal.json(report)
                } else if report.isValid {
                    print(
                        "\(DisplayText.quoted(bundle)) is valid: BagIt \(report.version ?? "?"), \(plural(report.payloadFiles, "payload file")), "
                            + Terminal.formatBytes(report.payloadBytes))
                } else {
                    for problem in report.problems { print(DisplayText.escapingControls(problem)) }
                    let omitted = report.problemCount - report.problems.count
                    if omitted > 0 { print("… and \(plural(omitted, "more problem"))") }
                    Terminal.note(
                        "\(DisplayText.quoted(bundle)) is not a valid bag: \(plural(report.problemCount, "problem"))")
                }
                if !report.isValid { throw ExitCode.failure }
            }
        }
    }
}
