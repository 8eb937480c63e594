import Foundation
import Locking

/// Staged content: the pin of each content (a staged copy, or a second link to its object,
/// that keeps the bytes should a removal take the object before a commit), by SHA-256.
protocol StagedContent: Sendable {
    /// Calls `body` with the pin and SHA-256 of each content, a page at a time.
    func forEachPin(_ body: ([(path: String, digest: String)]) throws -> Void) throws
    /// Those of `digests` it has.
    func holds(_ digests: Set<String>) throws -> Set<String>
}

/// Staged content listed in memory: an add's, a batch of files at a time.
struct PinTable: StagedContent {
    /// The pin of each content, by SHA-256.
    let pins: [String: String]

    func forEachPin(_ body: ([(path: String, digest: String)]) throws -> Void) throws {
        try body(pins.map { ($0.value, $0.key) })
    }

    func holds(_ digests: Set<String>) throws -> Set<String> { digests.filter { pins[$0] != nil } }
}

/// Staged content on its way into `objects/` for the assets one save records, with its
/// pins (``StagedContent``) — and, for an import, the adoption itself, on another thread
/// while the rows are built and written, in two stages. The import waits for the first (the
/// staged bytes made durable, a `syncfs` that for a large bundle can take seconds) before
/// its transaction takes the write lock. The links, and the `syncfs` that makes them
/// durable, overlap the transaction's writes; its check before the commit waits for them,
/// then looks for every content (``Asset/willInsertRows(_:in:effects:)``).
final class ContentAdoption: @unchecked Sendable {
    private let staged: any StagedContent
    /// Left once the stage is over; not entered for content already in `objects/`.
    private let durable = DispatchGroup()
    private let linked = DispatchGroup()
    /// What stopped each stage: written before its group is left, read after it is waited for.
    private var durableFailure: (any Error)?
    private var linkFailure: (any Error)?

    /// Starts adopting `staged`'s content from its pins.
    init(content: ContentStore, adopting staged: some StagedContent) {
        self.staged = staged
        durable.enter()
        linked.enter()
        DispatchQueue.global(qos: .userInitiated).async { [self] in
            do {
                try content.makeStagedDurable()
            } catch {
                durableFailure = error
            }
            durable.leave()
            if durableFailure == nil {
                do {
                    try content.linkAll(from: staged)
                    content.faults.reach(.beforeImportCommit)
                } catch {
                    linkFailure = error
                }
            }
            linked.leave()
        }
    }

    /// Content already in `objects/` (an add adopts before it records), held by its pins.
    init(holding staged: some StagedContent) {
        self.staged = staged
    }

    /// Waits until the staged bytes are durable; throws what stopped that.
    func waitUntilDurable() throws {
        durable.wait()
        if let durableFailure { throw durableFailure }
    }

    /// Waits until the content is linked and the links durable; throws what stopped it.
    func wait() throws {
        linked.wait()
        if let failure = durableFailure ?? linkFailure { throw failure }
    }

    /// Those of `digests` the adoption holds (a pin of each): ``requireAll(in:)`` checks them.
    func covering(_ digests: Set<String>) throws -> Set<String> { try staged.holds(digests) }

    private let checkClaimed = Locked(false)

    /// `true` the first time only: the save that writes an adoption's rows, in batches,
    /// plans one ``requireAll(in:)``.
    func claimCheck() -> Bool {
        checkClaimed.withLock { claimed in
            defer { claimed = true }
            return !claimed
        }
    }

    /// Checks, under the store's write lock, that `objects/` has every content of the
    /// adoption, putting back from its pin what a removal took meanwhile.
    func requireAll(in content: ContentStore) throws {
        try staged.forEachPin { page in
            for pin in page { try content.requireObject(pin.digest, for: "an imported asset", pin: pin.path) }
        }
    }
}
