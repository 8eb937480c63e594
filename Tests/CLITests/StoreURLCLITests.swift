import AssetCatalogTestSupport
import Foundation
import TestScratch
import Testing

/// `assetcat init --store URL`: a catalog whose records are in a PostgreSQL schema, used by
/// every command as a SQLite one is; `init --join`, `ASSETCAT_STORE`, the failures, the stub
/// `catalog.sqlite`, and several hosts at once. Run through Scripts/with-postgres.sh.
@Suite struct StoreURLCLITests {
    /// A PostgreSQL URL with a new schema of its own in the test server's database, its
    /// password, and the schema; cancels the test when there is no server.
    struct Store {
        var url: String
        var password: String
        var schema: String
        var server: String
        /// The URL without its password.
        var redacted: String
        /// The URL with another password, or another database.
        func with(password: String? = nil, database: String? = nil) -> String {
            var components = URLComponents(string: url)!
            if let password { components.password = password }
            if let database { components.path = "/" + database }
            return components.string!
        }
    }

    static func newStore(variable: String = PostgreSQLTestServer.variable) throws -> Store {
        let components = try PostgreSQLTestServer.newSchema(variable: variable)
        let schema = components.queryItems?.last { $0.name == "schema" }?.value ?? ""
        let password = components.password ?? ""
        var safe = components
        safe.password = nil
        return Store(
            url: components.string!, password: password, schema: schema,
            server: "\(components.host!):\(components.port!)\(components.path)", redacted: safe.string!)
    }

    /// The environment of a run on host `name`: its own config folder and host ID, and no
    /// store or password from the test's environment.
    static func host(_ t: TestCatalog, _ name: String, _ extra: [String: String] = [:]) -> [String: String] {
        ["XDG_CONFIG_HOME": t.directory.appending(path: "config-\(name)").path, "ASSETCAT_HOST_ID": name]
            .merging(extra) { $1 }
    }

    /// Every file and folder under `root`, with the bytes of each file: what "unchanged" means.
    static func snapshot(_ root: URL) -> [String: Data] {
        var result: [String: Data] = [:]
        guard let walk = FileManager.default.enumerator(atPath: root.path) else { return [:] }
        for case let path as String in walk {
            result[path] = FileManager.default.contents(atPath: root.appending(path: path).path) ?? Data("dir".utf8)
        }
        return result
    }

    /// Every file under `root` whose bytes hold `text`.
    static func files(under root: URL, holding text: String) -> [String] {
        snapshot(root).filter { $0.value.range(of: Data(text.utf8)) != nil }.map(\.key).sorted()
    }

    /// A catalog made with `init --store` on host h1 (the URL carries the password).
    func made() async throws -> (TestCatalog, Store) {
        let t = try TestCatalog()
        let store = try Self.newStore()
        let run = try await t.run(["init", "--store", store.url, t.root.path], environment: Self.host(t, "h1"))
        #expect(run.status == 0, "\(run.stderr)")
        #expect(
            run.stdout
                == "Created an empty catalog in \(t.root.path), its records in \(store.server) (schema \(store.schema))\n"
        )
        let file = t.directory.appending(path: "config-h1/assetcat/catalogs").path
        let id = try #require(try FileManager.default.contentsOfDirectory(atPath: file).first)
        #expect(
            run.stderr
                == "note: the password in the URL was not stored in \(t.root.path); it was kept for this host only, "
                + "in \(file)/\(id) (mode 0600). Other hosts give theirs through PGPASSWORD, ~/.pgpass or "
                + "`assetcat init --join --store URL`\n")
        let mode = try FileManager.default.attributesOfItem(atPath: "\(file)/\(id)")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        return (t, store)
    }

    @Test func everyCommandWorksOnACatalogInPostgreSQL() async throws {
        let (t, store) = try await made()
        let h1 = Self.host(t, "h1")
        #expect(
            Set(Self.snapshot(t.root).keys).isSuperset(of: ["catalog.json", "catalog.sqlite", "objects", "staging"]))
        let identity = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: t.root.appending(path: "catalog.json")))
                as? [String: Any])
        #expect(identity["store"] as? String == store.redacted)
        let a = try t.file("a.txt", "hello\n")
        let copy = try t.file("copy.txt", "hello\n")
        let photo = try t.file("photo.jpg", "JFIF")
        var outputs: [String] = []
        func run(_ arguments: [String]) async throws -> TestCatalog.Run {
            let run = try await t.run(arguments, environment: h1)
            outputs += [run.stdout, run.stderr]
            return run
        }
        #expect(try await run(["add", a, copy, photo, "--tag", "demo"]).stdout == "added 3 files\n")
        #expect(
            try await run(["ls"]).stdout == """
                     ID  KIND      STORAGE             SIZE  SHA256        NAME
                      1  text      managed                6  5891b5b522d5  a.txt
                      2  text      managed                6  5891b5b522d5  copy.txt
                      3  image     managed                4  963eb818f218  photo.jpg

                """)
        #expect(try await run(["cat", "1"]).stdout == "hello\n")
        let verify = try await run(["verify"])
        #expect(verify.status == 0, "\(verify.stderr)")
        let stats = try await run(["stats"]).stdout.components(separatedBy: "\n")
        #expect(stats[0] == "assets:        3 (3 managed, 0 referenced, 0 members)")
        let digest = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        #expect(try await run(["rm", "1"]).stdout == "removed 1  a.txt\nremoved 1 asset and 0 files from objects/\n")
        #expect(t.hasObject(digest))
        #expect(
            try await run(["rm", "copy.txt"]).stdout
                == "removed 2  copy.txt\nremoved 1 asset and 1 file from objects/\n")
        #expect(!t.hasObject(digest))
        // The password is in no file of the catalog and in no output.
        #expect(!store.password.isEmpty)
        #expect(Self.files(under: t.root, holding: store.password) == [])
        #expect(outputs.allSatisfy { !$0.contains(store.password) })
    }

    /// Behind pgbouncer in transaction mode, `init` refuses with the line *Naming a store* shows and makes
    /// nothing: no catalog, no schema (the multi-host suites pass behind it in session mode:
    /// Scripts/test-behind-pgbouncer.sh).
    @Test func initBehindATransactionPoolIsRefusedWithOneLine() async throws {
        let t = try TestCatalog()
        let store = try Self.newStore(variable: PostgreSQLTestServer.transactionPoolVariable)
        let target = t.directory.appending(path: "pooled")
        let run = try await t.run(["init", "--store", store.url, target.path], environment: Self.host(t, "h1"))
        #expect(run.status == 1)
        #expect(
            run.stderr
                == "assetcat: The store \(store.redacted) is reached through a pooler that shares server connections "
                + "between transactions (pgbouncer's pool_mode = transaction or statement), and a store needs each "
                + "connection to keep its server session (its search path, session locks, LISTEN): use pool_mode = "
                + "session\n")
        #expect(run.stdout == "")
        #expect(!FileManager.default.fileExists(atPath: target.path))
    }

    @Test func aSecondInitOnTheSameSchemaIsRefusedNamingJoin() async throws {
        let (t, store) = try await made()
        let other = t.directory.appending(path: "other")
        let run = try await t.run(["init", "--store", store.url, other.path], environment: Self.host(t, "h2"))
        #expect(run.status == 1)
        let id =
            try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: t.root.appending(path: "catalog.json")))
                    as? [String: Any])["id"] as? String
        #expect(
            run.stderr
                == "assetcat: the store at \(store.redacted) (schema \(store.schema)) already holds catalog \(id!); to "
                + "use it from this host, run `assetcat init --join --store URL DIR` on the directory that holds it\n")
        #expect(!FileManager.default.fileExists(atPath: other.appending(path: "catalog.json").path))
        #expect(!run.stderr.contains(store.password))
        // Nor into a directory that is not empty.
        try t.file("something.txt", "x")
        let full = try await t.run(
            ["init", "--store", try Self.newStore().url, t.sources.path], environment: Self.host(t, "h2"))
        #expect(full.status == 1)
        #expect(
            full.stderr
                == "assetcat: \(t.sources.path) is not empty: a catalog on a store is made in a new or empty "
                + "directory; to use a catalog that exists, run `assetcat init --join \(t.sources.path)`\n")
    }

    @Test func joinIsIdempotentAndRefusesAnotherCatalogsStore() async throws {
        let (t, store) = try await made()
        let h2 = Self.host(t, "h2")
        let id =
            try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: t.root.appending(path: "catalog.json")))
                    as? [String: Any])["id"] as? String
        let before = Self.snapshot(t.root)
        for _ in 0..<2 {
            let join = try await t.run(["init", "--join", "--store", store.url, t.root.path], environment: h2)
            #expect(join.status == 0, "\(join.stderr)")
            #expect(join.stdout == "joined catalog \(id!) (store \(store.server), schema \(store.schema))\n")
        }
        #expect(Self.snapshot(t.root) == before)
        // h2 uses the URL it recorded (with its password): no PGPASSWORD needed.
        #expect(try await t.run(["stats"], environment: h2).status == 0)
        // Without --store, the recorded one is checked again.
        #expect(try await t.run(["init", "--join", t.root.path], environment: h2).status == 0)

        // Another catalog's store is refused, and nothing is recorded.
        let other = try Self.newStore()
        let b = t.directory.appending(path: "b")
        #expect(try await t.run(["init", "--store", other.url, b.path], environment: Self.host(t, "h3")).status == 0)
        let idB =
            try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: b.appending(path: "catalog.json")))
                    as? [String: Any])["id"] as? String
        let h4 = Self.host(t, "h4")
        let wrong = try await t.run(["init", "--join", "--store", other.url, t.root.path], environment: h4)
        #expect(wrong.status == 1)
        #expect(
            wrong.stderr
                == "assetcat: \(t.root.path) is catalog \(id!) but the store at \(other.redacted) (schema "
                + "\(other.schema)) holds catalog \(idB!); nothing was changed\n")
        #expect(!FileManager.default.fileExists(atPath: t.directory.appending(path: "config-h4").path))
        // A directory that is a SQLite catalog has nothing to join.
        let sqlite = t.directory.appending(path: "sqlite")
        #expect(try await t.run(["init", sqlite.path]).status == 0)
        let none = try await t.run(["init", "--join", "--store", store.url, sqlite.path], environment: h4)
        #expect(
            none.stderr
                == "assetcat: \(sqlite.path) holds no catalog whose records are in a store (its catalog.json names "
                + "none); make one with `assetcat init --store URL \(sqlite.path)`\n")
    }

    @Test func assetcatStoreOverridesTheStoreOfCatalogJSON() async throws {
        let (t, store) = try await made()
        let empty = try Self.newStore()
        let env = Self.host(t, "h1", ["ASSETCAT_STORE": empty.redacted, "PGPASSWORD": store.password])
        let before = Self.snapshot(t.root)
        let run = try await t.run(["ls"], environment: env)
        #expect(run.status == 1)
        #expect(
            run.stderr
                == "assetcat: The catalog at \(t.root.path) has lost its store: the store at \(empty.redacted) "
                + "(schema \(empty.schema)) holds no catalog. Nothing was changed; restore the schema from a backup, "
                + "or run `assetcat recover` to start a new store there that lists the content of objects/\n")
        #expect(Self.snapshot(t.root) == before)
        // The store of catalog.json, named by ASSETCAT_STORE: works, with the password from PGPASSWORD.
        let same = try await t.run(
            ["stats"],
            environment: Self.host(t, "h1", ["ASSETCAT_STORE": store.redacted, "PGPASSWORD": store.password]))
        #expect(same.status == 0, "\(same.stderr)")
        // A password in ASSETCAT_STORE is refused, and not printed.
        let secret = try await t.run(["ls"], environment: Self.host(t, "h1", ["ASSETCAT_STORE": store.url]))
        #expect(secret.status == 1)
        #expect(
            secret.stderr
                == "assetcat: ASSETCAT_STORE must not carry a password (\(store.redacted)): give it through "
                + "PGPASSWORD or ~/.pgpass, or `assetcat init --join --store URL` for this host\n")
    }

    @Test func recoverStartsAStoreOnlyWhereTheSchemaHoldsNoCatalog() async throws {
        let (t, store) = try await made()
        let h1 = Self.host(t, "h1")
        #expect(try await t.run(["add", try t.file("a.txt", "hello\n")], environment: h1).status == 0)
        let opens = try await t.run(["recover"], environment: h1)
        #expect(opens.status == 1)
        #expect(
            opens.stderr
                == "assetcat: The catalog at \(t.root.path) opens: the store at \(store.redacted) (schema "
                + "\(store.schema)) holds it, and there is nothing to recover (`assetcat gc --adopt` records content "
                + "no asset uses)\n")
        // An empty schema, as if the catalog's were lost: recover starts it there.
        let empty = try Self.newStore()
        let lost = Self.host(t, "h1", ["ASSETCAT_STORE": empty.redacted, "PGPASSWORD": store.password])
        let recover = try await t.run(["recover"], environment: lost)
        #expect(recover.status == 0, "\(recover.stderr)")
        #expect(
            recover.stdout
                == "started a new store in \(t.root.path)\nrecorded 1 file of objects/ as assets tagged 'recovered'\n")
        let ls = try await t.run(["ls"], environment: lost)
        #expect(ls.stdout.contains("recovered-5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"))
        #expect(try await t.run(["recover"], environment: lost).status == 1)
    }

    @Test func serverDownWrongPasswordOrMissingDatabaseIsOneLineAndChangesNothing() async throws {
        let (t, store) = try await made()
        let before = Self.snapshot(t.root)
        // A closed port: a listening socket closed again.
        let down = "postgresql://nobody@127.0.0.1:1/nothing?schema=\(store.schema)"
        let cases: [(String, [String: String], String)] = [
            ("down", ["ASSETCAT_STORE": down], "127.0.0.1:1"),
            ("password", ["ASSETCAT_STORE": store.redacted, "PGPASSWORD": "wrong"], "password"),
            (
                "database",
                [
                    "ASSETCAT_STORE": URLComponents(string: store.with(database: "no_such_db"))!.with {
                        $0.password = nil
                    },
                    "PGPASSWORD": store.password,
                ], "no_such_db"
            ),
        ]
        for (name, extra, named) in cases {
            for command in [["ls"], ["add", try t.file("x.txt", "x")], ["recover"]] {
                let run = try await t.run(command, environment: Self.host(t, "h1", extra))
                #expect(run.status == 1, "\(name) \(command)")
                #expect(run.stdout == "", "\(name) \(command)")
                #expect(run.stderr.hasPrefix("assetcat: "), "\(name) \(command): \(run.stderr)")
                #expect(run.stderr.filter { $0 == "\n" }.count == 1, "\(name) \(command): \(run.stderr)")
                #expect(run.stderr.contains(named), "\(name) \(command): \(run.stderr)")
                #expect(!run.stderr.contains(store.password), "\(name) \(command)")
            }
            #expect(Self.snapshot(t.root) == before, "\(name)")
        }
        // init --store with the server down leaves no directory behind.
        let fresh = t.directory.appending(path: "fresh")
        let run = try await t.run(["init", "--store", down, fresh.path], environment: Self.host(t, "h1"))
        #expect(run.status == 1)
        #expect(run.stderr.contains("127.0.0.1:1"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fresh.path))
    }

    @Test func theStubRefusesTheSQLitePathAndChangesNothing() async throws {
        let (t, _) = try await made()
        let json = t.root.appending(path: "catalog.json")
        try FileManager.default.moveItem(at: json, to: t.directory.appending(path: "catalog.json.aside"))
        let before = Self.snapshot(t.root)
        for command in [["ls"], ["add", try t.file("x.txt", "x")], ["recover"], ["gc"]] {
            let run = try await t.run(command, environment: Self.host(t, "h1"))
            #expect(run.status == 1, "\(command)")
            #expect(
                run.stderr
                    == "assetcat: The catalog at \(t.root.path) keeps its records in PostgreSQL, but its catalog.json, "
                    + "which names the store, is missing or unreadable. Nothing was changed; restore catalog.json from "
                    + "a backup or from another host that mounts this directory\n", "\(command)")
        }
        #expect(Self.snapshot(t.root) == before)
        #expect(!FileManager.default.fileExists(atPath: t.root.appending(path: "quarantine").path))
    }

    /// Two hosts write at once: h1's add is stopped with the catalog open (its session
    /// alive, its content staged), and h2 adds and lists meanwhile; then h1's add commits.
    @Test func twoHostsHaveTheCatalogOpenAndWriteAtOnce() async throws {
        let (t, store) = try await made()
        let h1 = Self.host(t, "h1")
        let h2 = Self.host(t, "h2", ["PGPASSWORD": store.password])
        let paused = try await t.startPaused(["add", try t.file("a.txt", "a")], at: "after-stage", environment: h1)
        let other = try await t.run(["add", try t.file("b.txt", "b")], environment: h2)
        #expect(other.status == 0, "\(other.stderr)")
        #expect(other.stdout == "added 1 file\n")
        #expect(other.stderr == "")
        let listed = try await t.run(["ls"], environment: h2)
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(
            listed.stdout == """
                     ID  KIND      STORAGE             SIZE  SHA256        NAME
                      1  text      managed                1  3e23e8160039  b.txt

                """)
        paused.resume()
        let finished = try await paused.process.finish()
        #expect(finished.status == 0, "\(finished.stderrText)")
        #expect(finished.stdoutText == "added 1 file\n")
        #expect(
            try await t.run(["ls"], environment: h1).stdout == """
                     ID  KIND      STORAGE             SIZE  SHA256        NAME
                      1  text      managed                1  3e23e8160039  b.txt
                      2  text      managed                1  ca978112ca1b  a.txt

                """)
        let verify = try await t.run(["verify"], environment: h1)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }
}

extension URLComponents {
    /// This URL's text after `change`.
    fileprivate func with(_ change: (inout URLComponents) -> Void) -> String {
        var copy = self
        change(&copy)
        return copy.string!
    }
}
