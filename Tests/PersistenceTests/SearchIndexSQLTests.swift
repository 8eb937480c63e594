import Foundation
import GRDB
import Testing

@testable import Persistence
@testable import PersistencePostgreSQL

/// The text a store's search index is queried with: built from words, never from raw query
/// text, so that no quote or operator of the user's reaches FTS5 or `to_tsquery`; and a
/// SQLite without FTS5 refused in words.
@Suite struct SearchIndexSQLTests {
    final class Note: ManagedObject {
        @Attribute var title = ""
        override class var searchIndex: SearchIndex? { SearchIndex(SearchField("title", .attribute(\Note.title))) }
    }

    @Test func wordsAreCutAsTheIndexCutsThem() {
        #expect(TextSearch.words("Beach_2024-07.PNG") == ["beach", "2024", "07", "png"])
        #expect(TextSearch.Term(words: ["a\"b OR c*"]).words == ["a", "b", "or", "c"])
    }

    @Test func anIdentifierIsQuotedWithItsQuotesDoubled() {
        #expect(quote("Asset") == #""Asset""#)
        #expect(quote(#"a"b"#) == #""a""b""#)
        #expect(quote(#"""#) == #""""""#)
        #expect(quote(#""x""#) == #""""x""""#)
        #expect(quote("") == #""""#)
    }

    @Test func queriesQuoteEveryWord() {
        let terms = [
            ResolvedSearchTerm(words: ["sun", "set"], isPrefix: true, field: nil, fieldName: nil),
            ResolvedSearchTerm(words: ["png"], isPrefix: false, field: 3, fieldName: "ext"),
            ResolvedSearchTerm(words: ["it\"s", "o'k\\"], isPrefix: false, field: nil, fieldName: nil),
        ]
        #expect(
            SQLiteStore.matchText(terms)
                == #"("sun" + "set"*) AND {"ext"} : ("png") AND ("it""s" + "o'k\")"#)
        #expect(PostgreSQLStore.queryText(terms) == #"('sun' <-> 'set':*) & ('png':D) & ('it"s' <-> 'o''k\\')"#)
    }

    final class File: ManagedObject {
        @Attribute var name = ""
        override class var searchIndex: SearchIndex? { SearchIndex(SearchField("ext", .pathExtension(\File.name))) }
    }

    /// A large insertion's range statement computes an extension with the store's SQL
    /// function; the triggers, which other programs run too, with plain SQL. Both give the
    /// same text for every kind of name — a text with a NUL or invalid UTF-8, which the
    /// function leaves to the plain SQL, too.
    @Test func theStoresExtensionFunctionGivesWhatThePlainSQLGives() throws {
        let index = try #require(try Schema([File.self]).entity(named: "File")?.resolvedSearchIndex())
        let plain = try #require(SQLiteStore.fieldTexts(index, row: "r").first)
        let own = try #require(SQLiteStore.fieldTexts(index, row: "r", ownConnection: true).first)
        #expect(own.hasPrefix(#"COALESCE(_persistence_path_extension(IFNULL(CAST(r."name" AS TEXT), '')), "#))
        let queue = try DatabaseQueue()
        try queue.inDatabase { try SQLiteStore.addPathExtensionFunction($0) }
        func both(_ value: String) throws -> (plain: String, own: String, function: String?) {
            let row = try queue.read { db in
                try Row.fetchOne(
                    db,
                    sql:
                        "SELECT \(plain), \(own), _persistence_path_extension(\"name\") FROM (SELECT \(value) AS \"name\") AS r"
                )
            }
            return (try #require(row)[0], try #require(row)[1], try #require(row)[2])
        }
        let expected = [
            "photo.JPG": "jpg", "a.tar.gz": "gz", "archive.Tar.GZ": "gz", ".profile": "", "dir/.profile": "",
            "dir.d/notes": "", "dir.d/notes.md": "md", "trailing.": "", "..": "", "a..b": "b", "/x.y": "y",
            "/.y": "", "noext": "", "": "", "a/": "", "./a": "", "a.b/": "", "ÉTÉ.PNG": "png", "x.ÉXT": "Éxt",
            "日本.JPG": "jpg", "a.b.c/d.e": "e", "a b.c d": "c d", ".": "", "x/.": "", "x.y/.": "",
        ]
        for (name, ext) in expected {
            let literal = "'" + name.replacingOccurrences(of: "'", with: "''") + "'"
            let found = try both(literal)
            #expect(found.plain == ext, "plain SQL of \(name)")
            #expect(found.own == ext, "own statement's of \(name)")
            #expect(found.function == ext, "function of \(name)")
        }
        // Texts the function leaves to the plain SQL (NULL), whose `length` stops at a NUL and
        // counts bytes of invalid UTF-8 its own way; a value that is not text, cast to text.
        for (value, ext) in [
            ("'a.b' || char(0) || 'c.d'", ""), ("'x.D' || char(0) || 'Z'", ""), ("CAST(x'612EFF' AS TEXT)", "\u{FFFD}"),
            ("CAST(x'C32E706E67' AS TEXT)", "png"), ("12.5", "5"), ("NULL", ""),
        ] {
            let found = try both(value)
            #expect(found.own == found.plain, "own statement's of \(value)")
            #expect(found.own == ext || value.contains("x'"), "\(value): \(found.own)")
        }
        #expect(try both("'a.b' || char(0) || 'c.d'").function == nil)
        #expect(try both("CAST(x'612EFF' AS TEXT)").function == nil)
    }

    @Test func aSQLiteWithoutFTS5IsRefusedInWords() throws {
        let schema = try Schema([Note.self])
        #expect(
            try SQLiteStore.searchUnavailable(schema: schema, compileOptions: ["ENABLE_FTS5"], version: "3.40.1") == nil
        )
        #expect(
            try SQLiteStore.searchUnavailable(schema: schema, compileOptions: ["ENABLE_FTS4"], version: "3.40.1")
                == "the SQLite this program runs on (3.40.1) was built without FTS5, which the search index of Note "
                + "needs: run it with a SQLite built with FTS5 (Debian's and most distributions' are)")
        #expect(try SQLiteStore.searchUnavailable(schema: try Schema([]), compileOptions: [], version: "3") == nil)
    }
}
