import Foundation
import Locking
import Persistence
import PostgresNIO

/// Store sessions (`PersistentContainer.openSession(label:)`) on PostgreSQL: a row of
/// ``PostgreSQLStore/sessionsTable`` and a session-level advisory lock, both taken on a
/// connection of the session's own. That connection is never made again as the store's
/// are (its lock would not follow); a lost one is replaced only under the checks of
/// ``takeUp(_:after:)``: the lock taken again, then the row found still there.
///
/// The lock's key is in the two-`int4` form: (`hashtext('persistence-session:' || schema)`,
/// the session's ID); the named locks' space is `persistence-lock:`, the store's own locks
/// are one `bigint` (`pg_locks.objsubid` 1). IDs come from the sequence
/// ``PostgreSQLStore/sessionSequence`` (an `integer` one: IDs fit the lock's `int4`), never
/// reused. Acquiring takes the lock before it inserts the row, so a row is never visible
/// without its lock held, but by a reaper's: a row whose lock is free is a dead session's.
///
/// Fencing: every save of a store with a session first runs `SELECT … FOR SHARE` on the
/// session's row in its transaction (``fenceSave()``); a reaper deletes the row in a
/// transaction of its own before it cleans up, which waits for that share lock, so a save
/// in progress commits first and every later save finds the row gone.
extension PostgreSQLStore {
    static let sessionsTable = "_persistence_sessions"
    static let sessionSequence = "_persistence_session_ids"

    /// The first half of the keys of this store's session locks.
    var sessionLockSpace: String { "persistence-session:" + location.schema }

    /// Creates the sessions' table and sequence (at every writable open: a store made by an
    /// earlier version gets them too, and the column of the session's writer).
    func createSessionTables() throws {
        try writer.run("CREATE SEQUENCE IF NOT EXISTS \(Self.sessionSequence) AS integer", [])
        try writer.run(
            """
            CREATE TABLE IF NOT EXISTS \(Self.sessionsTable) \
            (id BIGINT PRIMARY KEY, label TEXT NOT NULL, started TIMESTAMPTZ NOT NULL, writer TEXT)
            """, [])
        try writer.run("ALTER TABLE \(Self.sessionsTable) ADD COLUMN IF NOT EXISTS writer TEXT", [])
    }

    /// The message of a save refused because session `id` has ended: another process
    /// reaped it, or (`ending`) its connection was lost and could not be taken up again.
    func sessionEnded(_ id: Int64, _ ending: StoreSession.Ending? = nil) -> PersistenceError {
        if let ending, ending.reason == .connectionLost {
            return PersistenceError(
                .sessionEnded, "This process's \(ending.message); nothing was saved. Open the store again.")
        }
        return PersistenceError(
            .sessionEnded,
            "This process's session \(id) with the store at \(url.absoluteString) ended (another process took over "
                + "its work); nothing was saved. Open the store again.")
    }

    /// Refuses a save before it starts when this store's session has been lost (or reaped).
    func refuseIfSessionLost() throws {
        guard let session = currentSession, let ending = session.ending, ending.reason != .ended else { return }
        throw sessionEnded(session.id, ending)
    }

    /// The fence of a save, first in its transaction on the writer: the session's row,
    /// locked `FOR SHARE` until the transaction ends. When the row is gone (a reaper took
    /// over), the session is marked reaped and the save fails. Nothing without a session.
    ///
    /// With `countingCommit`, the same statement counts the transaction's commit in
    /// `_persistence_commits` (``countCommit()``): one round trip for both, in every save.
    /// `alsoSelecting` (expressions such as `set_config(…)` calls, run for their effect) goes
    /// in the same statement too, or in one of its own when there is no session.
    func fenceSave(countingCommit: Bool = false, alsoSelecting extra: String? = nil) throws {
        guard let session = currentSession, session.isAlive else {
            if let session = currentSession, session.ending?.reason != .ended {
                throw sessionEnded(session.id, session.ending)
            }
            if countingCommit { try countCommit() }
            if let extra { try writer.run("SELECT \(extra)", []) }
            return
        }
        let fence = "SELECT 1\(extra.map { ", \($0)" } ?? "") FROM \(Self.sessionsTable) WHERE id = $1 FOR SHARE"
        if countingCommit { hasCountedCommits.withLock { $0 = true } }
        let rows =
            try countingCommit
            ? writer.run(
                "WITH \"_counted\" AS (\(Self.commitCount("$2"))) \(fence)", [.integer(session.id), .text(writerID)])
            : writer.run(fence, [.integer(session.id)])
        guard rows.rows.isEmpty else { return }
        let ending = StoreSession.Ending(
            reason: .reaped, message: "session \(session.id) was reaped by another process: its row is gone")
        if session.markEnded(ending) { sessionSlot.withLock { $0.connection }?.close() }
        throw sessionEnded(session.id)
    }

    func openSession(label: String) throws -> StoreSession? {
        try requireWritable()
        if sessionSlot.withLock({ $0.storeClosed }) { throw closedRefusal }
        if let session = currentSession {
            let state = session.isAlive ? "has session \(session.id) open" : "lost its session \(session.id)"
            throw PersistenceError(
                .misuse,
                "The container of the store at \(url.absoluteString) \(state): one session a container"
                    + (session.isAlive ? "" : "; open the store again"))
        }
        func newConnection() throws -> PostgreSQLConnection {
            try PostgreSQLConnection(location, logger: logger, session: true, outage: outage)
        }
        let ahead = try? sessionConnection?.take()?.get()
        var connection = try ahead ?? newConnection()
        do {
            let id: Int64
            let started: Double
            do {
                (id, started) = try register(connection, label: label)
            } catch  where connection === ahead {
                // Made at the open, the connection may have been dropped by the server since (a
                // restart while the open waited for another host's schema lock): a new one.
                connection.close()
                connection = try newConnection()
                (id, started) = try register(connection, label: label)
            }
            let session = StoreSession(
                id: id, label: label, started: Date(timeIntervalSince1970: started),
                end: { [weak self] in self?.endSession(id) })
            let refusal: PersistenceError? = sessionSlot.withLock { slot in
                if slot.storeClosed { return closedRefusal }
                guard slot.session == nil else {  // another thread opened one meanwhile: this one goes
                    return PersistenceError(
                        .misuse,
                        "The container of the store at \(url.absoluteString) has a session: one session a container")
                }
                slot.session = session
                slot.connection = connection
                return nil
            }
            if let refusal {
                _ = try? connection.run("DELETE FROM \(Self.sessionsTable) WHERE id = $1", [.integer(id)])
                connection.close()
                throw refusal
            }
            watch(session, on: connection)
            return session
        } catch let error as PersistenceError {
            connection.close()
            throw error
        } catch {
            connection.close()
            throw mapped(error, nil)
        }
    }

    /// Registers a session labelled `label` on its `connection`, in one statement: its ID, its
    /// lock, then its row, which other connections see only once the statement commits, the
    /// lock held. The ID, and when the session started (seconds since 1970).
    private func register(_ connection: PostgreSQLConnection, label: String) throws -> (Int64, Double) {
        try connection.run(
            """
            WITH next AS (SELECT nextval('\(Self.sessionSequence)') AS id), \
            locked AS (SELECT id, pg_advisory_lock(hashtext($1), id::integer) FROM next) \
            INSERT INTO \(Self.sessionsTable) (id, label, started, writer) SELECT id, $2, now(), $3 FROM locked \
            RETURNING id, EXTRACT(EPOCH FROM started)::DOUBLE PRECISION
            """, [.text(sessionLockSpace), .text(label), .text(writerID)]
        ).rows.first!.decode((Int64, Double).self)
    }

    /// The refusal of a session asked of a closed store (or one closed while it was opening).
    private var closedRefusal: PersistenceError {
        PersistenceError(.misuse, "The container of the store at \(url.absoluteString) is closed: it opens no session")
    }

    /// Watches the connection of `session`: when it closes while it is the session's, the
    /// session is taken up again on a new one (``takeUp(_:after:)``), off the event loop.
    private func watch(_ session: StoreSession, on connection: PostgreSQLConnection) {
        connection.onClose { [weak self, weak session] in
            guard let session else { return }
            guard let self, self.sessionSlot.withLock({ $0.session === session && $0.connection === connection }),
                session.isAlive
            else {
                // Ended by its program, or fenced: nothing to take up.
                session.markEnded(self?.lostEnding(session.id, because: nil) ?? Self.lost(session.id, "PostgreSQL"))
                return
            }
            DispatchQueue.global().async { self.takeUp(session, after: connection) }
        }
    }

    /// Takes `session` up again after its connection `lost` closed: on a new connection,
    /// its lock taken again and its row found still there — so no other process reaped it,
    /// nor can while the lock is held (a reaper holds the lock from before it deletes the
    /// row until its cleanup ends). While the server cannot be reached, tried again with
    /// backoff for ``PostgreSQLLocation/reconnectTimeout`` from the first failed attempt of
    /// the outage (the store's ``PostgreSQLStore/outage``). The session
    /// stays alive meanwhile: a save still checks its row in its transaction (the fence),
    /// so one that commits before a reaper's deletion is the reaper's to see. Otherwise the
    /// session ends: `connectionLost` when the server could not be reached in time (or
    /// refused this client), `reaped` when another process holds its lock or deleted its row.
    private func takeUp(_ session: StoreSession, after lost: PostgreSQLConnection) {
        let started = ContinuousClock.now
        let bound = Duration.seconds(location.reconnectTimeout)
        var delay = PostgreSQLConnection.retryDelays.first
        while true {
            guard bound > .zero else {
                session.markEnded(lostEnding(session.id, because: nil))
                return
            }
            do {
                let fresh: PostgreSQLConnection
                switch try lockAgain(session) {
                case .locked(let connection): fresh = connection
                case .rowGone:
                    let ending = StoreSession.Ending(
                        reason: .reaped,
                        message: "session \(session.id) lost its connection to PostgreSQL at \(place), and another "
                            + "process took over its work meanwhile")
                    session.markEnded(ending)
                    return
                case .lockHeld:
                    // Still held by the lost connection's server process (the server has not
                    // seen the loss yet), or by a reaper, which deletes the row: tried again.
                    throw LockStillHeld()
                }
                let installed = sessionSlot.withLock { slot in
                    guard slot.session === session, slot.connection === lost, session.isAlive else { return false }
                    slot.connection = fresh
                    return true
                }
                guard installed else {  // ended (or fenced) meanwhile: the lock goes with the connection
                    fresh.close()
                    return
                }
                outage.end()
                logger.info("session \(session.id): its connection to PostgreSQL at \(place) was made again")
                watch(session, on: fresh)
                return
            } catch  where PostgreSQLConnection.isUnavailable(error) || error is LockStillHeld {
                // The store's outage: its connections, once the session has given up, try once.
                let waited = ContinuousClock.now - (error is LockStillHeld ? started : outage.begin())
                guard waited < bound, session.isAlive else {
                    session.markEnded(lostEnding(session.id, because: error))
                    return
                }
                Thread.sleep(forTimeInterval: min(Duration.seconds(delay), bound - waited) / .seconds(1))
                delay = min(delay * 2, PostgreSQLConnection.retryDelays.longest)
            } catch {
                session.markEnded(lostEnding(session.id, because: error))
                return
            }
        }
    }

    /// What ``lockAgain(_:)`` found.
    private enum LockAgain {
        /// A new session connection that holds the session's lock, its row still there.
        case locked(PostgreSQLConnection)
        /// The session's row is gone: another process reaped it.
        case rowGone
        /// Another server process holds the lock.
        case lockHeld
    }

    private struct LockStillHeld: Error, CustomStringConvertible {
        var description: String { "its lock is still held, by its lost connection or by another process" }
    }

    /// Takes the lock of `session` on a new session connection, and then looks for its row.
    private func lockAgain(_ session: StoreSession) throws -> LockAgain {
        let connection = try PostgreSQLConnection(location, logger: logger, session: true, outage: outage)
        do {
            let locked = try connection.run(
                "SELECT pg_try_advisory_lock(hashtext($1), $2::integer)",
                [.text(sessionLockSpace), .integer(session.id)]
            ).rows.first!.decode(Bool.self)
            let row = "SELECT 1 FROM \(Self.sessionsTable) WHERE id = $1"
            let rowThere = try !connection.run(row, [.integer(session.id)]).rows.isEmpty
            guard locked, rowThere else {
                connection.close()  // and the lock with it
                return rowThere ? .lockHeld : .rowGone
            }
            return .locked(connection)
        } catch {
            connection.close()
            throw error
        }
    }

    /// The server, as messages name it.
    private var place: String { "\(location.host):\(location.port)" }

    /// How a session ends whose connection was lost and not made again (`error`: why).
    private func lostEnding(_ id: Int64, because error: (any Error)?) -> StoreSession.Ending {
        guard let error else { return Self.lost(id, "PostgreSQL at \(place)") }
        let timeout = location.reconnectTimeout
        let within =
            PostgreSQLConnection.isUnavailable(error) || error is LockStillHeld
            ? " within \(timeout.formatted(.number.grouping(.never))) s (the store URL's reconnect_timeout)" : ""
        return StoreSession.Ending(
            reason: .connectionLost,
            message: "session \(id) lost its connection to PostgreSQL at \(place), which could not be made again"
                + "\(within): \(PostgreSQLConnection.reason(error))")
    }

    private static func lost(_ id: Int64, _ server: String) -> StoreSession.Ending {
        StoreSession.Ending(reason: .connectionLost, message: "session \(id) lost its connection to \(server)")
    }

    /// Ends session `id` cleanly (``StoreSession/end()``): its row deleted, its lock given
    /// back, its connection closed. Best effort: a connection already lost has given the
    /// lock back, and its row is deleted through the writer; should that fail too, the row
    /// is a dead session's, for a reaper.
    func endSession(_ id: Int64) {
        let connection: PostgreSQLConnection? = sessionSlot.withLock { slot in
            guard slot.session?.id == id else { return nil }
            defer { (slot.session, slot.connection) = (nil, nil) }
            return slot.connection
        }
        guard let connection else { return }
        let delete = "DELETE FROM \(Self.sessionsTable) WHERE id = $1"
        if (try? connection.run(delete, [.integer(id)])) == nil {
            // Its connection was lost and not taken up yet (``takeUp(_:after:)``): the row
            // goes through the store's writer, which reconnects, rather than wait for a reaper.
            _ = try? writer.run(delete, [.integer(id)])
        }
        _ = try? connection.run(
            "SELECT pg_advisory_unlock(hashtext($1), $2::integer)", [.text(sessionLockSpace), .integer(id)])
        connection.close()
    }

    var currentSession: StoreSession? { sessionSlot.withLock { $0.session } }

    func sessions() throws -> [SessionInfo] {
        try mapErrors(nil) {
            try reader.run(
                """
                SELECT s.id, s.label, EXTRACT(EPOCH FROM s.started)::DOUBLE PRECISION, EXISTS (SELECT 1 FROM pg_locks l \
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                AND l.classid = hashtext($1)::oid AND l.objid = s.id::oid) \
                FROM \(Self.sessionsTable) s ORDER BY s.id
                """, [.text(sessionLockSpace)]
            ).rows.map { row in
                let (id, label, started, alive) = try row.decode((Int64, String, Double, Bool).self)
                return SessionInfo(
                    id: id, label: label, started: Date(timeIntervalSince1970: started), isAlive: alive)
            }
        }
    }

    func reap(session id: Int64, cleanup: () throws -> Void) throws -> ReapOutcome {
        let (mine, connection) = sessionSlot.withLock { ($0.session, $0.connection) }
        guard let mine, let connection, mine.isAlive else {
            throw PersistenceError(
                .misuse,
                "Reaping a session of the store at \(url.absoluteString) needs a live session of one's own: "
                    + "call openSession(label:) first")
        }
        guard id > 0, id <= Int64(Int32.max) else { return .neverOpened }
        // Its own lock is held by this connection, where a try-lock would succeed.
        guard id != mine.id, mine.beginReaping(id) else { return .alive }
        defer { mine.endReaping(id) }
        let key: [StoreValue] = [.text(sessionLockSpace), .integer(id)]
        let locked = try mapErrors(nil) {
            try connection.run("SELECT pg_try_advisory_lock(hashtext($1), $2::integer)", key).rows.first!.decode(
                Bool.self)
        }
        guard locked else { return .alive }
        defer { _ = try? connection.run("SELECT pg_advisory_unlock(hashtext($1), $2::integer)", key) }
        // The fence, committed on its own: waits for the session's save in progress. The same
        // statement folds the session's count of commits into the retired row (as a store's
        // close does): the sum other stores poll stays the same, and the table keeps no row
        // for each process that was killed.
        let deleted = try mapErrors(nil) {
            try connection.run(
                """
                WITH gone AS (DELETE FROM \(Self.sessionsTable) WHERE id = $1 RETURNING writer), \
                counted AS (DELETE FROM \(Self.commitsTable) WHERE writer IN (SELECT writer FROM gone) \
                RETURNING commits), \
                folded AS (INSERT INTO \(Self.commitsTable) (writer, commits) \
                SELECT $2, SUM(commits) FROM counted HAVING COUNT(*) > 0 \
                ON CONFLICT (writer) DO UPDATE SET commits = \(Self.commitsTable).commits + EXCLUDED.commits) \
                SELECT COUNT(*) FROM gone
                """, [.integer(id), .text(Self.retiredWriter)]
            ).rows.first?.decode(Int64.self) ?? 0
        }
        let outcome: ReapOutcome
        if deleted > 0 {
            outcome = .reaped
        } else {
            let issued = try mapErrors(nil) {
                try connection.run(
                    "SELECT is_called AND $1 <= last_value FROM \(Self.sessionSequence)", [.integer(id)]
                ).rows.first!.decode(Bool.self)
            }
            guard issued else { return .neverOpened }
            outcome = .alreadyFenced
        }
        try cleanup()
        return outcome
    }
}

/// A store's session and its connection (``PostgreSQLStore/sessionSlot``).
struct SessionSlot {
    var session: StoreSession?
    var connection: PostgreSQLConnection?
    /// Whether the store was closed: no session is installed any more.
    var storeClosed = false
}
