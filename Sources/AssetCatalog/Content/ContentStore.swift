import ArchiveIO
import BagIt
import CFileSync
import Crypto
import Foundation
import Locking
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The catalog's files: content-addressed `objects/ab/cdef…` (named by
/// SHA-256), and this process's own folder under `staging/`.
///
/// New content is written to staging, synced, then hard-linked into
/// `objects/` (and the folder synced) before the transaction that records it
/// commits. Staging folders belong to one process each, which holds a lock
/// on them (or, on a store that several hosts share, whose session is alive:
/// ``SessionLiveness``); an open removes the folders of processes that are gone, so a
/// crash leaves no debris and a live process's work is never touched.
final class ContentStore: Sendable {
    let root: String
    let objects: String
    let staging: String
    /// This process's staging folder.
    let ownStaging: String
    /// This process, as job rows and staging folders name it (`pid-id`, or `s<id>`).
    var owner: String { (ownStaging as NSString).lastPathComponent }
    /// This process's lock file (`.lock`, SQLite), or its slots file (`.slots`, a session):
    /// where its run slots are marked.
    let lockDescriptor: Int32
    /// The suffix of that file's name after ``ownStaging``.
    let slotsSuffix: String
    /// `objects/` and this process's staging folder, open: the `*at` calls resolve a file's
    /// short path from them instead of walking the whole absolute path each time.
    private let objectsDirectory: Int32
    private let stagingDirectory: Int32
    /// Names new staging files: a counter, where a UUID would read `/dev/urandom` per file.
    private let stagedCount = Atomic<Int>(0)

    /// Whether this store only reads (a read-only catalog): it has no staging folder and
    /// refuses to stage content.
    let isReadOnly: Bool

    /// The fault points a test chose for the catalog (``CatalogTesting/faults``): kept here,
    /// where every part of the catalog reaches them. None outside tests.
    let faults: FaultPoints

    static let bufferSize = 1 << 20

    /// The content of the catalog at `root`, for reading only: nothing is created, cleared
    /// or locked.
    init(readingAt root: String, faults: FaultPoints = FaultPoints()) throws {
        self.root = root
        self.faults = faults
        objects = root + "/objects"
        staging = root + "/staging"
        ownStaging = staging + "/\(getpid())-reader"
        isReadOnly = true
        lockDescriptor = -1
        slotsSuffix = ".lock"
        stagingDirectory = -1
        objectsDirectory = try Self.openDirectory(objects)
    }

    /// The content of the catalog at `root`, with a staging folder of this process's own.
    ///
    /// With no `session` (a SQLite catalog), the folder is `staging/<pid>-<id>`, next to a
    /// lock file that this process holds locked (`flock`) while it lives: other processes
    /// tell its liveness by that lock. With `session`, the name of this process's session
    /// with a store that several hosts share (`s<id>`, ``SessionLiveness``), the folder is
    /// `staging/s<id>` with a file `staging/s<id>.slots` for the run slots and no lock (a
    /// file lock over a network file system says nothing reliable about another host): the
    /// session tells liveness, and it was opened (its row committed) before this.
    init(root: String, session: String? = nil, faults: FaultPoints = FaultPoints()) throws {
        self.root = root
        self.faults = faults
        isReadOnly = false
        objects = root + "/objects"
        staging = root + "/staging"
        for directory in [objects, staging] { try Self.makeDirectory(directory) }
        let owner = session ?? "\(getpid())-\(UUID().uuidString.prefix(8))"
        ownStaging = staging + "/" + owner
        slotsSuffix = session == nil ? ".lock" : ".slots"
        if session != nil {
            // A session's ID is never reused: a file there already is not this process's.
            let slots = open(ownStaging + slotsSuffix, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard slots >= 0 else {
                throw CatalogError(
                    .io, "Could not create \(ownStaging)\(slotsSuffix): \(Self.errnoText())", path: ownStaging)
            }
            lockDescriptor = slots
        } else {
            // The lock file is created under another name, locked, then renamed:
            // an open in another process never sees it unlocked, and it exists
            // before the folder does.
            let pending = ownStaging + ".lock.new"
            let lock = open(pending, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard lock >= 0, flock(lock, LOCK_EX | LOCK_NB) == 0, rename(pending, ownStaging + ".lock") == 0 else {
                let error = CatalogError(
                    .io, "Could not lock \(ownStaging).lock: \(Self.errnoText())", path: ownStaging)
                if lock >= 0 { close(lock) }
                unlink(pending)
                throw error
            }
            lockDescriptor = lock
        }
        let lock = lockDescriptor
        var opened: [Int32] = []
        do {
            try Self.makeDirectory(ownStaging)
            opened.append(try Self.openDirectory(objects))
            opened.append(try Self.openDirectory(ownStaging))
        } catch {
            // Nothing half-made stays behind: the folder, its lock, the descriptors.
            for fd in opened { close(fd) }
            try? FileManager.default.removeItem(atPath: ownStaging)
            unlink(ownStaging + slotsSuffix)
            close(lock)
            throw error
        }
        objectsDirectory = opened[0]
        stagingDirectory = opened[1]
    }

    private static func openDirectory(_ path: String) throws -> Int32 {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CatalogError(.io, "Could not open \(path): \(errnoText())", path: path) }
        return fd
    }

    /// Set by ``release()``, under its lock: no slot is marked in a file it closed.
    let isClosed = Locked(false)

    deinit {
        release()
        // Closed only now, not by release(): work still in flight holds this store, and a
        // descriptor closed under it could be reused for another folder by then.
        close(objectsDirectory)
        if !isReadOnly { close(stagingDirectory) }
    }

    /// Throws unless content can be written (the catalog was not opened read-only).
    func requireWritable() throws {
        guard isReadOnly else { return }
        throw CatalogError.readOnlyCatalog(root)
    }

    /// Removes this process's staging folder and releases its lock. A clean
    /// close leaves nothing in staging; a crash leaves the folder to the next
    /// open (its lock dies with the process).
    func release() {
        guard
            isClosed.withLock({ closed in
                defer { closed = true }; return !closed
            })
        else { return }
        guard !isReadOnly else { return }
        try? FileManager.default.removeItem(atPath: ownStaging)
        unlink(ownStaging + slotsSuffix)
        close(lockDescriptor)
    }

    static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    func objectPath(_ digest: String) -> String {
        objects + "/" + Self.objectName(digest)
    }

    /// The object file of `digest` relative to `objects/`: `ab/cdef…`.
    static func objectName(_ digest: String) -> String {
        let u = Array(digest.utf8)
        return String(decoding: u[0..<2], as: UTF8.self) + "/" + String(decoding: u[2...], as: UTF8.self)
    }

    /// A staged path as the `*at` calls take it from `stagingDirectory`: a file of this
    /// process's staging folder by its name, any other by its absolute path (which they
    /// resolve from the root).
    private func stagingName(_ path: String) -> String {
        let folder = ownStaging.utf8.count
        guard path.utf8.count > folder + 1, path.utf8.starts(with: ownStaging.utf8),
            path.utf8.dropFirst(folder).first == UInt8(ascii: "/")
        else { return path }
        return String(path.utf8.dropFirst(folder + 1))!
    }

    /// A folder in this process's staging folder (``makeStagingFolder()``), whose files are
    /// numbered.
    struct StagingFolder: Sendable {
        /// Its name in this process's staging folder, which the `*at` calls take.
        let name: String
        let path: String

        init(parent: String, number: Int) {
            name = "work-\(number)"
            path = parent + "/" + name
        }

        /// The path of file `number`.
        func file(_ number: Int64) -> String { path + "/" + String(number) }

        /// File `number` as the `*at` calls take it.
        func name(of number: Int64) -> String { name + "/" + String(number) }
    }

    /// A path in this process's staging folder that no file has had.
    func newStagingPath(suffix: String = "") -> String {
        ownStaging + "/" + String(stagedCount.add(1, ordering: .relaxed).newValue) + suffix
    }

    /// Creates a new file in staging, for writing; returns its path and descriptor.
    func createStagingFile() throws -> (path: String, fd: Int32) {
        try requireWritable()
        let path = newStagingPath()
        let fd = openat(stagingDirectory, stagingName(path), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o444)
        guard fd >= 0 else { throw CatalogError(.io, "Could not create \(path): \(Self.errnoText())", path: path) }
        return (path, fd)
    }

    /// Makes a new folder in this process's staging folder, for the files of one piece of
    /// work (an import) that are removed together: ``removeStagingFolder(_:)``.
    func makeStagingFolder() throws -> StagingFolder {
        try requireWritable()
        let folder = StagingFolder(parent: ownStaging, number: stagedCount.add(1, ordering: .relaxed).newValue)
        guard mkdirat(stagingDirectory, folder.name, 0o755) == 0 else {
            throw CatalogError(.io, "Could not create \(folder.path): \(Self.errnoText())", path: folder.path)
        }
        return folder
    }

    /// Creates a new file in `folder`, for writing; returns its number and descriptor.
    func createStagingFile(in folder: StagingFolder) throws -> (number: Int64, fd: Int32) {
        let number = Int64(stagedCount.add(1, ordering: .relaxed).newValue)
        let fd = openat(stagingDirectory, folder.name(of: number), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o444)
        guard fd >= 0 else {
            let path = folder.file(number)
            throw CatalogError(.io, "Could not create \(path): \(Self.errnoText())", path: path)
        }
        return (number, fd)
    }

    /// Links the object of `digest` to a new file of `folder`, a pin that keeps the content
    /// until the record commits; returns its number, or nil when `objects/` has no such content.
    func pinObject(_ digest: String, in folder: StagingFolder) -> Int64? {
        guard Self.isDigest(digest) else { return nil }
        let number = Int64(stagedCount.add(1, ordering: .relaxed).newValue)
        return linkat(objectsDirectory, Self.objectName(digest), stagingDirectory, folder.name(of: number), 0) == 0
            ? number : nil
    }

    /// Removes a staging folder and its files, reading its entries as it goes (no list of
    /// them in memory, however many there are).
    func removeStagingFolder(_ folder: StagingFolder) {
        // Removing entries while reading the folder may make readdir skip some: a second pass
        // takes what the first one missed.
        for _ in 0..<2 {
            let fd = openat(stagingDirectory, folder.name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0, let directory = fdopendir(fd) else {
                if fd >= 0 { close(fd) }
                break
            }
            // A failed read leaves what it did not reach to the second pass, then to removeItem.
            _ = forEachDirectoryEntry(in: directory) { name in
                _ = name.withMemoryRebound(to: CChar.self) { Array($0) + [0] }.withUnsafeBufferPointer {
                    unlinkat(fd, $0.baseAddress!, 0)
                }
            }
            closedir(directory)
            if unlinkat(stagingDirectory, folder.name, AT_REMOVEDIR) == 0 || errno == ENOENT { return }
        }
        try? FileManager.default.removeItem(atPath: folder.path)
    }

    /// Whether `objects/` holds any content at all (a shard folder with a file in it).
    func hasAnyObject() -> Bool {
        let manager = FileManager.default
        for shard in (try? manager.contentsOfDirectory(atPath: objects)) ?? [] {
            if let files = try? manager.contentsOfDirectory(atPath: objects + "/" + shard), !files.isEmpty {
                return true
            }
        }
        return false
    }

    /// Whether `objects/` has the content of `digest`: a hint (on NFS, the client's cache
    /// may answer), never the check a commit relies on (``requireObject(_:for:pin:)``).
    func hasObject(_ digest: String) -> Bool {
        faccessat(objectsDirectory, Self.objectName(digest), F_OK, 0) == 0
    }

    /// Throws unless the object file of `digest` exists. When it does not but
    /// `pin` (a staged copy kept until the commit) does, the content is
    /// linked back from it: a sweep or purge that ran between the add's link
    /// and its commit loses nothing. Run under the content lock
    /// (``CatalogRuntime/contentLock``), which holds removals off until the commit.
    ///
    /// The answer comes from the file server, never from a client's cache of names (on
    /// NFS, a file another host unlinked can still look present to `access` or `stat`
    /// for a while): with a pin, the pin is linked to the object's name — the link is
    /// made (the content was gone: it is back, durable) or the name exists. Without one,
    /// the object is opened (an open revalidates the name with the server) and checked to
    /// be a regular file.
    func requireObject(_ digest: String, for name: String, pin: String? = nil) throws {
        let target = objectPath(digest)
        let objectName = Self.objectName(digest)
        if let pin {
            if linkat(stagingDirectory, stagingName(pin), objectsDirectory, objectName, 0) == 0 {
                let folder = objects + "/" + digest.prefix(2)
                try Self.syncDirectory(folder)
                return
            }
            switch errno {
            case EEXIST:
                return
            case ENOENT where access(objects + "/" + digest.prefix(2), F_OK) != 0:
                // The folder of the object went too: made again, and the pin linked.
                try adopt(staged: pin, digest: digest)
                return
            case ENOENT:
                break  // no pin: the object itself is looked at
            default:
                throw CatalogError(.io, "Could not put back \(target): \(Self.errnoText())", path: target)
            }
        }
        let fd = openat(objectsDirectory, objectName, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)
        if fd >= 0 {
            defer { close(fd) }
            var info = stat()
            if fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG { return }
        }
        throw CatalogError(
            .io, "The content of \(name) (\(digest.prefix(12))…) is missing from objects/; add the file again",
            path: target)
    }

    /// Removes the object files of `digests` (one already gone is skipped), calling
    /// `beforeEach` before each unlink and `removed` after each one done, then makes the
    /// removals durable at once: one fsync per touched folder when they are few, else one
    /// sync of the file system. A failure still syncs what was removed before it.
    ///
    /// A page of ``parallelUnlinkMinimum`` files or more is unlinked by two threads, each
    /// over half of it: an unlink is the kernel's work (the folder's lock, the inode's
    /// release), which a second core halves; `beforeEach` is then called from both, and
    /// `removed` on this thread, after both are done, in the order of `digests`.
    func removeObjects(
        _ digests: some Sequence<String>, beforeEach: @Sendable () -> Void = {}, removed: (String) -> Void = { _ in }
    ) throws {
        let paths = digests.map { (digest: $0, path: objectPath($0)) }
        let lanes = paths.count >= Self.parallelUnlinkMinimum ? 2 : 1
        let laneSize = (paths.count + lanes - 1) / lanes
        let done = Mutex([UnlinkLane](repeating: UnlinkLane(), count: lanes))
        DispatchQueue.concurrentPerform(iterations: lanes) { lane in
            let range = (lane * laneSize)..<min(paths.count, (lane + 1) * laneSize)
            let outcome = Self.unlinkAll(paths[range], beforeEach: beforeEach)
            done.withLock { $0[lane] = outcome }
        }
        let outcomes = done.withLock { $0 }
        var folders: [String] = []
        var seen = Set<String>()
        for outcome in outcomes {
            for index in outcome.removed {
                removed(paths[index].digest)
                let path = paths[index].path
                // `objects/ab/cdef…`: the folder is the path up to its last slash (NSString's
                // path methods cost as much as the unlink's own work, at 10,000 files).
                let folder = path.utf8.lastIndex(of: UInt8(ascii: "/")).map { String(path[..<$0]) } ?? "."
                if seen.insert(folder).inserted { folders.append(folder) }
            }
        }
        var failure: (any Error)? = outcomes.lazy.compactMap(\.failure).first
        do {
            if folders.count > 8 {
                try syncFileSystem()
            } else {
                for folder in folders { try Self.syncDirectory(folder) }
            }
        } catch {
            failure = failure ?? error
        }
        if let failure { throw failure }
    }

    /// The fewest files a removal unlinks with two threads.
    static let parallelUnlinkMinimum = 256

    /// What one thread of ``removeObjects(_:beforeEach:removed:)`` did: the indexes of the
    /// files it unlinked, and the error it stopped at.
    struct UnlinkLane {
        var removed: [Int] = []
        var failure: CatalogError?
    }

    /// Unlinks `paths` in order, skipping those already gone, up to the first failure.
    private static func unlinkAll(
        _ paths: ArraySlice<(digest: String, path: String)>, beforeEach: () -> Void
    ) -> UnlinkLane {
        var lane = UnlinkLane()
        lane.removed.reserveCapacity(paths.count)
        for index in paths.indices {
            let path = paths[index].path
            beforeEach()
            if Glibc.unlink(path) != 0 {
                if errno == ENOENT { continue }  // already gone (its folder too, perhaps): nothing to sync
                lane.failure = CatalogError(.io, "Could not remove \(path): \(errnoText())", path: path)
                break
            }
            lane.removed.append(index)
        }
        return lane
    }

    /// The SHA-256 (hex) and size of a file, read in 1 MiB chunks; when
    /// `copyTo` is given, the bytes are also written there and synced. See
    /// ``openSource(_:below:opened:)`` for `below` and `directoryFD`.
    static func digest(
        ofFileAt path: String, below directory: String? = nil, opened directoryFD: Int32 = -1,
        copyTo destination: String? = nil, syncsCopy: Bool = true, isCancelled: () -> Bool = { false }
    ) throws -> (digest: String, size: Int64) {
        let (input, inputSize) = try openSource(path, below: directory, opened: directoryFD)
        defer { close(input) }
        var output: Int32 = -1
        if let destination {
            output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o444)
            guard output >= 0 else {
                throw CatalogError(.io, "Could not create \(destination): \(errnoText())", path: destination)
            }
        }
        defer { if output >= 0 { close(output) } }
        var hasher = SHA256()
        var size: Int64 = 0
        func stopped() -> CatalogError { CatalogError(.cancelled, "Stopped while reading \(path)", path: path) }
        if isCancelled() { throw stopped() }
        try readChunks(input, path: path, size: inputSize) { chunk in
            if isCancelled() { throw stopped() }
            hasher.update(bufferPointer: chunk)
            size += Int64(chunk.count)
            if output >= 0 { try writeAll(output, chunk, path: destination!) }
        }
        if output >= 0, syncsCopy, fsync(output) != 0 {
            throw CatalogError(.io, "Could not sync \(destination!): \(errnoText())", path: destination)
        }
        return (hex(hasher.finalize()), size)
    }

    /// Opens a file to read it: once, and then checked for what it is (a regular file, or a
    /// `CatalogError` `io` naming it — a FIFO does not make the read wait for a writer). A file
    /// named by the user is opened following symbolic links; one found below the `directory`
    /// the user named (`path` then begins with it) is opened without following a link at any
    /// component below it, as it was found (links there are skipped, and one swapped in since
    /// is refused). `directoryFD`, when not -1, is `directory` already opened
    /// (``FileAccess/openDirectory(_:)``), for many files below it. Returns the descriptor and
    /// the size its `fstat` gave.
    static func openSource(_ path: String, below directory: String?, opened directoryFD: Int32 = -1) throws -> (
        fd: Int32, size: Int64
    ) {
        do {
            guard let directory else { return try FileAccess.openRegularFile(atPath: path) }
            let relative = String(Substring(path.utf8.dropFirst(directory.utf8.count + 1)))
            if directoryFD >= 0 { return try FileAccess.openRegularFile(relative, beneath: directoryFD) }
            let root = try FileAccess.openDirectory(directory)
            defer { close(root) }
            return try FileAccess.openRegularFile(relative, beneath: root)
        } catch {
            throw openFailure(error, path: path)
        }
    }

    /// Why `path` could not be opened to read it, as an `io` error naming it.
    static func openFailure(_ error: FileAccess.Failure, path: String) -> CatalogError {
        let name = DisplayText.quoted(path)
        switch error.kind {
        case .system(let code):
            return CatalogError(.io, "Could not open \(name): \(String(cString: strerror(code)))", path: path)
        case .symbolicLink:
            return CatalogError(.io, "\(name) \(error.reason) (links inside a directory are not followed)", path: path)
        default: return CatalogError(.io, "\(name) \(error.reason)", path: path)
        }
    }

    /// Reads an open file to its end, chunk by chunk, into a buffer the size of the file up
    /// to ``bufferSize``: a small file costs one small allocation and two reads. `size`, when
    /// the caller has it from the open's `fstat`, saves another.
    static func readChunks(
        _ fd: Int32, path: String, size known: Int64? = nil, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var info = stat()
        let size = known.map { Int(clamping: $0) } ?? (fstat(fd, &info) == 0 ? Int(info.st_size) : bufferSize)
        let capacity = min(max(size + 1, 4096), bufferSize)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = read(fd, buffer.baseAddress, capacity)
            if count < 0 {
                if errno == EINTR { continue }
                throw CatalogError(.io, "Could not read \(path): \(errnoText())", path: path)
            }
            if count == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }

    /// Copies a file into staging, hashing it on the way. The copy is not
    /// synced yet: ``adoptAll(_:)`` makes a whole batch durable at once. The
    /// caller adopts the staged copy or removes it.
    ///
    /// The copy goes in `folder` (``makeStagingFolder()``) when one is given. Creating a file
    /// holds its folder's lock while the file system allocates the inode — on ext4, a scan
    /// of a bitmap that passes over recently deleted inodes, long after a large deletion —
    /// so copies made at once, each in a folder of its own, do not wait for each other.
    func stage(
        fileAt path: String, below directory: String? = nil, opened directoryFD: Int32 = -1,
        in folder: StagingFolder? = nil, isCancelled: () -> Bool = { false }
    ) throws -> (digest: String, size: Int64, staged: String) {
        let staged = folder.map { $0.file(Int64(stagedCount.add(1, ordering: .relaxed).newValue)) } ?? newStagingPath()
        faults.reach(.slowIngest)
        do {
            let (digest, size) = try Self.digest(
                ofFileAt: path, below: directory, opened: directoryFD, copyTo: staged, syncsCopy: false,
                isCancelled: isCancelled)
            faults.reach(.afterStage)
            return (digest, size, staged)
        } catch {
            unlink(staged)
            throw error
        }
    }

    /// Adopts a batch of staged copies: their bytes are made durable with one
    /// `syncfs`, they are linked into `objects/`, and the links are made
    /// durable with a second one — two journal commits for the batch instead
    /// of two fsyncs per file. Each staged path stays as a pin.
    func adoptAll(_ staged: [(path: String, digest: String)]) throws {
        guard !staged.isEmpty else { return }
        try makeStagedDurable()
        try linkAll(staged)
    }

    /// The first half of ``adoptAll(_:)``: the staged bytes made durable, one `syncfs`.
    func makeStagedDurable() throws {
        try syncFileSystem()
    }

    /// The second half of ``adoptAll(_:)``: durable staged copies linked into `objects/`,
    /// and the links made durable with one `syncfs`.
    func linkAll(_ staged: [(path: String, digest: String)]) throws {
        try linkAll { body in try body(staged) }
    }

    /// ``linkAll(_:)`` of the pins of staged content, read a page at a time.
    func linkAll(from staged: some StagedContent) throws {
        try linkAll(staged.forEachPin)
    }

    private func linkAll(_ pages: (([(path: String, digest: String)]) throws -> Void) throws -> Void) throws {
        var folders = Set<String>()  // the fan-out folders known to exist: no access(2) per file
        try pages { page in
            for file in page { try adopt(staged: file.path, digest: file.digest, syncs: false, knownFolders: &folders) }
        }
        try syncFileSystem()
    }

    private func syncFileSystem() throws {
        let fd = open(objects, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CatalogError(.io, "Could not open \(objects): \(Self.errnoText())", path: objects) }
        defer { close(fd) }
        guard cfilesync_syncfs(fd) == 0 else {
            throw CatalogError(.io, "Could not sync the catalog's file system: \(Self.errnoText())", path: objects)
        }
    }

    /// Writes bytes produced by `produce` into staging and adopts them.
    /// Returns the digest, the size and the pin (see ``adopt(staged:digest:)``).
    func ingest(producing produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void) throws -> (
        digest: String, size: Int64, pin: String
    ) {
        let (staged, output) = try createStagingFile()
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            defer { close(output) }
            try produce { chunk in
                hasher.update(bufferPointer: chunk)
                size += Int64(chunk.count)
                try Self.writeAll(output, chunk, path: staged)
            }
            guard fsync(output) == 0 else {
                throw CatalogError(.io, "Could not sync \(staged): \(Self.errnoText())", path: staged)
            }
            let digest = Self.hex(hasher.finalize())
            try adopt(staged: staged, digest: digest)
            return (digest, size, staged)
        } catch {
            unlink(staged)
            throw error
        }
    }

    /// Links a synced staged file into `objects/` and syncs the folders. The
    /// staged path stays, as a second link to the object's bytes — a pin that
    /// keeps the content until the record commits (then ``unpin(_:)``). When
    /// `objects/` already has the content (stored once), the staged copy is
    /// replaced by a link to the existing object, which pins that one.
    func adopt(staged: String, digest: String, syncs: Bool = true, knownFolders: inout Set<String>) throws {
        let target = objectPath(digest)
        let name = Self.objectName(digest)
        let stagedName = stagingName(staged)
        let folder = objects + "/" + digest.prefix(2)
        if !knownFolders.contains(folder), access(folder, F_OK) != 0 {
            try Self.makeDirectory(folder)
            if syncs { try Self.syncDirectory(objects) }
        }
        while true {
            if linkat(stagingDirectory, stagedName, objectsDirectory, name, 0) == 0 { break }
            guard errno == EEXIST else {
                throw CatalogError(.io, "Could not store \(target): \(Self.errnoText())", path: target)
            }
            let pin = stagingName(staged + ".pin")
            if linkat(objectsDirectory, name, stagingDirectory, pin, 0) == 0 {
                if renameat(stagingDirectory, pin, stagingDirectory, stagedName) != 0 {
                    unlinkat(stagingDirectory, pin, 0)
                    throw CatalogError(.io, "Could not pin \(target): \(Self.errnoText())", path: staged)
                }
                return
            }
            guard errno == ENOENT else {  // the object vanished in between: link ours again
                throw CatalogError(.io, "Could not pin \(target): \(Self.errnoText())", path: target)
            }
        }
        if syncs { try Self.syncDirectory(folder) }
        knownFolders.insert(folder)
    }

    /// ``adopt(staged:digest:syncs:knownFolders:)`` of one file.
    func adopt(staged: String, digest: String, syncs: Bool = true) throws {
        var folders = Set<String>()
        try adopt(staged: staged, digest: digest, syncs: syncs, knownFolders: &folders)
    }

    /// Releases a pin once its record committed (or will never commit).
    func unpin(_ pin: String) {
        unlinkat(stagingDirectory, stagingName(pin), 0)
    }

    // MARK: - Helpers

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                throw CatalogError(.io, "Could not write \(path): \(errnoText())", path: path)
            }
            offset += written
        }
    }

    /// A new file written through a 64 KB buffer: for the staging files an export makes
    /// (records, manifest) a line at a time, without holding them in memory.
    final class BufferedFile {
        let path: String
        private let fd: Int32
        private var buffer: [UInt8] = []

        /// Creates the file; it must not exist.
        init(creating path: String) throws {
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw CatalogError(.io, "Could not create \(path): \(ContentStore.errnoText())", path: path)
            }
            self.path = path
            buffer.reserveCapacity(1 << 16)
        }

        deinit { close(fd) }

        func append(_ bytes: some Sequence<UInt8>) throws {
            buffer += bytes
            if buffer.count >= 1 << 16 { try flush() }
        }

        /// Writes what is buffered: every byte appended is in the file when this returns.
        func flush() throws {
            try buffer.withUnsafeBytes { try ContentStore.writeAll(fd, $0, path: path) }
            buffer.removeAll(keepingCapacity: true)
        }
    }

    static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw CatalogError(.io, "Could not open \(path): \(errnoText())", path: path) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw CatalogError(.io, "Could not sync \(path): \(errnoText())", path: path) }
    }

    static func makeDirectory(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw CatalogError(.io, "Could not create \(path): \(error.localizedDescription)", path: path, cause: error)
        }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }

    /// `digest` in lowercase hex, written straight into the string's storage: the generic
    /// `BagIt.hex`, unspecialized across modules, cost about 1 µs a file of an add.
    static func hex(_ digest: SHA256.Digest) -> String {
        digest.withUnsafeBytes { bytes in
            String(unsafeUninitializedCapacity: bytes.count * 2) { text in
                for (i, byte) in bytes.enumerated() {
                    text[2 * i] = hexDigits[Int(byte >> 4)]
                    text[2 * i + 1] = hexDigits[Int(byte & 0xf)]
                }
                return bytes.count * 2
            }
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}

extension ContentStore {
    /// Calls `body` with the files of each folder of `objects/` (`ab/`), by digest: one
    /// folder's files in memory at a time, whatever the number of files.
    func forEachObjectFolder(_ body: ([UnreferencedObject]) throws -> Void) rethrows {
        let manager = FileManager.default
        for folder in ((try? manager.contentsOfDirectory(atPath: objects)) ?? []).sorted() where folder.utf8.count == 2
        {
            var files: [UnreferencedObject] = []
            for rest in ((try? manager.contentsOfDirectory(atPath: objects + "/" + folder)) ?? []).sorted() {
                let digest = folder + rest
                guard Self.isDigest(digest) else { continue }
                let path = objectPath(digest)
                var info = stat()
                guard stat(path, &info) == 0 else { continue }
                files.append(
                    UnreferencedObject(
                        sha256: digest, path: path, size: Int64(info.st_size), isPinned: info.st_nlink > 1))
            }
            if !files.isEmpty { try body(files) }
        }
    }
}
