import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Dedup-on-add against the sweep's unlink, with several processes writing one catalog whose
/// records are in PostgreSQL — where transactions run at once, under `READ COMMITTED`, and
/// only the content lock (`assetcat.content`: shared by a save that checks its content,
/// exclusive by a removal) orders a removal's count and unlink against an add's check and
/// commit. Each interleaving is made exact with pause points (`ASSETCAT_FAULT_PAUSE`); the
/// processes are of one host (hosts add and sweep as processes do: MultiHostCrashTests).
/// Run through Scripts/with-postgres.sh.
@Suite struct ContentLockCLITests {
    static let text = "the same content\n"

    /// A catalog in a new PostgreSQL schema holding one asset, `first.txt`; the store, the
    /// environment of its host, and the content's digest.
    static func made() async throws -> (TestCatalog, StoreURLCLITests.Store, [String: String], String) {
        let t = try TestCatalog()
        let store = try StoreURLCLITests.newStore()
        let h1 = StoreURLCLITests.host(t, "h1")
        let initialised = try await t.run(["init", "--store", store.url, t.root.path], environment: h1)
        try #require(initialised.status == 0, "\(initialised.stderr)")
        let added = try await t.run(["add", try t.file("first.txt", text)], environment: h1)
        try #require(added.status == 0, "\(added.stderr)")
        let digests = objectDigests(t)
        try #require(digests.count == 1)
        return (t, store, h1, digests.first!)
    }

    /// How many transactions wait for the content lock of `store`'s catalog now (`psql`, on
    /// the server's `pg_locks`: the two-`int4` advisory key of the store's named locks).
    static func contentLockWaiters(_ store: StoreURLCLITests.Store) throws -> Int {
        var server = try #require(URLComponents(string: store.url))
        server.queryItems = nil
        let key = { (text: String) in "(hashtext('\(text)')::bigint & 4294967295)" }
        let query = """
            SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2
            AND classid::bigint = \(key("persistence-lock:" + store.schema))
            AND objid::bigint = \(key("assetcat.content"))
            """
        let psql =
            ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).sorted().last
            .map { "/usr/lib/postgresql/\($0)/bin/psql" } ?? "/usr/bin/psql"
        let outcome = try ChildProcess(psql, ["-XAtq", server.string!, "-c", query]).wait()
        let count = Int(outcome.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))
        return try #require(count, "psql: \(outcome.status) \(outcome.stderrText)")
    }

    /// The sweep removes the content between the add's link (a pin of the object it found)
    /// and its check: the add's check links its pin back to the object's name, and the
    /// record commits with its content there.
    @Test func aSweepBeforeTheAddsCheckLeavesTheContentPutBack() async throws {
        let (t, _, h1, digest) = try await Self.made()
        let add = try await t.startPaused(
            ["add", try t.file("second.txt", Self.text)], at: "before-add-commit", environment: h1)
        let rm = try await t.run(["rm", "1"], environment: h1)
        #expect(rm.stdout == "removed 1  first.txt\nremoved 1 asset and 1 file from objects/\n", "\(rm.stderr)")
        #expect(!t.hasObject(digest))
        add.resume()
        let added = try await add.process.finish()
        #expect(added.status == 0, "\(added.stderrText)")
        #expect(added.stdoutText == "added 1 file\n")
        #expect(t.hasObject(digest))
        let verify = try await t.run(["verify"], environment: h1)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    /// The orphan gap: the add finds the content in objects/ when it journals its batch,
    /// another process removes it (its last asset deleted), the add links its own copy and
    /// is killed before it commits. The journal names all the content the batch links, so
    /// the next command removes that copy: nothing in objects/ that no asset uses.
    @Test func contentRemovedWhileAnAddRunsIsNotLeftBehindWhenTheAddIsKilled() async throws {
        let (t, _, h1, digest) = try await Self.made()
        let add = try await t.startPaused(
            ["add", try t.file("second.txt", Self.text)], at: "after-add-journal",
            environment: h1.merging(["ASSETCAT_FAULT": "before-add-commit"]) { $1 })
        let rm = try await t.run(["rm", "1"], environment: h1)
        #expect(rm.status == 0, "\(rm.stdout)\(rm.stderr)")
        #expect(!t.hasObject(digest))
        add.resume()
        let killed = try await add.process.finish()
        #expect(killed.termination == .exited(86), "\(killed.stdoutText)\(killed.stderrText)")
        #expect(t.hasObject(digest))  // the add's own copy, linked before it died
        let verify = try await t.run(["verify"], environment: h1)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(objectDigests(t).isEmpty)
    }

    /// The add has checked its content (present: the asset that used it is deleted, its
    /// removal not carried out yet) and holds the shared content lock when another process
    /// sweeps: the sweep waits for the lock, then counts the add's committed asset and keeps
    /// the file. With the lock turned off (`skip-content-lock`), the same interleaving
    /// commits a record whose content the sweep removed — what the lock is for.
    ///
    /// Both processes open the catalog while no transaction is open: a PostgreSQL store's
    /// open waits for the writes in progress on its tables (see the report of step S9).
    @Test(arguments: [false, true])
    func aSweepWaitsForAnAddThatCheckedItsContent(skippingTheLock: Bool) async throws {
        let (t, store, h1, digest) = try await Self.made()
        let env = skippingTheLock ? h1.merging(["ASSETCAT_FAULT": "skip-content-lock"]) { $1 } : h1
        // The add opens (its sweep finds nothing to do) and pins the content it finds in
        // objects/…
        let add = try await t.startPaused(
            ["add", try t.file("second.txt", Self.text)], at: ["before-add-commit", "after-content-check"],
            environment: env)
        // …the asset that used the content is deleted by another process, which stops before
        // it sweeps…
        let rm = try await t.startPaused(["rm", "1"], at: "after-commit", environment: env)
        #expect(t.hasObject(digest))
        // …the add records its asset, checks its content and stops before its commit…
        add.resume(from: "before-add-commit")
        #expect(try await add.reached("after-content-check"))
        // …and the other process sweeps: it waits for the content lock (or, without the
        // lock, counts no asset, removes the file and ends).
        rm.resume()
        // Its output ends when it does.
        let hasEnded = { rm.process.stdout(within: 0, until: { _ in false }) != nil }
        var waited = false
        #expect(
            try await waitUntil {
                waited = try Self.contentLockWaiters(store) > 0
                return waited || hasEnded()
            })
        #expect(waited != skippingTheLock)
        add.resume(from: "after-content-check")
        let added = try await add.process.finish()
        #expect(added.status == 0, "\(added.stderrText)")
        let removed = try await rm.process.finish()
        #expect(removed.status == 0, "\(removed.stderrText)")
        let verify = try await t.run(["verify"], environment: h1)
        if skippingTheLock {
            // The dangling record the lock prevents.
            #expect(removed.stdoutText == "removed 1  first.txt\nremoved 1 asset and 1 file from objects/\n")
            #expect(!t.hasObject(digest))
            #expect(verify.status == 1)
            #expect(
                verify.stdout
                    == "missing  2  second.txt  \(t.objectPath(digest))\nchecked 1 asset: 1 missing, 0 damaged\n")
        } else {
            #expect(removed.stdoutText == "removed 1  first.txt\nremoved 1 asset and 0 files from objects/\n")
            #expect(t.hasObject(digest))
            #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        }
    }
}
