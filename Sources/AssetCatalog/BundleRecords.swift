import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The catalog's own tag file in a bundle: one entry per exported asset, with
/// what the payload alone cannot say — names, tags, metadata, storage kind,
/// archive-member links, dates. Its `payload` paths and digests must agree
/// with the bag's manifest.
struct BundleRecords: Codable {
    static let fileName = "assetcat-records.json"
    static let formatName = "assetcat-records"

    struct Entry: Codable, Hashable {
        /// The asset's ID in the exporting catalog: a key within this file only.
        var key: Int64
        var name: String
        var kind: String
        var storage: Storage
        var size: Int64
        var sha256: String
        /// The payload file holding the bytes, relative to the bag (`data/…`).
        var payload: String
        /// A referenced file's path (a managed file's origin) in the exporting catalog.
        var path: String?
        /// For a member: its archive's key (absent when the archive was not exported).
        var archive: Int64?
        var member: String?
        var memberOrdinal: Int?
        var tags: [String]
        var metadata: [String: String]
        var created: Date
        var modified: Date
    }

    var format = formatName
    var version = 1
    var assets: [Entry]

    /// Dates as ISO 8601 in UTC with milliseconds (`2026-11-21T13:39:06.323Z`), the style made once.
    private static let dateStyle = Date.ISO8601FormatStyle().year().month().day().time(includingFractionalSeconds: true)
        .timeZone(separator: .omitted)
    /// The same without the zone, as the first bundles wrote them (UTC too).
    private static let zonelessDateStyle = Date.ISO8601FormatStyle().year().month().day()
        .time(includingFractionalSeconds: true)

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.formatted(dateStyle))
        }
        return encoder
    }()

    /// Writes the records of `assets` to a new file at `path`, one asset per line —
    /// streaming, so that memory does not grow with the number of assets.
    static func write(_ assets: some Sequence<Entry>, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw CatalogError(.io, "Could not create \(path): \(ContentStore.errnoText())", path: path)
        }
        defer { close(fd) }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(1 << 16)
        func flush() throws {
            try buffer.withUnsafeBytes { try ContentStore.writeAll(fd, $0, path: path) }
            buffer.removeAll(keepingCapacity: true)
        }
        buffer += Array("{\"format\":\"\(formatName)\",\"version\":1,\"assets\":[".utf8)
        for (i, entry) in assets.enumerated() {
            buffer += i == 0 ? [0x0A] : [0x2C, 0x0A]  // ",\n"
            buffer += try encoder.encode(entry)
            if buffer.count >= 1 << 16 { try flush() }
        }
        buffer += Array("\n]}\n".utf8)
        try flush()
    }

    static func decode(_ bytes: [UInt8]) throws(BagError) -> BundleRecords {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            if let date = try? Date(text, strategy: dateStyle) { return date }
            if let date = try? Date(text, strategy: zonelessDateStyle) { return date }
            if let date = try? Date(text, strategy: .iso8601) { return date }
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "not a date: \(text)"))
        }
        let records: BundleRecords
        do {
            // The bytes as Data without a copy (the Data does not outlive the call).
            records = try bytes.withUnsafeBytes { buffer in
                guard let base = buffer.baseAddress else { return try decoder.decode(BundleRecords.self, from: Data()) }
                let data = Data(
                    bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: buffer.count, deallocator: .none)
                return try decoder.decode(BundleRecords.self, from: data)
            }
        } catch {
            throw BagError(.malformedTagFile, file: fileName, "cannot be read: \(error)")
        }
        guard records.format == formatName, records.version == 1 else {
            throw BagError(
                .unsupportedVersion, file: fileName,
                "is \(records.format) version \(records.version); this assetcat reads \(formatName) version 1")
        }
        return records
    }

    /// Every way the records contradict the bag: a payload path the bag lacks, a payload
    /// file no entry lists, a digest or size that differs from the manifest's, a dangling or
    /// non-archive archive key, a key or payload path used twice.
    func problems(in bag: BagContents) -> [BagError] {
        var problems: [BagError] = []
        let file = Self.fileName
        let manifest = bag.manifests[.sha256]
        var keys: [Int64: Entry] = [:]
        var payloads = Set<String>()
        for entry in assets {
            if keys.updateValue(entry, forKey: entry.key) != nil {
                problems.append(BagError(.malformedTagFile, file: file, "lists the key \(entry.key) twice"))
            }
            guard payloads.insert(entry.payload).inserted else {
                problems.append(BagError(.malformedTagFile, file: file, "gives \(entry.payload) to two assets"))
                continue
            }
            guard let payload = bag.payload[entry.payload] else {
                problems.append(
                    BagError(
                        .malformedTagFile, file: file,
                        "says \(entry.name) is \(entry.payload), which the bag does not hold"))
                continue
            }
            if let listed = manifest?[entry.payload], listed != entry.sha256 {
                problems.append(
                    BagError(
                        .malformedTagFile, file: file,
                        "contradicts manifest-sha256.txt: \(entry.payload) is \(listed.prefix(12))…, the records say "
                            + "\(entry.sha256.prefix(12))…"))
            } else if let actual = payload.digests[.sha256], actual != entry.sha256 {
                problems.append(
                    BagError(
                        .malformedTagFile, file: file,
                        "contradicts the payload: \(entry.payload) hashes to \(actual.prefix(12))…, the records say "
                            + "\(entry.sha256.prefix(12))…"))
            }
            if payload.size != entry.size {
                problems.append(
                    BagError(
                        .malformedTagFile, file: file,
                        "says \(entry.payload) has \(entry.size) bytes; it has \(payload.size)"))
            }
        }
        // A payload file no entry accounts for would be left out of the import without a word.
        for path in bag.payload.keys.sorted() where !payloads.contains(path) {
            problems.append(BagError(.malformedTagFile, file: file, "does not list \(path), which the bag holds"))
        }
        for entry in assets {
            if let archive = entry.archive {
                if keys[archive] == nil {
                    problems.append(
                        BagError(
                            .malformedTagFile, file: file,
                            "links \(entry.name) to archive key \(archive), which it does not list"))
                } else if entry.storage != .member || entry.member == nil {
                    problems.append(
                        BagError(
                            .malformedTagFile, file: file, "links \(entry.name) to an archive but it is not a member"))
                }
            }
        }
        return problems
    }
}

/// Payload paths for exported assets: names kept, made safe (no empty, `.` or `..`
/// components) and unique — a name already taken, as a file or as a folder, gets
/// ` (2)`, ` (3)`, … before its extension, in the order the assets come.
struct PayloadNamer {
    private var files = Set<String>()
    private var folders = Set<String>()

    static func safe(_ name: String) -> String {
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

    private func isFree(_ path: String) -> Bool {
        if files.contains(path) || folders.contains(path) { return false }
        var prefix = ""
        for component in path.split(separator: "/").dropLast() {
            prefix += prefix.isEmpty ? String(component) : "/" + component
            if files.contains(prefix) { return false }
        }
        return true
    }

    /// Claims a unique path for `name` (relative to `data/`).
    mutating func claim(_ name: String) -> String {
        let base = Self.safe(name)
        var candidate = base
        var n = 2
        while !isFree(candidate) {
            // A folder on the way is taken by a file: number the top folder instead.
            let top = base.split(separator: "/").first.map(String.init) ?? base
            if base.contains("/"), files.contains(where: { base.hasPrefix($0 + "/") }) {
                candidate = "\(top) (\(n))" + base.dropFirst(top.count)
            } else {
                candidate = Self.numbered(base, n)
            }
            n += 1
        }
        files.insert(candidate)
        var prefix = ""
        for component in candidate.split(separator: "/").dropLast() {
            prefix += prefix.isEmpty ? String(component) : "/" + component
            folders.insert(prefix)
        }
        return candidate
    }
}
