import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The catalog's own tag file in a bundle: one entry per exported asset, with
/// what the payload alone cannot say — names, tags, metadata, storage kind,
/// archive-member links, dates. Its `payload` paths and digests must agree
/// with the bag's manifest.
struct BundleRecords {
    static let fileName = "assetcat-records.json"
    static let formatName = "assetcat-records"

    struct Entry: Codable, Hashable {
        /// The asset's ID in the exporting catalog: a key within this file only.
        var key: Int64
        /// For a member: its archive's key (absent when the archive was not exported).
        var archive: Int64?
        /// The payload file holding the bytes, relative to the bag (`data/…`).
        var payload: String
        /// The asset's fields; `path` is a referenced file's path (a managed file's origin)
        /// in the exporting catalog, and `memberOrdinal` is written for members only.
        var fields: AssetFields

        init(key: Int64, archive: Int64?, payload: String, fields: AssetFields) {
            self.key = key
            self.archive = archive
            self.payload = payload
            self.fields = fields
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: AssetJSONKey.self)
            key = try c.decode(Int64.self, forKey: .key)
            fields = try AssetFields(from: c)
            payload = try c.decode(String.self, forKey: .payload)
            archive = try c.decodeIfPresent(Int64.self, forKey: .archive)
        }

        /// What ``appendJSON(to:)`` writes, through `JSONEncoder` (its tests' yardstick).
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: AssetJSONKey.self)
            try c.encode(key, forKey: .key)
            try c.encodeIfPresent(archive, forKey: .archive)
            try c.encode(payload, forKey: .payload)
            try fields.encode(to: &c, absentAsNull: false, memberOrdinal: fields.storage == .member)
        }
    }

    var assets: [Entry]

    /// Dates as ISO 8601 in UTC with milliseconds (`2026-11-21T13:39:06.323Z`), the style made once.
    static let dateStyle = Date.ISO8601FormatStyle().year().month().day().time(includingFractionalSeconds: true)
        .timeZone(separator: .omitted)
    /// The same without the zone, as the first bundles wrote them (UTC too).
    private static let zonelessDateStyle = Date.ISO8601FormatStyle().year().month().day()
        .time(includingFractionalSeconds: true)

    /// Writes records to a new file, one asset per line, as they come — so that memory does
    /// not grow with the number of assets.
    final class Writer {
        private let file: ContentStore.BufferedFile
        private var count = 0

        init(path: String) throws {
            file = try ContentStore.BufferedFile(creating: path)
            try file.append("{\"format\":\"\(formatName)\",\"version\":1,\"assets\":[".utf8)
        }

        /// Appends an entry encoded by ``Entry/appendJSON(to:)``.
        func append(line: some Sequence<UInt8>) throws {
            try file.append(count == 0 ? [0x0A] : [0x2C, 0x0A])  // ",\n"
            count += 1
            try file.append(line)
        }

        /// Ends the file; its bytes are all written when this returns.
        func finish() throws {
            try file.append("\n]}\n".utf8)
            try file.flush()
        }
    }

    /// The decoder of entries: dates as ``dateStyle`` writes them, or as the first bundles did.
    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            if let date = try? Date(text, strategy: dateStyle) { return date }
            if let date = try? Date(text, strategy: zonelessDateStyle) { return date }
            if let date = try? Date(text, strategy: .iso8601) { return date }
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "not a date: \(text)"))
        }
        return decoder
    }

    /// Decodes a whole records file in memory (``RecordsParser`` reads one as it comes).
    static func decode(_ bytes: [UInt8]) throws(BagError) -> BundleRecords {
        var assets: [Entry] = []
        var parser = RecordsParser { assets += $0 }
        do {
            try bytes.withUnsafeBytes { try parser.feed($0) }
            try parser.finish()
        } catch {
            throw error as? BagError ?? BagError(.malformedTagFile, file: fileName, "cannot be read: \(error)")
        }
        return BundleRecords(assets: assets)
    }

    /// Every way the records, in an import's ``ImportScratch``, contradict the bag: a payload
    /// path the bag lacks, a payload file no entry lists, a digest or size that differs from
    /// the manifest's, a dangling or non-archive archive key, a key or payload path used twice.
    ///
    /// The entries, by payload path, are walked along with the bag's payload, which
    /// ``BagPayload/forEach(_:)`` gives in that order: no lookup per entry, a page of entries
    /// in memory at a time.
    final class Check {
        let scratch: ImportScratch
        private var page: [(seq: Int64, key: String, entry: Entry)] = []
        private var next = 0
        private var after: (key: String, seq: Int64)?
        /// The problems of each entry that has some, by its `seq`: reported in the records' order.
        /// Only those of the first ``limit`` such entries are kept (``foundCount`` counts all).
        private var found: [Int64: [BagError]] = [:]
        private var foundCount = 0
        /// The payload files no entry lists: the first ``limit`` by path (``unlistedCount``: all).
        private var unlisted: [String] = []
        private var unlistedCount = 0
        /// The most problems of each kind kept: records of a million wrong entries take the
        /// memory of this many.
        let limit: Int

        init(_ scratch: ImportScratch, limit: Int = 1_000) {
            self.scratch = scratch
            self.limit = max(1, limit)
        }

        /// Notes an entry's problems, keeping those of the first ``limit`` entries by `seq`.
        private func note(_ seq: Int64, _ problems: [BagError]) {
            foundCount += problems.count
            found[seq] = problems
            if found.count >= 2 * limit {
                for seq in found.keys.sorted().dropFirst(limit) { found[seq] = nil }
            }
        }

        /// The entry at ``next``, reading the next page when the last is done; `nil` at the end.
        private func current() throws -> (seq: Int64, key: String, entry: Entry)? {
            if next == page.count {
                guard page.isEmpty || page.count == ImportScratch.pageSize else { return nil }
                if let last = page.last { after = (last.key, last.seq) }
                page = try scratch.entriesByPayloadKey(after: after)
                next = 0
                if page.isEmpty { return nil }
            }
            return page[next]
        }

        /// Takes the next payload file, in the order of ``BagPayload/forEach(_:)``.
        func visit(_ payload: BagPayloadFile) throws {
            let key = BagPayload.key(payload.path)
            while let entry = try current(), entry.key.utf8.lexicographicallyPrecedes(key.utf8) { try take(nil) }
            if let entry = try current(), entry.key.utf8.elementsEqual(key.utf8) {
                try take(payload)
            } else {
                // A payload file no entry accounts for would be left out of the import without a word.
                unlistedCount += 1
                unlisted.append(payload.path)
                if unlisted.count >= 2 * limit {
                    unlisted.sort()
                    unlisted.removeLast(unlisted.count - limit)
                }
            }
        }

        /// Takes the entries of one payload path: the first is checked against `payload`;
        /// any other gives the same file to a second asset.
        private func take(_ payload: BagPayloadFile?) throws {
            guard let first = try current() else { return }
            let problems = BundleRecords.problems(of: first.entry, payload)
            if !problems.isEmpty { note(first.seq, problems) }
            next += 1
            while let other = try current(), other.key.utf8.elementsEqual(first.key.utf8) {
                note(
                    other.seq,
                    [BagError(.malformedTagFile, file: fileName, "gives \(other.entry.payload) to two assets")])
                next += 1
            }
        }

        /// The problems found, once every payload file has been visited: the first of them (at
        /// most ``limit`` of each kind), and how many there are in all.
        func finish() throws -> (first: [BagError], count: Int) {
            while try current() != nil { try take(nil) }
            let file = fileName
            // A key used twice, at its second use; then each entry's own problems.
            var twice: [Int64: BagError] = [:]
            var twiceCount = 0
            var links: [BagError] = []
            var linkCount = 0
            try scratch.forEachKeyUsedAgain { seq, key in
                twiceCount += 1
                guard twice.count < limit else { return }
                twice[seq] = BagError(.malformedTagFile, file: file, "lists the key \(key) twice")
            }
            try scratch.forEachArchiveLink { name, archive, listed, isMember in
                guard !listed || !isMember else { return }
                linkCount += 1
                guard links.count < limit else { return }
                links.append(
                    listed
                        ? BagError(.malformedTagFile, file: file, "links \(name) to an archive but it is not a member")
                        : BagError(
                            .malformedTagFile, file: file,
                            "links \(name) to archive key \(archive), which it does not list"))
            }
            var problems: [BagError] = []
            for seq in Set(twice.keys).union(found.keys).sorted() {
                if let error = twice[seq] { problems.append(error) }
                problems += found[seq] ?? []
            }
            for path in unlisted.sorted().prefix(limit) {
                problems.append(BagError(.malformedTagFile, file: file, "does not list \(path), which the bag holds"))
            }
            return (problems + links, twiceCount + foundCount + unlistedCount + linkCount)
        }
    }
}

extension BundleRecords {
    /// How one entry contradicts the payload file at its path (`nil`: the bag has none).
    static func problems(of entry: Entry, _ payload: BagPayloadFile?) -> [BagError] {
        guard let payload else {
            return [
                BagError(
                    .malformedTagFile, file: fileName,
                    "says \(entry.fields.name) is \(entry.payload), which the bag does not hold")
            ]
        }
        var problems: [BagError] = []
        if let listed = payload.listed[.sha256], listed != entry.fields.sha256 {
            problems.append(
                BagError(
                    .malformedTagFile, file: fileName,
                    "contradicts manifest-sha256.txt: \(entry.payload) is \(listed.prefix(12))…, the records say "
                        + "\(entry.fields.sha256.prefix(12))…"))
        } else if let actual = payload.digests[.sha256], actual != entry.fields.sha256 {
            problems.append(
                BagError(
                    .malformedTagFile, file: fileName,
                    "contradicts the payload: \(entry.payload) hashes to \(actual.prefix(12))…, the records say "
                        + "\(entry.fields.sha256.prefix(12))…"))
        }
        if payload.size != entry.fields.size {
            problems.append(
                BagError(
                    .malformedTagFile, file: fileName,
                    "says \(entry.payload) has \(entry.fields.size) bytes; it has \(payload.size)"))
        }
        return problems
    }
}

extension BundleRecords.Entry {
    /// Appends this entry as one line of JSON, keys sorted, `nil` fields left out — what
    /// `JSONEncoder` writes with `.sortedKeys` and `.withoutEscapingSlashes`, about ten
    /// times faster: with `JSONEncoder`, the records of 10,000 assets took 0.12 s of a
    /// 0.7 s export. Read back with `JSONDecoder` (``BundleRecords/decode(_:)``).
    func appendJSON(to out: inout [UInt8]) {
        var first = true
        func key(_ name: StaticString) {
            if !first { out.append(0x2C) }  // ,
            first = false
            out.append(0x22)
            name.withUTF8Buffer { out += $0 }
            out += [0x22, 0x3A]  // ":
        }
        func string(_ value: String) { BundleRecords.appendJSONString(value, to: &out) }
        func number(_ value: some BinaryInteger) { out += String(value).utf8 }
        func date(_ value: Date) { string(value.formatted(BundleRecords.dateStyle)) }
        let fields = self.fields
        out.append(0x7B)  // {
        if let archive {
            key("archive")
            number(archive)
        }
        key("created")
        date(fields.created)
        key("key")
        number(self.key)
        key("kind")
        string(fields.kind)
        if let member = fields.member {
            key("member")
            string(member)
        }
        if fields.storage == .member {
            key("memberOrdinal")
            number(fields.memberOrdinal)
        }
        key("metadata")
        out.append(0x7B)
        // By UTF-8 bytes, as JSONEncoder sorts keys (String's < compares canonical equivalents).
        for (i, (name, value)) in fields.metadata.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) })
            .enumerated()
        {
            if i > 0 { out.append(0x2C) }
            string(name)
            out.append(0x3A)
            string(value)
        }
        out.append(0x7D)
        key("modified")
        date(fields.modified)
        key("name")
        string(fields.name)
        if let path = fields.path {
            key("path")
            string(path)
        }
        key("payload")
        string(payload)
        key("sha256")
        string(fields.sha256)
        key("size")
        number(fields.size)
        key("storage")
        string(fields.storage.rawValue)
        key("tags")
        out.append(0x5B)  // [
        for (i, tag) in fields.tags.enumerated() {
            if i > 0 { out.append(0x2C) }
            string(tag)
        }
        out += [0x5D, 0x7D]  // ]}
    }
}

extension BundleRecords {
    /// Appends a JSON string (RFC 8259): quotes, backslashes and control characters
    /// escaped, everything else as its UTF-8 bytes.
    static func appendJSONString(_ value: String, to out: inout [UInt8]) {
        let utf8 = value.utf8
        out.append(0x22)
        guard utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) else {
            out += utf8  // nothing to escape: one copy
            out.append(0x22)
            return
        }
        let hex = Array("0123456789abcdef".utf8)
        for byte in utf8 {
            switch byte {
            case 0x22: out += [0x5C, 0x22]  // \"
            case 0x5C: out += [0x5C, 0x5C]  // \\
            case 0x0A: out += [0x5C, 0x6E]  // \n
            case 0x0D: out += [0x5C, 0x72]  // \r
            case 0x09: out += [0x5C, 0x74]  // \t
            case 0x08: out += [0x5C, 0x62]  // \b
            case 0x0C: out += [0x5C, 0x66]  // \f
            case 0x00..<0x20: out += [0x5C, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]  // \u00XX
            default: out.append(byte)
            }
        }
        out.append(0x22)
    }
}

/// Payload paths for exported assets: names kept, made safe (no empty, `.` or `..`
/// components) and unique — a name already taken, as a file or as a folder, gets
/// ` (2)`, ` (3)`, … before its extension, in the order the assets come.
///
/// Every extractor must give back the same tree, so a path is written in NFC (bsdtar, for
/// one, turns a decomposed name into a precomposed one as it extracts), and names that are
/// one string in another Unicode normalisation (`é` as one scalar or two), or that differ
/// only by letter case, are the same name: on a case-insensitive file system (macOS,
/// Windows) they would be one file. A folder keeps the spelling it was first taken with,
/// so that `Docs/a` and `docs/b` share one folder. The records keep each asset's own name
/// and member path, byte for byte. The names taken are kept in the export's
/// ``ExportScratch``, not in memory.
struct PayloadNamer {
    let names: ExportScratch.Batch

    /// A payload path claimed for a name.
    struct Claim {
        /// Relative to `data/`, in NFC.
        var path: String
        /// Whether `path` differs from the name (in NFC) because another path claimed before
        /// differs from it only by letter case.
        var apartByCase: Bool
    }

    static func safe(_ name: String) -> String {
        if TagFile.isNormal(name) { return name }
        let components = name.split(separator: "/", omittingEmptySubsequences: true).map { component -> String in
            component == "." || component == ".." ? "_" + component : String(component)
        }
        return components.isEmpty ? "unnamed" : components.joined(separator: "/")
    }

    /// `a/b/photo.jpg` → `a/b/photo (2).jpg`.
    static func numbered(_ path: String, _ n: Int) -> String {
        var components = path.split(separator: "/").map(String.init)
        let last = components.removeLast()
        let ext = (last as NSString).pathExtension
        let stem = ext.isEmpty || last.hasPrefix(".") ? last : String(last.dropLast(ext.count + 1))
        let numberedLast = ext.isEmpty || last.hasPrefix(".") ? "\(stem) (\(n))" : "\(stem) (\(n)).\(ext)"
        return (components + [numberedLast]).joined(separator: "/")
    }

    /// `path` in NFC (ASCII is its own).
    static func nfc(_ path: String) -> String {
        path.utf8.allSatisfy { $0 < 0x80 } ? path : path.precomposedStringWithCanonicalMapping
    }

    /// The key a path is taken under, the same for every spelling a case-insensitive file
    /// system takes for one name: upper-cased, then case-folded in full (`ß` and `ss`, `ſ`
    /// and `s`, the Kelvin sign and `k`; upper-casing first also joins `ı` and `i`, as
    /// NTFS's upcase table does), in NFC. Coarser than any one file system, never finer:
    /// a name numbered apart needlessly costs a warning, one taken as free would be lost.
    static func key(_ path: String) -> String {
        guard !path.utf8.allSatisfy({ $0 < 0x80 }) else { return path.lowercased() }
        return path.uppercased().folding(options: .caseInsensitive, locale: nil).precomposedStringWithCanonicalMapping
    }

    /// The folders on the way to `path`: `a`, `a/b` for `a/b/c`.
    static func folders(_ path: String) -> [String] {
        var result: [String] = []
        var prefix = ""
        for component in path.split(separator: "/").dropLast() {
            prefix += prefix.isEmpty ? String(component) : "/" + component
            result.append(prefix)
        }
        return result
    }

    /// Whether a folder on the way to `path` is taken by a file.
    private func folderIsAFile(_ path: String) throws -> Bool {
        for folder in Self.folders(path) {
            let name = try names.name(Self.key(folder))
            if name.taken && !name.folder { return true }
        }
        return false
    }

    private func isFree(_ path: String) throws -> Bool {
        try !names.name(Self.key(path)).taken && !folderIsAFile(path)
    }

    /// `path` with each folder on the way spelt as it was first taken (`docs/b` → `Docs/b`
    /// once `Docs/a` is taken).
    private func firstSpellings(_ path: String) throws -> String {
        var components = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard components.count > 1 else { return path }
        let last = components.removeLast()
        var prefix = ""
        for component in components {
            let candidate = prefix.isEmpty ? component : prefix + "/" + component
            let name = try names.name(Self.key(candidate))
            prefix = name.taken && name.folder ? name.spelling : candidate
        }
        return prefix + "/" + last
    }

    /// Whether `path` is taken by another spelling of the same letters, or a folder on its
    /// way is taken so as a file (all in NFC, so another spelling differs by case).
    private func takenInAnotherCase(_ path: String) throws -> Bool {
        for prefix in Self.folders(path) + [path] {
            let name = try names.name(Self.key(prefix))
            if name.taken && (!name.folder || prefix == path) && !name.spelling.utf8.elementsEqual(prefix.utf8) {
                return true
            }
        }
        return false
    }

    /// Claims a unique path for `name` (relative to `data/`).
    func claim(_ name: String) throws -> Claim {
        let safe = Self.nfc(Self.safe(name))
        let nested = safe.utf8.contains(0x2F)
        // The usual case, one statement: a name with no folder, free.
        if !nested, try names.takeIfFree(Self.key(safe), spelling: safe) {
            return Claim(path: safe, apartByCase: false)
        }
        let base = nested ? try firstSpellings(safe) : safe
        var apartByCase = !base.utf8.elementsEqual(safe.utf8)
        var candidate = base
        var n = 2
        while try !isFree(candidate) {
            if n == 2, try takenInAnotherCase(candidate) { apartByCase = true }
            // A folder on the way is taken by a file: number the top folder instead.
            let top = base.split(separator: "/").first.map(String.init) ?? base
            if nested, try folderIsAFile(base) {
                // (The numbered folder may be taken, as a folder, in another case.)
                candidate = try firstSpellings("\(top) (\(n))" + base.dropFirst(top.count))
            } else {
                candidate = Self.numbered(base, n)
            }
            n += 1
        }
        try names.take(Self.key(candidate), folder: false, spelling: candidate)
        for folder in Self.folders(candidate) { try names.take(Self.key(folder), folder: true, spelling: folder) }
        return Claim(path: candidate, apartByCase: apartByCase)
    }
}
