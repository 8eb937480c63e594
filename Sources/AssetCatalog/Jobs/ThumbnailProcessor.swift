import ArchiveIO
import BagIt
import CFileSync
import Crypto
public import Foundation
import Glibc
import Persistence
import Thumbnails

/// Makes an image's thumbnail — a WebP of at most 256 pixels a side (``Thumbnailer``) — and
/// records it on the asset (``Asset/thumbnail``). An image that is not one, is damaged or
/// is too large to decode in bounded memory (a decompression bomb) fails the job with the
/// reason in one line.
struct ThumbnailProcessor: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput {
        let thumbnail = try job.catalog.withOpenedContent(of: job) { descriptor in
            do {
                return try Thumbnailer.make(fromDescriptor: descriptor)
            } catch let error as ThumbnailError {
                throw CatalogError(.invalidArgument, "no thumbnail: \(error.message)")
            }
        }
        job.reportProgress(0.5)
        try job.checkCancellation()
        try job.catalog.recordThumbnail(thumbnail.bytes, of: job)
        return JobOutput()
    }
}

extension Catalog {
    /// Calls `body` with a descriptor of the job's asset's bytes, open for reading: its file,
    /// opened once and checked to be a regular file; for an archive member, an unnamed file in
    /// the catalog's staging folder that the member is streamed into, which goes with its
    /// descriptor (a crash leaves nothing behind).
    func withOpenedContent<T>(of job: JobContext, _ body: (Int32) throws -> T) throws -> T {
        if let path = contentPath(of: job.asset) {
            let file: (fd: Int32, size: Int64)
            do {
                file = try FileAccess.openRegularFile(atPath: path)
            } catch {
                throw ContentStore.openFailure(error, path: path)
            }
            defer { Glibc.close(file.fd) }
            return try body(file.fd)
        }
        let writer = cfilesync_open_unnamed(content.staging, 0o600)
        guard writer >= 0 else {
            throw CatalogError(
                .io, "Could not make a temporary file in \(content.staging): \(ContentStore.errnoText())",
                path: content.staging)
        }
        defer { Glibc.close(writer) }
        try job.readAsset { chunk in try ContentStore.writeAll(writer, chunk, path: content.staging) }
        // The unnamed file, opened again for reading (it was opened write-only).
        let reader = Glibc.open("/proc/self/fd/\(writer)", O_RDONLY | O_CLOEXEC)
        guard reader >= 0 else {
            throw CatalogError(.io, "Could not read back a temporary file: \(ContentStore.errnoText())")
        }
        defer { Glibc.close(reader) }
        return try body(reader)
    }

    /// Stores `bytes` as the thumbnail of the job's asset, so that no step lost leaves a
    /// file that nothing points at, nor a record that points at nothing:
    ///
    /// 1. The file's removal is journaled first, and committed (a ``RemovalPlan``): should a
    ///    later step fail, or the process die, the sweep removes the file unless an asset
    ///    uses it.
    /// 2. The bytes are stored in `objects/`, by their SHA-256, with a staged link (a pin).
    /// 3. The asset's ``Asset/thumbnail`` is set — only while this run is the job's current
    ///    one — by a save that certifies the file under the content lock, putting it back
    ///    from its pin should a sweep have taken it since step 2 (``ContentPins``); the
    ///    asset's earlier thumbnail, if any, is journaled in the same save. Another save of
    ///    the asset committed since this one read it (the `metadata` job's result) makes it
    ///    read the asset again and set the thumbnail over that change.
    /// 4. The sweep: the plan of step 1 goes, the file staying (the asset uses it).
    func recordThumbnail(_ bytes: [UInt8], of job: JobContext) throws {
        let digest = ContentStore.hex(SHA256.hash(data: bytes))
        try storeErrors {
            try withContext { context in
                RemovalPlan(context: context).sha256 = digest
                try context.save()
            }
        }
        let stored = try content.ingest { write in try bytes.withUnsafeBytes { try write($0) } }
        defer { content.unpin(stored.pin) }
        try storeErrors {
            try withRetriedContext { context in
                context[ContentPins.self] = [digest: stored.pin]
                let asset = try context.existingObject(with: job.asset.objectID, as: Asset.self)
                let row = try context.existingObject(with: jobs.jobObjectID(job.jobID), as: Job.self)
                guard row.state == .running, row.owner == job.runToken else { throw CancellationError() }
                asset.thumbnail = digest
                content.faults.reach(.beforeThumbnailCommit)
                try context.save()
            }
        }
        runtime.didCommitRemovals()
    }

    /// The file of the thumbnail of the asset `id` (a WebP, `image/webp`), or `nil`
    /// when it has none (not an image, or its `thumbnail` job has not run or failed).
    ///
    /// The file is shared by every asset with the same thumbnail: open it read-only. It is
    /// valid while the asset keeps this thumbnail; after its removal commits the file may go.
    ///
    /// - Throws: ``CatalogError/Code/notFound`` when no asset has `id`.
    public func thumbnailURL(of id: AssetID) throws -> URL? {
        try asset(id).thumbnail.map { URL(fileURLWithPath: content.objectPath($0)) }
    }
}
