import Foundation
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
