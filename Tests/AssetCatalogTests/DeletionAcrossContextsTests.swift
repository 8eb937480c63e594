import AssetCatalogTestSupport
import Foundation
import Locking
import Persistence
import Testing

@testable import AssetCatalog

/// However many contexts a deletion passes through, a deletion that never
/// commits leaves the asset's jobs free to run again — once — and one that
/// commits leaves them cancelled (issue: jobs held forever when a deletion
/// saved from a child into its parent was rolled back or discarded).
@Suite struct DeletionAcrossContextsTests {
    /// The ways a deletion can travel, each ending either uncommitted or committed.
    enum Path: String, CaseIterable, CustomTestStringConvertible {
        case childSavedParentRolledBack
        case childSavedParentDiscarded
        case childSavedParentReset
        case grandchildSavedChildSavedParentRolledBack
        case grandchildSavedChildDiscarded
        case childDiscardedUnsaved
        case siblingChildrenOneSavedOneRolledBackParentRolledBack
        case childSavedTwiceAfterParentRollback
        // Committed:
        case childSavedParentSaved
        case grandchildSavedChildSavedParentSaved
        case siblingsOneSavedOneRolledBack
        case siblingsOneRolledBackOneSaved

        var testDescription: String { rawValue }

        var commits: Bool {
            switch self {
            case .childSavedParentSaved, .grandchildSavedChildSavedParentSaved, .siblingsOneSavedOneRolledBack,
                .siblingsOneRolledBackOneSaved:
                true
            default: false
            }
        }
    }

    /// Deletes `ids` in `context` (on its queue).
    static func delete(_ ids: [ManagedObjectID], in context: ManagedObjectContext) throws {
        try context.performAndWait {
            for id in ids { context.delete(try context.existingObject(with: id)) }
        }
    }

    static func save(_ context: ManagedObjectContext) throws { try context.performAndWait { try context.save() } }

    /// Runs `path` for the assets `ids` of `catalog`.
    static func travel(_ path: Path, _ ids: [ManagedObjectID], in catalog: Catalog) throws {
        switch path {
        case .childSavedParentRolledBack, .childSavedParentSaved:
            let parent = catalog.newContext(name: "parent")
            let child = parent.newChildContext(name: "child")
            try delete(ids, in: child)
            try save(child)
            if path.commits { try save(parent) } else { parent.performAndWait { parent.rollback() } }
        case .childSavedParentDiscarded:
            do {
                let parent = catalog.newContext(name: "parent")
                let child = parent.newChildContext(name: "child")
                try delete(ids, in: child)
                try save(child)
            }  // both let go
        case .childSavedParentReset:
            let parent = catalog.newContext(name: "parent")
            let child = parent.newChildContext(name: "child")
            try delete(ids, in: child)
            try save(child)
            parent.performAndWait { parent.reset() }
        case .grandchildSavedChildSavedParentRolledBack, .grandchildSavedChildSavedParentSaved:
            let parent = catalog.newContext(name: "parent")
            let child = parent.newChildContext(name: "child")
            let grandchild = child.newChildContext(name: "grandchild")
            try delete(ids, in: grandchild)
            try save(grandchild)
            try save(child)
            if path.commits { try save(parent) } else { parent.performAndWait { parent.rollback() } }
        case .grandchildSavedChildDiscarded:
            let parent = catalog.newContext(name: "parent")
            do {
                let child = parent.newChildContext(name: "child")
                let grandchild = child.newChildContext(name: "grandchild")
                try delete(ids, in: grandchild)
                try save(grandchild)
            }  // the child (and the grandchild) let go; the parent never saw the deletion
            try save(parent)
        case .childDiscardedUnsaved:
            let parent = catalog.newContext(name: "parent")
            do {
                let child = parent.newChildContext(name: "child")
                try delete(ids, in: child)
            }
            try save(parent)
        case .siblingChildrenOneSavedOneRolledBackParentRolledBack:
            let parent = catalog.newContext(name: "parent")
            let (first, second) = (parent.newChildContext(name: "first"), parent.newChildContext(name: "second"))
            try delete(ids, in: first)
            try delete(ids, in: second)
            try save(first)
            second.performAndWait { second.rollback() }
            parent.performAndWait { parent.rollback() }
        case .childSavedTwiceAfterParentRollback:
            let parent = catalog.newContext(name: "parent")
            let child = parent.newChildContext(name: "child")
            try delete(ids, in: child)
            try save(child)
            parent.performAndWait { parent.rollback() }
            // The child deletes the assets again (it refetches them from the parent), saves,
            // and the parent rolls back again.
            child.performAndWait { child.reset() }
            try delete(ids, in: child)
            try save(child)
            parent.performAndWait { parent.rollback() }
        case .siblingsOneSavedOneRolledBack, .siblingsOneRolledBackOneSaved:
            let (first, second) = (catalog.newContext(name: "first"), catalog.newContext(name: "second"))
            try delete(ids, in: first)
            try delete(ids, in: second)
            if path == .siblingsOneSavedOneRolledBack {
                try save(first)
                second.performAndWait { second.rollback() }
            } else {
                second.performAndWait { second.rollback() }
                try save(first)
            }
        }
    }

    /// A queued job is held while a deletion of its asset is pending, and runs once that
    /// deletion is over without committing; it is cancelled when it commits.
    @Test(arguments: Path.allCases)
    func aQueuedJob(path: Path) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let asset = try #require(try await catalog.add([try t.file("a.txt", "alpha")]).added.first)
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 1, stepDuration: .milliseconds(1)), as: "stepper")
        let id = try catalog.jobs.submit("stepper", for: asset.id)
        try Self.travel(path, [asset.objectID], in: catalog)
        _ = try await catalog.jobs.runUntilIdle()
        let job = try #require(try catalog.jobs.list().first { $0.id == id })
        if path.commits {
            #expect(job.state == .cancelled)
            #expect(log.all.isEmpty)
            #expect(!t.hasObject(asset.sha256))
        } else {
            #expect(job.state == .succeeded)
            #expect(log.all == ["asset \(asset.id) step 1"])  // once
            #expect(t.hasObject(asset.sha256))
            #expect(try catalog.asset(asset.id).metadata["stepped"] == "1")
        }
        try await close(catalog)
    }

    /// The issue's own case: a job running when the deletion comes is interrupted, and
    /// runs again from the start, once, when the deletion does not commit.
    @Test(arguments: [Path.childSavedParentRolledBack, .childSavedParentDiscarded, .childSavedParentReset])
    func aRunningJobRunsAgainOnce(path: Path) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let asset = try #require(try await catalog.add([try t.file("a.txt", "alpha")]).added.first)
        let processor = FirstRunWaits()
        catalog.jobs.register(processor, as: "waits")
        let id = try catalog.jobs.submit("waits", for: asset.id)
        catalog.jobs.start()
        try await eventually { processor.log.contains("run 1") }
        try Self.travel(path, [asset.objectID], in: catalog)
        try await eventually { try catalog.jobs.list().first { $0.id == id }?.state == .succeeded }
        // Interrupted in its first run, then run again from the start, once.
        #expect(processor.log.all == ["run 1", "run 1 cancelled", "run 2"])
        try await close(catalog)
    }

    /// Deleting an archive in a child cascades to its members there and in the parent:
    /// each member's jobs are held once, and run again when the parent rolls back.
    @Test(arguments: [Path.childSavedParentRolledBack, .childSavedParentSaved])
    func archiveMembersCascadedThroughAChild(path: Path) async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        let records = try await catalog.addAndRunJobs([try testArchive(in: t)])
        let archive = try #require(records.first { $0.storage != .member })
        let members = records.filter { $0.storage == .member }
        #expect(members.count == 2)
        let log = StepLog()
        catalog.jobs.register(Stepper(log: log, steps: 1, stepDuration: .milliseconds(1)), as: "stepper")
        let ids = try catalog.jobs.submit(["stepper"], for: members.map(\.id))
        try Self.travel(path, [archive.objectID], in: catalog)
        _ = try await catalog.jobs.runUntilIdle()
        let states = try catalog.jobs.list().filter { ids.contains($0.id) }.map(\.state)
        #expect(states == Array(repeating: path.commits ? .cancelled : .succeeded, count: 2))
        try await close(catalog)
    }

    /// Closes `catalog` off the concurrency pool: `close()` waits for the job worker to
    /// end, which needs a thread of the pool (two on a two-core machine), and cases of
    /// one test run in parallel.
    func close(_ catalog: Catalog) async throws {
        try await offThePool { catalog.close() }
    }

    func eventually(
        _ condition: () throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        if try await !waitUntil(condition) { Issue.record("condition never held", sourceLocation: sourceLocation) }
    }
}

/// A processor whose first run waits until it is cancelled, and whose later runs end at
/// once: whether the run is interrupted depends on the deletion, never on time.
final class FirstRunWaits: JobProcessor {
    let log = StepLog()
    private let runs = Locked(0)

    func run(_ job: JobContext) async throws -> JobOutput {
        let run = runs.withLock { count in
            count += 1
            return count
        }
        log.record("run \(run)")
        if run == 1 {
            do {
                try await Task.sleep(for: .seconds(600))
            } catch {
                log.record("run 1 cancelled")
                throw error
            }
        }
        return JobOutput(metadata: ["runs": String(run)])
    }
}
