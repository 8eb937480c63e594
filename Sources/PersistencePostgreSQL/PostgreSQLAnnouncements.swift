import Foundation
import Locking
import Logging
import NIOCore
import Persistence
import PostgresNIO

/// Announcements on PostgreSQL (`SaveEffects.announce(_:payload:)`,
/// `PersistentContainer.announcements()`): `pg_notify` in the announcing save's
/// transaction, which the server delivers only if it commits, and `LISTEN` on a connection
/// of the container's own (``PostgreSQLListener``).
///
/// Why a connection of its own rather than the session's (PostgreSQLSessions.swift): a
/// container without a session gets announcements too, and the session's connection is
/// made again only under its lock's checks (PostgreSQLSessions.swift), whereas a lost
/// `LISTEN` must be made again at once and announced as missed announcements (the re-read
/// marker). It costs one more
/// connection a container, only once `announcements()` is called.
extension PostgreSQLStore {
    /// The channel of the store's announcements: `persistence_` and 8 hex digits of a hash
    /// (FNV-1a, 32 bits) of the schema's name. A channel is an identifier (at most 63
    /// bytes) and every schema of the database shares the channels: two schemas whose hashes
    /// collide hear each other's announcements, which only costs their receivers a look.
    var announcementChannel: String { Self.announcementChannel(schema: location.schema) }

    static func announcementChannel(schema: String) -> String {
        var hash: UInt32 = 0x811c_9dc5
        for byte in schema.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 0x0100_0193
        }
        return "persistence_" + String(format: "%08x", hash)
    }

    /// Sends the save's announcements (`pg_notify`) in its transaction, on the writer.
    func notify(_ announcements: [Announcement]) throws {
        for announcement in announcements {
            _ = try mapErrors(nil) {
                try writer.run(
                    "SELECT pg_notify($1, $2)", [.text(announcementChannel), .text(announcement.encoded())])
            }
        }
    }

    func startAnnouncements(_ deliver: @escaping @Sendable (Announcement) -> Void) {
        guard !writer.isClosed else { return }  // a closed container's stream has ended
        let listener = PostgreSQLListener(
            location: location, channel: announcementChannel, logger: logger, deliver: deliver)
        let started = listenerSlot.withLock { slot -> Bool in
            guard slot == nil else { return false }
            slot = listener
            return true
        }
        if started { listener.start() }
    }

    /// Ends the `LISTEN` connection, if there is one.
    func stopAnnouncements() {
        listenerSlot.withLock { $0 }?.stop()
    }
}

/// The `LISTEN` of one container: its own connection (`application_name`
/// `persistence listen SCHEMA`), made again when lost — after 50 ms, then at doubling
/// intervals up to a second. Its loss (or a first attempt that failed) is delivered as the
/// interruption marker, and its return, once it listens again, as the re-read marker.
final class PostgreSQLListener: @unchecked Sendable {
    private let location: PostgreSQLLocation
    private let channel: String
    private let logger: Logger
    private let deliver: @Sendable (Announcement) -> Void
    private let lock = NSLock()
    private var connection: PostgresConnection?
    private var stopped = false

    /// The first wait before a lost connection is made again, and the longest.
    static let retryDelays = (first: 0.05, longest: 1.0)

    /// Tests: the schemas whose listeners do not make a lost connection again (they look
    /// again every 50 ms) until ``letListenAgain(schema:)`` — an outage of the `LISTEN` alone,
    /// as long as a test needs it.
    private static let heldSchemas = Locked<Set<String>>([])

    /// Tests: from now on, the listeners of stores on `schema` do not make a lost
    /// connection again until ``letListenAgain(schema:)``.
    static func keepFromListeningAgain(schema: String) {
        heldSchemas.withLock { _ = $0.insert(schema) }
    }

    /// Tests: ends ``keepFromListeningAgain(schema:)``.
    static func letListenAgain(schema: String) {
        heldSchemas.withLock { _ = $0.remove(schema) }
    }

    init(
        location: PostgreSQLLocation, channel: String, logger: Logger,
        deliver: @escaping @Sendable (Announcement) -> Void
    ) {
        self.location = location
        self.channel = channel
        self.logger = logger
        self.deliver = deliver
    }

    /// Listens; returns once the server listens for this connection, or after a first
    /// attempt that failed (then retried in the background, with a re-read marker once it
    /// works).
    func start() {
        if !listen() {
            deliver(.interruption)
            retry(after: Self.retryDelays.first)
        }
    }

    /// Closes the connection; nothing is delivered after it returns but what was under way.
    func stop() {
        let connection = lock.withLock {
            stopped = true
            defer { self.connection = nil }
            return self.connection
        }
        try? connection?.close().wait()
    }

    private var isStopped: Bool { lock.withLock { stopped } }

    /// Connects and listens; whether it worked.
    private func listen() -> Bool {
        let fresh: PostgresConnection
        do {
            let configuration = try PostgreSQLConnection.configuration(
                location, application: "persistence listen \(location.schema)")
            fresh = try PostgreSQLConnection.connect(configuration, location, logger: logger)
        } catch {
            logger.warning("announcements: \(PostgreSQLConnection.describe(error)); trying again")
            return false
        }
        let deliver = self.deliver
        fresh.addListener(channel: channel) { _, message in
            if let announcement = Announcement(encoded: message.payload) { deliver(announcement) }
        }
        do {
            // Answered after the `LISTEN` that `addListener` sent: the server listens now.
            _ = try fresh.query("SELECT 1", logger: logger).wait()
        } catch {
            logger.warning("announcements: could not listen: \(PostgreSQLConnection.describe(error)); trying again")
            try? fresh.close().wait()
            return false
        }
        let keep = lock.withLock {
            guard !stopped else { return false }
            connection = fresh
            return true
        }
        guard keep else {
            try? fresh.close().wait()
            return true
        }
        fresh.closeFuture.whenComplete { [weak self] _ in self?.lost(fresh) }
        return true
    }

    /// On an event loop: the connection closed. Unless stopped, it is made again.
    private func lost(_ closed: PostgresConnection) {
        let again = lock.withLock {
            guard !stopped, connection === closed else { return false }
            connection = nil
            return true
        }
        guard again else { return }
        logger.info("announcements: the LISTEN connection to \(location.host):\(location.port) was lost")
        deliver(.interruption)
        retry(after: Self.retryDelays.first)
    }

    /// Tries to listen again after `delay`; once it does, delivers the re-read marker.
    private func retry(after delay: TimeInterval) {
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self, !self.isStopped else { return }
            if Self.heldSchemas.withLock({ $0.contains(self.location.schema) }) {
                self.retry(after: Self.retryDelays.first)
            } else if self.listen() {
                if !self.isStopped { self.deliver(.reread) }
            } else {
                self.retry(after: min(delay * 2, Self.retryDelays.longest))
            }
        }
    }
}
