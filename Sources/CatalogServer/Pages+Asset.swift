import AssetCatalog
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// An asset's page, its preview and its download.
extension Pages {
    /// How much of a text asset its page shows.
    static let textPreviewBytes = 4_096

    /// `/assets/ID`: the asset's fields, preview, tags (with forms to change them), metadata,
    /// jobs, its archive, and its members when it is an archive (a page at a time, `after`).
    func asset(_ id: AssetID, _ fields: FormFields) async throws -> Response {
        let after = try fields.number("after")
        let catalog = self.catalog
        let limit = Self.pageSize
        let (listed, members, jobs) = try await blocking {
            let listed = try catalog.listed(catalog.asset(id))
            let members =
                listed.record.kind == "archive"
                ? try catalog.listedAssets(AssetQuery(archive: id), after: after.map { AssetID($0) }, limit: limit + 1)
                : []
            return (listed, members, try catalog.jobs.list(asset: id))
        }
        let record = listed.record
        let preview = await preview(of: record)
        let archive: HTML =
            record.archive.map { archiveID in
                "<a href=\"\(Self.assetPath(archiveID))\" id=\"archive\">\(listed.archiveName ?? "#\(archiveID)")</a>"
            } ?? ""
        var rows: [HTML] = [
            "<dt>ID</dt><dd>\(record.id.rawValue)</dd>",
            "<dt>Name</dt><dd>\(record.name)</dd>",
            "<dt>Kind</dt><dd>\(record.kind)</dd>",
            "<dt>Storage</dt><dd>\(record.storage.rawValue)</dd>",
            "<dt>Size</dt><dd>\(Self.bytes(record.size)) <span class=\"muted\">(\(record.size) bytes)</span></dd>",
            "<dt>SHA-256</dt><dd><code class=\"digest\">\(record.sha256)</code></dd>",
            "<dt>Added</dt><dd>\(Self.date(record.created))</dd>",
            "<dt>Modified</dt><dd>\(Self.date(record.modified))</dd>",
        ]
        if let member = record.member {
            rows.insert("<dt>In archive</dt><dd>\(archive) <span class=\"muted\">as</span> \(member)</dd>", at: 2)
        } else if let path = record.path {
            let label = record.storage == .referenced ? "File" : "Added from"
            rows.insert("<dt>\(label)</dt><dd>\(path)</dd>", at: 2)
        }
        let crumb: HTML = record.archive != nil ? " / \(archive)" : ""
        let body: HTML = """
            <nav class="crumbs"><a href="/">Assets</a>\(crumb) / \
            <span>\(record.member ?? record.name)</span></nav>
            <h1 id="asset-name">\(listed.location)</h1>
            <div class="asset">
            <section class="preview">\(preview)</section>
            <section class="details">
            <dl class="fields">\(rows)</dl>
            <div class="actions">
            <a class="button" id="download" href="\(Self.assetPath(id))/download">Download</a>
            <a class="button danger" id="delete" href="\(Self.assetPath(id))/delete">Delete…</a>
            </div>
            </section>
            </div>
            \(tagsSection(record))
            \(metadataSection(record))
            \(jobsSection(jobs))
            \(membersSection(record, Array(members.prefix(limit)), more: members.count > limit, after: after))
            """
        return page(listed.location, body)
    }

    private func tagsSection(_ record: AssetRecord) -> HTML {
        let action = "\(Self.assetPath(record.id))/tags"
        let tags = record.tags.map { tag -> HTML in
            """
            <li class="tag"><a href="\(Self.searchPath(Self.adding("tag", tag, to: "")))">\(tag)</a>\
            <form method="post" action="\(action)" class="inline">\(csrfField)\
            <input type="hidden" name="remove" value="\(tag)">\
            <button type="submit" class="remove" title="Remove the tag \(tag)" aria-label="Remove the tag \(tag)">×</button>\
            </form></li>
            """
        }
        return """
            <section class="block">
            <h2>Tags</h2>
            <ul class="tag-list" id="tags">\(tags.isEmpty ? ["<li class=\"none\">No tags.</li>"] : tags)</ul>
            <form method="post" action="\(action)" class="add-tag">\(csrfField)
            <input type="text" name="add" id="new-tag" aria-label="New tag" placeholder="New tag" required>
            <button type="submit" id="add-tag">Add tag</button>
            </form>
            </section>
            """
    }

    private func metadataSection(_ record: AssetRecord) -> HTML {
        let metadata = record.metadata.sorted { $0.key < $1.key }
        guard !metadata.isEmpty else { return "" }
        return """
            <section class="block">
            <h2>Metadata</h2>
            <table class="plain">\(metadata.map { key, value -> HTML in "<tr><th>\(key)</th><td>\(value)</td></tr>" })</table>
            </section>
            """
    }

    private func jobsSection(_ jobs: [JobRecord]) -> HTML {
        guard !jobs.isEmpty else { return "" }
        return """
            <section class="block">
            <h2>Jobs</h2>
            \(jobTable(jobs, showsAsset: false))
            </section>
            """
    }

    private func membersSection(_ record: AssetRecord, _ members: [ListedAsset], more: Bool, after: Int64?) -> HTML {
        guard record.kind == "archive" else { return "" }
        let next: HTML =
            more
            ? "<a class=\"button\" id=\"next-members\" href=\"\(Self.assetPath(record.id))?after=\(members.last!.record.id.rawValue)\">Next members →</a>"
            : ""
        let first: HTML = after != nil ? "<a href=\"\(Self.assetPath(record.id))\">first members</a>" : ""
        return """
            <section class="block">
            <h2>Members</h2> \(first)
            \(table(members, next: nil))
            <div class="actions">\(next)</div>
            </section>
            """
    }

    // MARK: - Preview

    /// What the page shows of the asset's content: an image (its own address, served with
    /// its sniffed type), the first few KB of a text (escaped), or nothing.
    private func preview(of record: AssetRecord) async -> HTML {
        do {
            switch record.kind {
            case "image":
                guard try await imageType(of: record.id) != nil else {
                    return "<p class=\"muted\">No preview: not a PNG, JPEG, GIF or WebP image.</p>"
                }
                return "<img id=\"preview-image\" src=\"\(Self.assetPath(record.id))/content\" alt=\"\(record.name)\">"
            case "text":
                let bytes = try await prefix(of: record.id, Self.textPreviewBytes + 1)
                let shown = Self.text(bytes.prefix(Self.textPreviewBytes))
                let cut: HTML =
                    bytes.count > Self.textPreviewBytes
                    ? "<p class=\"muted\">The first \(Self.textPreviewBytes / 1024) KB of \(Self.bytes(record.size)).</p>"
                    : ""
                return "<pre class=\"text-preview\" id=\"preview-text\">\(shown)</pre>\(cut)"
            default:
                return "<p class=\"muted\">No preview for this kind of asset.</p>"
            }
        } catch let error as CatalogError {
            return "<p class=\"error\">Cannot read the content: \(error.message)</p>"
        } catch {
            return "<p class=\"error\">Cannot read the content: \(String(describing: error))</p>"
        }
    }

    /// The bytes as UTF-8 text, a character cut at the end left out, other bad bytes as U+FFFD.
    static func text(_ bytes: ArraySlice<UInt8>) -> String {
        for cut in 0...min(3, bytes.count) {
            if let text = String(validating: bytes.dropLast(cut), as: UTF8.self) { return text }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The first `count` bytes of an asset (fewer if it is shorter), read through the catalog
    /// and no further.
    func prefix(of id: AssetID, _ count: Int) async throws -> [UInt8] {
        struct Enough: Error {}
        let catalog = self.catalog
        return try await blocking {
            var bytes: [UInt8] = []
            do {
                try catalog.read(id) { chunk in
                    bytes += chunk.prefix(count - bytes.count)
                    if bytes.count >= count { throw Enough() }
                }
            } catch is Enough {}
            return bytes
        }
    }

    /// The image type the content's first bytes show (PNG, JPEG, GIF, WebP), or `nil`:
    /// what a preview is served as, whatever its name says.
    func imageType(of id: AssetID) async throws -> String? {
        Self.imageType(try await prefix(of: id, 12))
    }

    static func imageType(_ head: [UInt8]) -> String? {
        if head.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if head.starts(with: [0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if head.starts(with: Array("GIF87a".utf8)) || head.starts(with: Array("GIF89a".utf8)) { return "image/gif" }
        if head.count >= 12, head.starts(with: Array("RIFF".utf8)), Array(head[8..<12]) == Array("WEBP".utf8) {
            return "image/webp"
        }
        return nil
    }

    /// `/assets/ID/content`: an image's bytes with its sniffed type, for its page's `<img>`;
    /// anything else is refused (a text or an HTML file is never served to be rendered).
    func preview(_ id: AssetID) async throws -> Response {
        guard let type = try await imageType(of: id) else {
            throw PageError(.notFound, "No preview: only PNG, JPEG, GIF and WebP images are shown.")
        }
        let size = try await blocking { [catalog] in try catalog.asset(id).size }
        return stream(id, size: size, headers: [.contentType: type, .contentDisposition: "inline"])
    }

    /// `/assets/ID/thumbnail`: the WebP the asset's `thumbnail` job made
    /// (`Catalog.thumbnailURL(of:)`), read whole — a few kilobytes; a file over
    /// ``maximumThumbnailBytes`` in its place is not served.
    func thumbnail(_ id: AssetID) async throws -> Response {
        let bytes = try await blocking { [catalog] () -> Data? in
            guard let url = try catalog.thumbnailURL(of: id), let file = FileHandle(forReadingAtPath: url.path) else {
                return nil
            }
            defer { try? file.close() }
            let bytes = try file.read(upToCount: Self.maximumThumbnailBytes + 1) ?? Data()
            return bytes.count <= Self.maximumThumbnailBytes ? bytes : nil
        }
        guard let bytes else { throw PageError(.notFound, "No thumbnail: this asset has none (yet).") }
        return Response(
            status: .ok, headers: [.contentType: "image/webp", .contentDisposition: "inline"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The most bytes a thumbnail is served with (they are a few kilobytes).
    static let maximumThumbnailBytes = 1 << 20

    // MARK: - Download

    /// `/assets/ID/download`: the asset's bytes as an attachment, streamed through the catalog
    /// (an archive member out of its archive) in bounded memory.
    func download(_ id: AssetID) async throws -> Response {
        let record = try await blocking { [catalog] in try catalog.asset(id) }
        let name = Self.downloadName(record)
        return stream(
            id, size: record.size,
            headers: [
                .contentType: "application/octet-stream",
                .contentDisposition:
                    "attachment; filename=\"\(Self.asciiFileName(name))\"; filename*=UTF-8''\(URLText.encode(name))",
            ])
    }

    /// A response that streams the asset's bytes as `Catalog.read` gives them.
    private func stream(_ id: AssetID, size: Int64, headers: HTTPFields) -> Response {
        let catalog = self.catalog
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody(contentLength: Int(size)) { writer in
                let relay = ByteRelay()
                relay.start { relay in try catalog.read(id) { try relay.push($0) } }
                defer { relay.cancel() }
                while let buffer = try await relay.next() { try await writer.write(buffer) }
                try await writer.finish(nil)
            })
    }

    /// The file name a download is saved as: the last component of the asset's name (a
    /// member's path), with control characters and the characters some file systems refuse
    /// (`<>:"/\|?*`) as `_`; `asset-ID` when nothing is left, or only `.` or `..`.
    static func downloadName(_ record: AssetRecord) -> String {
        let last = (record.member ?? record.name).split(separator: "/").last.map(String.init) ?? ""
        var name = ""
        for scalar in last.unicodeScalars {
            let unsafe =
                scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
                || "<>:\"/\\|?*".unicodeScalars.contains(scalar)
            name.unicodeScalars.append(unsafe ? "_" : scalar)
        }
        return name.isEmpty || name == "." || name == ".." ? "asset-\(record.id.rawValue)" : name
    }

    /// `name` for the plain `filename=` parameter: printable ASCII but `"`, `\`, `%` and `;`;
    /// anything else becomes `_` (browsers take `filename*` for the real name).
    static func asciiFileName(_ name: String) -> String {
        String(
            name.unicodeScalars.map { scalar -> Character in
                scalar.value >= 0x20 && scalar.value < 0x7F && !"\"\\%;".unicodeScalars.contains(scalar)
                    ? Character(scalar) : "_"
            })
    }
}
