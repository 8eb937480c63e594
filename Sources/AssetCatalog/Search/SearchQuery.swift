public import Foundation
import Persistence

/// A parsed search: the query language of `assetcat search QUERY` and `Catalog.search(_:)`.
///
/// A query is a list of items separated by whitespace, and an asset matches when every item holds:
///
///     beach tag:trip -tag:rejected kind:image ext:png size>10MB added<2026-01-01 "summer trip" sun*
///
/// - `beach`: a word, split into tokens like the indexed text (see `TextSearch.words(_:)`), so `beach_2024.png`
///   searches for the phrase `beach 2024 png`.
/// - `"summer trip"`: a phrase, whose words must be adjacent and in this order. Inside quotes, `\"` is a quote
///   and `\\` a backslash.
/// - `sun*`, `"summer tr"*`: the last word matches as a prefix.
/// - `-beach`, `-"summer trip"`: the asset must not contain it.
/// - `tag:trip`: the asset has this tag (exact, case-sensitive); several `tag:` must all hold.
/// - `kind:image`: one of `image`, `audio`, `video`, `text`, `document`, `archive`, `data`.
/// - `ext:png` (or `ext:.PNG`): the file name extension.
/// - `storage:managed`, `storage:referenced` or `storage:member`.
/// - `archive:photos.zip`: a member of the archive asset named exactly `photos.zip`.
/// - `size>10MB`, with `>`, `>=`, `<`, `<=` or `=`: units B, K or KB, M or MB, G or GB, T or TB (powers of 1000)
///   and KiB, MiB, GiB, TiB (powers of 1024), case-insensitive; decimals are allowed (`1.5GB`).
/// - `added<2026-01-01`, with the same operators: a UTC day, or an ISO 8601 date-time with a time zone
///   (`2026-01-31T09:00:00Z`, `2026-01-31T09:00:00+02:00`).
///
/// Several `kind:`, `ext:`, `storage:` or `archive:` filters are alternatives (any of them); several `size` or
/// `added` filters intersect. Only `tag:`, `kind:` and `ext:` can be negated with `-`. Filter names are
/// case-insensitive and values may be quoted (`archive:"My Photos.zip"`); to search for text that looks like a
/// filter, quote it (`"foo:bar"`). Items that repeat are kept once.
public struct SearchQuery: Sendable, Hashable {
    /// Full-text terms: every term that is not excluded must match, and no excluded term may.
    public var terms: [SearchTerm] = []
    /// `tag:T`: the asset has all of these tags (exact values).
    public var tags: [String] = []
    /// `-tag:T`: the asset has none of these tags.
    public var excludingTags: [String] = []
    /// `kind:K`: the asset's kind is one of these (lowercased kind names), unless the list is empty.
    public var kinds: [String] = []
    /// `-kind:K`: the asset's kind is none of these.
    public var excludingKinds: [String] = []
    /// `storage:S`: the asset's storage is one of these, unless the list is empty.
    public var storages: [Storage] = []
    /// `archive:NAME`: the asset is a member of an archive asset with one of these exact names, unless empty.
    public var archives: [String] = []
    /// `ext:X`: the asset's file name extension is one of these (lowercased, without the dot), unless empty.
    public var extensions: [String] = []
    /// `-ext:X`: the asset's file name extension is none of these.
    public var excludingExtensions: [String] = []
    /// The smallest matching size in bytes, inclusive.
    public var minimumSize: Int64?
    /// The largest matching size in bytes, inclusive.
    public var maximumSize: Int64?
    /// The earliest matching time the asset was added, inclusive.
    public var addedFrom: Date?
    /// The time assets must have been added before, exclusive.
    public var addedBefore: Date?

    /// A query without terms or filters, which matches everything.
    public init() {}

    /// Parses the query language described on the type.
    /// - Throws: `SyntaxError` with the column of the problem and what was expected there.
    public init(parsing text: String) throws(SyntaxError) {
        var parser = SearchQueryParser(text)
        self = try parser.parse()
    }

    /// Whether the query has no term and no filter.
    public var isEmpty: Bool {
        terms.isEmpty && tags.isEmpty && excludingTags.isEmpty && kinds.isEmpty && excludingKinds.isEmpty
            && storages.isEmpty && archives.isEmpty && extensions.isEmpty && excludingExtensions.isEmpty
            && minimumSize == nil && maximumSize == nil && addedFrom == nil && addedBefore == nil
    }

    /// Whether there is at least one term that is not excluded.
    public var hasFullText: Bool {
        terms.contains { !$0.isExcluded }
    }

    /// Why a query could not be parsed.
    public struct SyntaxError: Error, Hashable, CustomStringConvertible {
        /// Where the problem is: 1-based, counted in `Character`s of the query text.
        public var column: Int
        /// What was expected there, like "expected a size after `size>`, like 10MB or 512KiB".
        public var message: String

        /// An error at `column` (1-based, in `Character`s) saying what was expected there.
        public init(column: Int, message: String) {
            self.column = column
            self.message = message
        }

        public var description: String { "column \(column): \(message)" }
    }

    /// The kinds `kind:` accepts.
    static let kindNames = ["image", "audio", "video", "text", "document", "archive", "data"]
    /// The longest query accepted, in characters.
    static let maximumLength = 4096
    /// The most words and filters a query may have.
    static let maximumItems = 64
    /// The longest word or filter value accepted, in characters.
    static let maximumTokenLength = 256
}

/// A full-text term of a `SearchQuery`: a word, or a phrase of adjacent words.
public struct SearchTerm: Sendable, Hashable {
    /// The normalized tokens (see `TextSearch.words(_:)`), in order; more than one is a phrase, whose tokens
    /// must be adjacent and in this order.
    public var tokens: [String]
    /// Whether the last token matches as a prefix (`sun*`).
    public var isPrefix: Bool
    /// Whether the term must not match (`-word`, `-"a phrase"`).
    public var isExcluded: Bool

    /// A term of normalized tokens; by default neither a prefix nor excluded.
    public init(tokens: [String], isPrefix: Bool = false, isExcluded: Bool = false) {
        self.tokens = tokens
        self.isPrefix = isPrefix
        self.isExcluded = isExcluded
    }
}

/// The comparison operator of a `size` or `added` filter.
private enum Comparison {
    case less, lessOrEqual, greater, greaterOrEqual, equal

    /// The bounds of the matching values, `from` inclusive and `before` exclusive, for a value that covers the
    /// half-open range `start..<end` (one day, one second, one byte).
    func bounds<Value>(start: Value, end: Value) -> (from: Value?, before: Value?) {
        switch self {
        case .less: (nil, start)
        case .lessOrEqual: (nil, end)
        case .greater: (end, nil)
        case .greaterOrEqual: (start, nil)
        case .equal: (start, end)
        }
    }
}

/// Scans a query item by item; `position` indexes `characters`, and columns are `position + 1`.
private struct SearchQueryParser {
    typealias SyntaxError = SearchQuery.SyntaxError

    private let characters: [Character]
    private var position = 0
    private var query = SearchQuery()

    init(_ text: String) {
        characters = Array(text.prefix(SearchQuery.maximumLength + 1))  // enough to tell it is too long
    }

    private var current: Character? {
        position < characters.count ? characters[position] : nil
    }

    mutating func parse() throws(SyntaxError) -> SearchQuery {
        guard characters.count <= SearchQuery.maximumLength else {
            let limit = SearchQuery.maximumLength
            throw error(at: limit, "the query is longer than \(limit) characters")
        }
        var itemCount = 0
        while true {
            while let character = current, character.isWhitespace {
                position += 1
            }
            guard current != nil else { break }
            itemCount += 1
            guard itemCount <= SearchQuery.maximumItems else {
                throw error(at: position, "more than \(SearchQuery.maximumItems) words and filters")
            }
            try parseItem()
        }
        guard itemCount > 0 else {
            throw error(at: 0, "expected a word or a filter, like beach or tag:trip")
        }
        return query
    }

    private mutating func parseItem() throws(SyntaxError) {
        let start = position
        let isExcluded = skip("-")
        if current == "\"" {
            let quote = position
            let phrase = try readQuoted(what: "phrase")
            let isPrefix = skip("*")
            try expectEndOfItem()
            guard phrase.contains(where: { !$0.isWhitespace }) else {
                throw error(at: quote, "the phrase is empty: expected words between the quotes")
            }
            try addTerm(TextSearch.words(phrase), isPrefix: isPrefix, isExcluded: isExcluded, start: start)
            return
        }
        let nameStart = position
        while let character = current, character.isASCII, character.isLetter {
            position += 1
        }
        let name = String(characters[nameStart..<position])
        if !name.isEmpty, let next = current {
            if next == ":" {
                position += 1
                return try parseFilter(named: name, isExcluded: isExcluded, start: start)
            }
            if "<>=".contains(next), ["size", "added"].contains(name.lowercased()) {
                return try parseComparison(named: name.lowercased(), isExcluded: isExcluded, start: start)
            }
        }
        position = nameStart
        let word = try readBare()
        let tokens = TextSearch.words(word)
        if !tokens.isEmpty, let star = (nameStart..<position - 1).first(where: { characters[$0] == "*" }) {
            throw error(at: star, "`*` can only end a word, like sun*")
        }
        try addTerm(tokens, isPrefix: word.last == "*", isExcluded: isExcluded, start: start)
    }

    /// Adds the term of the item from `start` to `position`.
    private mutating func addTerm(
        _ tokens: [String], isPrefix: Bool, isExcluded: Bool, start: Int
    ) throws(SyntaxError) {
        guard !tokens.isEmpty else {
            let item = String(characters[start..<position])
            throw error(at: start, "`\(shown(item))` has no letters or digits to search for")
        }
        guard tokens.allSatisfy({ $0.count <= SearchQuery.maximumTokenLength }) else {
            throw error(at: start, "a word is longer than \(SearchQuery.maximumTokenLength) characters")
        }
        appendUnique(SearchTerm(tokens: tokens, isPrefix: isPrefix, isExcluded: isExcluded), to: &query.terms)
    }

    /// Parses the value of `name:VALUE`; `position` is just after the colon.
    private mutating func parseFilter(named typedName: String, isExcluded: Bool, start: Int) throws(SyntaxError) {
        let name = typedName.lowercased()
        let emptyMessage: String
        switch name {
        case "tag": emptyMessage = "expected a tag after `tag:`"
        case "kind": emptyMessage = "expected a kind after `kind:`, like image"
        case "ext": emptyMessage = "expected an extension after `ext:`, like png"
        case "storage": emptyMessage = "expected managed, referenced or member after `storage:`"
        case "archive": emptyMessage = "expected an archive name after `archive:`"
        case "size": throw error(at: start, "`size:` is not a filter; use a comparison like size>10MB")
        case "added": throw error(at: start, "`added:` is not a filter; use a comparison like added>=2026-01-01")
        default:
            throw error(
                at: start,
                "unknown filter `\(shown(typedName)):`; expected one of tag:, kind:, ext:, storage:, archive:, "
                    + "size>, added<")
        }
        if isExcluded, name == "storage" || name == "archive" {
            throw error(at: start, "`-\(name):` is not allowed: only tag:, kind: and ext: can be negated")
        }
        let valueStart = position
        let value = try readValue()
        guard value.contains(where: { !$0.isWhitespace }) else { throw error(at: valueStart, emptyMessage) }
        let limit = SearchQuery.maximumTokenLength
        guard value.count <= limit else {
            throw error(at: valueStart, "the value after `\(name):` is longer than \(limit) characters")
        }
        switch name {
        case "tag":
            appendUnique(value, to: &query[keyPath: isExcluded ? \SearchQuery.excludingTags : \.tags])
        case "kind":
            let kind = value.lowercased()
            guard SearchQuery.kindNames.contains(kind) else {
                let kinds = SearchQuery.kindNames.joined(separator: ", ")
                throw error(at: valueStart, "unknown kind `\(shown(value))`; expected one of \(kinds)")
            }
            appendUnique(kind, to: &query[keyPath: isExcluded ? \SearchQuery.excludingKinds : \.kinds])
        case "ext":
            var ext = value.lowercased()
            if ext.hasPrefix(".") {
                ext.removeFirst()
            }
            guard !ext.isEmpty else { throw error(at: valueStart, emptyMessage) }
            guard !ext.contains("/") else { throw error(at: valueStart, "an extension can't contain `/`") }
            appendUnique(ext, to: &query[keyPath: isExcluded ? \SearchQuery.excludingExtensions : \.extensions])
        case "storage":
            guard let storage = Storage(rawValue: value.lowercased()) else {
                let storages = Storage.allCases.map(\.rawValue).joined(separator: ", ")
                throw error(at: valueStart, "unknown storage `\(shown(value))`; expected one of \(storages)")
            }
            appendUnique(storage, to: &query.storages)
        default:
            appendUnique(value, to: &query.archives)
        }
    }

    /// Parses `size<op>N` or `added<op>DATE`; `position` is at the operator.
    private mutating func parseComparison(named name: String, isExcluded: Bool, start: Int) throws(SyntaxError) {
        let operatorStart = position
        let comparison: Comparison
        if skip("<") {
            comparison = skip("=") ? .lessOrEqual : .less
        } else if skip(">") {
            comparison = skip("=") ? .greaterOrEqual : .greater
        } else {
            position += 1  // the "=" seen by parseItem()
            comparison = .equal
        }
        let filter = name + String(characters[operatorStart..<position])
        if isExcluded {
            throw error(at: start, "`-\(filter)` is not allowed: only tag:, kind: and ext: can be negated")
        }
        let valueStart = position
        let value = try readValue()
        if name == "size" {
            let tooLarge = error(at: valueStart, "the size `\(shown(value))` is too large")
            guard let bytes = try parseSize(value, tooLarge: tooLarge) else {
                throw error(at: valueStart, "expected a size after `\(filter)`, like 10MB or 512KiB")
            }
            guard comparison != .greater || bytes < .max else { throw tooLarge }
            // `end` wraps only for Int64.max, where `>` was rejected and `end &- 1` unwraps it again
            let (minimum, before) = comparison.bounds(start: bytes, end: bytes &+ 1)
            if let minimum {
                query.minimumSize = max(query.minimumSize ?? minimum, minimum)
            }
            if let maximum = before.map({ $0 &- 1 }) {
                query.maximumSize = min(query.maximumSize ?? maximum, maximum)
            }
        } else {
            guard let range = Self.parseDate(value) else {
                throw error(
                    at: valueStart, "expected a date after `\(filter)`, like 2026-01-31 or 2026-01-31T09:00:00Z")
            }
            let (from, before) = comparison.bounds(start: range.start, end: range.end)
            if let from {
                query.addedFrom = max(query.addedFrom ?? from, from)
            }
            if let before {
                query.addedBefore = min(query.addedBefore ?? before, before)
            }
        }
    }

    /// A filter value: a quoted string (raw, with escapes resolved) or the rest of the item.
    private mutating func readValue() throws(SyntaxError) -> String {
        guard current == "\"" else { return try readBare() }
        let value = try readQuoted(what: "quoted value")
        try expectEndOfItem()
        return value
    }

    /// The characters up to the next whitespace; a quote among them is an error.
    private mutating func readBare() throws(SyntaxError) -> String {
        let start = position
        while let character = current, !character.isWhitespace {
            if character == "\"" {
                throw error(at: position, "unexpected `\"` inside a word; quotes go around a whole phrase or value")
            }
            position += 1
        }
        return String(characters[start..<position])
    }

    /// The text between the quote at `position` and the closing quote; `\"` is a quote and `\\` a backslash.
    private mutating func readQuoted(what: String) throws(SyntaxError) -> String {
        let opening = position
        position += 1
        var text = ""
        while let character = current {
            position += 1
            if character == "\"" {
                return text
            }
            if character == "\\", let next = current, next == "\"" || next == "\\" {
                text.append(next)
                position += 1
            } else {
                text.append(character)
            }
        }
        throw error(at: opening, "a \(what) opened here is not closed: expected `\"`")
    }

    /// Consumes `character` if it is next.
    private mutating func skip(_ character: Character) -> Bool {
        guard current == character else { return false }
        position += 1
        return true
    }

    private func expectEndOfItem() throws(SyntaxError) {
        if let character = current, !character.isWhitespace {
            throw error(at: position, "expected a space after the closing `\"`")
        }
    }

    private func error(at index: Int, _ message: String) -> SyntaxError {
        SyntaxError(column: index + 1, message: message)
    }

    /// Bytes for a number with an optional unit, rounded down; nil if it is not one.
    private func parseSize(_ text: String, tooLarge: SyntaxError) throws(SyntaxError) -> Int64? {
        var scanner = ASCIIScanner(text)
        let whole = scanner.digits()
        var fraction: [Int64] = []
        if scanner.skip(".") {
            fraction = scanner.digits()
            guard !fraction.isEmpty else { return nil }
        }
        guard !whole.isEmpty, let multiplier = Self.units[scanner.rest.lowercased()] else { return nil }
        var bytes: Int64 = 0
        for digit in whole {
            let (tens, overflow) = bytes.multipliedReportingOverflow(by: 10)
            guard !overflow, tens <= .max - digit else { throw tooLarge }
            bytes = tens + digit
        }
        // floor(multiplier × 0.d₁d₂…dₙ), exactly: from the last digit, v = (multiplier × dᵢ + v) / 10
        let fractionBytes = fraction.reversed().reduce(Int64(0)) { (multiplier * $1 + $0) / 10 }
        let (scaled, overflow) = bytes.multipliedReportingOverflow(by: multiplier)
        guard !overflow, scaled <= .max - fractionBytes else { throw tooLarge }
        return scaled + fractionBytes
    }

    private static let units: [String: Int64] = [
        "": 1, "b": 1, "k": 1_000, "kb": 1_000, "m": 1_000_000, "mb": 1_000_000, "g": 1_000_000_000,
        "gb": 1_000_000_000, "t": 1_000_000_000_000, "tb": 1_000_000_000_000, "kib": 1 << 10, "mib": 1 << 20,
        "gib": 1 << 30, "tib": 1 << 40,
    ]

    /// The half-open range a date covers: a UTC day `YYYY-MM-DD`, or the second starting at an ISO 8601
    /// date-time with a time zone (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`); nil if it is neither.
    static func parseDate(_ text: String) -> (start: Date, end: Date)? {
        var scanner = ASCIIScanner(text)
        guard let year = scanner.number(digits: 4), scanner.skip("-"), let month = scanner.number(digits: 2),
            scanner.skip("-"), let day = scanner.number(digits: 2), (1...12).contains(month)
        else { return nil }
        let isLeapYear = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthLengths = [31, isLeapYear ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...monthLengths[month - 1]).contains(day) else { return nil }
        let midnight = Double(daysSince1970(year: year, month: month, day: day) * 86_400)
        if scanner.isAtEnd {
            return (Date(timeIntervalSince1970: midnight), Date(timeIntervalSince1970: midnight + 86_400))
        }
        guard scanner.skip("T") || scanner.skip("t"), let hour = scanner.number(digits: 2), scanner.skip(":"),
            let minute = scanner.number(digits: 2), scanner.skip(":"), let second = scanner.number(digits: 2),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var fraction = 0.0
        if scanner.skip(".") {
            let digits = scanner.digits()
            guard !digits.isEmpty else { return nil }
            fraction = digits.reversed().reduce(0.0) { ($0 + Double($1)) / 10 }
        }
        var offset = 0
        if !scanner.skip("Z") && !scanner.skip("z") {
            let sign = scanner.skip("+") ? 1 : scanner.skip("-") ? -1 : 0
            guard sign != 0, let hours = scanner.number(digits: 2), scanner.skip(":"),
                let minutes = scanner.number(digits: 2), hours < 24, minutes < 60
            else { return nil }
            offset = sign * (hours * 3_600 + minutes * 60)
        }
        guard scanner.isAtEnd else { return nil }
        let start = midnight + Double(hour * 3_600 + minute * 60 + second - offset) + fraction
        return (Date(timeIntervalSince1970: start), Date(timeIntervalSince1970: start + 1))
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's `days_from_civil`).
    private static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let year = month <= 2 ? year - 1 : year
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

/// Reads ASCII numbers and punctuation from the UTF-8 of a string.
private struct ASCIIScanner {
    private let bytes: [UInt8]
    private var index = 0

    init(_ text: String) {
        bytes = Array(text.utf8)
    }

    var isAtEnd: Bool { index == bytes.count }

    /// The unread text.
    var rest: String { String(decoding: bytes[index...], as: UTF8.self) }

    /// Consumes `character` if it is next.
    mutating func skip(_ character: Unicode.Scalar) -> Bool {
        guard index < bytes.count, bytes[index] == character.value else { return false }
        index += 1
        return true
    }

    /// Consumes a run of digits and returns their values.
    mutating func digits() -> [Int64] {
        var values: [Int64] = []
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
            values.append(Int64(bytes[index] - UInt8(ascii: "0")))
            index += 1
        }
        return values
    }

    /// Consumes a run of digits; its value if it has exactly `count` digits.
    mutating func number(digits count: Int) -> Int? {
        let values = digits()
        return values.count == count ? values.reduce(0) { $0 * 10 + Int($1) } : nil
    }
}

private func appendUnique<Element: Equatable>(_ element: Element, to array: inout [Element]) {
    if !array.contains(element) {
        array.append(element)
    }
}

/// Text to quote in a message: shortened when long, with control and format characters (like NUL or a
/// right-to-left override, which could garble the terminal) written as `\u{…}`.
private func shown(_ text: String) -> String {
    var shown = ""
    for character in text.prefix(40) {
        if let first = character.unicodeScalars.first, [.control, .format].contains(first.properties.generalCategory) {
            shown += character.unicodeScalars.map { "\\u{\(String($0.value, radix: 16, uppercase: true))}" }.joined()
        } else {
            shown.append(character)
        }
    }
    return text.count > 40 ? shown + "…" : shown
}
