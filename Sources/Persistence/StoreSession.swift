public import Foundation
import Locking

/// A process's registration with a store that several processes (on several hosts) share:
/// a row the other processes can list, and a lock that the store's server holds for as long
/// as the session's own connection lives. Opened with
/// ``PersistentContainer/openSession(label:)``.
///
/// What a session is for: telling, from another process, whether this one is alive
/// (``PersistentContainer/sessions()``), so that the work of a dead one (its staging files,
/// its running jobs) can be taken over (``PersistentContainer/reap(session:cleanup:)``);
/// and fencing: once another process has reaped this session, nothing this process saves
/// commits — every save of its container first checks, inside its transaction, that the
/// session's row is still there, and fails with ``PersistenceError/Code/sessionEnded``
/// when it is not. A partitioned process that was taken for dead therefore cannot commit
/// over the work another process took over.
///
/// A session ends when the program ends it (``end()``, or closing the container), or
/// when its connection is lost (the server restarted or was unreachable, the network
/// dropped it, an administrator ended it) and cannot be taken up again safely: on
/// PostgreSQL a new connection takes the session's lock again and then finds its row still
/// there — no other process reaped it, nor can while the lock is held — tried while the
/// server cannot be reached for the store URL's `reconnect_timeout` (default 10 s; 0:
/// never); the session stays alive meanwhile, its saves still fenced by its row. When it
/// ends, ``state`` says so, the handlers of ``onEnd(_:)`` run and the streams of
/// ``endings()`` yield. After that, every further save of the container fails: the
/// program stops its work and opens the store again (a new container, a new session).
///
/// On PostgreSQL, the lock is a session-level advisory lock on a dedicated connection
/// with TCP keepalives, so a dead host is detected by the server in about 10 seconds. The
/// SQLite store has no sessions (``PersistentContainer/openSession(label:)`` returns
/// `nil`): one file on one host, whose processes tell each other's liveness by their own
/// means (file locks).
public final class StoreSession: Sendable {
    /// How a session ended.
    public struct Ending: Sendable, Hashable, CustomStringConvertible {
        /// Why a session ended.
        public enum Reason: Sendable, Hashable {
            /// The program ended it (``StoreSession/end()``, or the container was closed).
            case ended
            /// Its connection to the store was lost.
            case connectionLost
            /// A save found its row gone: another process reaped it.
            case reaped
        }

        /// Why it ended.
        public var reason: Reason
        /// One line saying what happened.
        public var message: String

        /// An ending for `reason`, said in `message`.
        public init(reason: Reason, message: String) {
            self.reason = reason
            self.message = message
        }

        public var description: String { message }
    }

    /// Whether a session is alive, or how it ended.
    public enum State: Sendable, Hashable {
        /// Open: its lock is held and its row is there (unless another process reaped it
        /// and no save has found out yet).
        case alive
        /// Ended, never to be alive again.
        case ended(Ending)
    }

    /// The session's ID in the store: never reused, whichever process opens the next one.
    public let id: Int64
    /// The label it was opened with (what the program says of itself: host, process).
    public let label: String
    /// When it was opened, by the store's clock.
    public let started: Date

    private let mutable = Locked(Mutable())
    private let ender: @Sendable () -> Void

    private struct Mutable {
        var state = State.alive
        var handlers: [@Sendable (Ending) -> Void] = []
        var reaping: Set<Int64> = []
    }

    /// A session the store opened; `end` gives its row and lock back and closes its
    /// connection (called once, by ``end()``).
    package init(id: Int64, label: String, started: Date, end: @escaping @Sendable () -> Void) {
        self.id = id
        self.label = label
        self.started = started
        ender = end
    }

    /// Whether the session is alive or how it ended.
    public var state: State { mutable.withLock { $0.state } }

    /// Whether the session is alive (``state`` is ``State/alive``).
    public var isAlive: Bool { state == .alive }

    /// How the session ended, or `nil` while it is alive.
    public var ending: Ending? {
        if case .ended(let ending) = state { return ending }
        return nil
    }

    /// Calls `handler` once, when the session ends — at once if it has ended already. The
    /// handler runs on a Dispatch queue of its own, never on the thread that found the end
    /// (which may be the store's I/O): it may call the container.
    public func onEnd(_ handler: @escaping @Sendable (Ending) -> Void) {
        let ended: Ending? = mutable.withLock { mutable in
            guard case .ended(let ending) = mutable.state else {
                mutable.handlers.append(handler)
                return nil
            }
            return ending
        }
        if let ended { DispatchQueue.global().async { handler(ended) } }
    }

    /// A stream that yields how the session ended, once, and then finishes.
    public func endings() -> AsyncStream<Ending> {
        let (stream, continuation) = AsyncStream.makeStream(of: Ending.self)
        onEnd { ending in
            continuation.yield(ending)
            continuation.finish()
        }
        return stream
    }

    /// Ends the session: its row is deleted, its lock given back and its connection closed,
    /// so that other processes no longer list it. The container's saves are no longer
    /// fenced by it, and it may open another session. Ending a session that has ended does
    /// nothing. A save of the container in progress is waited for.
    public func end() {
        guard markEnded(Ending(reason: .ended, message: "session \(id) was ended by its program")) else { return }
        ender()
    }

    /// Records the end; runs the handlers. Returns whether this call ended the session.
    @discardableResult
    package func markEnded(_ ending: Ending) -> Bool {
        let handlers: [@Sendable (Ending) -> Void]? = mutable.withLock { mutable in
            guard mutable.state == .alive else { return nil }
            mutable.state = .ended(ending)
            defer { mutable.handlers = [] }
            return mutable.handlers
        }
        guard let handlers else { return false }
        for handler in handlers { DispatchQueue.global().async { handler(ending) } }
        return true
    }

    /// Marks `id` as being reaped through this session; `false` when it is already.
    package func beginReaping(_ id: Int64) -> Bool {
        mutable.withLock { $0.reaping.insert(id).inserted }
    }

    /// Ends ``beginReaping(_:)``.
    package func endReaping(_ id: Int64) {
        _ = mutable.withLock { $0.reaping.remove(id) }
    }
}

/// A session as another process sees it: ``PersistentContainer/sessions()``.
public struct SessionInfo: Sendable, Hashable {
    /// The session's ID.
    public var id: Int64
    /// The label it was opened with.
    public var label: String
    /// When it was opened, by the store's clock.
    public var started: Date
    /// Whether its lock is held: by its own process, alive, or — for the moment of its
    /// cleanup — by a process reaping it. `false` means its process is gone (it died, or
    /// lost its connection) and it may be reaped.
    public var isAlive: Bool

    package init(id: Int64, label: String, started: Date, isAlive: Bool) {
        self.id = id
        self.label = label
        self.started = started
        self.isAlive = isAlive
    }
}

/// What ``PersistentContainer/reap(session:cleanup:)`` did.
public enum ReapOutcome: Sendable, Hashable {
    /// The session was dead: its row was deleted (fencing it), then the cleanup ran.
    case reaped
    /// The session was dead and its row already gone (it ended cleanly, or an earlier
    /// reaper fenced it and may have died before its cleanup ended): the cleanup ran, so
    /// it must be idempotent.
    case alreadyFenced
    /// Its lock is held — the session is alive, or another reaper is reaping it now (in
    /// this process or another), or it is this container's own: nothing was done.
    case alive
    /// No session with this ID was ever opened on the store: nothing was done.
    case neverOpened
}

extension PersistentContainer {
    /// Opens a session on the store, labelled `label` (what other processes will list:
    /// host and process, say), or returns `nil` when the store has none.
    ///
    /// On PostgreSQL: a dedicated connection (not the store's), with TCP keepalives (idle 5
    /// s, then every second, 3 probes: a host that dies or is cut off is detected by the
    /// server in about 8 to 10 seconds), holds a session-level advisory lock keyed by the
    /// session's ID, and the session's row is inserted into `_persistence_sessions`. From
    /// then on every save of this container is fenced by the session (see
    /// ``StoreSession``). When the connection is lost, the session is taken up again on a new
    /// one only if its lock can be taken again and its row is still there (within the
    /// store URL's `reconnect_timeout`); otherwise it ends. It needs a direct connection to
    /// the server, or a pooler in session mode:
    /// pgbouncer's transaction mode would give the lock to whichever client came next.
    ///
    /// On SQLite it returns `nil`: one file on one host, whose processes keep their own
    /// liveness (file locks); saves are not fenced.
    ///
    /// - Throws: ``PersistenceError`` with code `misuse` when the container already has a
    ///   session (alive, or lost: open the store again), `readOnly` for a store opened
    ///   read-only, or `io`.
    public func openSession(label: String) throws -> StoreSession? {
        try core.store.openSession(label: label)
    }

    /// The session this container opened, alive or lost; `nil` when it has none (or
    /// ended it).
    public var session: StoreSession? { core.store.currentSession }

    /// Every session the store records, in the order of their IDs, and whether each is
    /// alive — for any process, with a session of its own or not. Empty on SQLite.
    ///
    /// A session listed dead stays dead: its lock is gone with its connection, and no one
    /// takes it again but a reaper.
    public func sessions() throws -> [SessionInfo] {
        try core.store.sessions()
    }

    /// Takes over the work of the session `id` if it is dead, through this container's
    /// own session (which holds the dead one's lock meanwhile, so that two reapers exclude
    /// each other):
    ///
    /// 1. takes the session's lock, without waiting: if it is held, returns
    ///    ``ReapOutcome/alive`` and does nothing else;
    /// 2. fences it: deletes its row, in a transaction of its own. That deletion waits for
    ///    the dead session's save in progress, if any (its process may be cut off rather
    ///    than dead), and once it has committed, no save of that process commits again;
    /// 3. runs `cleanup` (remove its staging files, give its jobs back), still holding
    ///    the lock; and
    /// 4. gives the lock back — also when `cleanup` throws, which `reap` then throws.
    ///
    /// If this container's session is lost while `cleanup` runs, the lock has gone with
    /// its connection and another reaper may start: check ``StoreSession/isAlive`` between
    /// steps of a long cleanup.
    ///
    /// - Throws: ``PersistenceError`` with code `misuse` when this container has no live
    ///   session, `unsupported` on SQLite (which has no sessions), `io`; what `cleanup`
    ///   throws.
    @discardableResult
    public func reap(session id: Int64, cleanup: () throws -> Void) throws -> ReapOutcome {
        try core.store.reap(session: id, cleanup: cleanup)
    }
}

extension PersistentStore {
    /// A store without sessions (SQLite): none to open.
    package func openSession(label: String) throws -> StoreSession? { nil }

    /// A store without sessions has none open.
    package var currentSession: StoreSession? { nil }

    /// A store without sessions lists none.
    package func sessions() throws -> [SessionInfo] { [] }

    /// A store without sessions reaps none.
    package func reap(session id: Int64, cleanup: () throws -> Void) throws -> ReapOutcome {
        throw PersistenceError(
            .unsupported, "The store at \(url.path) keeps no sessions: there is no session \(id) to reap")
    }
}
