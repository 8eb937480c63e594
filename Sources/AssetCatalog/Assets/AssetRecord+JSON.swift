import Foundation
import Persistence

/// How ``Catalog/writeJSON(_:listing:fields:orderedBy:pageSize:to:)`` lays out a listing.
public enum JSONListing: Sendable, Hashable {
    /// One pretty-printed JSON array (`ls --json`).
    case array
    /// One compact JSON object per line (`ls --jsonl`: what jq and pipelines read).
    case lines
}

extension AssetRecord {
    /// How ``appendJSON(to:layout:only:)`` lays out one record.
    enum JSONLayout {
        /// Compact, on one line.
        case line
        /// Pretty-printed as an element of a pretty-printed array: the opening brace
        /// unindented (the array's line break and indent come before it), every other line
        /// indented one level (two spaces) more than on its own, an empty object or array on
        /// two lines (`{` then `}`).
        case arrayElement
    }

    /// Appends the record's JSON form (``encode(to:)``), or with `only` just those of its
    /// fields — the bytes `JSONEncoder` writes with `.sortedKeys`, `.withoutEscapingSlashes`
    /// and `.iso8601` dates (`.prettyPrinted` too for ``JSONLayout/arrayElement``, empty
    /// lines dropped), written by hand: `JSONEncoder` was most of the time of `ls --json`.
    /// Keys come sorted by their UTF-8 bytes, as `JSONEncoder` sorts them.
    func appendJSON(to out: inout [UInt8], layout: JSONLayout, only: Set<Field>? = nil) {
        let pretty = layout == .arrayElement
        var first = true
        func wanted(_ field: Field) -> Bool { only?.contains(field) ?? true }
        func key(_ name: StaticString) {
            if !first { out.append(0x2C) }  // ,
            first = false
            if pretty { out += Self.newlineAndIndent(2) }
            out.append(0x22)
            name.withUTF8Buffer { out += $0 }
            if pretty { out += Self.prettyColon } else { out += [0x22, 0x3A] }  // ": or " :
        }
        func string(_ value: String) { BundleRecords.appendJSONString(value, to: &out) }
        func number(_ value: Int64) { out += String(value).utf8 }
        func optionalString(_ value: String?) { if let value { string(value) } else { out += Self.null } }
        /// Opens a nested object or array, its members' separator and indent, and closes it.
        func nested(_ open: UInt8, _ close: UInt8, _ count: Int, _ member: (Int) -> Void) {
            out.append(open)
            for i in 0..<count {
                if i > 0 { out.append(0x2C) }
                if pretty { out += Self.newlineAndIndent(3) }
                member(i)
            }
            if pretty { out += Self.newlineAndIndent(2) }  // an empty one on two lines too
            out.append(close)
        }
        let fields = self.fields
        out.append(0x7B)  // {
        if wanted(.archive) {
            key("archive")
            if let archive { number(archive.rawValue) } else { out += Self.null }
        }
        if wanted(.created) {
            key("created")
            Self.appendDate(fields.created, to: &out)
        }
        if wanted(.id) {
            key("id")
            number(id.rawValue)
        }
        if wanted(.kind) {
            key("kind")
            string(fields.kind)
        }
        if wanted(.member) {
            key("member")
            optionalString(fields.member)
        }
        if wanted(.metadata) {
            key("metadata")
            // By UTF-8 bytes, as JSONEncoder sorts keys (String's < compares canonical equivalents).
            let metadata =
                fields.metadataJSON == "{}"
                ? []
                : fields.metadata.sorted {
                    $0.key.utf8.lexicographicallyPrecedes($1.key.utf8)
                }
            nested(0x7B, 0x7D, metadata.count) { i in
                string(metadata[i].key)
                out += pretty ? Self.prettyValueColon : [0x3A]
                string(metadata[i].value)
            }
        }
        if wanted(.modified) {
            key("modified")
            Self.appendDate(fields.modified, to: &out)
        }
        if wanted(.name) {
            key("name")
            string(fields.name)
        }
        if wanted(.path) {
            key("path")
            optionalString(fields.path)
        }
        if wanted(.sha256) {
            key("sha256")
            string(fields.sha256)
        }
        if wanted(.size) {
            key("size")
            number(fields.size)
        }
        if wanted(.storage) {
            key("storage")
            string(fields.storage.rawValue)
        }
        if wanted(.tags) {
            key("tags")
            let tags = fields.tagText == "\n" ? [] : fields.tags
            nested(0x5B, 0x5D, tags.count) { string(tags[$0]) }
        }
        if pretty { out += Self.newlineAndIndent(1) }
        out.append(0x7D)  // }
    }

    private static let null: [UInt8] = Array("null".utf8)
    /// `" : ` after a key of the record: the closing quote and the pretty separator.
    private static let prettyColon: [UInt8] = Array("\" : ".utf8)
    /// ` : ` after a key of a nested object (its quotes are the string's).
    private static let prettyValueColon: [UInt8] = Array(" : ".utf8)
    private static let indents: [[UInt8]] = (0...3).map { [0x0A] + Array(repeating: 0x20, count: 2 * $0) }

    /// A line break and `level` levels of two spaces.
    private static func newlineAndIndent(_ level: Int) -> [UInt8] { indents[level] }

    /// A date as `JSONEncoder`'s `.iso8601` strategy writes it (`"2026-11-21T13:39:06Z"`, UTC,
    /// whole seconds, rounded down), computed for the years 1600 to 9999 rather than through a
    /// formatter. Other dates go to the formatter: before the Gregorian calendar (1582) it
    /// counts days by the Julian one.
    static func appendDate(_ date: Date, to out: inout [UInt8]) {
        let interval = date.timeIntervalSince1970
        // 1600-01-01 to 9999-12-31T23:59:59.
        guard interval >= -11_676_096_000, interval < 253_402_300_800 else {
            BundleRecords.appendJSONString(date.formatted(.iso8601), to: &out)
            return
        }
        let seconds = Int64(interval.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func digits(_ value: Int64, _ count: Int) {
            var divisor: Int64 = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                out.append(0x30 + UInt8((value / divisor) % 10))
                divisor /= 10
            }
        }
        out.append(0x22)
        digits(year, 4)
        out.append(0x2D)
        digits(month, 2)
        out.append(0x2D)
        digits(day, 2)
        out.append(0x54)  // T
        digits(secondOfDay / 3_600, 2)
        out.append(0x3A)
        digits(secondOfDay / 60 % 60, 2)
        out.append(0x3A)
        digits(secondOfDay % 60, 2)
        out += [0x5A, 0x22]  // Z"
    }
}

extension AssetRecord {
    /// A snapshot of an asset's row read without making an object, as ``init(_:)`` makes one
    /// of the object.
    init(snapshot row: ObjectSnapshot) {
        id = AssetID(row.objectID.rowID)
        archive = row.objectID(for: \Asset.archive).map { AssetID($0.rowID) }
        fields = AssetFields(row)
    }
}

extension Catalog {
    /// Writes the assets `query` selects as JSON, in `order` (by ID unless told) — each record in its JSON form
    /// (``AssetRecord/encode(to:)``), or with `fields` just those of its fields: one
    /// pretty-printed array (``JSONListing/array``) or one compact object per line
    /// (``JSONListing/lines``), each line ending in a line break.
    ///
    /// The assets are read a page at a time and the text handed to `write` in blocks of
    /// about 64 KiB, the first as soon as the first record is written: memory stays bounded
    /// whatever the catalog's size, and a reader sees the first record at once.
    public func writeJSON(
        _ query: AssetQuery = AssetQuery(), listing: JSONListing, fields: [AssetRecord.Field]? = nil,
        orderedBy order: AssetOrder = .id, pageSize: Int? = nil, to write: ([UInt8]) throws -> Void
    ) throws {
        var json = JSONRecords(listing: listing, fields: fields)
        try forEachAsset(query, orderedBy: order, pageSize: pageSize) { try json.append($0, to: write) }
        try json.finish(to: write)
    }

    /// Writes the assets `search` finds as JSON, in its order (``forEachSearchResult(_:_:)``),
    /// as ``writeJSON(_:listing:fields:orderedBy:pageSize:to:)`` writes a listing.
    public func writeJSON(
        found search: SearchQuery, listing: JSONListing, fields: [AssetRecord.Field]? = nil,
        to write: ([UInt8]) throws -> Void
    ) throws {
        var json = JSONRecords(listing: listing, fields: fields)
        try forEachSearchResult(search) { try json.append($0.record, to: write) }
        try json.finish(to: write)
    }
}

/// Records written as JSON (one array, or one object a line), handed on in blocks of about
/// 64 KiB, the first as soon as the first record is written.
public struct JSONRecords {
    private let listing: JSONListing
    private let only: Set<AssetRecord.Field>?
    private var out: [UInt8] = []
    private var first = true

    /// Records as `listing` lays them out, with only `fields` (all when `nil`).
    public init(listing: JSONListing, fields: [AssetRecord.Field]?) {
        self.listing = listing
        only = fields.map(Set.init)
        out.reserveCapacity(1 << 17)
        if listing == .array { out.append(0x5B) }  // [
    }

    /// Writes `record`; hands the text on to `write` when a block is full (or it is the first).
    public mutating func append(_ record: AssetRecord, to write: ([UInt8]) throws -> Void) throws {
        switch listing {
        case .lines:
            record.appendJSON(to: &out, layout: .line, only: only)
            out.append(0x0A)
        case .array:
            out += first ? [0x0A, 0x20, 0x20] : [0x2C, 0x0A, 0x20, 0x20]  // \n or ,\n and the indent
            record.appendJSON(to: &out, layout: .arrayElement, only: only)
        }
        if first || out.count >= 1 << 16 {
            try write(out)
            out.removeAll(keepingCapacity: true)
        }
        first = false
    }

    /// Ends the text, and hands what is left on to `write`.
    public mutating func finish(to write: ([UInt8]) throws -> Void) throws {
        if listing == .array { out += first ? [0x5D, 0x0A] : [0x0A, 0x5D, 0x0A] }  // ]\n or \n]\n
        if !out.isEmpty { try write(out) }
        out.removeAll()
    }
}
