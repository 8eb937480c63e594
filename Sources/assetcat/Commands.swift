import ArgumentParser
import AssetCatalog
import Dispatch
import Foundation

extension AssetCat {
    struct Add: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "add",
            abstract: "Add files, directories (--recursive) and archives (one record per member).",
            discussion: """
                Files are copied into the catalog unless --reference is given. Ctrl-C (or SIGTERM) commits what is \
                complete, and the same command run again (after a kill too) adds the rest: it skips the files the \
                interrupted add recorded, unless they changed since. A file whose name is not UTF-8 is named on stderr and \
                not added (exit 1). A store that fails, or cannot be reached (a PostgreSQL connection lost is tried \
                again for the store URL's reconnect_timeout, default 10 s), stops the add with one line (exit 1); what \
                it recorded stays, and the same command run again adds the rest.

                Then add runs the jobs it queued — indexing archives (one record per member), reading image \
                metadata, making image thumbnails — and only those, before it returns: a job that fails is named on stderr with its asset and \
                error (exit 1). Ctrl-C (or SIGTERM) while they run leaves the files added and the jobs \
                queued for `assetcat jobs run`. With --queue-only (or --defer-hash), add queues them and returns, for \
                pipelines whose workers run them.
                """
        )

        @OptionGroup var options: CatalogOption
        @Argument(help: "Files, directories or archives to add.") var paths: [String]
        @Flag(help: "Record files where they are instead of copying them.") var reference = false
        @Option(name: .customLong("tag"), help: "Tag the added assets (repeatable).") var tags: [String] = []
        @Flag(name: [.customShort("r"), .long], help: "Add the files under directories.") var recursive = false
        @Flag(help: "With --reference: record files without reading them; a digest job hashes them later.")
        var deferHash = false
        @Flag(help: "Queue the jobs (archive indexing, metadata, thumbnails, digests) and return without running them.")
        var queueOnly = false

        func validate() throws {
            if deferHash && !reference { throw ValidationError("--defer-hash goes with --reference.") }
        }

        func run(_ catalog: Catalog) async throws {
            let addOptions = AddOptions(
                mode: reference ? .reference : .copy, tags: tags, recursive: recursive, defersHashing: deferHash,
                keepsRecords: false)
            let paths = paths
            // Deferred digests are deferred: --defer-hash leaves its jobs queued, as --queue-only does.
            let runsJobs = !queueOnly && !deferHash
            // An add that stops at a store error ends its bar before the error's line.
            defer { Terminal.endProgress() }
            // One interruptible task for both phases: the files, then the jobs they queued.
            let (result, jobs) = try await Interrupt().run { () async throws -> (AddResult, QueuedJobs.Outcome?) in
                // No bar, no progress: the add then does not read every file's size to total them.
                var progress: (@Sendable (AddProgress) -> Void)?
                if Terminal.drawsProgress {
                    progress = { p in
                        Terminal.progress(
                            "adding", done: p.filesDone, total: p.filesTotal, bytes: p.bytesDone, endsLine: !runsJobs)
                    }
                }
                let result = try await catalog.add(paths, options: addOptions, progress: progress)
                guard runsJobs, !result.wasCancelled else { return (result, nil) }
                return (
                    result,
                    try await QueuedJobs(ids: result.queuedJobIDs, count: result.queuedJobCount).run(in: catalog)
                )
            }
            Terminal.endProgress()
            // An add records files; their archives' members come from the jobs it queues.
            let files = result.addedCount
            for failure in result.failures { Terminal.error(failure.message) }
            if result.resumedInterruptedAdd {
                print(
                    "resumed an interrupted add of the same paths: skipped \(plural(result.skippedCount, "file")) "
                        + "it had recorded")
            }
            if result.wasCancelled {
                let queued =
                    result.queuedJobCount > 0
                    ? "; `assetcat jobs run` runs the \(plural(result.queuedJobCount, "job")) queued for them" : ""
                Terminal.note(
                    "interrupted: added \(files) of \(plural(result.filesFound, "file")) (0 archive members); "
                        + "nothing was left half-done — run the same command again to add the rest\(queued)")
                throw Interrupt.exitCode
            }
            if let jobs, jobs.wasInterrupted {
                Terminal.note(
                    "interrupted: added \(plural(files, "file")); the jobs not finished for them are queued again — "
                        + "`assetcat jobs run` finishes them")
                throw Interrupt.exitCode
            }
            print("added \(plural(files, "file"))")
            guard let jobs else {
                printQueued(result.queuedJobCount)
                if !result.failures.isEmpty { throw ExitCode.failure }
                return
            }
            fflush(nil)  // the summary first, then the failed jobs on stderr
            QueuedJobs.report(jobs, in: catalog)
            if !result.failures.isEmpty || jobs.failedCount > 0 { throw ExitCode.failure }
        }
    }
}

/// "1 file", "2 files".
func plural(_ count: Int, _ noun: String) -> String {
    "\(count) \(noun)\(count == 1 ? "" : "s")"
}

/// Says how many jobs a command queued, and how to run them.
func printQueued(_ jobs: Int) {
    if jobs > 0 { print("queued \(plural(jobs, "job")); run them with `assetcat jobs run`") }
}

extension AssetCat {
    struct List: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List assets.")

        @OptionGroup var options: CatalogOption
        @Option(name: .customLong("tag"), help: "Only assets with this tag (repeatable: all of them).")
        var tags: [String] = []
        @Option(name: .customLong("not-tag"), help: "Only assets without this tag (repeatable: none of them).")
        var notTags: [String] = []
        @Option(help: "Only assets of this kind (image, audio, video, text, document, archive, data).")
        var kind: String?
        @Flag(help: "Print one JSON array.") var json = false
        @Flag(help: "Print one compact JSON object per line.") var jsonl = false
        @Option(help: "Only these fields in --json or --jsonl output, comma-separated (id,name,size).")
        var fields: String?
        @Option(help: "The order (added: the date added); ties are listed by ID.")
        var sort = SortOption(.id)

        func validate() throws {
            if json && jsonl { throw ValidationError("Give --json or --jsonl, not both.") }
            guard let fields else { return }
            if !json && !jsonl { throw ValidationError("--fields goes with --json or --jsonl.") }
            do { _ = try AssetRecord.Field.list(fields) } catch let error as CatalogError {
                throw ValidationError(error.message)
            }
        }

        func run(_ catalog: Catalog) async throws {
            let query = AssetQuery(tags: tags, excludingTags: notTags, kind: kind)
            if json || jsonl {
                // Streamed a page at a time and written in blocks; the first record at once.
                try catalog.writeJSON(
                    query, listing: jsonl ? .lines : .array, fields: try fields.map(AssetRecord.Field.list),
                    orderedBy: sort.order
                ) { try Terminal.output(Data($0)) }
                return
            }
            print(Table.header)
            try catalog.forEachListedAsset(query, orderedBy: sort.order) { print(Table.row($0)) }
        }
    }
}

/// The `ls` columns: fixed widths, the name last (it may contain spaces; a member's is
/// `ARCHIVE-NAME:member/path`).
/// Fixed-width text tables: each table's columns are declared once, so its header and rows can't drift apart.
struct Table {
    struct Column {
        let title: String
        let width: Int
        var right = false
    }

    /// The padded columns; the last, unpadded column follows them.
    let columns: [Column]
    let lastTitle: String

    var header: String { line(columns.map(\.title), last: lastTitle) }

    func line(_ values: [String], last: String) -> String {
        zip(columns, values).map { Table.pad($1, $0.width, right: $0.right) + "  " }.joined() + last
    }

    static let assets = Table(
        columns: [
            Column(title: "ID", width: 7, right: true), Column(title: "KIND", width: 8),
            Column(title: "STORAGE", width: 10), Column(title: "SIZE", width: 12, right: true),
            Column(title: "SHA256", width: 12),
        ],
        lastTitle: "NAME")

    static let header = assets.header

    /// A member's name is where it lives: `ARCHIVE-NAME:member/path`.
    static func row(_ listed: ListedAsset) -> String {
        let a = listed.record
        return assets.line(
            ["\(a.id)", a.kind, a.storage.rawValue, String(a.size), String(a.sha256.prefix(12))],
            last: DisplayText.quoted(listed.location))
    }

    static func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - text.count))
        return right ? fill + text : text + fill
    }
}

extension AssetCat {
    struct Show: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one asset in full.")

        @OptionGroup var options: CatalogOption
        @Argument(help: "An asset ID or name.") var asset: String
        @Flag(help: "Print JSON.") var json = false

        func run(_ catalog: Catalog) async throws {
            let a = try AssetReference.resolve(asset, in: catalog)
            if json { return try Terminal.json(a) }
            // Names, paths, tags and metadata come from files: quoted if they hold control characters.
            var lines: [(String, String)] = [
                ("id", "\(a.id)"), ("name", DisplayText.quoted(a.name)), ("kind", a.kind),
                ("storage", a.storage.rawValue), ("size", String(a.size)), ("sha256", a.sha256),
            ]
            if let path = a.path { lines.append(("path", DisplayText.quoted(path))) }
            if let archive = a.archive { lines.append(("archive", "\(archive)")) }
            if a.member != nil { lines.append(("member", DisplayText.quoted(try catalog.listed(a).location))) }
            lines.append(("tags", a.tags.map(DisplayText.quoted).joined(separator: ", ")))
            for (key, value) in a.metadata.sorted(by: { $0.key < $1.key }) {
                lines.append((DisplayText.quoted("metadata.\(key)"), DisplayText.quoted(value)))
            }
            // FoundationEssentials' format style: ISO8601DateFormatter made an ICU formatter (0.7 ms).
            lines += [("created", a.created.formatted(.iso8601)), ("modified", a.modified.formatted(.iso8601))]
            for (key, value) in lines { print(Table.pad(key + ":", 10) + value) }
        }
    }
}

extension AssetCat {
    struct Cat: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(
            commandName: "cat",
            abstract: "Write an asset's bytes (archive members too) to stdout.")

        @OptionGroup var options: CatalogOption
        @Argument(help: "An asset ID or name.") var asset: String

        func run(_ catalog: Catalog) async throws {
            try catalog.read(AssetReference.resolve(asset, in: catalog).id) { chunk in try Terminal.output(Data(chunk))
            }
        }
    }
}

extension AssetCat {
    struct Remove: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "rm", abstract: "Delete assets; their files go only after the deletion has committed.")

        @OptionGroup var options: CatalogOption
        /// The first reference as ArgumentParser parsed it; the rest are ``BulkArguments/rest()``.
        @Argument(help: "Asset IDs or names.") var assets: [String] = []
        @Option(
            name: .customLong("tag"),
            help:
                "Every asset with this tag (and the members of archives among them), in one deletion (repeatable: all of them)."
        )
        var tags: [String] = []
        @Option(name: .customLong("not-tag"), help: "With --tag: leave out assets with this tag (repeatable).")
        var notTags: [String] = []
        @Option(
            help: ArgumentHelp(
                "Read asset IDs or names from FILE, one a line ('-' reads standard input); empty lines are skipped.",
                valueName: "FILE"))
        var fromFile: String?
        @Flag(name: [.customShort("n"), .long], help: "Show what would be removed; change nothing.") var dryRun = false

        func validate() throws {
            if fromFile != nil {
                guard tags.isEmpty && notTags.isEmpty && assets.isEmpty else {
                    throw ValidationError("Give --from-file FILE alone, without asset IDs, names or --tag.")
                }
                return
            }
            if tags.isEmpty && assets.isEmpty {
                throw ValidationError(
                    notTags.isEmpty
                        ? "Give asset IDs or names, or --tag TAG."
                        : "--not-tag narrows --tag: give --tag TAG too (rm never selects by --not-tag alone).")
            }
            if !tags.isEmpty && !assets.isEmpty {
                throw ValidationError("Give asset IDs or names, or --tag TAG, not both.")
            }
            if !notTags.isEmpty && !assets.isEmpty { throw ValidationError("--not-tag goes with --tag, not with IDs.") }
        }

        func run(_ catalog: Catalog) async throws {
            if !tags.isEmpty {
                // Listed a page at a time; deleted in one transaction, a page of rows at a time
                // (no objects loaded); the counts are the library's.
                let query = AssetQuery(tags: tags, excludingTags: notTags)
                // A dry run refuses what the removal would, before it lists anything.
                let result = try catalog.removeAll(query, dryRun: dryRun)
                if dryRun {
                    try catalog.forEachAsset(query) { a in
                        print("would remove \(a.id)  \(DisplayText.quoted(a.name))")
                    }
                }
                let tagged = tags.map(DisplayText.quoted).joined(separator: " and ")
                let excluded =
                    notTags.isEmpty ? "" : " but not " + notTags.map(DisplayText.quoted).joined(separator: " or ")
                let members = result.members > 0 ? " (and \(plural(result.members, "archive member")))" : ""
                let files = result.files.map { " and \(plural($0, "file")) from objects/" } ?? ""
                print(
                    "\(dryRun ? "would remove" : "removed") \(plural(result.assets, "asset")) tagged "
                        + "\(tagged)\(excluded)\(members)\(files)")
                return
            }
            // Resolved a page of references at a time; removed as rows, in one transaction.
            let ids = try catalog.assetIDs(
                for: fromFile.map(AssetReference.lines(ofFile:)) ?? assets + BulkArguments.rest())
            let result = try dryRun ? catalog.remove(ids, dryRun: true) : catalog.removeRows(ids)
            let verb = dryRun ? "would remove" : "removed"
            for a in result.removed { print("\(verb) \(a.id)  \(DisplayText.quoted(a.name))") }
            print(
                "\(verb) \(plural(result.removed.count, "asset")) and \(plural(result.filesRemoved.count, "file")) "
                    + "from objects/")
        }
    }
}

extension AssetCat {
    struct Tag: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(commandName: "tag", abstract: "Add or remove tags.")

        @OptionGroup var options: CatalogOption
        /// The first reference as ArgumentParser parsed it; the rest are ``BulkArguments/rest()``.
        @Argument(help: "Asset IDs or names.") var assets: [String]
        @Option(name: .customLong("add"), help: "A tag to add (repeatable).") var add: [String] = []
        @Option(name: .customLong("remove"), help: "A tag to remove (repeatable).") var remove: [String] = []

        func validate() throws {
            guard !add.isEmpty || !remove.isEmpty else { throw ValidationError("Give --add TAG or --remove TAG.") }
        }

        func run(_ catalog: Catalog) async throws {
            // Resolved a page of references at a time, as `rm`'s are.
            let ids = try catalog.assetIDs(for: assets + BulkArguments.rest())
            for a in try catalog.tag(ids, adding: add, removing: remove) {
                let tags = a.tags.map(DisplayText.quoted).joined(separator: ", ")
                print("\(a.id)  \(DisplayText.quoted(a.name))  [\(tags)]")
            }
        }
    }
}

extension AssetCat {
    struct Verify: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract:
                "Re-hash content; report missing and damaged assets, and content no asset uses (exit 1 if any). Changes nothing."
        )

        @OptionGroup var options: CatalogOption
        /// The first reference as ArgumentParser parsed it; the rest are ``BulkArguments/rest()``.
        @Argument(help: "Asset IDs or names (default: all).") var assets: [String] = []
        @Flag(help: "Print JSON.") var json = false
        @Flag(help: "Check only the catalog's store (its full integrity check), not the content.")
        var storeOnly = false

        func run(_ catalog: Catalog) async throws {
            if storeOnly {
                let problems = try catalog.verifyStore()
                // Counted again only where the store is sound: damage is for a restore first.
                let statistics = problems.isEmpty ? try catalog.repairStatistics() : []
                let searchIndex = problems.isEmpty ? try catalog.repairSearchIndex() : []
                if json {
                    try Terminal.json([
                        "storeProblems": problems, "statisticsFixed": statistics, "searchIndexFixed": searchIndex,
                    ])
                } else {
                    for problem in problems { print("store  \(problem)") }
                    for line in statistics + searchIndex { print(line) }
                    if !options.output.quiet {
                        print(
                            problems.isEmpty ? "store: no damage found" : "store: \(plural(problems.count, "problem"))")
                    }
                }
                if !problems.isEmpty { throw ExitCode.failure }
                return
            }
            let ids = assets.isEmpty ? nil : try catalog.assetIDs(for: assets + BulkArguments.rest())
            let report = try await catalog.verify(ids) { done, total in
                Terminal.progress("verifying", done: done, total: total)
            }
            if json {
                try Terminal.json(report)
            } else {
                for problem in report.storeProblems { print("store  \(problem)") }
                for line in report.statisticsFixed + report.searchIndexFixed { print(line) }
                for issue in report.issues {
                    let (name, path) = (DisplayText.quoted(issue.name), DisplayText.quoted(issue.path))
                    print("\(issue.problem.rawValue)  \(issue.id)  \(name)  \(path)")
                }
                let missing = report.issues.filter { $0.problem == .missing }.count
                let damaged = report.issues.filter { $0.problem == .damaged }.count
                let unreadable = report.issues.count - missing - damaged
                if !options.output.quiet {
                    print(
                        "checked \(plural(report.checked, "asset")): \(missing) missing, \(damaged) damaged"
                            + (unreadable > 0 ? ", \(unreadable) unreadable" : ""))
                }
                if report.unreferencedObjects > 0 {
                    print(
                        "\(plural(report.unreferencedObjects, "file")) in objects/ that no asset uses "
                            + "(`assetcat gc` lists them; nothing was removed)")
                }
            }
            if !report.isHealthy { throw ExitCode.failure }
        }
    }
}

extension AssetCat {
    struct CollectGarbage: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "gc", abstract: "Finish pending removals; report files in objects/ that no asset uses.")

        @OptionGroup var options: CatalogOption
        @Flag(help: "Record unreferenced files as assets tagged 'recovered'.") var adopt = false
        @Flag(help: "Remove unreferenced files.") var purge = false

        func validate() throws {
            if adopt && purge { throw ValidationError("Give --adopt or --purge, not both.") }
        }

        func run(_ catalog: Catalog) async throws {
            let report = try catalog.collectGarbage(adopt ? .adopt : purge ? .purge : .report)
            print("finished \(report.pendingRemovalsFinished) pending removals")
            for line in report.statisticsFixed { print(line) }
            for object in report.unreferenced {
                print("unreferenced  \(object.size)  \(DisplayText.quoted(object.path))")
            }
            if adopt { print("adopted \(report.adopted.count) files as assets tagged 'recovered'") }
            if purge { print("purged \(report.purged.count) files") }
            if !adopt && !purge && !report.unreferenced.isEmpty {
                print(
                    "\(report.unreferenced.count) unreferenced files; keep them with --adopt or remove them with --purge"
                )
            }
        }
    }
}

extension AssetCat {
    struct Stats: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(commandName: "stats", abstract: "Counts and sizes.")

        @OptionGroup var options: CatalogOption
        @Flag(help: "Print JSON.") var json = false

        func run(_ catalog: Catalog) async throws {
            let s = try catalog.stats()
            if json { return try Terminal.json(s) }
            print("assets:        \(s.assets) (\(s.managed) managed, \(s.referenced) referenced, \(s.members) members)")
            print("archives:      \(s.archives)")
            print("content:       \(Terminal.formatBytes(s.totalBytes))")
            print("objects/:      \(s.objectFiles) files, \(Terminal.formatBytes(s.objectBytes))")
            print("pending:       \(s.pendingRemovals) removals")
            let kinds = s.kinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            print("kinds:         \(kinds)")
            let tags = s.tags.sorted { $0.key < $1.key }.map { "\(DisplayText.quoted($0.key)) \($0.value)" }
                .joined(separator: ", ")
            print("tags:          \(tags)")
        }
    }
}

/// The value of `ls --sort`, an ``AssetOrder``: a bad value is refused with ArgumentParser's
/// message listing the valid ones.
struct SortOption: ExpressibleByArgument {
    let order: AssetOrder

    init?(argument: String) {
        guard let order = AssetOrder(rawValue: argument) else { return nil }
        self.order = order
    }

    init(_ order: AssetOrder) { self.order = order }

    var defaultValueDescription: String { order.rawValue }
    static var allValueStrings: [String] { AssetOrder.allCases.map(\.rawValue) }
}

extension AssetCat {
    struct Search: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(
            commandName: "search",
            abstract: "Find assets by words and filters.",
            discussion: """
                Words are looked for in names (a member's path, and its archive's name), tags and metadata: \
                every word must match; "a phrase" matches words in order; sun* matches words starting with \
                sun; -word leaves out assets with that word. Filters: tag:T, -tag:T, kind:image, -kind:K, \
                ext:png, -ext:E, storage:managed|referenced|member, archive:NAME (members of that archive), \
                size>10MB (also <, >=, <=, =; B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), added<2026-01-01 (UTC \
                days, or a date and time with its zone). Matches are ranked, the best first, when at most \
                1,000 assets match a query with words; otherwise they come in ID order.
                """)

        @OptionGroup var options: CatalogOption
        @Argument(help: "The query (several arguments are one query, joined by spaces).")
        var query: [String]
        @Option(help: "How many matches a page shows.") var limit = 20
        @Option(help: "Which page to show (1 is the first).") var page = 1
        @Flag(help: "Show every match, not a page.") var all = false
        @Flag(help: "Print one JSON array.") var json = false
        @Flag(help: "Print one compact JSON object per line.") var jsonl = false
        @Option(help: "Only these fields in --json or --jsonl output, comma-separated (id,name,size).")
        var fields: String?

        var text: String { query.joined(separator: " ") }

        func validate() throws {
            if json && jsonl { throw ValidationError("Give --json or --jsonl, not both.") }
            if limit < 1 { throw ValidationError("--limit must be 1 or more.") }
            if page < 1 { throw ValidationError("--page must be 1 or more.") }
            if let fields {
                if !json && !jsonl { throw ValidationError("--fields goes with --json or --jsonl.") }
                do { _ = try AssetRecord.Field.list(fields) } catch let error as CatalogError {
                    throw ValidationError(error.message)
                }
            }
            do { _ = try SearchQuery(parsing: text) } catch {
                Terminal.error("search: \(error)")
                throw ExitCode(64)
            }
        }

        func run(_ catalog: Catalog) async throws {
            let search = try SearchQuery(parsing: text)
            let selected = try fields.map(AssetRecord.Field.list)
            if all {
                if json || jsonl {
                    try catalog.writeJSON(found: search, listing: jsonl ? .lines : .array, fields: selected) {
                        try Terminal.output(Data($0))
                    }
                    return
                }
                print(Table.header)
                try catalog.forEachSearchResult(search) { print(Table.row($0)) }
                return
            }
            let found = try catalog.search(search, limit: limit, offset: (page - 1) * limit)
            if json || jsonl {
                var out = JSONRecords(listing: jsonl ? .lines : .array, fields: selected)
                for asset in found.assets { try out.append(asset.record) { try Terminal.output(Data($0)) } }
                try out.finish { try Terminal.output(Data($0)) }
            } else {
                print(Table.header)
                for asset in found.assets { print(Table.row(asset)) }
            }
            if found.hasMore { Terminal.note("more matches: --page \(page + 1), or --all") }
        }
    }
}
