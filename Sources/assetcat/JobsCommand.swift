import ArgumentParser
import AssetCatalog
import Foundation

extension AssetCat {
    struct Jobs: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "jobs",
            abstract: "Durable jobs: archive indexing, deferred digests, metadata, and a pipeline's own.",
            subcommands: [List.self, Run.self, Cancel.self, Retry.self],
            defaultSubcommand: List.self
        )
    }
}

extension AssetCat.Jobs {
    struct List: CatalogCommand {
        static let access = CatalogAccess.read
        static let configuration = CommandConfiguration(
            commandName: "ls", abstract: "List jobs with their state and progress.")

        @OptionGroup var options: CatalogOption
        @Option(help: "Only the jobs of this asset (its ID).") var asset: Int64?
        @Option(help: "Only the jobs in this state: queued, running, succeeded, failed or cancelled.")
        var state: String?
        @Flag(help: "Print one JSON array.") var json = false

        func validate() throws {
            if let state, JobState(rawValue: state) == nil {
                throw ValidationError("Unknown --state '\(state)': use queued, running, succeeded, failed or cancelled")
            }
        }

        func run(_ catalog: Catalog) async throws {
            let jobs = try catalog.jobs.list(
                asset: asset.map { AssetID($0) }, state: state.flatMap(JobState.init(rawValue:)))
            if json { return try Terminal.json(jobs) }
            let table = Table(
                columns: [
                    .init(title: "ID", width: 7, right: true), .init(title: "KIND", width: 14),
                    .init(title: "ASSET", width: 7, right: true), .init(title: "STATE", width: 10),
                    .init(title: "PROGRESS", width: 8, right: true), .init(title: "ATTEMPTS", width: 8, right: true),
                ],
                lastTitle: "ERROR")
            print(table.header)
            for job in jobs {
                let cells = [
                    String(job.id), job.kind, "\(job.asset)", job.state.rawValue,
                    "\(Int(job.progress * 100))%", String(job.attempts),
                ]
                print(table.line(cells, last: DisplayText.escapingControls(job.error ?? "")))
            }
        }
    }
}

extension AssetCat.Jobs {
    struct Run: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "run", abstract: "Work the queue until it is empty (or keep going with --watch).")

        @OptionGroup var options: CatalogOption
        @Flag(help: "Keep running, taking new jobs as they are queued, until Ctrl-C.") var watch = false

        func run(_ catalog: Catalog) async throws {
            if watch {
                let interrupt = Interrupt()
                catalog.jobs.start()
                let events = catalog.jobs.events()
                _ = try? await interrupt.run {
                    for await job in events where job.state != .running {
                        let error = job.error.map { "  \(DisplayText.escapingControls($0))" } ?? ""
                        print("\(job.id)  \(job.kind)  asset \(job.asset)  \(job.state.rawValue)\(error)")
                        fflush(nil)  // as it happens, in a pipe too (`jobs run --watch | tee log`)
                    }
                }
                catalog.jobs.stop()
                return
            }
            let summary = try await Interrupt().run {
                try await catalog.jobs.runUntilIdle { job in
                    if job.state == .running, job.progress > 0 {
                        Terminal.progress("job \(job.id) \(job.kind)", done: Int(job.progress * 100), total: 100)
                    }
                }
            }
            print(
                "ran jobs: \(summary.succeeded) succeeded, \(summary.failed) failed, \(summary.cancelled) cancelled"
                    + (summary.retried > 0 ? ", \(summary.retried) retried" : ""))
            fflush(nil)  // the queue is done: say so now, not after the store has closed
            if summary.wasInterrupted {
                Terminal.note("interrupted: the jobs that were running are queued again; `assetcat jobs run` resumes")
                throw Interrupt.exitCode
            }
            if summary.failed > 0 { throw ExitCode.failure }
        }
    }
}

extension AssetCat.Jobs {
    struct Cancel: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "cancel", abstract: "Cancel a queued or running job.")

        @OptionGroup var options: CatalogOption
        @Argument(help: "The job's ID.") var id: Int64

        func run(_ catalog: Catalog) async throws {
            let job = try catalog.jobs.cancel(id)
            print("\(job.id)  \(job.kind)  asset \(job.asset)  \(job.state.rawValue)")
        }
    }
}

extension AssetCat.Jobs {
    struct Retry: CatalogCommand {
        static let access = CatalogAccess.write
        static let configuration = CommandConfiguration(
            commandName: "retry", abstract: "Queue a failed or cancelled job again.")

        @OptionGroup var options: CatalogOption
        @Argument(help: "The job's ID.") var id: Int64

        func run(_ catalog: Catalog) async throws {
            let job = try catalog.jobs.retry(id)
            print("\(job.id)  \(job.kind)  asset \(job.asset)  \(job.state.rawValue)")
        }
    }
}
