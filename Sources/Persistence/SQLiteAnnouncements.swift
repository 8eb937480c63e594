import Foundation
import GRDB
import Locking

/// Announcements on SQLite (``PersistentContainer/announcements()``): a save's own
/// announcements go to its container's listeners once it has committed; other connections'
/// commits (other containers, other processes) are heard through inotify on the store's
/// `-wal` (``StoreWatch``), which every commit writes, and delivered as the re-read marker.
/// Where the `-wal` cannot be watched, or the watch fails later (logged), the listeners get
/// the interruption marker, for good: they poll the store from then on.
struct SQLiteAnnouncer {
    var deliver: (@Sendable (Announcement) -> Void)?
    var watch: StoreWatch?
    /// `PRAGMA data_version` on the writer when last looked at: it moves when another
    /// connection commits, never for this store's own commits.
    var dataVersion: Int64?
    /// The delays between looks for the commit of a change of the `-wal`
    /// (``SQLiteStore/commitLookDelays``).
    var lookDelays = SQLiteStore.commitLookDelays
    /// Tests: told of each look (``StoreWatch/InjectedLooks``).
    var looked: (@Sendable () -> Void)?
    /// Which of ``lookDelays`` the watch waits for next, after a change of the `-wal` whose
    /// commit it has not seen yet.
    var nextLook = 0
}

extension SQLiteStore {
    /// How long after a change of the `-wal` the watch looks again for the commit it belongs
    /// to, when that commit is not visible yet: the `-wal` is written (and watched) before the
    /// committing connection syncs it and publishes the commit in the `-shm`. The sync takes a
    /// few milliseconds, so the first looks come a millisecond or two apart: with looks 1, 2,
    /// 5, 10, 20 ms apart, JobBenchmarks' cancellation by another process's deletion took
    /// p50 15.3 / p99 21.4 ms, with these 7.5 / 12.0 ms (same quiet machine). About half a
    /// second in all. A change of the `-wal` while the looks go on (another commit) starts
    /// them again from the first: this store's own commits, which never show as another
    /// connection's, would otherwise keep the next one waiting for the later, longer looks.
    static let commitLookDelays: [TimeInterval] =
        [0.001, 0.001, 0.001, 0.002, 0.002, 0.002, 0.003, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3]

    func startAnnouncements(_ deliver: @escaping @Sendable (Announcement) -> Void) {
        guard !isClosed else { return }  // a closed container's stream has ended
        let version = try? currentDataVersion()
        let injected = StoreWatch.injectedLooks
        announcer.withLock {
            $0.deliver = deliver
            $0.dataVersion = version
            $0.lookDelays = injected?.delays ?? Self.commitLookDelays
            $0.looked = injected?.looked
        }
        guard
            let watch = StoreWatch(
                path: url.path + "-wal", logger: logger, onChange: { [weak self] in self?.walChanged($0) },
                onFailure: { [weak self] in self?.watchFailed() })
        else {
            // Other connections' commits cannot be heard: only this store's own announcements are.
            deliver(.interruption)
            return
        }
        let extra = announcer.withLock { a -> StoreWatch? in
            guard a.deliver != nil, a.watch == nil else { return watch }  // closed meanwhile
            a.watch = watch
            return nil
        }
        extra?.stop()
    }

    /// Delivers a committed save's announcements to this store's listeners.
    func announceCommitted(_ announcements: [Announcement]) {
        guard !announcements.isEmpty, let deliver = announcer.withLock({ $0.deliver }) else { return }
        for announcement in announcements { deliver(announcement) }
    }

    /// Ends the watch; nothing is delivered after.
    func stopAnnouncements() {
        announcer.withLock { a -> StoreWatch? in
            defer {
                a.watch = nil
                a.deliver = nil
            }
            return a.watch
        }?.stop()
    }

    /// On the watch's thread: the watch failed, and has ended (logged by it). Other
    /// connections' commits can no longer be heard: the listeners get the interruption
    /// marker, and poll the store from then on.
    private func watchFailed() {
        announcer.withLock { $0.deliver }?(.interruption)
    }

    private func currentDataVersion() throws -> Int64 {
        try pool.writeWithoutTransaction { try Int64.fetchOne($0, sql: "PRAGMA data_version") ?? 0 }
    }

    /// On the watch's thread: the `-wal` changed (or the delay this asked for passed). When
    /// another connection committed (the writer's `data_version` moved), the listeners get the
    /// re-read marker; the store's own commits, and writes that commit nothing, deliver
    /// nothing. Returns the delay to the next look while the commit is not seen, through
    /// the look delays, started again at each change.
    private func walChanged(_ wake: StoreWatch.Wake) -> TimeInterval? {
        guard announcer.withLock({ $0.deliver != nil }), let version = try? currentDataVersion() else {
            return nil  // closing
        }
        let (deliver, delay, looked) = announcer.withLock {
            a -> ((@Sendable (Announcement) -> Void)?, TimeInterval?, (@Sendable () -> Void)?) in
            if wake == .changed { a.nextLook = 0 }
            if a.dataVersion != version {
                a.dataVersion = version
                a.nextLook = a.lookDelays.count
                return (a.deliver, nil, a.looked)
            }
            guard a.nextLook < a.lookDelays.count else { return (nil, nil, a.looked) }
            defer { a.nextLook += 1 }
            return (nil, a.lookDelays[a.nextLook], a.looked)
        }
        deliver?(.reread)
        looked?()
        return delay
    }
}
