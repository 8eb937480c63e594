import Foundation
import Persistence
import Testing

@testable import AssetCatalog

@Suite struct SearchQueryTests {
    // MARK: - Helpers

    private func expectSyntaxError(
        _ text: String, column: Int, _ message: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(throws: SearchQuery.SyntaxError(column: column, message: message), sourceLocation: sourceLocation) {
            try SearchQuery(parsing: text)
        }
    }

    private static func utc(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return ISO8601DateFormatter().date(from: text) ?? formatter.date(from: text)
    }

    private static let sizeMessage = "expected a size after `size>`, like 10MB or 512KiB"
    private static let kindsList = "image, audio, video, text, document, archive, data"
    private static let filtersList = "tag:, kind:, ext:, storage:, archive:, size>, added<"
    private static let negationMessage = "is not allowed: only tag:, kind: and ext: can be negated"

    // MARK: - Tokenizer

    @Test func tokenizerSplitsOnAnythingButLettersAndDigitsAndLowercases() {
        #expect(TextSearch.words("Beach_2024-07.PNG") == ["beach", "2024", "07", "png"])
        #expect(TextSearch.words("Cafe\u{301} ÉTÉ") == ["cafe\u{301}", "été"])
        #expect(TextSearch.words("日本 ٣٤ x½") == ["日本", "٣٤", "x½"])
        #expect(TextSearch.words("--- 🏖 \u{0}") == [])
        #expect(TextSearch.words("") == [])
        #expect(TextSearch.words("ab cd".dropFirst(3)) == ["cd"])
    }

    // MARK: - Terms

    @Test func wordIsOneTerm() throws {
        let query = try SearchQuery(parsing: "  Beach  ")
        var expected = SearchQuery()
        expected.terms = [SearchTerm(tokens: ["beach"])]
        #expect(query == expected)
        #expect(query.hasFullText)
        #expect(!query.isEmpty)
    }

    @Test func wordWithSeparatorsIsAPhrase() throws {
        let query = try SearchQuery(parsing: "beach_2024.PNG 12:30")
        #expect(query.terms == [SearchTerm(tokens: ["beach", "2024", "png"]), SearchTerm(tokens: ["12", "30"])])
    }

    @Test func minusExcludesAWord() throws {
        let query = try SearchQuery(parsing: "-rock")
        #expect(query.terms == [SearchTerm(tokens: ["rock"], isExcluded: true)])
        #expect(!query.hasFullText)
        #expect(try SearchQuery(parsing: "beach -rock").hasFullText)
    }

    @Test func trailingStarMakesAPrefix() throws {
        let query = try SearchQuery(parsing: "sun* beach_su* -Rock*")
        #expect(
            query.terms == [
                SearchTerm(tokens: ["sun"], isPrefix: true),
                SearchTerm(tokens: ["beach", "su"], isPrefix: true),
                SearchTerm(tokens: ["rock"], isPrefix: true, isExcluded: true),
            ])
    }

    @Test func starAnywhereButTheEndOfAWordIsAnError() {
        expectSyntaxError("su*n", column: 3, "`*` can only end a word, like sun*")
        expectSyntaxError("tag:x sun**", column: 10, "`*` can only end a word, like sun*")
        expectSyntaxError("-*sun", column: 2, "`*` can only end a word, like sun*")
    }

    @Test func itemWithoutLettersOrDigitsIsAnError() {
        expectSyntaxError("---", column: 1, "`---` has no letters or digits to search for")
        expectSyntaxError("beach *", column: 7, "`*` has no letters or digits to search for")
        expectSyntaxError("-", column: 1, "`-` has no letters or digits to search for")
        expectSyntaxError(#"x "-- ."*"#, column: 3, #"`"-- ."*` has no letters or digits to search for"#)
        expectSyntaxError("x \u{0}", column: 3, #"`\u{0}` has no letters or digits to search for"#)
        expectSyntaxError("-\u{202E}", column: 1, #"`-\u{202E}` has no letters or digits to search for"#)
        expectSyntaxError(
            String(repeating: "-", count: 50), column: 1,
            "`\(String(repeating: "-", count: 40))…` has no letters or digits to search for")
    }

    @Test func quotedTextIsOnePhrase() throws {
        let query = try SearchQuery(parsing: #""Summer  Trip" -"rainy day" "summer tr"* "say \"hi\" \\o/""#)
        #expect(
            query.terms == [
                SearchTerm(tokens: ["summer", "trip"]),
                SearchTerm(tokens: ["rainy", "day"], isExcluded: true),
                SearchTerm(tokens: ["summer", "tr"], isPrefix: true),
                SearchTerm(tokens: ["say", "hi", "o"]),
            ])
        #expect(try SearchQuery(parsing: #""foo:bar""#).terms == [SearchTerm(tokens: ["foo", "bar"])])
    }

    @Test func unterminatedQuoteIsAnErrorAtTheOpeningQuote() {
        let phrase = "a phrase opened here is not closed: expected `\"`"
        expectSyntaxError(#"beach "summer trip"#, column: 7, phrase)
        expectSyntaxError(#"-""#, column: 2, phrase)
        expectSyntaxError(#""abc\""#, column: 1, phrase)
        expectSyntaxError(#"tag:"summer"#, column: 5, "a quoted value opened here is not closed: expected `\"`")
    }

    @Test func emptyPhraseIsAnError() {
        expectSyntaxError(#""""#, column: 1, "the phrase is empty: expected words between the quotes")
        expectSyntaxError(#"beach -" ""#, column: 8, "the phrase is empty: expected words between the quotes")
    }

    @Test func closingQuoteMustEndTheItem() {
        expectSyntaxError(#""a"b"#, column: 4, "expected a space after the closing `\"`")
        expectSyntaxError(#"tag:"a"*"#, column: 8, "expected a space after the closing `\"`")
    }

    @Test func quoteInsideAWordIsAnError() {
        let message = "unexpected `\"` inside a word; quotes go around a whole phrase or value"
        expectSyntaxError(#"ab"c d""#, column: 3, message)
        expectSyntaxError(#"tag:a"b"#, column: 6, message)
    }

    // MARK: - Filters

    @Test func tagsAreExactAndAllRequired() throws {
        let query = try SearchQuery(parsing: #"tag:Trip tag:trip -tag:rejected tag:"summer trip" tag:"a \"b\" \\c""#)
        var expected = SearchQuery()
        expected.tags = ["Trip", "trip", "summer trip", #"a "b" \c"#]
        expected.excludingTags = ["rejected"]
        #expect(query == expected)
        #expect(!query.hasFullText)
    }

    @Test func kindsAreLowercasedAlternatives() throws {
        let query = try SearchQuery(parsing: "kind:image kind:Video -kind:DATA")
        #expect(query.kinds == ["image", "video"])
        #expect(query.excludingKinds == ["data"])
        expectSyntaxError("kind:foo", column: 6, "unknown kind `foo`; expected one of \(Self.kindsList)")
        expectSyntaxError("kind:\"x\ny\"", column: 6, #"unknown kind `x\u{A}y`; expected one of "# + Self.kindsList)
        expectSyntaxError("beach -kind:Photo", column: 13, "unknown kind `Photo`; expected one of \(Self.kindsList)")
    }

    @Test func storagesAreAlternativesAndCannotBeNegated() throws {
        let query = try SearchQuery(parsing: "storage:managed storage:MEMBER")
        #expect(query.storages == [.managed, .member])
        expectSyntaxError(
            "storage:cloud", column: 9, "unknown storage `cloud`; expected one of managed, referenced, member")
        expectSyntaxError("-storage:managed", column: 1, "`-storage:` \(Self.negationMessage)")
    }

    @Test func archivesAreExactNamesAndCannotBeNegated() throws {
        let query = try SearchQuery(parsing: #"archive:Photos.ZIP archive:"My Photos.zip""#)
        #expect(query.archives == ["Photos.ZIP", "My Photos.zip"])
        expectSyntaxError("x -archive:a.zip", column: 3, "`-archive:` \(Self.negationMessage)")
    }

    @Test func extensionsAreLowercasedWithoutOneLeadingDot() throws {
        let query = try SearchQuery(parsing: "ext:PNG ext:.jpg ext:tar.gz -ext:..GZ")
        #expect(query.extensions == ["png", "jpg", "tar.gz"])
        #expect(query.excludingExtensions == [".gz"])
        expectSyntaxError("ext:.", column: 5, "expected an extension after `ext:`, like png")
        expectSyntaxError("ext:a/b", column: 5, "an extension can't contain `/`")
    }

    @Test func filterNamesAreCaseInsensitive() throws {
        let query = try SearchQuery(parsing: "TAG:Trip Kind:IMAGE EXT:.PNG Storage:Referenced ARCHIVE:x.zip SIZE>=1")
        #expect(query.tags == ["Trip"])
        #expect(query.kinds == ["image"])
        #expect(query.extensions == ["png"])
        #expect(query.storages == [.referenced])
        #expect(query.archives == ["x.zip"])
        #expect(query.minimumSize == 1)
    }

    @Test func unknownFilterIsAnError() {
        expectSyntaxError("beach foo:bar", column: 7, "unknown filter `foo:`; expected one of \(Self.filtersList)")
        expectSyntaxError("-Foo:bar", column: 1, "unknown filter `Foo:`; expected one of \(Self.filtersList)")
        expectSyntaxError("beach:", column: 1, "unknown filter `beach:`; expected one of \(Self.filtersList)")
    }

    @Test func itemsThatOnlyLookLikeFiltersAreWords() throws {
        let query = try SearchQuery(parsing: #"12:30 a1:b :tag foo>3 "kind:image""#)
        #expect(
            query.terms == [
                SearchTerm(tokens: ["12", "30"]), SearchTerm(tokens: ["a1", "b"]), SearchTerm(tokens: ["tag"]),
                SearchTerm(tokens: ["foo", "3"]), SearchTerm(tokens: ["kind", "image"]),
            ])
        #expect(query.kinds.isEmpty)
    }

    @Test func sizeAndAddedNeedAComparison() {
        expectSyntaxError("size:10MB", column: 1, "`size:` is not a filter; use a comparison like size>10MB")
        expectSyntaxError(
            "beach Added:2026-01-01", column: 7, "`added:` is not a filter; use a comparison like added>=2026-01-01")
    }

    @Test(arguments: [
        ("tag:", 5, "expected a tag after `tag:`"),
        (#"tag:"""#, 5, "expected a tag after `tag:`"),
        (#"x -tag:" ""#, 8, "expected a tag after `tag:`"),
        ("kind:", 6, "expected a kind after `kind:`, like image"),
        ("Ext:", 5, "expected an extension after `ext:`, like png"),
        ("storage:", 9, "expected managed, referenced or member after `storage:`"),
        ("archive:", 9, "expected an archive name after `archive:`"),
    ])
    func emptyFilterValueIsAnError(text: String, column: Int, message: String) {
        expectSyntaxError(text, column: column, message)
    }

    // MARK: - Size

    @Test(
        arguments: [
            ("size>10MB", 10_000_001, nil),
            ("size>=10MB", 10_000_000, nil),
            ("size<1KiB", nil, 1023),
            ("size<=1KiB", nil, 1024),
            ("size=512", 512, 512),
            ("size<0", nil, -1),
            ("size<=9223372036854775807", nil, Int64.max),
        ] as [(String, Int64?, Int64?)])
    func sizeComparisons(text: String, minimum: Int64?, maximum: Int64?) throws {
        let query = try SearchQuery(parsing: text)
        #expect(query.minimumSize == minimum)
        #expect(query.maximumSize == maximum)
    }

    @Test(
        arguments: [
            ("1", 1), ("1B", 1), ("2k", 2_000), ("2KB", 2_000), ("3m", 3_000_000), ("3mB", 3_000_000),
            ("1g", 1_000_000_000), ("1GB", 1_000_000_000), ("1t", 1_000_000_000_000), ("1TB", 1_000_000_000_000),
            ("1KiB", 1_024), ("1mib", 1_048_576), ("1GiB", 1_073_741_824), ("1TIB", 1_099_511_627_776),
            ("1.5KB", 1_500), ("1.5B", 1), ("0.5", 0), ("0.001KiB", 1), ("2.75GiB", 2_952_790_016),
            ("0.0000000001TiB", 109), ("0.99999999999999999999999999999999999999KiB", 1_023),
            ("8388607.999999999999TiB", 9_223_372_036_854_775_806),
        ] as [(String, Int64)])
    func sizeUnitsAndDecimalsRoundDown(value: String, bytes: Int64) throws {
        #expect(try SearchQuery(parsing: "size>=\(value)").minimumSize == bytes)
    }

    @Test func sizeFiltersIntersect() throws {
        let query = try SearchQuery(parsing: "size>1KB size>=2KB size<1MB size<=500KB size>=1")
        #expect(query.minimumSize == 2_000)
        #expect(query.maximumSize == 500_000)
        let empty = try SearchQuery(parsing: "size=5 size>10")
        #expect(empty.minimumSize == 11)
        #expect(empty.maximumSize == 5)
    }

    @Test func invalidSizeIsAnError() {
        expectSyntaxError("size>", column: 6, Self.sizeMessage)
        expectSyntaxError("size>>1", column: 6, Self.sizeMessage)
        expectSyntaxError("x size>-1", column: 8, Self.sizeMessage)
        expectSyntaxError("size>1.", column: 6, Self.sizeMessage)
        expectSyntaxError("size>.5", column: 6, Self.sizeMessage)
        expectSyntaxError("size>1e6", column: 6, Self.sizeMessage)
        expectSyntaxError("size>１", column: 6, Self.sizeMessage)
        expectSyntaxError("size>=10XB", column: 7, "expected a size after `size>=`, like 10MB or 512KiB")
        expectSyntaxError(#"size>"1 KB""#, column: 6, Self.sizeMessage)
    }

    @Test func sizeBeyondInt64IsAnError() {
        expectSyntaxError("size>9223372036854775807", column: 6, "the size `9223372036854775807` is too large")
        expectSyntaxError("size<99999999999999999999", column: 6, "the size `99999999999999999999` is too large")
        expectSyntaxError("size>=9300000TB", column: 7, "the size `9300000TB` is too large")
        expectSyntaxError("size>=8388608TiB", column: 7, "the size `8388608TiB` is too large")
    }

    @Test func sizeCannotBeNegated() {
        expectSyntaxError("-size>1", column: 1, "`-size>` \(Self.negationMessage)")
        expectSyntaxError("x -SIZE<=1", column: 3, "`-size<=` \(Self.negationMessage)")
    }

    // MARK: - Added

    @Test(
        arguments: [
            ("added<2026-01-01", nil, "2026-01-01T00:00:00Z"),
            ("added<=2026-01-01", nil, "2026-01-02T00:00:00Z"),
            ("added>2026-01-01", "2026-01-02T00:00:00Z", nil),
            ("added>=2026-01-01", "2026-01-01T00:00:00Z", nil),
            ("added=2026-01-31", "2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z"),
            ("added>=2024-02-29", "2024-02-29T00:00:00Z", nil),
            ("added=2000-02-29", "2000-02-29T00:00:00Z", "2000-03-01T00:00:00Z"),
            ("added=1969-12-31", "1969-12-31T00:00:00Z", "1970-01-01T00:00:00Z"),
            ("added<2026-01-01T10:00:00Z", nil, "2026-01-01T10:00:00Z"),
            ("added<=2026-01-01T10:00:00+02:00", nil, "2026-01-01T08:00:01Z"),
            ("added>2026-01-01t10:00:00z", "2026-01-01T10:00:01Z", nil),
            ("added>=2026-01-01T10:00:00-05:30", "2026-01-01T15:30:00Z", nil),
            ("added=2026-12-31T23:59:59Z", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"),
            ("added>=2026-01-01T10:00:00.5Z", "2026-01-01T10:00:00.500Z", nil),
        ] as [(String, String?, String?)])
    func addedComparisons(text: String, from: String?, before: String?) throws {
        let query = try SearchQuery(parsing: text)
        #expect(query.addedFrom == from.flatMap(Self.utc))
        #expect(query.addedBefore == before.flatMap(Self.utc))
        #expect(from.map(Self.utc) != .some(nil) && before.map(Self.utc) != .some(nil))
    }

    @Test func addedFiltersIntersect() throws {
        let query = try SearchQuery(
            parsing: "added>=2026-01-01 added>2026-01-10 added<2026-03-01 added<=2026-02-01 added>=2025-06-01")
        #expect(query.addedFrom == Self.utc("2026-01-11T00:00:00Z"))
        #expect(query.addedBefore == Self.utc("2026-02-02T00:00:00Z"))
    }

    @Test(arguments: [
        "2026-13-01", "2026-02-30", "2025-02-29", "1900-02-29", "2026-00-10", "2026-01-00", "2026-04-31",
        "2026-1-5", "20260101", "garbage", "", "2026-01-01x", "2026-01-01T24:00:00Z", "2026-01-01T10:60:00Z",
        "2026-01-01T10:00:60Z", "2026-01-01T10:00:00", "2026-01-01T10:00Z", "2026-01-01T10:00:00+2:00",
        "2026-01-01T10:00:00+02", "2026-01-01T10:00:00.Z", "2026-01-01T10:00:00Zjunk", "２０２６-01-01",
    ])
    func invalidDateIsAnError(value: String) {
        let message = "expected a date after `added<`, like 2026-01-31 or 2026-01-31T09:00:00Z"
        expectSyntaxError("added<\(value)", column: 7, message)
    }

    @Test func addedCannotBeNegated() {
        expectSyntaxError("-added<2026-01-01", column: 1, "`-added<` \(Self.negationMessage)")
        expectSyntaxError(
            "x added<=", column: 10, "expected a date after `added<=`, like 2026-01-31 or 2026-01-31T09:00:00Z")
    }

    // MARK: - Whole query

    @Test func emptyQueryIsAnError() {
        expectSyntaxError("", column: 1, "expected a word or a filter, like beach or tag:trip")
        expectSyntaxError(" \t\n\r\n ", column: 1, "expected a word or a filter, like beach or tag:trip")
    }

    @Test func queryLongerThan4096CharactersIsAnError() throws {
        let longest = "\"" + String(repeating: "a ", count: 2047) + "\""
        #expect(longest.count == 4096)
        #expect(try SearchQuery(parsing: longest).terms.first?.tokens.count == 2047)
        expectSyntaxError(longest + " ", column: 4097, "the query is longer than 4096 characters")
        expectSyntaxError(
            String(repeating: " ", count: 10_000), column: 4097, "the query is longer than 4096 characters")
    }

    @Test func moreThan64ItemsIsAnError() throws {
        let words = (1...65).map { "w\($0)" }
        #expect(try SearchQuery(parsing: words.dropLast().joined(separator: " ")).terms.count == 64)
        #expect(words.dropLast().joined(separator: " ").count + 2 == 248)
        expectSyntaxError(words.joined(separator: " "), column: 248, "more than 64 words and filters")
        expectSyntaxError(
            Array(repeating: "tag:a", count: 65).joined(separator: " "), column: 385, "more than 64 words and filters")
    }

    @Test func tokensAndValuesLongerThan256CharactersAreErrors() throws {
        let longest = String(repeating: "a", count: 256)
        #expect(try SearchQuery(parsing: "\(longest) tag:\(longest)").tags == [longest])
        expectSyntaxError("beach -\(longest)b", column: 7, "a word is longer than 256 characters")
        expectSyntaxError("\"x \(longest)b\"", column: 1, "a word is longer than 256 characters")
        expectSyntaxError("tag:\(longest)b", column: 5, "the value after `tag:` is longer than 256 characters")
    }

    @Test func repeatedTermsAndFiltersAreKeptOnce() throws {
        let query = try SearchQuery(
            parsing: """
                beach Beach "x y" x_y -beach tag:a tag:a kind:image kind:IMAGE ext:png ext:.PNG \
                storage:member storage:member archive:a.zip archive:a.zip -tag:b -tag:b -kind:data -kind:data \
                -ext:gz -ext:GZ
                """)
        var expected = SearchQuery()
        expected.terms = [
            SearchTerm(tokens: ["beach"]), SearchTerm(tokens: ["x", "y"]),
            SearchTerm(tokens: ["beach"], isExcluded: true),
        ]
        expected.tags = ["a"]
        expected.excludingTags = ["b"]
        expected.kinds = ["image"]
        expected.excludingKinds = ["data"]
        expected.extensions = ["png"]
        expected.excludingExtensions = ["gz"]
        expected.storages = [.member]
        expected.archives = ["a.zip"]
        #expect(query == expected)
    }

    @Test func emptinessAndFullText() throws {
        var query = SearchQuery()
        #expect(query.isEmpty)
        #expect(!query.hasFullText)
        query.addedBefore = Date(timeIntervalSince1970: 0)
        #expect(!query.isEmpty)
        #expect(!query.hasFullText)
        query.terms = [SearchTerm(tokens: ["a"], isExcluded: true)]
        #expect(!query.hasFullText)
        query.terms.append(SearchTerm(tokens: ["b"]))
        #expect(query.hasFullText)
        #expect(try !SearchQuery(parsing: "size>1").isEmpty)
    }

    @Test func syntaxErrorDescribesColumnAndMessage() {
        #expect(SearchQuery.SyntaxError(column: 3, message: "expected x").description == "column 3: expected x")
    }

    @Test func fullExampleQuery() throws {
        let query = try SearchQuery(
            parsing: #"beach tag:trip -tag:rejected kind:image ext:png size>10MB added<2026-01-01 "#
                + #"archive:photos.zip "summer trip" sun*"#)
        var expected = SearchQuery()
        expected.terms = [
            SearchTerm(tokens: ["beach"]), SearchTerm(tokens: ["summer", "trip"]),
            SearchTerm(tokens: ["sun"], isPrefix: true),
        ]
        expected.tags = ["trip"]
        expected.excludingTags = ["rejected"]
        expected.kinds = ["image"]
        expected.extensions = ["png"]
        expected.minimumSize = 10_000_001
        expected.addedBefore = Self.utc("2026-01-01T00:00:00Z")
        expected.archives = ["photos.zip"]
        #expect(query == expected)
    }

    // MARK: - Hostile input

    @Test(arguments: [
        "-", "\"", "-\"", "tag:\"", "size>", "size>>1", "added<=", "🏖️", "👨‍👩‍👧‍👦 family", "e\u{301}\u{301}\u{301}",
        "\u{301}", "-\u{301}", "tag\u{301}:x", "\u{0}", "a\u{0}b", "tag:\u{0}", "שלום עולם", "مرحبا tag:سفر",
        "\u{202E}gnp.exe", String(repeating: " ", count: 10_000), "\"\\", "\\\"", "tag:\"\\\"", "*", "**", "-*",
        "-tag:", "-\"\"*", ":::", "size>=1e999", "added=9999-12-31T23:59:59.999999999999Z", "added=0000-01-01",
        "\r\n", "\"a\"\"b\"", "size=99999999999999999999999TiB", "\"\u{301}\"", "size>\"1 KB\"",
        String(repeating: "\"", count: 4096), String(repeating: "a", count: 4096), String(repeating: "-", count: 5000),
    ])
    func hostileInputParsesOrThrows(text: String) {
        do {
            _ = try SearchQuery(parsing: text)
        } catch {
            #expect((1...4097).contains(error.column))
            #expect(!error.message.isEmpty)
        }
    }
}
