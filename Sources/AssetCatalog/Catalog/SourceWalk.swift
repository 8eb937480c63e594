import Foundation
import Locking

#if canImport(Glibc)
    import Glibc
#endif

extension Catalog {
    /// What a path given to ``add(_:options:progress:)`` names, checked before anything is
    /// added: a regular file, or a directory to walk (with `recursive`).
    enum NamedSource: Sendable {
        case file(SourceFile)
        /// A directory: `path` as the user named it (standardized), `listed` the real path
        /// its entries are read from (a named link to a directory is followed).
        case directory(path: String, listed: String)
    }

    /// The named paths, checked: each exists, is outside the catalog, and is a regular file
    /// or (with `recursive`) a directory. Nothing is read yet.
    static func namedSources(_ paths: [String], recursive: Bool, excluding catalogRoot: String) throws
        -> [NamedSource]
    {
        let excluded = CatalogExclusion(catalogRoot)
        var named: [NamedSource] = []
        let manager = FileManager.default
        for raw in paths {
            let path = URL(fileURLWithPath: raw).standardizedFileURL.path
            var isDirectory: ObjCBool = false
            guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else {
                throw CatalogError(.notFound, "No such file or directory: \(raw)", path: raw)
            }
            guard !excluded.contains(path) else {
                throw CatalogError(
                    .invalidArgument, "\(raw) is inside the catalog itself; add files from elsewhere", path: raw)
            }
            if !isDirectory.boolValue {
                var info = stat()
                guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
                    throw CatalogError(.invalidArgument, "\(raw) is not a regular file", path: raw)
                }
                named.append(.file(SourceFile(path: path, size: Int64(info.st_size))))
                continue
            }
            guard recursive else {
                throw CatalogError(.invalidArgument, "\(raw) is a directory; add it with --recursive", path: raw)
            }
            named.append(.directory(path: path, listed: CatalogExclusion.realPath(path) ?? path))
        }
        return named
    }
}

/// The catalog's own directory, which an add never walks into.
struct CatalogExclusion: Sendable {
    let root: String

    init(_ catalogRoot: String) {
        root = Self.realPath(catalogRoot) ?? catalogRoot
    }

    func contains(_ path: String) -> Bool {
        let real = Self.realPath(path) ?? path
        return real == root || real.hasPrefix(root + "/")
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

/// The regular files of the named paths, one at a time, in the order an add records them:
/// the named paths in the order given, and below a named directory its files in the order of
/// their sorted full paths. A directory is read (and its entries sorted) only when the walk
/// reaches it, so what the walk holds is the entries of the directories on the way to the
/// current one, never the whole tree: an add of a million files keeps a few thousand names.
///
/// Below a named directory, symbolic links are skipped (never followed) and so is the
/// catalog's own directory; a directory that cannot be read is skipped. An entry whose name
/// is not UTF-8 is not walked: it goes to ``unnamable``, one error naming it with its bytes
/// escaped (`bad\xff.txt`), a folder's contents with it.
struct SourceWalk {
    /// One entry of a directory being walked: its name, with `/` after a directory's (so that
    /// sorting the names sorts the full paths: `a-b` comes before the files of `a/`).
    private struct Entry {
        var key: String
        var isDirectory: Bool
        var size: Int64
    }

    private struct Frame {
        /// The directory's path, below the named one as the user named it.
        var path: String
        var entries: [Entry]
        var next = 0
    }

    private var named: ArraySlice<Catalog.NamedSource>
    private let excluded: CatalogExclusion
    private let needsSizes: Bool
    /// The named directory being walked (files below it are opened below it), and its frames.
    private var below: String?
    private var frames: [Frame] = []
    /// The entries whose names are not UTF-8 met so far (see the type's comment).
    private(set) var unnamable: [CatalogError] = []

    /// A walk of `named`; with `needsSizes`, every file's size is read (`fstatat`), otherwise
    /// a file found below a directory has size 0 where the directory entry gave its type.
    init(_ named: [Catalog.NamedSource], excluding catalogRoot: String, needsSizes: Bool) {
        self.named = named[...]
        self.excluded = CatalogExclusion(catalogRoot)
        self.needsSizes = needsSizes
    }

    /// The next file, or `nil` at the end of the walk.
    mutating func next() -> Catalog.SourceFile? {
        while true {
            if frames.isEmpty {
                guard let item = named.popFirst() else { return nil }
                switch item {
                case .file(let file): return file
                case .directory(let path, let listed):
                    below = path
                    if let entries = list(listed, shownAs: path) { frames.append(Frame(path: path, entries: entries)) }
                }
                continue
            }
            let top = frames.count - 1
            guard frames[top].next < frames[top].entries.count else {
                frames.removeLast()
                continue
            }
            let entry = frames[top].entries[frames[top].next]
            frames[top].next += 1
            if !entry.isDirectory {
                return Catalog.SourceFile(path: frames[top].path + "/" + entry.key, size: entry.size, below: below)
            }
            let path = frames[top].path + "/" + entry.key.dropLast()
            if excluded.contains(path) { continue }  // e.g. `add --recursive .` next to ./.assetcat
            if let entries = list(path, shownAs: path) { frames.append(Frame(path: path, entries: entries)) }
        }
    }

    /// The regular files and directories of the directory at `path` (opened without
    /// following a link), sorted; `nil` if it cannot be read.
    private mutating func list(_ path: String, shownAs shown: String) -> [Entry]? {
        guard let listed = Self.entries(of: path, shownAs: shown, needsSizes: needsSizes) else { return nil }
        unnamable += listed.unnamable
        return listed.entries.sorted { $0.key < $1.key }
    }

    /// The regular files and directories of the directory at `path` (opened without
    /// following a link), in the directory's order, and an error for each entry whose name
    /// is not UTF-8; `nil` if it cannot be read, or once `stopped` holds `true`.
    private static func entries(of path: String, shownAs shown: String, needsSizes: Bool, stopped: Locked<Bool>? = nil)
        -> (entries: [Entry], unnamable: [CatalogError])?
    {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        guard let directory = fdopendir(fd) else {
            close(fd)
            return nil
        }
        defer { closedir(directory) }
        var entries: [Entry] = []
        var unnamable: [CatalogError] = []
        let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        while let entry = readdir(directory) {
            if let stopped, entries.count % 4096 == 4095, stopped.withLock({ $0 }) { return nil }
            let start = UnsafeRawPointer(entry) + offset
            let bytes = UnsafeRawBufferPointer(start: start, count: strlen(start.assumingMemoryBound(to: CChar.self)))
            if bytes.elementsEqual([0x2E]) || bytes.elementsEqual([0x2E, 0x2E]) { continue }
            guard let name = String(validating: bytes, as: UTF8.self) else {
                // A name is text in the catalog, and would not survive `ls --json` or a bundle.
                unnamable.append(
                    CatalogError(
                        .invalidArgument,
                        "Cannot add \(shown + "/" + Catalog.escaped(Array(bytes))): its name is not valid UTF-8, "
                            + "which the catalog cannot record; rename it and add it again",
                        path: shown + "/" + String(decoding: bytes, as: UTF8.self)))
                continue
            }
            var type = Int32(entry.pointee.d_type)
            var size: Int64 = 0
            if type == Int32(DT_UNKNOWN) || (type == Int32(DT_REG) && needsSizes) {
                var info = stat()
                guard fstatat(dirfd(directory), name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                switch info.st_mode & S_IFMT {
                case S_IFREG: type = Int32(DT_REG)
                case S_IFDIR: type = Int32(DT_DIR)
                default: continue
                }
                size = Int64(info.st_size)
            }
            if type == Int32(DT_REG) {
                entries.append(Entry(key: name, isDirectory: false, size: size))
            } else if type == Int32(DT_DIR) {
                entries.append(Entry(key: name + "/", isDirectory: true, size: 0))
            }
        }
        return (entries, unnamable)
    }

    /// The files a ``SourceWalk`` of `named` finds, counted (with their sizes when
    /// `needsSizes`), and the errors of its ``unnamable`` entries (sorted by path): the same
    /// files, found in no particular order. The directories are listed on `workers` threads at
    /// once and not sorted: the walk that counts a million tiny files spends most of its time
    /// in the kernel, looking each one up for its size (when it needs it: a directory entry
    /// gives a file's type, not its size), while nothing else can start.
    ///
    /// Returns `nil` as soon as `stopped` holds `true`.
    static func count(
        _ named: [Catalog.NamedSource], excluding catalogRoot: String, needsSizes: Bool, workers: Int,
        stopped: Locked<Bool>
    ) -> SourceCount? {
        let excluded = CatalogExclusion(catalogRoot)
        var files = SourceCount()
        var directories: [(listed: String, shown: String)] = []
        for item in named {
            switch item {
            case .file(let file):
                files.files += 1
                files.bytes += file.size
            case .directory(let path, let listed): directories.append((listed, path))
            }
        }
        let work = CountingWork(directories: directories.reversed(), counted: files, stopped: stopped)
        DispatchQueue.concurrentPerform(iterations: max(1, workers)) { _ in
            while let (listedPath, shown) = work.next() {
                var found: [(listed: String, shown: String)] = []
                var counted = SourceCount()
                if let listed = entries(of: listedPath, shownAs: shown, needsSizes: needsSizes, stopped: work.stopped) {
                    counted.unnamable = listed.unnamable
                    for entry in listed.entries {
                        guard entry.isDirectory else {
                            counted.files += 1
                            counted.bytes += entry.size
                            continue
                        }
                        let path = shown + "/" + entry.key.dropLast()
                        if !excluded.contains(path) { found.append((path, path)) }
                    }
                }
                work.listed(found: found, counted: counted)
            }
        }
        guard var total = work.total else { return nil }
        total.unnamable.sort { ($0.path ?? "") < ($1.path ?? "") }
        return total
    }
}

/// The directories ``SourceWalk/count(_:excluding:needsSizes:workers:stopped:)`` has yet to list, and
/// what its workers counted, shared by the workers under one lock.
private final class CountingWork: @unchecked Sendable {
    private let turn = NSCondition()
    let stopped: Locked<Bool>
    /// Directories to list: the path each is read from, and as it is shown. Under `turn`.
    private var waiting: [(listed: String, shown: String)] = []
    /// How many directories workers are listing now (each may find more). Under `turn`.
    private var listing = 0
    private var counted = SourceCount()

    init(directories: [(listed: String, shown: String)], counted: SourceCount, stopped: Locked<Bool>) {
        waiting = directories
        self.counted = counted
        self.stopped = stopped
    }

    /// What was counted, once every worker has returned; `nil` if the count was stopped.
    var total: SourceCount? { stopped.withLock { $0 } ? nil : turn.withLock { counted } }

    /// The next directory to list, waiting while others are being listed; `nil` when there
    /// is none left (or the count is stopped).
    func next() -> (listed: String, shown: String)? {
        turn.withLock {
            while waiting.isEmpty && listing > 0 && !stopped.withLock({ $0 }) { turn.wait() }
            guard !stopped.withLock({ $0 }), let directory = waiting.popLast() else { return nil }
            listing += 1
            return directory
        }
    }

    /// Takes in what listing the directory ``next()`` gave found: more directories, and a count.
    func listed(found: [(listed: String, shown: String)], counted: SourceCount) {
        turn.withLock {
            waiting += found
            listing -= 1
            self.counted.files += counted.files
            self.counted.bytes += counted.bytes
            self.counted.unnamable += counted.unnamable
            turn.broadcast()
        }
    }
}

/// What ``SourceWalk/count(_:excluding:needsSizes:workers:stopped:)`` finds.
struct SourceCount {
    var files = 0
    var bytes: Int64 = 0
    /// One error per entry whose name is not UTF-8 (``SourceWalk/unnamable``).
    var unnamable: [CatalogError] = []
}
