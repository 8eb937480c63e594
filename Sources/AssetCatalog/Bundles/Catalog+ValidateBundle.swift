public import ArchiveIO
import BagIt
import Foundation
import Locking
import Logging
@_spi(Testing) import Persistence

#if canImport(Glibc)
    import Glibc
#endif

extension Catalog {
    /// Checks a bag — a directory or an archive — as an import would, without importing:
    /// the declaration, every manifest both ways, checksums, `Payload-Oxum`, this
    /// catalog's records file when present, and the safety of every archive member.
    ///
    /// - Returns: The findings; ``BundleValidation/problems`` lists the problems (the first
    ///   of them when there are many), one line each, naming its file, and
    ///   ``BundleValidation/problemCount`` counts them all.
    /// - Throws: ``CatalogError`` `notFound` when there is nothing at `path`.
    public static func validateBundle(
        at path: String, policy: ExtractionPolicy = .default, progress: (@Sendable (BundleProgress) -> Void)? = nil
    ) throws -> BundleValidation {
        guard FileManager.default.fileExists(atPath: path) else {
            throw CatalogError(.notFound, "No such file or directory: \(path)", path: path)
        }
        var validation = BundleValidation(
            bundle: path, isValid: false, version: nil, payloadFiles: 0, payloadBytes: 0, hasRecords: false,
            problems: [], problemCount: 0)
        // Our records come before the payload: they are read into a temporary database on
        // another core meanwhile.
        let early = EarlyRecords()
        let records = RecordsFile.Tap(directory: NSTemporaryDirectory()) { early.start($0) }
        defer { early.wait() }  // the reading never outlives the call
        do {
            let bag = try BagReader.read(
                at: path, options: BagReadOptions(policy: policy), tagSink: records.sink,
                progress: { p in
                    progress?(
                        BundleProgress(
                            filesDone: p.filesDone, filesTotal: 0, bytesDone: p.bytesDone, bytesTotal: p.bytesTotal))
                })
            var problems = bag.problems
            var problemCount = bag.problemCount
            let root = bag.bagName.isEmpty ? "" : bag.bagName + "/"
            if records.file?.path == root + BundleRecords.fileName {
                validation.hasRecords = true
                do {
                    let scratch = try early.scratch()
                    let check = BundleRecords.Check(scratch)
                    try bag.payload.forEach { try check.visit($0) }
                    let found = try check.finish()
                    problems += found.first
                    problemCount += found.count
                    // As import: the members the records give an archive, once all else is right.
                    if problemCount == 0 {
                        let copies = ArchiveCopies(bag)
                        let members = try BundleRecords.MemberCheck.problems(
                            scratch, policy: policy, archiveFile: { _, payload in try copies.copy(payload) },
                            isCancelled: { false })
                        problems += members.first
                        problemCount += members.count
                    }
                } catch let error as BagError {
                    problems.append(error)
                    problemCount += 1
                }
            }
            validation.version = bag.version
            validation.payloadFiles = bag.payload.count
            validation.payloadBytes = bag.payloadBytes
            validation.problems = problems.map(\.description)
            validation.problemCount = problemCount
            validation.warnings = bag.warnings.map(\.description)
            validation.warningCount = bag.warningCount
        } catch let error as BagError {
            validation.problems = [error.description]
            validation.problemCount = 1
        }
        validation.isValid = validation.problemCount == 0
        return validation
    }
}

/// Our records file, read into a temporary database on another thread while the rest of the
/// bag is read (for ``Catalog/validateBundle(at:policy:progress:)``, which does not run in a task).
private final class EarlyRecords: @unchecked Sendable {
    private let done = DispatchGroup()
    /// Set by `start`, on the reading thread; the result is written before `done` is left.
    private var started = false
    private var result: Result<ImportScratch, any Error>?

    /// Starts reading `file`, once.
    func start(_ file: RecordsFile) {
        guard !started else { return }
        started = true
        done.enter()
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            result = Result {
                let scratch = try ImportScratch()
                try file.load(into: scratch, isCancelled: { false })
                return scratch
            }
            done.leave()
        }
    }

    /// The records, read; throws what stopped the reading.
    func scratch() throws -> ImportScratch {
        done.wait()
        guard let result else { throw BagError(.io, file: BundleRecords.fileName, "was not read") }
        return try result.get()
    }

    /// Waits for a reading in progress.
    func wait() { done.wait() }
}
