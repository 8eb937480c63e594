import ArchiveIO
import Crypto
import Foundation
import Persistence

/// The job kinds every catalog has.
enum BuiltInProcessors {
    static let digest = "digest"
    static let indexArchive = "index-archive"
    static let metadata = "metadata"
    static let thumbnail = "thumbnail"
    /// The job an import from another tool queues for an asset of each kind, as an add does
    /// (by default): an archive is indexed, an image's metadata read.
    static let jobForKind = ["archive": indexArchive, "image": metadata]

    static func register(on queue: JobQueue) {
        queue.register(DigestProcessor(), as: digest)
        queue.register(ArchiveIndexProcessor(), as: indexArchive)
        queue.register(MetadataProcessor(), as: metadata)
        queue.register(ThumbnailProcessor(), as: thumbnail)
    }
}

/// Hashes an asset added with hashing deferred, and records its digest and size.
struct DigestProcessor: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput {
        var hasher = DigestAccumulator()
        var size: Int64 = 0
        let total = max(1, job.asset.size)
        try job.readAsset { chunk in
            hasher.add(chunk)
            size += Int64(chunk.count)
            job.reportProgress(Double(size) / Double(total))
        }
        let digest = hasher.hex
        let measured = size
        var output = JobOutput()
        output.apply = { asset, _ in
            asset.sha256 = digest
            asset.size = measured
        }
        return output
    }
}

/// Media type from magic bytes; pixel size from PNG, GIF and JPEG headers.
struct MetadataProcessor: JobProcessor {
    func run(_ job: JobContext) async throws -> JobOutput {
        let head = try job.readPrefix(maxBytes: 256 << 10)
        var metadata = ["mediaType": MediaType.of(head)]
        if let (width, height) = MediaType.pixelSize(head) {
            metadata["width"] = String(width)
            metadata["height"] = String(height)
        }
        return JobOutput(metadata: metadata)
    }
}

/// Records one asset per member of an archive asset, committing them in
/// batches as it reads (so members appear while a large archive is indexed).
struct ArchiveIndexProcessor: JobProcessor {
    static let batchSize = 256

    func run(_ job: JobContext) async throws -> JobOutput {
        let catalog = job.catalog
        guard let path = catalog.contentPath(of: job.asset) else {
            throw CatalogError(.notFound, "Asset \(job.asset.id) has no file to index")
        }
        // Members recorded by an earlier, interrupted attempt are kept, not duplicated.
        let existing = try catalog.withContext { context -> Set<String> in
            let archive = context.object(with: job.asset.objectID) as? Asset
            let members = try context.fetch(
                FetchRequest<Asset>(predicate: \.storage == Storage.member && \.archive == archive))
            return Set(members.map { "\($0.memberOrdinal)\u{0}\($0.member ?? "")" })
        }
        var pending: [IngestedMember] = []
        var count = 0
        let total = max(1, job.asset.size)
        try withArchiveReaderReporting(path, job: job) { reader in
            var seen: [[UInt8]: Int] = [:]
            var files: [[UInt8]: (digest: String, size: Int64)] = [:]
            var lastReport = ContinuousClock.now
            while let entry = try reader.nextEntry() {
                try job.checkCancellation()
                job.catalog.content.faults.reach(.slowJobs)
                let key = Array(entry.path.utf8)
                var member: IngestedMember?
                if entry.kind == .hardlink, let target = entry.linkTarget, let linked = files[Array(target.utf8)] {
                    member = IngestedMember(
                        path: entry.path, ordinal: seen[key, default: 0], digest: linked.digest, size: linked.size)
                } else if entry.kind == .file {
                    var hasher = DigestAccumulator()
                    var size: Int64 = 0
                    try reader.readData { chunk in
                        // A member may be gigabytes: a deletion stops the run within a chunk,
                        // and its progress shows every half second.
                        try job.checkCancellation()
                        job.catalog.content.faults.reach(.slowJobs)
                        hasher.add(chunk)
                        size += Int64(chunk.count)
                        if ContinuousClock.now - lastReport > .milliseconds(500) {
                            lastReport = .now
                            job.reportProgress(Double(reader.compressedBytesRead) / Double(total))
                        }
                    }
                    let digest = hasher.hex
                    files[key] = (digest, size)
                    member = IngestedMember(
                        path: entry.path, ordinal: seen[key, default: 0], digest: digest, size: size)
                }
                guard let member else { continue }
                seen[key, default: 0] += 1
                count += 1
                if !existing.contains("\(member.ordinal)\u{0}\(member.path)") { pending.append(member) }
                if pending.count >= Self.batchSize {
                    try record(pending, job: job, progress: Double(reader.compressedBytesRead) / Double(total))
                    pending = []
                }
            }
        }
        if !pending.isEmpty { try record(pending, job: job, progress: 1) }
        return JobOutput(metadata: ["members": String(count)])
    }

    /// Commits a batch of members, only if the archive still exists and the job is still ours.
    private func record(_ members: [IngestedMember], job: JobContext, progress: Double) throws {
        try job.checkCancellation()
        try job.catalog.withContext { context in
            let archive = try context.existingObject(with: job.asset.objectID, as: Asset.self)
            let row = try context.existingObject(with: job.catalog.jobs.jobObjectID(job.jobID), as: Job.self)
            guard row.state == .running, row.owner == job.runToken else { throw CancellationError() }
            row.progress = progress
            row.resultRequiresAsset = job.asset.id.rawValue
            for member in members {
                let m = Asset(context: context)
                m.name = member.path
                m.kind = ContentKind.of(member.path)
                m.storage = .member
                m.size = member.size
                m.sha256 = member.digest
                m.member = member.path
                m.memberOrdinal = member.ordinal
                m.archive = archive
                m.tags = archive.tags
            }
            try context.save()
        }
        job.reportProgress(progress)
    }

    private func withArchiveReaderReporting(_ path: String, job: JobContext, _ body: (ArchiveReader) throws -> Void)
        throws
    {
        do {
            try withArchiveReader(at: path, body)
        } catch let error as CatalogError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch let error as ArchiveError {
            var reason = error.libarchiveMessage ?? error.message
            if let member = error.member { reason = "member '\(member)': \(reason)" }
            throw CatalogError(.archive, "Could not index the archive \(job.asset.name): \(reason)", cause: error)
        }
    }
}

/// Media types from the first bytes of content.
enum MediaType {
    static func of(_ head: [UInt8]) -> String {
        func starts(_ magic: [UInt8], at offset: Int = 0) -> Bool {
            head.count >= offset + magic.count && Array(head[offset..<offset + magic.count]) == magic
        }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts([0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return "image/gif" }
        if starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8) { return "image/webp" }
        if starts(Array("RIFF".utf8)) && starts(Array("WAVE".utf8), at: 8) { return "audio/wav" }
        if starts(Array("%PDF".utf8)) { return "application/pdf" }
        if starts([0x50, 0x4B, 0x03, 0x04]) { return "application/zip" }
        if starts([0x1F, 0x8B]) { return "application/gzip" }
        if starts([0x28, 0xB5, 0x2F, 0xFD]) { return "application/zstd" }
        if starts([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00]) { return "application/x-xz" }
        if starts(Array("BZh".utf8)) { return "application/x-bzip2" }
        if starts([0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C]) { return "application/x-7z-compressed" }
        if starts(Array("ustar".utf8), at: 257) { return "application/x-tar" }
        if starts(Array("fLaC".utf8)) { return "audio/flac" }
        if starts(Array("OggS".utf8)) { return "audio/ogg" }
        if starts(Array("ID3".utf8)) { return "audio/mpeg" }
        if starts(Array("ftyp".utf8), at: 4) { return "video/mp4" }
        if !head.contains(0), String(validating: head, as: UTF8.self) != nil || isUTF8Prefix(head) {
            return "text/plain"
        }
        return "application/octet-stream"
    }

    /// Valid UTF-8 but for a character cut at the end of the prefix read.
    private static func isUTF8Prefix(_ bytes: [UInt8]) -> Bool {
        for cut in 1...3 where bytes.count > cut {
            if String(validating: bytes.dropLast(cut), as: UTF8.self) != nil { return true }
        }
        return false
    }

    /// Width and height from a PNG, GIF or JPEG header.
    static func pixelSize(_ b: [UInt8]) -> (Int, Int)? {
        func be16(_ i: Int) -> Int { Int(b[i]) << 8 | Int(b[i + 1]) }
        func be32(_ i: Int) -> Int { be16(i) << 16 | be16(i + 2) }
        switch of(b) {
        case "image/png" where b.count >= 24: return (be32(16), be32(20))
        case "image/gif" where b.count >= 10: return (Int(b[6]) | Int(b[7]) << 8, Int(b[8]) | Int(b[9]) << 8)
        case "image/jpeg":
            var i = 2
            while i + 9 < b.count {
                guard b[i] == 0xFF else { return nil }
                let marker = b[i + 1]
                if marker == 0xD8 || marker == 0x01 || (0xD0...0xD7).contains(marker) {
                    i += 2
                    continue
                }
                let isFrame = (0xC0...0xCF).contains(marker) && ![0xC4, 0xC8, 0xCC].contains(marker)
                if isFrame { return (be16(i + 7), be16(i + 5)) }
                i += 2 + be16(i + 2)
            }
            return nil
        default: return nil
        }
    }
}

extension JobContext {
    /// The first `maxBytes` of the asset (all of it if smaller).
    func readPrefix(maxBytes: Int) throws -> [UInt8] {
        struct Enough: Error {}
        var bytes: [UInt8] = []
        do {
            try readAsset { chunk in
                bytes.append(contentsOf: chunk.prefix(maxBytes - bytes.count))
                if bytes.count >= maxBytes { throw Enough() }
            }
        } catch is Enough {}
        return bytes
    }
}

extension Catalog {
    /// The file holding an asset's bytes (managed or referenced; `nil` for members).
    func contentPath(of record: AssetRecord) -> String? {
        switch record.storage {
        case .managed: content.objectPath(record.sha256)
        case .referenced: record.path
        case .member: nil
        }
    }
}
