import Foundation
import Testing

@testable import AssetCatalog

/// The hand-written JSON of a record (``AssetRecord/appendJSON(to:layout:only:)``) is the
/// bytes `JSONEncoder` writes, for strings of every escape class, any dates, subsets of fields
/// and both layouts: `ls --json` and `ls --jsonl` did not change when the encoder did.
@Suite struct RecordJSONTests {
    /// A small deterministic generator (SplitMix64), so that a failure can be replayed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Pieces of every escape class: each control character, quote, backslash, slash, DEL,
    /// accents in both normalisations, CJK, an emoji, line and paragraph separators, a BOM.
    static let pieces: [String] =
        (0..<0x20).map { String(UnicodeScalar(UInt8($0))) } + [
            "\"", "\\", "/", "\u{7F}", "a", "Z", "0", " ", "é", "e\u{301}", "日本", "😀", "\u{2028}", "\u{2029}",
            "\u{FEFF}", "\u{85}", "\u{A0}", "</script>", "plain words",
        ]

    static func string(_ g: inout Generator, maxPieces: Int = 6) -> String {
        (0..<Int.random(in: 0...maxPieces, using: &g)).map { _ in pieces.randomElement(using: &g)! }.joined()
    }

    static let dates: [TimeInterval] = [
        0, -0.5, -1, 0.5, 0.999_999, 1_795_268_346.5, 1_795_271_946.625, 951_782_400, 951_868_799.999,
        -62_135_596_800, 253_402_300_799.9, 4_102_444_800, -2_208_988_800, 1e9 + 0.000_001, 86_399.999_9,
    ]

    static func record(_ g: inout Generator) -> AssetRecord {
        let storage = [Storage.managed, .referenced, .member].randomElement(using: &g)!
        var metadata: [String: String] = [:]
        for _ in 0..<Int.random(in: 0...4, using: &g) { metadata[string(&g, maxPieces: 3)] = string(&g) }
        let date = { (g: inout Generator) in
            Bool.random(using: &g)
                ? Date(timeIntervalSince1970: dates.randomElement(using: &g)!)
                : Date(timeIntervalSince1970: Double.random(in: -3e9...5e9, using: &g))
        }
        let fields = AssetFields(
            name: string(&g), kind: string(&g, maxPieces: 2), storage: storage,
            size: [0, 1, Int64.max, Int64.random(in: 0...1 << 40, using: &g)].randomElement(using: &g)!,
            sha256: string(&g), path: Bool.random(using: &g) ? string(&g) : nil,
            member: storage == .member ? string(&g) : nil, memberOrdinal: Int.random(in: 0...3, using: &g),
            tags: (0..<Int.random(in: 0...3, using: &g)).map { _ in "t" + string(&g, maxPieces: 2) }
                .filter { !$0.contains("\n") }, metadata: metadata, created: date(&g), modified: date(&g))
        return AssetRecord(
            id: AssetID(Int64.random(in: 1...Int64.max, using: &g)),
            archive: Bool.random(using: &g) ? AssetID(Int64.random(in: 1...1_000, using: &g)) : nil,
            fields: fields)
    }

    /// What the CLI wrote before: `JSONEncoder`, pretty-printed and indented one level as an
    /// element of the listing's array (empty lines dropped), or compact.
    static func encoded(_ value: some Encodable, pretty: Bool) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting =
            pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let text = String(decoding: try encoder.encode(value), as: UTF8.self)
        return pretty ? text.split(separator: "\n").joined(separator: "\n  ") : text
    }

    static func written(_ record: AssetRecord, _ layout: AssetRecord.JSONLayout, _ only: Set<AssetRecord.Field>?)
        -> String
    {
        var out: [UInt8] = []
        record.appendJSON(to: &out, layout: layout, only: only)
        return String(decoding: out, as: UTF8.self)
    }

    @Test func recordsOfEveryEscapeClassAreWhatJSONEncoderWrites() throws {
        var g = Generator(state: 19)
        for _ in 0..<2_000 {
            let record = Self.record(&g)
            #expect(Self.written(record, .line, nil) == (try Self.encoded(record, pretty: false)))
            #expect(Self.written(record, .arrayElement, nil) == (try Self.encoded(record, pretty: true)))
            let some = Set(AssetRecord.Field.allCases.filter { _ in Bool.random(using: &g) })
            let selection = record.selecting(some)
            #expect(Self.written(record, .line, some) == (try Self.encoded(selection, pretty: false)))
            #expect(Self.written(record, .arrayElement, some) == (try Self.encoded(selection, pretty: true)))
        }
    }

    @Test func everySingleCharacterEscapesAsJSONEncoderEscapesIt() throws {
        // Every scalar of the first plane but surrogates, one at a time, as a name.
        var base = AssetRecord(
            id: 1, archive: nil,
            fields: AssetFields(
                name: "", kind: "data", storage: .managed, size: 0, sha256: "", created: Date(timeIntervalSince1970: 0),
                modified: Date(timeIntervalSince1970: 0)))
        for value in UInt32(0)..<0x1_0000 {
            guard let scalar = UnicodeScalar(value) else { continue }
            base.name = "x" + String(Character(scalar)) + "y"
            let written = Self.written(base, .line, [.name])
            let expected = try Self.encoded(base.selecting([.name]), pretty: false)
            if written != expected {
                Issue.record("U+\(String(value, radix: 16)): \(written) != \(expected)")
                return
            }
        }
    }

    @Test func datesAreWhatTheISO8601StrategyWrites() throws {
        var g = Generator(state: 7)
        let samples =
            Self.dates + (0..<5_000).map { _ in Double.random(in: -62_135_596_800...253_402_300_799, using: &g) } + [
                -62_135_596_801, 253_402_300_800, 3e11, -7e10,
            ]
        struct Box: Encodable { let d: Date }
        for interval in samples {
            let date = Date(timeIntervalSince1970: interval)
            var out: [UInt8] = []
            AssetRecord.appendDate(date, to: &out)
            let expected = try Self.encoded(Box(d: date), pretty: false).dropFirst(5).dropLast()  // {"d": … }
            #expect(String(decoding: out, as: UTF8.self) == expected, "\(interval)")
        }
    }

    @Test func anEmptySelectionIsAnEmptyObject() throws {
        var g = Generator(state: 3)
        let record = Self.record(&g)
        #expect(Self.written(record, .line, []) == "{}")
        #expect(Self.written(record, .arrayElement, []) == (try Self.encoded(record.selecting([]), pretty: true)))
    }
}
