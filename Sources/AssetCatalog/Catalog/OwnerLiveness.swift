import Foundation
import Locking
import Logging
import Persistence

/// Who owns the work a process leaves in a catalog — its staging folder, the jobs it runs
/// (their tokens are `<owner>#<run>`), its journals (``PendingImport``) and temporaries
/// (``PendingTemporary``) — and whether that owner is alive, so that the work of a process
/// that is gone is taken over and the work of a live one is never touched.
///
/// Two meanings, chosen by the store, never by asking which engine it is:
/// - ``FileLockLiveness`` (a SQLite catalog: one host): the owner is the process's staging
///   folder, `<pid>-<id>`, alive while its lock file is locked (`flock`).
/// - ``SessionLiveness`` (a store with sessions, PostgreSQL: several hosts): the owner is
///   the process's session with the store, `s<id>`, alive while the session is
///   (``PersistentContainer/sessions()``). A file lock across hosts of a network file
///   system is no sound test of liveness.
protocol OwnerLiveness: Sendable {
    /// This process, as its work names it.
    var owner: String { get }
    /// The host that host-local records (``PendingTemporary``, ``AddMark``'s key) name on
    /// a catalog that several hosts share; `nil` where only one host uses the catalog.
    var sharedHost: String? { get }
    /// Whether `owner` is alive; `true` when that cannot be told (its work is left alone).
    func isAlive(_ owner: String) -> Bool
    /// The runs of `owner`, gone, that held a job slot when it died (the others were only
    /// claimed ahead); `nil` when that cannot be told, and every run counts as started.
    func runsInSlots(of owner: String) -> Set<Int64>?
    /// Ends this process's ownership: its staging folder goes (the catalog closes).
    func end()
    /// Runs `body` as one pass over many records (a sweep, a reap): liveness is told from
    /// one look at the owners for the whole pass, not one per record.
    func pass<T>(_ body: () throws -> T) rethrows -> T
}

/// ``OwnerLiveness`` by file locks in `staging/` (a SQLite catalog, on one host): the
/// behaviour of every catalog before stores had sessions.
struct FileLockLiveness: OwnerLiveness {
    let content: ContentStore

    var owner: String { content.owner }
    var sharedHost: String? { nil }
    func isAlive(_ owner: String) -> Bool { content.isOwnerAlive(owner) }
    func runsInSlots(of owner: String) -> Set<Int64>? { content.runsInSlots(of: owner) }
    func end() { content.release() }
    /// A lock file is asked where it lies: nothing to share across the pass.
    func pass<T>(_ body: () throws -> T) rethrows -> T { try body() }
}

/// ``OwnerLiveness`` by the sessions of a store that several hosts share.
///
/// This process's owner is `s<id>`, its session's ID (never reused); its staging folder
/// `staging/s<id>/` is made only once the session's row has committed, so a folder whose
/// session is dead (or whose row is gone) is garbage whatever its age: no clock is read.
/// Run slots are marked in `staging/s<id>.slots`, unsynced and unlocked: a process of the
/// same host reads them as they were (the same page cache); one of another host does not
/// trust them (``runsInSlots(of:)``), and counts every run of a dead host as started.
///
/// Owners that are not `s<digits>` (made by a version that staged by file locks) are told
/// alive by their lock file, as then.
final class SessionLiveness: OwnerLiveness {
    let content: ContentStore
    let session: StoreSession
    /// This host (``HostIdentity``).
    let host: String
    private weak let container: PersistentContainer?
    /// The pass in progress (``pass(_:)``), if any.
    private let passState = Locked(PassState())
    /// How many times this process asked the store for its sessions (a test's count).
    let sessionQueries = Locked(0)

    /// What a pass knows: the sessions as its last look listed them, and the sessions no
    /// look made since they were asked about listed (their rows are gone: never again).
    private struct PassState {
        var depth = 0
        var listed: [Int64: SessionInfo]?
        var gone: Set<Int64> = []
    }

    /// What the store says of a session: listed (alive or dead), or not listed at all.
    private enum Listing {
        case listed(SessionInfo)
        case gone
    }

    init(content: ContentStore, session: StoreSession, host: String, container: PersistentContainer) {
        self.content = content
        self.session = session
        self.host = host
        self.container = container
    }

    /// The owner name of session `id`.
    static func owner(of id: Int64) -> String { "s\(id)" }

    /// The session an owner name (or a staging entry, without its `.slots`) names: `s`
    /// followed by decimal digits; `nil` for any other name.
    static func session(of owner: String) -> Int64? {
        let digits = owner.utf8.dropFirst()
        guard owner.utf8.first == UInt8(ascii: "s"), (1...18).contains(digits.count),
            digits.allSatisfy({ (48...57).contains($0) })
        else { return nil }
        return Int64(String(Substring(digits)))
    }

    var owner: String { Self.owner(of: session.id) }
    var sharedHost: String? { host }

    func isAlive(_ owner: String) -> Bool {
        if owner == self.owner { return true }
        guard let id = Self.session(of: owner) else { return content.isOwnerAlive(owner) }
        switch listing(id) {
        case nil: return true
        case .gone: return false
        case .listed(let info): return info.isAlive
        }
    }

    /// Read only for a session of this host that is still listed: a slots file written by
    /// another host may reach this one late, or never (a host that lost power), and a stale
    /// file would read as "no run started" — a job that crashes hosts would never fail.
    func runsInSlots(of owner: String) -> Set<Int64>? {
        guard let id = Self.session(of: owner), case .listed(let info) = listing(id),
            HostIdentity.host(ofLabel: info.label) == host
        else { return nil }
        return content.runsInSlots(of: owner)
    }

    /// Within a pass, the store is asked once, at the first question, and again only for a
    /// session its last look did not list (one may have started since; its records can be
    /// read after that look). What a look told is sound for the whole pass: a session seen
    /// alive is treated as alive (its work is left, as if the question came a moment
    /// earlier); one seen dead never lives again; one not listed by a look made after it was
    /// asked about has its row gone (reaped), and session IDs are never reused. Work taken
    /// over from a dead session goes through the paths that are safe when re-counted, as
    /// without a pass (a journal given up becomes plans, a reap fences first).
    func pass<T>(_ body: () throws -> T) rethrows -> T {
        passState.withLock { $0.depth += 1 }
        defer {
            passState.withLock { state in
                state.depth -= 1
                if state.depth == 0 { state = PassState() }
            }
        }
        return try body()
    }

    /// The sessions of the store, as one query lists them (counted).
    private func listSessions() throws -> [SessionInfo] {
        guard let container else { throw CancellationError() }
        sessionQueries.withLock { $0 += 1 }
        let listed = try container.sessions()
        passState.withLock { state in
            guard state.depth > 0 else { return }
            state.listed = Dictionary(listed.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        }
        return listed
    }

    /// What the store says of session `id` (from the pass's look when it tells), or `nil`
    /// when the store cannot be asked.
    private func listing(_ id: Int64) -> Listing? {
        let known = passState.withLock { state -> Listing? in
            guard state.depth > 0 else { return nil }
            if let info = state.listed?[id] { return .listed(info) }
            return state.gone.contains(id) ? .gone : nil
        }
        if let known { return known }
        guard let listed = try? listSessions() else { return nil }
        guard let info = listed.first(where: { $0.id == id }) else {
            passState.withLock { state in if state.depth > 0 { state.gone.insert(id) } }
            return .gone
        }
        return .listed(info)
    }

    /// Records, for the pass in progress, that session `id` is gone: its reaper fenced it
    /// (deleted its row).
    func fenced(_ id: Int64) {
        passState.withLock { state in if state.depth > 0 { state.gone.insert(id) } }
    }

    /// The sessions whose work is to be taken over: those the store lists dead, and those
    /// that `staging/` names (`s<id>`, `s<id>.slots`) but the store no longer lists (an
    /// earlier reaper fenced them and died before its cleanup ended), each with its host
    /// when it is listed. Not this process's. Other entries of `staging/` are left alone.
    func deadSessions() throws -> [(id: Int64, host: String?)] {
        guard container != nil else { return [] }
        let listed = try listSessions()
        var dead = listed.filter { !$0.isAlive && $0.id != session.id }.map {
            (id: $0.id, host: Optional(HostIdentity.host(ofLabel: $0.label)))
        }
        let known = Set(listed.map(\.id)).union([session.id])
        var named = Set<Int64>()
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: content.staging)) ?? [] {
            let name = entry.hasSuffix(".slots") ? String(entry.dropLast(".slots".count)) : entry
            if let id = Self.session(of: name), !known.contains(id) { named.insert(id) }
        }
        dead += named.sorted().map { (id: $0, host: nil) }
        return dead
    }

    /// The staging folder goes before the session ends: a session that ended is never
    /// alive again, and another host's open would take its folder for garbage.
    func end() {
        content.release()
        session.end()
    }
}

extension CatalogRuntime {
    /// Takes over the work of every dead session of the store (``SessionLiveness/deadSessions()``),
    /// at a writable open; the sweep that follows carries out what this gives up. Each
    /// session goes through ``PersistentContainer/reap(session:cleanup:)``: fenced first (its
    /// process, should it be cut off rather than dead, commits nothing after), and, holding its
    /// lock, in this order:
    /// 1. its running jobs are queued again (``JobQueue/recoverAbandoned(of:runsInSlots:)``);
    ///    a session of another host has every run counted as started (its slots file may be
    ///    stale here);
    /// 2. its import journals are given up (they become removal plans, which remove only
    ///    content no asset uses);
    /// 3. its temporaries are removed where they are this host's (their paths are outside
    ///    the catalog, on the host that made them; another host's stay for that host);
    /// 4. last, its staging folder and slots file: a cleanup cut short is done again by the
    ///    next open, which finds the folder, and every step is idempotent.
    /// A session that is alive, or being reaped by another process, is left alone; a failure
    /// is logged and the session left for the next open.
    func reapDeadSessions(_ sessions: SessionLiveness) {
        sessions.pass { reapDeadSessions(sessions, container) }
    }

    /// ``reapDeadSessions(_:)`` within its pass: one look at the sessions for all of them.
    private func reapDeadSessions(_ sessions: SessionLiveness, _ container: PersistentContainer?) {
        guard let container else { return }
        let dead: [(id: Int64, host: String?)]
        do {
            dead = try sessions.deadSessions()
        } catch {
            logger.warning("the work of processes that are gone stays until the next open: \(error)")
            return
        }
        for (id, host) in dead {
            let owner = SessionLiveness.owner(of: id)
            do {
                let outcome = try container.reap(session: id) {
                    sessions.fenced(id)
                    let sameHost = host == sessions.host
                    let content = content
                    jobs?.recoverAbandoned(of: owner) { sameHost ? content.runsInSlots(of: $0) : nil }
                    try giveUpImports(of: owner)
                    if let failure = try removeAbandonedTemporaries(of: owner) { throw failure }
                    try content.removeStaging(ofSession: owner)
                }
                if outcome != .alive { logger.info("took over the work of session \(id), whose process is gone") }
            } catch {
                logger.warning("the work of session \(id), whose process is gone, stays until the next open: \(error)")
            }
        }
    }

    /// Gives up the import journals of `owner` (they become removal plans).
    private func giveUpImports(of owner: String) throws {
        guard let container else { return }
        let context = container.newBackgroundContext(name: "reaper")
        context[CatalogRuntime.self] = self
        try context.performAndWait {
            for pending in try context.fetch(FetchRequest<PendingImport>(predicate: \.owner == owner)) {
                pending.giveUp()
                try context.save()
            }
        }
    }
}
