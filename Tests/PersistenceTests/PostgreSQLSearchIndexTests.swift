import Foundation
import PostgresNIO
import TestScratch
import Testing

@testable import Persistence
@testable import PersistencePostgreSQL

/// A clip found by its title and its file's extension.
final class Clip: ManagedObject {
    @Attribute var title = ""
    @Attribute var fileName = ""
    override class var searchIndex: SearchIndex? {
        SearchIndex(SearchField("title", .attribute(\Clip.title)), SearchField("ext", .pathExtension(\Clip.fileName)))
    }
}

/// How PostgreSQL's index cuts text into words, and an index kept across versions that wrote
/// the same documents another way.
@Suite struct PostgreSQLSearchIndexTests {
    /// The regular expression that makes punctuation spaces gives the text `translate` gave,
    /// for every code point the server takes, and for mixed text.
    @Test func punctuationBecomesSpacesAsTranslateMadeIt() throws {
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        let admin = try serverAdmin(for: url)
        defer { admin.close() }
        let differing = try admin.run(
            """
            SELECT count(*) FROM (SELECT chr(g) AS c FROM generate_series(1, 55295) g \
            UNION ALL SELECT chr(g) FROM generate_series(57344, 1114111) g) AS s \
            WHERE \(PostgreSQLStore.DocumentSQL.current.separated("c")) IS DISTINCT FROM \(PostgreSQLStore.DocumentSQL.earlier.separated("c"))
            """, []
        ).rows.first!.decode(Int64.self)
        #expect(differing == 0)
        for text in ["a.b-c_d/e\\f[g]h`i{j}k~l!m\"n'o", "Straße.PNG", "日本語 の.txt", "tab\there", ""] {
            let same = try admin.run(
                "SELECT \(PostgreSQLStore.DocumentSQL.current.separated("$1")) = \(PostgreSQLStore.DocumentSQL.earlier.separated("$1"))",
                [.text(text)]
            ).rows.first!.decode(Bool.self)
            #expect(same, "\(text)")
        }
    }

    /// This version finds a path's extension as earlier ones did (a regular expression), for
    /// every path of up to six of `a`, `.`, `/`, `É` and a space, and for NULL.
    @Test func anExtensionIsFoundAsEarlierVersionsFoundIt() throws {
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        let admin = try serverAdmin(for: url)
        defer { admin.close() }
        let current = PostgreSQLStore.DocumentSQL.current.pathExtension("p.n")
        let earlier = PostgreSQLStore.DocumentSQL.earlier.pathExtension("p.n")
        let counts = try admin.run(
            """
            WITH RECURSIVE p(n) AS (SELECT ''::TEXT UNION ALL SELECT NULL::TEXT \
            UNION ALL SELECT p.n || c FROM p, (VALUES ('a'), ('.'), ('/'), ('É'), (' ')) AS v(c) WHERE length(p.n) < 6) \
            SELECT count(*)::BIGINT, (count(*) FILTER (WHERE \(current) IS DISTINCT FROM \(earlier)))::BIGINT, \
            (count(*) FILTER (WHERE \(current) <> ''))::BIGINT FROM p
            """, []
        ).rows.first!.decode((Int64, Int64, Int64).self)
        #expect(counts.0 == 19_532)  // the empty path, NULL, and 5 + 25 + … + 15,625
        #expect(counts.1 == 0)
        #expect(counts.2 > 1_000)  // not a comparison of empty texts
    }

    /// Each search index's GIN index keeps its pending list short (256 kB, which every search
    /// reads whole until it is merged): after 10,000 rows, at most 32 pages wait (at the default
    /// 4 MB, all of them would). An index an earlier version made without the limit gets it at
    /// the next open, which finds the store current afterwards.
    @Test func theIndexKeepsItsPendingListShortAndAnEarlierOneGetsTheLimit() throws {
        let schema = try Schema([Clip.self])
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        var container = try PersistentContainer.open(url: url, schema: schema)
        let admin = try serverAdmin(for: url)
        defer { admin.close() }
        let index = "\"\(try PostgreSQLLocation(url).schema)\".\"_persistence_search_Clip_doc\""
        func options() throws -> String? {
            try admin.run(
                "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = $1::regclass", [.text(index)]
            )
            .rows.first!.decode(String?.self)
        }
        #expect(try options() == "gin_pending_list_limit=256")
        let context = container.newBackgroundContext()
        try context.insertRows(Clip.self, count: 10_000) { i, row in
            row[\.title] = "clip \(i) of the harbour"
            row[\.fileName] = "clip-\(i).mov"
        }
        try context.save()
        let pending = try admin.run("SELECT gin_clean_pending_list($1::regclass)", [.text(index)]).rows.first!
            .decode(Int64.self)
        #expect(pending <= 32)
        container.close()

        try admin.run("ALTER INDEX \(index) RESET (gin_pending_list_limit)", [])
        #expect(try options() == nil)
        container = try PersistentContainer.open(url: url, schema: schema)
        defer { container.close() }
        #expect(try options() == "gin_pending_list_limit=256")
        let store = try #require(container.core.store as? PostgreSQLStore)
        #expect(try store.schemaIsCurrent())
        #expect(try container.checkSearchIndex(fix: false) == [])
    }

    /// A store whose index functions an earlier version made (with `translate`) gets this
    /// version's at its next open, and keeps its index's rows: same table, same documents,
    /// found as before; and new rows are indexed by the new functions.
    @Test func anIndexMadeByAnEarlierVersionKeepsItsRowsAndGetsNewFunctions() throws {
        let schema = try Schema([Clip.self])
        let index = try #require(try schema.entity(named: "Clip")?.resolvedSearchIndex())
        let url = try StoreKind.postgresql.newStoreURL(in: URL(filePath: "/"))
        var container = try PersistentContainer.open(url: url, schema: schema)
        let context = container.newBackgroundContext()
        for (title, file) in [("Beach day", "IMG_1.PNG"), ("Mountain", "notes.txt")] {
            let clip = Clip(context: context)
            clip.title = title
            clip.fileName = file
        }
        try context.save()
        let store = try #require(container.core.store as? PostgreSQLStore)
        try store.writer.withLock {
            try store.transaction(store.writer) {
                try store.makeSearchFunctions(store.writer, index, version: .earlier)
            }
        }
        let admin = try serverAdmin(for: url)
        defer { admin.close() }
        let schemaName = try PostgreSQLLocation(url).schema
        func table() throws -> Int64 {
            try admin.run(
                "SELECT $1::regclass::oid::bigint", [.text("\"\(schemaName)\".\"_persistence_search_Clip\"")]
            ).rows.first!.decode(Int64.self)
        }
        func body() throws -> String {
            try admin.run(
                """
                SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
                WHERE p.proname = '_persistence_search_Clip' AND n.nspname = $1
                """, [.text(schemaName)]
            ).rows.first!.decode(String.self)
        }
        #expect(try body().contains("translate("))
        let before = try table()
        container.close()

        // Read-only (a host whose mount is, or one not yet upgraded): the same documents, read.
        var readOnly = PersistentContainer.Options()
        readOnly.readOnly = true
        let reader = try PersistentContainer.open(url: url, schema: schema, options: readOnly)
        #expect(
            try reader.newBackgroundContext().fetch(
                FetchRequest<Clip>(predicate: .matches(TextSearch([.init("beach")])))
            ).map(\.title) == ["Beach day"])
        #expect(try reader.checkSearchIndex(fix: false) == [])
        reader.close()
        #expect(try body().contains("translate("))

        container = try PersistentContainer.open(url: url, schema: schema)
        defer { container.close() }
        #expect(try table() == before)
        #expect(try body().contains("regexp_replace(") && !body().contains("translate("))
        #expect(try container.checkSearchIndex(fix: false) == [])
        func found(_ terms: [TextSearch.Term]) throws -> [String] {
            try container.newBackgroundContext().fetch(
                FetchRequest<Clip>(predicate: .matches(TextSearch(terms)), sortBy: [.init(\.title)])
            ).map(\.title)
        }
        #expect(try found([.init("beach")]) == ["Beach day"])
        #expect(try found([.init(words: ["png"], field: "ext")]) == ["Beach day"])
        let later = container.newBackgroundContext()
        let clip = Clip(context: later)
        clip.title = "Harbour_at-dusk"
        clip.fileName = "dusk.tar.GZ"
        try later.save()
        #expect(try found([.init("dusk")]) == ["Harbour_at-dusk"])
        #expect(try found([.init(words: ["gz"], field: "ext")]) == ["Harbour_at-dusk"])
        #expect(try container.checkSearchIndex(fix: false) == [])
    }
}
