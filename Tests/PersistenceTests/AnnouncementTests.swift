import Foundation
import Logging
@_spi(Testing) import Persistence
import PostgresNIO
import TestScratch
import Testing

@testable import PersistencePostgreSQL

/// Announcements (``SaveEffects/announce(_:payload:)``, ``PersistentContainer/announcements()``):
/// delivered once the save commits, never for one that fails or is rolled back; intact; heard
/// by the other containers of the store; and, when the means to hear them is lost, replaced
/// by the re-read marker. "Not delivered" is shown by order, never by time: a later
/// announcement arrives, and the earlier one did not arrive before it.
@Suite struct AnnouncementTests {
    /// Saves a `Checked` row on `context` whose save announces `topic` with `payload`.
    func saveAnnouncing(_ context: ManagedObjectContext, _ topic: String, _ payload: String) throws {
        context.userInfo["effects"] = { (effects: SaveEffects) in
            try! effects.announce(topic, payload: payload)
        }
        defer { context.userInfo["effects"] = nil }
        Checked(context: context).label = payload
        try context.save()
    }

    @Test(arguments: StoreKind.allCases) func onlyCommittedSavesAnnounce(_ kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let heard = Heard(store.container)
        defer { heard.stop() }
        let context = store.context()
        try saveAnnouncing(context, "t", "first")

        // A commit that fails after every statement ran (pg_notify among them).
        store.container.failNextCommit(with: ValidationMessage("the disk is gone"))
        #expect(throws: (any Error).self) { try saveAnnouncing(context, "t", "failed commit") }
        context.rollback()
        // A save its beforeCommit check refuses: the transaction is rolled back.
        context.userInfo["beforeCommit"] = { (_: TransactionReader) in throw ValidationMessage("refused") }
        #expect(throws: (any Error).self) { try saveAnnouncing(context, "t", "rolled back") }
        context.userInfo["beforeCommit"] = nil
        context.rollback()
        // A child's save commits nothing: it announces nothing; its parent's save does.
        // (Announced once: by the parent's save, not by the child's as well.)
        let child = store.child(of: context)
        let announce = { (effects: SaveEffects) in try! effects.announce("t", payload: "child") }
        child.userInfo["effects"] = announce
        context.userInfo["effects"] = announce
        Checked(context: child).label = "child"
        try child.save()
        try context.save()
        context.userInfo["effects"] = nil
        // Own commits that announce nothing wake nothing.
        Note(context: context).title = "quiet"
        try context.save()

        try saveAnnouncing(context, "t", "last")
        #expect(try await eventually { heard.payloads.contains("last") })
        #expect(heard.payloads == ["first", "child", "last"])
        #expect(heard.all.allSatisfy { $0.topic == "t" && $0.isFromThisProcess })
    }

    @Test(arguments: StoreKind.allCases) func topicsAndPayloadsArriveIntact(_ kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let heard = Heard(store.container)
        defer { heard.stop() }
        let largest = String(repeating: "é", count: (Announcement.maximumBytes - 2) / 2)  // 2 bytes each
        let sent: [(String, String)] = [
            ("assets.deleted", ""),
            ("Tëst ✓ 日本", "e\u{301} é 🎉\n\ttabs and 12 spaces "),
            ("12 3", "1 2 3"),
            ("é", largest),
            ("last", "done"),
        ]
        #expect(("é".utf8.count + largest.utf8.count) == Announcement.maximumBytes)
        let context = store.context()
        for (topic, payload) in sent { try saveAnnouncing(context, topic, payload) }
        #expect(try await eventually { heard.all.contains { $0.topic == "last" } })
        #expect(heard.all.map(\.topic) == sent.map(\.0))
        #expect(heard.all.map(\.payload) == sent.map(\.1))
        #expect(heard.all.map { $0.payload.unicodeScalars.count } == sent.map { $0.1.unicodeScalars.count })
    }

    @Test func whatCannotBeAnnouncedIsRefused() throws {
        let store = try TestStore()
        let context = store.context()
        let refusals = HookLog()
        let tooLarge = String(repeating: "x", count: Announcement.maximumBytes)
        let refused = [("", "p"), ("*", "p"), ("-", ""), ("t\u{0}", "p"), ("t", "p\u{0}"), ("t", tooLarge)]
        context.userInfo["effects"] = { (effects: SaveEffects) in
            for (topic, payload) in refused {
                do {
                    try effects.announce(topic, payload: payload)
                    refusals.record("accepted \(topic)")
                } catch let error as PersistenceError {
                    refusals.record("\(error.code == .misuse ? "misuse" : "other"): \(error.message)")
                } catch {
                    refusals.record("\(error)")
                }
            }
        }
        Checked(context: context).label = "x"
        try context.save()
        #expect(
            refusals.events == [
                "misuse: An announcement needs a topic other than \"*\", \"-\" and the empty one; got \"\"",
                "misuse: An announcement needs a topic other than \"*\", \"-\" and the empty one; got \"*\"",
                "misuse: An announcement needs a topic other than \"*\", \"-\" and the empty one; got \"-\"",
                "misuse: An announcement cannot hold a NUL character (topic \"t\u{0}\")",
                "misuse: An announcement cannot hold a NUL character (topic \"t\")",
                "misuse: The announcement \"t\" is 7901 bytes; at most 7900 can be announced "
                    + "(announce less, and let receivers read the rest from the store)",
            ])
        #expect(Announcement.fits(topic: "t", payload: String(tooLarge.dropFirst())))
        #expect(!Announcement.fits(topic: "t", payload: tooLarge))
        #expect(!Announcement.fits(topic: "*", payload: ""))
        #expect(!Announcement.fits(topic: "-", payload: ""))
    }

    /// A notification on the store's channel that names a marker's topic (sent by hand: no
    /// save can) is not an announcement: it neither interrupts the stream nor ends an
    /// interruption.
    @Test func aMarkersTopicIsNotDecoded() {
        #expect(Announcement(encoded: "0123 1 t") == Announcement(topic: "t", payload: "", isFromThisProcess: false))
        #expect(Announcement(encoded: "0123 1 -") == nil)
        #expect(Announcement(encoded: "0123 1 *") == nil)
        #expect(Announcement(encoded: "0123 1 -x") == nil)
        #expect(Announcement(encoded: "0123 2 -x") == Announcement(topic: "-x", payload: "", isFromThisProcess: false))
    }

    /// Two containers on one store, as two hosts would have: each hears the other's. On
    /// SQLite the other's commit is heard as the re-read marker.
    @Test(arguments: StoreKind.allCases) func twoContainersOnOneStoreHearEachOther(_ kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let other = try store.reopen()
        defer { other.close() }
        let heardHere = Heard(store.container)
        defer { heardHere.stop() }
        let heardThere = Heard(other)
        defer { heardThere.stop() }

        try saveAnnouncing(other.newBackgroundContext(), "from", "there")
        try saveAnnouncing(store.context(), "from", "here")
        let fromThere =
            kind == .sqlite
            ? Announcement.reread : Announcement(topic: "from", payload: "there", isFromThisProcess: true)
        let fromHere =
            kind == .sqlite
            ? Announcement.reread : Announcement(topic: "from", payload: "here", isFromThisProcess: true)
        // Each also hears its own, as sent. (Waited for as the other's is: on PostgreSQL a
        // container hears its own through its listening connection too, so the other one
        // may hear "here" first.)
        let ownHere = Announcement(topic: "from", payload: "here", isFromThisProcess: true)
        let ownThere = Announcement(topic: "from", payload: "there", isFromThisProcess: true)
        #expect(
            try await eventually {
                heardHere.all.contains(fromThere) && heardThere.all.contains(fromHere)
                    && heardHere.all.contains(ownHere) && heardThere.all.contains(ownThere)
            }, "here heard \(heardHere.all); there heard \(heardThere.all)")
    }

    /// The streams end when the container closes; one asked for after ends at once.
    @Test(arguments: StoreKind.allCases) func theStreamsEndWithTheContainer(_ kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let before = store.container.announcements()
        store.container.close()
        for await announcement in before { Issue.record("after close: \(announcement)") }
        for await announcement in store.container.announcements() { Issue.record("after close: \(announcement)") }
    }

    /// SQLite: another process's commit wakes the stream with the re-read marker.
    @Test func anotherProcesssCommitWakesTheStreamOnSQLite() async throws {
        let store = try TestStore()
        let heard = Heard(store.container)
        defer { heard.stop() }
        let executable = fixtureExecutable()
        try #require(FileManager.default.isExecutableFile(atPath: executable.path), "missing \(executable.path)")
        let child = try ChildProcess(
            executable.path, ["insert", store.storeURL.path, "other", "1"], stdout: .inherit, stderr: .inherit)
        #expect(try child.wait().status == 0)
        #expect(try await eventually { heard.all.contains(.reread) })
        #expect(heard.all.allSatisfy { $0 == .reread })
    }

    /// SQLite: the watch's looks for the commit of this store's own change of the `-wal`
    /// (which never shows as another connection's commit) do not keep another connection's
    /// commit waiting: its change of the `-wal` starts the looks again, at once. Here the
    /// look after the first waits ten minutes, longer than `eventually` waits.
    @Test func anotherConnectionsCommitIsHeardWhileTheStoresOwnIsStillLookedFor() async throws {
        let store = try TestStore()
        let other = try store.reopen()
        defer { other.close() }
        let looks = Looks()
        let heard = StoreWatch.$injectedLooks.withValue(.init(delays: [600], looked: { looks.add() })) {
            Heard(store.container)
        }
        defer { heard.stop() }
        let before = looks.count
        let own = store.context()
        Checked(context: own).label = "own"
        try own.save()
        // The watch has looked for the commit of this change, found none of another
        // connection, and waits ten minutes for its next look.
        #expect(try await eventually { looks.count > before })
        #expect(heard.all.isEmpty)
        let there = other.newBackgroundContext()
        Checked(context: there).label = "there"
        try there.save()
        #expect(try await eventually { heard.all.contains(.reread) }, "heard \(heard.all)")
    }

    /// A stream that ends (its task cancelled) while announcements are delivered to it: the
    /// two never wait for each other. (A delivery held the streams' lock while it resumed the
    /// stream's task, which takes the task's own lock; a cancellation holds that lock while
    /// the stream's end takes the streams' lock. JobBenchmarks' worker hung there once.)
    /// Streams are asked for and cancelled on one thread while saves deliver bursts of
    /// announcements on another, for a second.
    @Test func aStreamThatEndsWhileAnnouncementsAreDeliveredToItEndsAndTheyGoOn() async throws {
        let store = try TestStore()
        let container = store.container
        let until = ContinuousClock.now + .seconds(1)
        let ended = DispatchSemaphore(value: 0)
        let saver = Thread {
            let context = container.newBackgroundContext()
            context.userInfo["effects"] = { (effects: SaveEffects) in
                for n in 0..<100 { try! effects.announce("burst", payload: "\(n)") }
            }
            var n = 0
            while ContinuousClock.now < until {
                Checked(context: context).label = "\(n)"
                try! context.save()
                n += 1
            }
            ended.signal()
        }
        let canceller = Thread {
            while ContinuousClock.now < until {
                let stream = container.announcements()
                let listener = Task.detached {
                    for await _ in stream {}
                }
                usleep(UInt32.random(in: 0..<300))
                listener.cancel()
            }
            ended.signal()
        }
        saver.start()
        canceller.start()
        // A deadlock leaves both threads waiting: the test fails rather than waits for them.
        let deadline = DispatchTime.now() + .seconds(120)
        #expect(ended.wait(timeout: deadline) == .success && ended.wait(timeout: deadline) == .success, "deadlocked")
    }

    /// PostgreSQL: the server ends the `LISTEN` connection; the stream says so at once (the
    /// interruption marker), the re-read marker follows once it listens again, and later
    /// announcements arrive. Until then the store is kept from listening again: a stream asked
    /// for meanwhile begins with the interruption marker; one asked for after it ended does not.
    @Test func aLostListenConnectionIsMadeAgainAndSaysSo() async throws {
        let store = try TestStore(.postgresql)
        let heard = Heard(store.container)
        defer { heard.stop() }
        let context = store.context()
        try saveAnnouncing(context, "t", "before")
        #expect(try await eventually { heard.payloads == ["before"] })
        let location = try PostgreSQLLocation(store.storeURL)
        PostgreSQLListener.keepFromListeningAgain(schema: location.schema)
        defer { PostgreSQLListener.letListenAgain(schema: location.schema) }
        #expect(try endSessions(named: "persistence listen \(location.schema)", of: store.storeURL) == 1)
        #expect(try await eventually { heard.all.contains(.interruption) })
        let during = Heard(store.container)
        defer { during.stop() }
        #expect(try await eventually { during.all == [.interruption] })

        PostgreSQLListener.letListenAgain(schema: location.schema)
        #expect(try await eventually { heard.all.contains(.reread) })
        let after = Heard(store.container)
        defer { after.stop() }
        try saveAnnouncing(context, "t", "after")
        #expect(try await eventually { heard.payloads.contains("after") && after.payloads == ["after"] })
        let sent = Announcement(topic: "t", payload: "after", isFromThisProcess: true)
        #expect(try await eventually { during.all.contains(sent) })
        #expect(
            heard.all
                == [
                    Announcement(topic: "t", payload: "before", isFromThisProcess: true), .interruption, .reread, sent,
                ])
        #expect(during.all == [.interruption, .reread, sent])
        #expect(after.all == [sent])
    }

    /// The channel is an identifier of at most 63 bytes whatever the schema's name, and the
    /// same for every store on the schema.
    @Test func theChannelIsShortAndNamedByTheSchema() {
        let long = String(repeating: "s", count: 63)
        #expect(PostgreSQLStore.announcementChannel(schema: long).utf8.count == 20)
        #expect(PostgreSQLStore.announcementChannel(schema: "a") == PostgreSQLStore.announcementChannel(schema: "a"))
        #expect(PostgreSQLStore.announcementChannel(schema: "a") != PostgreSQLStore.announcementChannel(schema: "b"))
        #expect(PostgreSQLStore.announcementChannel(schema: "").hasPrefix("persistence_"))
    }

    /// Ends the server sessions whose `application_name` is `name`, as `pg_terminate_backend`
    /// does; returns how many once the server lists none of them.
    func endSessions(named name: String, of url: URL) throws -> Int {
        let admin = try serverAdmin(for: url)
        defer { admin.close() }
        return try endServerConnections(named: name, from: admin)
    }
}

/// What a container's ``PersistentContainer/announcements()`` delivered, in order.
/// How many times the `-wal`'s watch has looked for a commit (``StoreWatch/InjectedLooks``).
final class Looks: @unchecked Sendable {
    private let lock = NSLock()
    private var looked = 0

    func add() {
        lock.lock()
        looked += 1
        lock.unlock()
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return looked
    }
}

final class Heard: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Announcement] = []
    private var task: Task<Void, Never>?

    init(_ container: PersistentContainer) {
        let stream = container.announcements()
        task = Task { [weak self] in
            for await announcement in stream { self?.append(announcement) }
        }
    }

    private func append(_ announcement: Announcement) {
        lock.lock()
        storage.append(announcement)
        lock.unlock()
    }

    var all: [Announcement] {
        lock.lock()
        defer { lock.unlock() }
        return storage
    }

    /// The payloads of what is not the re-read marker.
    var payloads: [String] { all.filter { !$0.isReread }.map(\.payload) }

    func stop() { task?.cancel() }
}
