import ArchiveIO
import BagIt
import Foundation
import Locking
import Logging
@_spi(Testing) import Persistence

#if canImport(Glibc)
    import Glibc
#endif

extension Catalog {
    /// Adopts the staged content and records every planned asset in one transaction.
    func commitImport(_ plan: inout ImportPlan, staged: StagedFiles, foreign: Bool) throws {
        let scratch = plan.scratch
        // The content of the imported managed assets, each once.
        let adopting = try scratch.planAdoption(hasObject: content.hasObject)
        if let digest = adopting.missing {
            throw CatalogError(
                .invalidArgument, "The bundle has no payload with SHA-256 \(digest); nothing was imported")
        }
        plan.result.bytesStored = adopting.newBytes
        // The content is journaled before it is linked into objects/: should the import not
        // commit (an error, a crash), it is removed again, unless an asset uses it by then.
        // All of it, not only what objects/ lacked when planned: another process may remove
        // that before this one links (or puts back) its own copy. Rows of up to 10,000
        // digests, written in one transaction a row at a time.
        let journal: Range<Int64> = try storeErrors {
            guard adopting.count > 0 else { return 0..<0 }
            return try withContext { context in
                let size = Self.journalRowSize
                let created = Date()
                let ids = try context.insertRows(
                    PendingImport.self, count: (adopting.count + size - 1) / size, batchSize: 1,
                    streaming: { [content] i, row in
                        row[\.owner] = content.owner
                        row[\.created] = created
                        row[\.digests] = try scratch.adoptedContent(chunk: i, size: size).joined(separator: "\n")
                    })
                try context.save()
                return ids
            }
        }
        content.faults.reach(.afterImportJournal)
        // The content is adopted on another thread while the rows are built and written.
        let pins = ImportPins(scratch: scratch, folder: staged.folder)
        let adoption =
            adopting.count == 0 ? ContentAdoption(holding: pins) : ContentAdoption(content: content, adopting: pins)
        do {
            let (ids, count, jobs) = try recordImport(plan, adoption: adoption, foreign: foreign)
            plan.result.importedIDs = ids.map { AssetID($0.lowerBound)...AssetID($0.upperBound) }
            plan.result.importedCount = count
            plan.result.queuedJobIDs = jobs
            plan.result.queuedJobCount = jobs.reduce(0) { $0 + $1.count }
        } catch {
            var error = error
            do { try adoption.wait() } catch let failure { error = failure }  // what stopped the linking comes first
            if !journal.isEmpty { giveUp(journal) }
            if let error = error as? CatalogError { throw error }
            throw CatalogError(.store, "The import could not be recorded, nothing was imported: \(error)", cause: error)
        }
        // The records make the journal moot. Should this fail (or the process die first), a
        // sweep gives the rows up once this process is gone: it removes no content in use.
        content.faults.reach(.afterImportCommit)
        // A row at a time: a batch delete hands each row's values to the hooks.
        do {
            try storeErrors {
                try withContext { context in
                    for rowID in journal {
                        let id = ManagedObjectID(entityName: PendingImport.entityName, rowID: rowID)
                        try context.batchDelete(FetchRequest<PendingImport>(predicate: .objectIDs([id])))
                    }
                }
            }
        } catch {
            runtime.logger.warning("the journal of an import that committed stays until a sweep: \(error)")
        }
    }

    /// Turns the journal of an import (or an add) that did not commit into removal plans, a
    /// row at a time, and sweeps: its content goes, unless another asset uses it by now.
    /// Should that fail for a row, the row loses its owner, so that the next sweep (from any
    /// process) takes it up. Without `warns`, that failure is logged at `info`: the caller's
    /// own error (a store that failed) says the same, and a warning would be a second line.
    func giveUp(_ journal: Range<Int64>, warns: Bool = true) {
        var failure: (any Error)?
        for rowID in journal {
            let id = ManagedObjectID(entityName: PendingImport.entityName, rowID: rowID)
            do {
                try withContext { context in
                    do {
                        try context.existingObject(with: id, as: PendingImport.self).giveUp()
                        try context.save()
                    } catch {
                        context.rollback()
                        try context.existingObject(with: id, as: PendingImport.self).owner = ""
                        try context.save()
                        throw error
                    }
                }
            } catch {
                failure = failure ?? error
            }
        }
        do { _ = try runtime.sweep() } catch { failure = failure ?? error }
        if let failure {
            let message: Logger.Message =
                "content of a failed import stays in objects/ until the next sweep: \(failure)"
            if warns { runtime.logger.warning(message) } else { runtime.logger.info(message) }
        }
    }

    /// Records the planned assets, streamed from the import's entries a page at a time;
    /// returns their IDs, their number and the jobs queued.
    func recordImport(
        _ plan: ImportPlan, adoption: ContentAdoption, foreign: Bool
    ) throws -> ([ClosedRange<Int64>], Int, [ClosedRange<Int64>]) {
        let scratch = plan.scratch
        let topCount = Int(try scratch.value("SELECT count(*) FROM entry AS e WHERE \(ImportScratch.importedTop)"))
        let memberCount = try scratch.importedMemberCount()
        let recorded = try storeErrors {
            try withContext { context in
                // The assets replaced go as rows too, a page at a time, with their members:
                // Asset.willBatchDelete plans the removal of their content and, once the
                // save commits, cancels their jobs.
                try context.deleteRows(Asset.self) { try scratch.replacedPage(after: $0) }
                // The assets as rows, without an object each, produced a page at a time as the
                // save writes them: archives (and every other top-level asset) first, then the
                // members, which point at their archive's ID. Asset.willInsertRows checks them
                // as an insert's hooks would, and that the content of each managed one is in
                // objects/ (the pins put it back).
                context[ContentAdoption.self] = adoption
                let top = RowPages { try scratch.page(where: ImportScratch.importedTop, after: $0) }
                let topIDs = try context.insertRows(
                    Asset.self, count: topCount, batchSize: 1_000,
                    streaming: { i, row in Self.fill(&row, try top.row(i), member: false, archive: nil) })
                try scratch.giveRowIDs(from: topIDs.lowerBound, jobs: foreign)
                let members = RowPages { try scratch.memberPage(after: $0) }
                let memberIDs = try context.insertRows(
                    Asset.self, count: memberCount, batchSize: 1_000,
                    streaming: { i, row in
                        let member = try members.row(i)
                        Self.fill(
                            &row, member, member: true,
                            archive: member.archiveRowID.map {
                                ManagedObjectID(entityName: Asset.entityName, rowID: $0)
                            })
                    })
                // The bytes durable before the transaction takes the write lock (the links
                // follow meanwhile; the check before the commit waits for them).
                try adoption.waitUntilDurable()
                // A bag from another tool: its archives are indexed and its images read, as an
                // add would — jobs as rows too, pointing at the assets' reserved IDs.
                let created = Date()
                let jobRows = RowPages { try scratch.jobPage(after: $0) }
                let jobIDs = try context.insertRows(
                    Job.self, count: foreign ? try scratch.jobCount() : 0, batchSize: 1_000,
                    streaming: { i, row in
                        let entry = try jobRows.row(i)
                        guard let job = BuiltInProcessors.jobForKind[entry.kind] else {
                            throw CatalogError(.store, "The import's entries changed while they were recorded")
                        }
                        row[\.kind] = job
                        row[\.assetID] = entry.rowID
                        row[\.created] = created
                        row[\.updated] = created
                    })
                if content.faults.isActive(.failImportCommit) {
                    container.failNextCommit(with: CatalogError(.io, "the disk is full (injected)"))
                }
                try context.save()
                let ranges = { (ids: [Range<Int64>]) in
                    ids.filter { !$0.isEmpty }.map { $0.lowerBound...($0.upperBound - 1) }
                }
                return (ranges([topIDs, memberIDs]), topCount + memberCount, ranges([jobIDs]))
            }
        }
        if !recorded.2.isEmpty { jobs.wakeWorker() }
        return recorded
    }

    /// The row of a planned asset.
    static func fill(
        _ row: inout BatchInsertRow<Asset>, _ entry: ImportScratch.Row, member: Bool, archive: ManagedObjectID?
    ) {
        var fields = entry.fields
        fields.name = entry.plannedName
        fields.storage = member ? .member : entry.referenced ? .referenced : .managed
        if fields.storage == .member {
            fields.path = nil
            row[\.archive] = archive
        } else {
            fields.member = nil
            fields.memberOrdinal = 0
        }
        fields.write(to: &row)
    }
}
