// ExtractionGuard's checks of a sequence of members (kind, path, link target, size), as an
// archive would list them. Every member admitted has a relative path of normal components
// (no empty, `.` or `..` component, no `/` or NUL in one) within the policy's lengths; no
// two members admitted share a path; a symbolic link admitted stays inside the root; a hard
// link admitted names a regular file admitted before it.
import ArchiveIO
import FuzzSupport

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzExtractionGuard(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    var policy = ExtractionPolicy.default
    // Small limits too, so that the fuzzer reaches them.
    if input.byte() & 1 == 1 {
        policy.maxPathLength = 1 + Int(input.byte())
        policy.maxComponentLength = 1 + Int(input.byte() % 64)
        policy.maxEntryCount = 1 + Int(input.byte())
        policy.maxTotalBytes = Int64(input.byte()) << 8
    }
    let remembers = input.byte() & 1 == 0
    var checker = ExtractionGuard(policy: policy, archivePath: "fuzz.tar", remembersPaths: remembers)
    let kinds: [ArchiveEntry.Kind] = [
        .file, .directory, .symlink, .hardlink, .characterDevice, .blockDevice, .fifo, .socket, .other,
    ]
    var admitted: [[UInt8]: ArchiveEntry.Kind] = [:]
    while let header = input.field() {
        // A member: its kind, size, then path and link target separated by 0xFE.
        var fields = FuzzInput(header, header.count)
        let kind = fields.choose(kinds)
        let size = Int64(fields.byte()) << 4
        let path = String(decoding: fields.field(separator: 0xFE) ?? [], as: UTF8.self)
        let target = fields.field(separator: 0xFE).map { String(decoding: $0, as: UTF8.self) }
        let entry = ArchiveEntry(path: path, kind: kind, size: size, linkTarget: target)
        let admittedPath: ExtractionPath?
        do {
            admittedPath = try checker.admit(entry)
        } catch {
            invariant(error.member == path, "an error about \(error.member ?? "no member"), not \(path)")
            continue
        }
        guard let admittedPath else {
            invariant(kind == .directory, "a \(kind) admitted as the root")
            continue
        }
        let components = admittedPath.components
        invariant(!components.isEmpty, "an admitted path with no component")
        for component in components {
            let bytes = Array(component.utf8)
            invariant(!bytes.isEmpty && bytes != [0x2E] && bytes != [0x2E, 0x2E], "a component '\(component)'")
            invariant(!bytes.contains(0x2F) && !bytes.contains(0), "a '/' or NUL in '\(component.debugDescription)'")
            invariant(bytes.count <= policy.maxComponentLength, "a component longer than the policy's limit")
        }
        invariant(path.utf8.count <= policy.maxPathLength, "a path longer than the policy's limit")
        invariant(path.utf8.first != 0x2F, "an absolute path admitted")
        invariant([.file, .directory, .symlink, .hardlink].contains(kind), "a \(kind) admitted")
        let key = Array(admittedPath.description.utf8)
        if remembers {
            invariant(admitted[key] == nil, "\(admittedPath) admitted twice")
        }
        if kind == .symlink {
            // Resolved from the link's directory, the target never climbs above the root.
            var depth = components.count - 1
            for part in (target ?? "").utf8.split(separator: 0x2F) where !part.elementsEqual([0x2E]) {
                depth += part.elementsEqual([0x2E, 0x2E]) ? -1 : 1
                invariant(depth >= 0, "a symbolic link to \(target ?? "") from \(admittedPath) leaves the root")
            }
        }
        if kind == .hardlink, remembers {
            let parts = (target ?? "").utf8.split(separator: 0x2F).filter { !$0.elementsEqual([0x2E]) }
            let targetKey = Array(parts.map { Array($0) }.joined(separator: [0x2F]))
            invariant(admitted[targetKey] == .file, "a hard link to \(target ?? ""), not a regular file admitted")
        }
        admitted[key] = kind
    }
    invariant(checker.totalBytes == 0, "bytes counted with no data")
    return 0
}
