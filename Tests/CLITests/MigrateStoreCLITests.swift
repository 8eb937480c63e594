import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `assetcat migrate-store --to postgresql://… | --to sqlite`: the records move, all or nothing,
/// and every command reads the same catalog afterwards; refusals change nothing; a run killed at
/// any step leaves the old or the new store in force, and running it again finishes. Run
/// through Scripts/with-postgres.sh.
@Suite struct MigrateStoreCLITests {
    /// Runs `assetcat ARGUMENTS` on `t` with a config folder of the test's own (where a URL's
    /// password is kept for the host), and `extra` in the environment.
    static func run(_ t: TestCatalog, _ arguments: [String], _ extra: [String: String] = [:]) async throws
        -> TestCatalog.Run
    {
        try await t.run(
            arguments,
            environment: ["XDG_CONFIG_HOME": t.directory.appending(path: "config").path].merging(extra) { $1 })
    }

    /// What a user sees of a catalog: its listing, its jobs, its statistics.
    static func view(_ t: TestCatalog) async throws -> [String] {
        var outputs: [String] = []
        for arguments in [["ls", "--json"], ["jobs", "ls"], ["stats"], ["ls", "--tag", "blue"]] {
            let run = try await Self.run(t, arguments)
            #expect(run.status == 0, "\(arguments): \(run.stderr)")
            outputs.append(run.stdout)
        }
        return outputs
    }

    /// A SQLite catalog with assets (IDs with a hole), tags and jobs.
    static func filled() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await Self.run(t, ["init", t.root.path]).status == 0)
        let files = try (0..<6).map { try t.file("f\($0).txt", "content \($0)\n") }
        #expect(try await Self.run(t, ["add"] + files + ["--tag", "blue"]).status == 0)
        #expect(try await Self.run(t, ["tag", "2", "--add", "red"]).status == 0)
        #expect(try await Self.run(t, ["rm", "3"]).status == 0)
        return t
    }

    static func identity(_ t: TestCatalog) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(contentsOf: t.root.appending(path: "catalog.json")))
            as? [String: Any] ?? [:]
    }

    static func entries(_ t: TestCatalog) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: t.root.path).sorted()
    }

    /// The ID the next `add` gets.
    static func nextID(_ t: TestCatalog, _ name: String) async throws -> String {
        let file = try t.file(name, "new \(name)\n")
        let run = try await Self.run(t, ["add", file])
        #expect(run.status == 0, "\(run.stderr)")
        let listing = try await Self.run(t, ["ls", "--json"])
        let assets = try JSONSerialization.jsonObject(with: Data(listing.stdout.utf8)) as? [[String: Any]] ?? []
        return "\(assets.first { $0["name"] as? String == name }?["id"] ?? "?")"
    }

    @Test func aRoundTripKeepsEverything() async throws {
        let t = try await Self.filled()
        let store = try StoreURLCLITests.newStore()
        let before = try await Self.view(t)
        // What the next ID would be on SQLite: on a copy of the catalog.
        let twin = try TestCatalog()
        try FileManager.default.copyItem(at: t.root, to: twin.root)
        let expectedNext = try await Self.nextID(twin, "next.txt")

        let there = try await Self.run(t, ["migrate-store", "--to", store.url])
        #expect(there.status == 0, "\(there.stderr)")
        let moved = try #require(try Self.entries(t).first { $0.hasPrefix("catalog.sqlite.moved-") })
        let records = try #require(there.stdout.split(separator: " ").dropFirst().first.flatMap { Int($0) })
        #expect(records > 0)
        #expect(
            there.stdout
                == "moved \(records) records from \(t.root.path)/catalog.sqlite to \(store.redacted); the old store "
                + "is kept as \(t.root.path)/\(moved); versions of assetcat without PostgreSQL can no longer open "
                + "this catalog\n")
        #expect(!there.stdout.contains(store.password) && !there.stderr.contains(store.password))
        #expect(try Self.identity(t)["store"] as? String == store.redacted)
        #expect(StoreURLCLITests.files(under: t.root, holding: store.password).isEmpty)
        #expect(try await Self.view(t) == before)
        let onPostgreSQL = try await Self.run(t, ["ls"])
        #expect(onPostgreSQL.status == 0)

        let back = try await Self.run(t, ["migrate-store", "--to", "sqlite"])
        #expect(back.status == 0, "\(back.stderr)")
        #expect(back.stdout == "moved \(records) records from \(store.redacted) to \(t.root.path)/catalog.sqlite\n")
        #expect(try Self.identity(t)["store"] == nil)
        #expect(try await Self.view(t) == before)
        #expect(try await Self.nextID(t, "next.txt") == expectedNext)
        #expect(try Self.entries(t).contains(moved))  // kept
    }

    @Test func anotherHostNamingTheMovedSchemaIsRefused() async throws {
        let t = try await Self.filled()
        let store = try StoreURLCLITests.newStore()
        #expect(try await Self.run(t, ["migrate-store", "--to", store.url]).status == 0)
        let naming = try Data(contentsOf: t.root.appending(path: "catalog.json"))
        #expect(try await Self.run(t, ["migrate-store", "--to", "sqlite"]).status == 0)
        // A directory whose catalog.json still names the schema (another mount's, a backup's).
        let other = try TestCatalog()
        try FileManager.default.createDirectory(at: other.root, withIntermediateDirectories: true)
        try naming.write(to: other.root.appending(path: "catalog.json"))
        let refused = try await other.run(
            ["ls"], environment: ["XDG_CONFIG_HOME": t.directory.appending(path: "config").path])
        #expect(refused.status == 1)
        #expect(
            refused.stderr
                == "assetcat: The catalog at \(other.root.path) moved back to SQLite at \(t.root.path) "
                + "(`assetcat migrate-store --to sqlite`): the store at \(store.redacted) (schema \(store.schema)) is "
                + "no longer its store. Use it from one host (SQLite over NFS is unsafe). Nothing was changed\n")
    }

    @Test func refusedWhileAnotherProcessHasTheCatalogOpen() async throws {
        let t = try await Self.filled()
        let store = try StoreURLCLITests.newStore()
        let before = try await Self.view(t)
        let file = try t.file("held.txt", "held\n")
        let paused = try await t.startPaused(["add", file], at: "after-stage")
        let entries = try Self.entries(t)
        let refused = try await Self.run(t, ["migrate-store", "--to", store.url])
        #expect(refused.status == 1)
        #expect(
            refused.stderr
                == "assetcat: The catalog at \(t.root.path) is open in another process (pid \(paused.process.pid)); "
                + "close it and run migrate-store again. Nothing was changed\n")
        #expect(refused.stdout == "")
        #expect(try Self.identity(t)["store"] == nil)
        #expect(try Self.entries(t) == entries)
        paused.process.signal(SIGKILL)
        _ = try await paused.process.finish()
        #expect(try await Self.view(t) == before)
        // The schema was left empty: the same migration now goes through.
        let run = try await Self.run(t, ["migrate-store", "--to", store.url])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try await Self.view(t) == before)
    }

    @Test func refusedWhenTheSchemaHoldsACatalog() async throws {
        let t = try await Self.filled()
        let store = try StoreURLCLITests.newStore()
        let other = try TestCatalog()
        let made = try await other.run(
            ["init", "--store", store.url, other.root.path],
            environment: ["XDG_CONFIG_HOME": other.directory.path])
        #expect(made.status == 0, "\(made.stderr)")
        let id = try #require(try Self.identity(other)["id"] as? String)
        let before = try await Self.view(t)
        let entries = try Self.entries(t)
        let refused = try await Self.run(t, ["migrate-store", "--to", store.url])
        #expect(refused.status == 1)
        #expect(
            refused.stderr
                == "assetcat: the store at \(store.redacted) (schema \(store.schema)) already holds catalog "
                + "\(id.uppercased()); migrate into an empty schema. Nothing was changed\n")
        #expect(try Self.entries(t) == entries)
        #expect(try Self.identity(t)["store"] == nil)
        #expect(try await Self.view(t) == before)
    }

    /// Killed at each step, the catalog reads as before (from the old store or the new), and a
    /// second run finishes.
    @Test(arguments: ["before-store-commit", "after-store-commit", "after-store-switch", "after-store-moved"])
    func killedAtAnyStepToPostgreSQLThenRunAgain(point: String) async throws {
        let t = try await Self.filled()
        let store = try StoreURLCLITests.newStore()
        let before = try await Self.view(t)
        let killed = try await Self.run(t, ["migrate-store", "--to", store.url], ["ASSETCAT_FAULT": point])
        #expect(killed.status == 86, "\(killed.stderr)")
        #expect(try await Self.view(t) == before)
        let again = try await Self.run(t, ["migrate-store", "--to", store.url])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try Self.identity(t)["store"] as? String == store.redacted)
        #expect(try await Self.view(t) == before)
        let moved = try Self.entries(t).filter { $0.hasPrefix("catalog.sqlite.moved-") }
        #expect(moved.filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }.count == 1, "\(moved)")
        #expect(try !Self.entries(t).contains { $0.hasSuffix("-wal") && !$0.contains("moved") })
    }

    @Test(arguments: ["before-store-commit", "after-store-commit", "after-store-moved", "after-store-switch"])
    func killedAtAnyStepToSQLiteThenRunAgain(point: String) async throws {
        let t = try await Self.filled()
        let store = try StoreURLCLITests.newStore()
        let before = try await Self.view(t)
        #expect(try await Self.run(t, ["migrate-store", "--to", store.url]).status == 0)
        let killed = try await Self.run(t, ["migrate-store", "--to", "sqlite"], ["ASSETCAT_FAULT": point])
        #expect(killed.status == 86, "\(killed.stderr)")
        #expect(try await Self.view(t) == before)
        let again = try await Self.run(t, ["migrate-store", "--to", "sqlite"])
        if point == "after-store-switch" {
            // catalog.json no longer names the schema: the catalog is in SQLite already.
            #expect(again.status == 1)
            #expect(
                again.stderr
                    == "assetcat: The catalog at \(t.root.path) keeps its records in catalog.sqlite already; nothing "
                    + "was changed\n")
        } else {
            #expect(again.status == 0, "\(again.stderr)")
        }
        #expect(try Self.identity(t)["store"] == nil)
        #expect(try await Self.view(t) == before)
        #expect(try !Self.entries(t).contains("catalog.sqlite.new"))
    }
}
