import AssetCatalog
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// The pages that change the catalog — tags, deletion — and the export of a selection, each
/// through the call the CLI makes. Each is a POST whose form carries the CSRF token
/// (checked by ``ServerResponder`` before it gets here).
extension Pages {
    /// `POST /assets/ID/tags`: adds the tag `add`, removes the tags `remove` (``Catalog/tag``),
    /// then shows the asset again.
    func tag(_ id: AssetID, _ form: FormFields) async throws -> Response {
        let adding = form.all("add").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let removing = form.all("remove")
        guard !adding.isEmpty || !removing.isEmpty else {
            throw PageError(.badRequest, "Bad request: no tag to add or remove.")
        }
        _ = try await blocking { [catalog] in try catalog.tag([id], adding: adding, removing: removing) }
        return Self.redirect(to: Self.assetPath(id))
    }

    /// `GET /assets/ID/delete`: what a deletion removes, and the form that does it. Changes nothing.
    func confirmDeletion(_ id: AssetID, _ fields: FormFields) async throws -> Response {
        let listed = try await blocking { [catalog] in try catalog.listed(catalog.asset(id)) }
        let members: HTML =
            listed.record.kind == "archive" ? "<p>Its members are deleted with it.</p>" : ""
        let body: HTML = """
            <h1>Delete \(listed.location)?</h1>
            <div class="confirm">
            <p>The record of <strong>\(listed.location)</strong> (\(listed.record.kind), \
            \(Self.bytes(listed.record.size))) is deleted, and its jobs cancelled. Content that no other \
            asset uses is removed from the catalog once the deletion has committed.</p>
            \(members)
            <form method="post" action="\(Self.assetPath(id))/delete">\(csrfField)
            <button type="submit" class="danger" id="confirm-delete">Delete</button>
            <a class="button" href="\(Self.assetPath(id))">Cancel</a>
            </form>
            </div>
            """
        return page("Delete \(listed.location)", body)
    }

    /// `POST /assets/ID/delete`: deletes the asset (``Catalog/remove(_:dryRun:)-(AssetID,_)``:
    /// its jobs cancelled, its file gone once the deletion has committed), and says what went.
    func delete(_ id: AssetID, _ form: FormFields) async throws -> Response {
        let result = try await blocking { [catalog] in try catalog.remove(id) }
        let first = result.removed.first { $0.id == id }
        let members = result.removed.count - 1
        let body: HTML = """
            <h1>Deleted</h1>
            <p class="notice" id="deleted">Deleted \(first?.name ?? "asset \(id)")\
            \(members > 0 ? " and its \(members) member\(members == 1 ? "" : "s")" : ""); \
            \(result.filesRemoved.count) file\(result.filesRemoved.count == 1 ? "" : "s") removed from the catalog's \
            objects/.</p>
            <p><a href="/">Back to the assets</a></p>
            """
        return page("Deleted", body)
    }

    /// `POST /export`: the assets `id` as a BagIt bag in a `.tar` (``Catalog/export``),
    /// written to a temporary folder, then streamed. The file is unlinked as soon as it is
    /// open, before a byte is sent: whether the client takes it all or goes away, nothing is
    /// left behind.
    func export(_ form: FormFields) async throws -> Response {
        let ids = try form.all("id").map { text throws(PageError) -> AssetID in
            guard let number = FormFields.number(text), number > 0 else {
                throw PageError(.badRequest, "Bad request: id must be an asset ID.")
            }
            return AssetID(number)
        }
        guard !ids.isEmpty else {
            throw PageError(.badRequest, "Nothing to export: select assets with their checkboxes first.")
        }
        let folder = try Self.temporaryFolder(in: server.configuration.temporaryDirectory)
        let path = folder + "/assetcat-export.tar"
        let file: OpenFile
        do {
            _ = try await catalog.export(to: path, selection: ExportSelection(ids: Array(Set(ids)).sorted()))
            file = try OpenFile(path)
            unlink(path)
            rmdir(folder)
        } catch {
            unlink(path)
            rmdir(folder)
            throw error
        }
        let size = file.size
        return Response(
            status: .ok,
            headers: [
                .contentType: "application/x-tar",
                .contentDisposition: "attachment; filename=\"assetcat-export.tar\"",
            ],
            body: ResponseBody(contentLength: Int(size)) { writer in
                let relay = ByteRelay()
                relay.start { relay in try file.readAll { try relay.push($0) } }
                defer { relay.cancel() }
                while let buffer = try await relay.next() { try await writer.write(buffer) }
                try await writer.finish(nil)
            })
    }

    /// A new private folder (`assetcat-serve-XXXXXX`) in `directory`, else in the system's
    /// temporary directory (`$TMPDIR`, else `/tmp`).
    static func temporaryFolder(in directory: String?) throws -> String {
        let base =
            directory ?? ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/assetcat-serve-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw PageError(
                .internalServerError,
                "Cannot export: no temporary folder in \(base): \(String(cString: strerror(errno)))")
        }
        return String(cString: made)
    }
}

/// A file open for reading, closed when the last reference goes (a response that is never
/// sent closes it too).
final class OpenFile: Sendable {
    let fd: Int32
    let size: Int64

    init(_ path: String) throws {
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw PageError(.internalServerError, "Cannot open the bundle: \(String(cString: strerror(errno)))")
        }
        size = Int64(lseek(fd, 0, SEEK_END))
    }

    deinit { close(fd) }

    /// Reads the file from the start, 256 KiB at a time.
    func readAll(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while true {
            let count = pread(fd, buffer.baseAddress, buffer.count, offset)
            if count < 0 {
                if errno == EINTR { continue }
                throw PageError(.internalServerError, "Cannot read the bundle: \(String(cString: strerror(errno)))")
            }
            if count == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += off_t(count)
        }
    }
}
