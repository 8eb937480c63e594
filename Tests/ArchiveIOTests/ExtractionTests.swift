import ArchiveIO
import Foundation
import Testing

/// Each hostile fixture gets its own error, naming the member, and nothing lands outside the
/// extraction root.
@Suite struct ExtractionTests {
    struct Hostile: CustomTestStringConvertible, Sendable {
        var fixture: String
        var code: ArchiveError.Code
        var member: String
        var reason: String
        /// What the root holds afterwards (members before the refused one stay).
        var rootAfter: Set<String>
        var testDescription: String { fixture }
    }

    static let hostile: [Hostile] = [
        Hostile(
            fixture: "hostile-absolute-path.tar", code: .absolutePath, member: "/archiveio-hostile-absolute/evil.txt",
            reason: "its path is absolute", rootAfter: ["ok.txt"]),
        Hostile(
            fixture: "hostile-dotdot.tar", code: .parentTraversal, member: "sub/../../escaped.txt",
            reason: "its path contains a '..' component", rootAfter: ["ok.txt"]),
        Hostile(
            fixture: "hostile-dotdot.zip", code: .parentTraversal, member: "../escaped.txt",
            reason: "its path contains a '..' component", rootAfter: ["ok.txt"]),
        Hostile(
            fixture: "hostile-symlink-escape.tar", code: .linkOutsideRoot, member: "docs/link",
            reason: "it is a symbolic link to '../../outside', which leaves the extraction root",
            rootAfter: ["ok.txt"]),
        Hostile(
            fixture: "hostile-symlink-absolute.tar", code: .linkOutsideRoot, member: "etc-link",
            reason: "it is a symbolic link to the absolute path '/etc'", rootAfter: []),
        Hostile(
            fixture: "hostile-symlink-climb.tar", code: .linkOutsideRoot, member: "d/sneaky",
            reason: "it is a symbolic link to 'up/../..', which climbs with '..' after a name; only leading '..' "
                + "components can be checked to stay inside the extraction root",
            rootAfter: ["d", "d/up"]),
        Hostile(
            fixture: "hostile-write-through-symlink.tar", code: .pathThroughSymlink, member: "inner-link/evil.txt",
            reason: "'inner-link' is a symbolic link, and extraction never writes through one",
            rootAfter: ["real", "inner-link"]),
        Hostile(
            fixture: "hostile-hardlink-escape.tar", code: .linkOutsideRoot, member: "hl",
            reason: "it is a hard link to '../../etc/passwd', which leaves the extraction root", rootAfter: ["ok.txt"]),
        Hostile(
            fixture: "hostile-hardlink-missing.tar", code: .hardlinkTargetMissing, member: "hl",
            reason: "it is a hard link to 'not-extracted.txt', which is not a regular file extracted before it",
            rootAfter: []),
        Hostile(
            fixture: "hostile-device.tar", code: .entryTypeNotAllowed, member: "dev/null-copy",
            reason: "it is a character device; device, FIFO and socket entries are never extracted",
            rootAfter: ["ok.txt"]),
        Hostile(
            fixture: "hostile-fifo.tar", code: .entryTypeNotAllowed, member: "pipe",
            reason: "it is a FIFO; device, FIFO and socket entries are never extracted", rootAfter: []),
        Hostile(
            fixture: "hostile-duplicate.tar", code: .duplicateEntry, member: "a.txt",
            reason: "an earlier member has the same path", rootAfter: ["a.txt"]),
        Hostile(
            fixture: "hostile-long-name.tar", code: .nameTooLong, member: String(repeating: "x", count: 2000),
            reason: "its path is 2000 bytes long, more than the policy's limit of 1024", rootAfter: []),
        Hostile(
            fixture: "hostile-long-component.tar", code: .nameTooLong,
            member: "dir/" + String(repeating: "y", count: 300),
            reason: "its path has a component of 300 bytes, more than the policy's limit of 255", rootAfter: []),
    ]

    @Test(arguments: hostile)
    func refusesHostileArchive(_ hostile: Hostile) throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let path = Fixtures.path(hostile.fixture)
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: path, to: root)
        }
        let shown = hostile.member.count > 120 ? String(hostile.member.prefix(120)) + "…" : hostile.member
        #expect(error?.code == hostile.code)
        #expect(error?.member == hostile.member)
        #expect(error?.archivePath == path)
        #expect(error?.message == "Refusing member '\(shown)' of '\(path)': \(hostile.reason)")
        // Nothing outside the root: the temporary directory holds the root alone, and no
        // absolute path of the fixtures exists.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["root"])
        #expect(!FileManager.default.fileExists(atPath: "/archiveio-hostile-absolute"))
        let inside = Set(snapshotTree(root).keys.map { String(decoding: $0, as: UTF8.self) })
        #expect(inside == hostile.rootAfter)
    }

    @Test func duplicateDoesNotReplaceTheFirstFile() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: Fixtures.path("hostile-duplicate.tar"), to: root)
        }
        #expect(snapshotTree(root)[bytes("a.txt")] == .file(Array("first\n".utf8)))
    }

    @Test func truncatedArchiveLeavesNoPartialFile() throws {
        for (fixture, member) in [("truncated.tar", "big.bin"), ("truncated.zip", "big.bin")] {
            let directory = try TemporaryDirectory()
            let root = directory.sub("root")
            let error = #expect(throws: ArchiveError.self) {
                try ArchiveReader.extract(archiveAt: Fixtures.path(fixture), to: root)
            }
            #expect(error?.code == .truncatedArchive)
            #expect(error?.member == member)
            #expect(snapshotTree(root) == [bytes("ok.txt"): .file(Array("fine\n".utf8))], "\(fixture)")
        }
    }

    @Test func corruptArchivesAreErrors() throws {
        for (fixture, code, kept) in [
            ("corrupt-header.tar", ArchiveError.Code.corruptArchive, ["first.txt"]),
            ("corrupt-data.zip", .corruptArchive, []),
        ] {
            let directory = try TemporaryDirectory()
            let root = directory.sub("root")
            let error = #expect(throws: ArchiveError.self) {
                try ArchiveReader.extract(archiveAt: Fixtures.path(fixture), to: root)
            }
            #expect(error?.code == code, "\(fixture)")
            #expect(Set(snapshotTree(root).keys.map { String(decoding: $0, as: UTF8.self) }) == Set(kept))
        }
    }

    @Test func nulBytesAndEmptyNamesAreRefusedByTheGuard() throws {
        // libarchive cuts names at a NUL (see ReaderTests), so the guard's own check is tested
        // with entries built in Swift, as the bundle importer may hand it.
        var checker = ExtractionGuard(policy: .default, archivePath: "x.tar")
        let cases: [(ArchiveEntry, String)] = [
            (ArchiveEntry(path: "evil\0.txt", kind: .file, size: 1), "its path contains a NUL byte"),
            (ArchiveEntry(path: "", kind: .file, size: 1), "its path is empty"),
            (ArchiveEntry(path: "./", kind: .file, size: 1), "its path names no file"),
            (
                ArchiveEntry(path: "l", kind: .symlink, linkTarget: "a\0b"),
                "it is a symbolic link whose target contains a NUL byte"
            ),
            (ArchiveEntry(path: "l2", kind: .symlink, linkTarget: ""), "it is a symbolic link with an empty target"),
        ]
        for (entry, reason) in cases {
            let error = #expect(throws: ArchiveError.self) { try checker.admit(entry) }
            #expect(error?.code == .invalidName)
            #expect(
                error?.message == "Refusing member '\(entry.path.replacingOccurrences(of: "\0", with: "\\0"))' "
                    + "of 'x.tar': \(reason)")
        }
        // The root itself ("./") is accepted as a directory and needs no extraction.
        #expect(try checker.admit(ArchiveEntry(path: "./", kind: .directory)) == nil)
        #expect(
            try checker.admit(ArchiveEntry(path: "./a//b/./c", kind: .file, size: 0))?.components == ["a", "b", "c"])
    }

    @Test func symlinksThatStayInsideAreExtracted() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("links.tar")
        try withArchiveWriter(at: archive) { writer in
            try writer.writeEntry(ArchiveEntry(path: "a/b/file.txt", kind: .file), contents: Array("x".utf8))
            try writer.writeEntry(ArchiveEntry(path: "a/b/up", kind: .symlink, linkTarget: "../../a/b/file.txt"))
            try writer.writeEntry(ArchiveEntry(path: "a/hard", kind: .hardlink, linkTarget: "a/b/file.txt"))
        }
        let summary = try ArchiveReader.extract(archiveAt: archive, to: root)
        #expect(summary.symlinkCount == 1 && summary.hardlinkCount == 1 && summary.fileCount == 1)
        #expect(snapshotTree(root)[bytes("a/b/up")] == .symlink("../../a/b/file.txt"))
        var first = stat()
        var second = stat()
        #expect(stat(root + "/a/hard", &first) == 0 && stat(root + "/a/b/file.txt", &second) == 0)
        #expect(first.st_ino == second.st_ino)
    }

    @Test func policyCanRefuseLinks() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let path = Fixtures.path("sample.zip")
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: path, to: root, policy: .filesAndDirectoriesOnly)
        }
        #expect(error?.code == .entryTypeNotAllowed)
        #expect(
            error?.message == "Refusing member 'sample/link-to-hello' of '\(path)': it is a symbolic link, which the "
                + "extraction policy does not allow")
    }

    @Test func namesThatLibarchiveNormalisedIntoTheSameNameAreDuplicates() throws {
        // sample.tar (Python's UTF-8 pax) holds an NFC and an NFD name; libarchive reads both
        // as NFC, so extraction refuses the second rather than overwrite the first.
        let directory = try TemporaryDirectory()
        let path = Fixtures.path("sample.tar")
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: path, to: directory.sub("root"))
        }
        #expect(error?.code == .duplicateEntry)
        #expect(
            error?.message
                == "Refusing member 'sample/r\u{e9}sum\u{e9}.txt' of '\(path)': an earlier member has the same path")
    }

    /// The guard remembers each member's path (as a print, not the bytes): a path spelled
    /// differently is the same member, a path in another Unicode normalisation is another,
    /// and a hard link may name only a regular file admitted before it.
    @Test func theGuardRemembersPathsByTheirBytes() throws {
        var checker = ExtractionGuard(
            policy: ExtractionPolicy(allowedKinds: [.files, .directories, .hardlinks]), archivePath: "a.tar")
        func admit(_ path: String, _ kind: ArchiveEntry.Kind = .file, link: String? = nil) throws(ArchiveError) {
            var entry = ArchiveEntry(path: path, kind: kind)
            entry.linkTarget = link
            _ = try checker.admit(entry)
        }
        try admit("d", .directory)
        try admit("d/r\u{e9}sum\u{e9}.txt")
        try admit("d/re\u{301}sume\u{301}.txt")  // another name on Linux
        let again = #expect(throws: ArchiveError.self) { try admit("./d//r\u{e9}sum\u{e9}.txt") }
        #expect(again?.code == .duplicateEntry)
        let dir = #expect(throws: ArchiveError.self) { try admit("d/", .file) }
        #expect(dir?.code == .duplicateEntry)  // a directory's path, as a file's
        try admit("copy", .hardlink, link: "d/re\u{301}sume\u{301}.txt")
        let toDirectory = #expect(throws: ArchiveError.self) { try admit("copy2", .hardlink, link: "d") }
        #expect(toDirectory?.code == .hardlinkTargetMissing)
        let toLink = #expect(throws: ArchiveError.self) { try admit("copy3", .hardlink, link: "copy") }
        #expect(toLink?.code == .hardlinkTargetMissing)  // a hard link is not a regular file admitted
    }

    /// Found by fuzz-extraction-guard: a file refused for its size was remembered as
    /// admitted, and a later hard link to it was admitted (a caller that skips a refused
    /// member and reads on would have linked to nothing it extracted). Only members admitted
    /// are remembered.
    @Test func aMemberRefusedIsNoHardLinksTargetNorADuplicate() throws {
        var policy = ExtractionPolicy(allowedKinds: [.files, .hardlinks])
        policy.maxTotalBytes = 100
        var checker = ExtractionGuard(policy: policy, archivePath: "a.tar")
        let large = ArchiveEntry(path: "de", kind: .file, size: 4_064)
        let tooLarge = #expect(throws: ArchiveError.self) { try checker.admit(large) }
        #expect(tooLarge?.code == .sizeLimitExceeded)
        var link = ArchiveEntry(path: "link", kind: .hardlink)
        link.linkTarget = "de"
        let refused = #expect(throws: ArchiveError.self) { try checker.admit(link) }
        #expect(refused?.code == .hardlinkTargetMissing)
        #expect(try checker.admit(ArchiveEntry(path: "de", kind: .file, size: 10))?.components == ["de"])
        #expect(try checker.admit(link)?.components == ["link"])
    }

    /// A guard made with `remembersPaths: false` keeps nothing per member: it leaves
    /// duplicates and hard-link targets to its caller, who refuses them with the errors a
    /// remembering guard throws — the same codes, the same messages.
    @Test func aGuardThatRemembersNoPathsLeavesDuplicatesAndLinkTargetsToItsCaller() throws {
        let policy = ExtractionPolicy(allowedKinds: [.files, .hardlinks])
        var remembering = ExtractionGuard(policy: policy, archivePath: "a.tar")
        var forgetting = ExtractionGuard(policy: policy, archivePath: "a.tar", remembersPaths: false)
        #expect(remembering.remembersPaths && !forgetting.remembersPaths)
        let first = ArchiveEntry(path: "d/a.txt", kind: .file)
        let again = ArchiveEntry(path: "./d//a.txt", kind: .file)
        var link = ArchiveEntry(path: "l", kind: .hardlink)
        link.linkTarget = "d/missing.txt"
        _ = try remembering.admit(first)
        _ = try forgetting.admit(first)
        #expect(try forgetting.admit(again)?.components == ["d", "a.txt"])
        #expect(try forgetting.admit(link)?.components == ["l"])
        for (entry, code) in [(again, ArchiveError.Code.duplicateEntry), (link, .hardlinkTargetMissing)] {
            let error = #expect(throws: ArchiveError.self) { try remembering.admit(entry) }
            let made =
                code == .duplicateEntry
                ? forgetting.duplicateRefusal(for: entry) : forgetting.missingLinkTargetRefusal(for: entry)
            #expect(error?.code == code && made.code == code)
            #expect(error?.message == made.message && made.member == entry.path)
        }
        #expect(
            forgetting.duplicateRefusal(for: again).message
                == "Refusing member './d//a.txt' of 'a.tar': an earlier member has the same path")
        // What it still checks without remembering: a link's target stays inside the root.
        var outside = ArchiveEntry(path: "m", kind: .hardlink)
        outside.linkTarget = "../etc/passwd"
        let escape = #expect(throws: ArchiveError.self) { try forgetting.admit(outside) }
        #expect(escape?.code == .linkOutsideRoot)
    }

    @Test func existingFilesAreNeverOverwritten() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let path = Fixtures.path("sample.cpio")
        try ArchiveReader.extract(archiveAt: path, to: root)
        let error = #expect(throws: ArchiveError.self) { try ArchiveReader.extract(archiveAt: path, to: root) }
        #expect(error?.code == .destinationExists)
        let member = try #require(error?.member)
        #expect(
            error?.message
                == "Cannot extract member '\(member)' of '\(path)': '\(root)/\(member)' already exists as a file")
    }

    @Test func aSymlinkPlantedInTheRootIsNotFollowed() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let outside = directory.sub("outside")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        #expect(symlink(outside, root + "/planted") == 0)
        let archive = directory.sub("a.tar")
        try withArchiveWriter(at: archive) { writer in
            try writer.writeEntry(ArchiveEntry(path: "planted/x.txt", kind: .file), contents: Array("x".utf8))
        }
        let error = #expect(throws: ArchiveError.self) { try ArchiveReader.extract(archiveAt: archive, to: root) }
        #expect(error?.code == .pathThroughSymlink)
        #expect(
            error?.message == "Refusing member 'planted/x.txt' of '\(archive)': 'planted' is a symbolic link, and "
                + "extraction never writes through one")
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
    }

    @Test func restoresPermissionsAndDates() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("modes.tar.gz")
        let date = Date(timeIntervalSince1970: 1_600_000_000)
        try withArchiveWriter(at: archive) { writer in
            try writer.writeEntry(
                ArchiveEntry(path: "ro", kind: .directory, modificationDate: date, permissions: 0o555))
            try writer.writeEntry(
                ArchiveEntry(path: "ro/tool", kind: .file, modificationDate: date, permissions: 0o4755),
                contents: Array("#!/bin/sh\n".utf8))
        }
        try ArchiveReader.extract(archiveAt: archive, to: root)
        var info = stat()
        #expect(stat(root + "/ro/tool", &info) == 0)
        #expect(info.st_mode & 0o7777 == 0o755)  // setuid dropped
        #expect(info.st_mtim.tv_sec == 1_600_000_000)
        #expect(stat(root + "/ro", &info) == 0)
        #expect(info.st_mode & 0o777 == 0o755)  // owner keeps rwx
        #expect(info.st_mtim.tv_sec == 1_600_000_000)
    }

    @Test func sparseHolesStayHolesAndDoNotCountAsExpansion() throws {
        // 4 MiB from a 15 KiB archive: a ratio of 270, but all of it holes.
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        var policy = ExtractionPolicy.default
        policy.maxCompressionRatio = 10
        let summary = try ArchiveReader.extract(archiveAt: Fixtures.path("sparse.tar"), to: root, policy: policy)
        #expect(summary.totalBytes == 4 << 20)
        var info = stat()
        #expect(stat(root + "/sparse.bin", &info) == 0)
        #expect(info.st_size == 4 << 20)
        #expect(info.st_blocks * 512 < 1 << 20, "\(info.st_blocks) blocks allocated")
        let data = try Array(Data(contentsOf: URL(fileURLWithPath: root + "/sparse.bin")))
        #expect(data[(1 << 20)..<(1 << 20) + 5000].allSatisfy { $0 == UInt8(ascii: "A") })
        #expect(data[(3 << 20)..<(3 << 20) + 100].allSatisfy { $0 == UInt8(ascii: "B") })
        #expect(data.filter { $0 != 0 }.count == 5100)
        // Holes still count toward the total size.
        policy.maxTotalBytes = 2 << 20
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(
                archiveAt: Fixtures.path("sparse.tar"), to: directory.sub("again"), policy: policy)
        }
        #expect(error?.code == .sizeLimitExceeded)
    }

    @Test func unusableDestinationIsAnIOError() throws {
        let path = Fixtures.path("sample.zip")
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: path, to: "/dev/null/root")
        }
        #expect(error?.code == .io)
        #expect(
            error?.message.hasPrefix("Cannot extract '\(path)' to '/dev/null/root': cannot create the directory")
                == true)
    }

    @Test func policyCanLeavePermissionsAndDatesAlone() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("modes.tar")
        try withArchiveWriter(at: archive) { writer in
            try writer.writeEntry(
                ArchiveEntry(
                    path: "f", kind: .file, modificationDate: Date(timeIntervalSince1970: 1), permissions: 0o700),
                contents: [1])
        }
        var policy = ExtractionPolicy.default
        policy.restoresPermissions = false
        policy.restoresModificationDates = false
        try ArchiveReader.extract(archiveAt: archive, to: root, policy: policy)
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Umask:") })
        let mask = try #require(mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8))
        var info = stat()
        #expect(stat(root + "/f", &info) == 0)
        #expect(info.st_mode & 0o777 == 0o666 & ~mask)
        #expect(info.st_mtim.tv_sec > 1_700_000_000)
    }

    // MARK: Limits (archives generated here, never committed)

    @Test func tooManyEntries() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("many.zip")
        try withArchiveWriter(at: archive) { writer in
            for index in 0..<11 {
                try writer.writeEntry(ArchiveEntry(path: "f\(index).txt", kind: .file), contents: [1])
            }
        }
        var policy = ExtractionPolicy.default
        policy.maxEntryCount = 10
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: archive, to: root, policy: policy)
        }
        #expect(error?.code == .tooManyEntries)
        #expect(
            error?.message == "Refusing member 'f10.txt' of '\(archive)': the archive has more than 10 members, the "
                + "policy's limit")
        #expect(snapshotTree(root).count == 10)
    }

    /// A member whose header announces more than the limit is refused before a byte is written.
    @Test func sizeBombIsRefusedFromItsHeader() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("bomb.tar.gz")
        try writeZeros(to: archive, member: "zeros.bin", size: 64 << 20)
        var policy = ExtractionPolicy.default
        policy.maxTotalBytes = 8 << 20
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: archive, to: root, policy: policy)
        }
        #expect(error?.code == .sizeLimitExceeded)
        #expect(
            error?.message == "Refusing member 'zeros.bin' of '\(archive)': extracting it would exceed the policy's "
                + "limit of 8388608 uncompressed bytes")
        #expect(snapshotTree(root).isEmpty)
    }

    /// A streamed zip member has no size in its header: the limit is enforced chunk by chunk,
    /// long before the whole archive has even been read.
    @Test func sizeBombWithoutSizeIsStoppedWhileStreaming() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("streamed.zip")
        // Python writes to a pipe, so its zip has data descriptors and no sizes up front.
        let script = """
            import random, sys, zipfile
            data = random.Random(1).randbytes(16 << 20)
            with open(sys.argv[1], "wb") as f:
                class Pipe:
                    def write(self, b): return f.write(b)
                    def flush(self): f.flush()
                with zipfile.ZipFile(Pipe(), "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
                    with z.open("random.bin", "w") as m:
                        m.write(data)
            """
        _ = try python(script, [archive])
        let file = try #require(FileHandle(forReadingAtPath: archive))
        defer { try? file.close() }
        let archiveSize = try file.seekToEnd()
        try file.seek(toOffset: 0)
        var handedOut = 0
        let reader = try ArchiveReader(name: "streamed.zip") { () -> [UInt8]? in
            let chunk = try file.read(upToCount: 65_536).map(Array.init) ?? []
            handedOut += chunk.count
            return chunk.isEmpty ? nil : chunk
        }
        var policy = ExtractionPolicy.default
        policy.maxTotalBytes = 4 << 20
        let error = #expect(throws: ArchiveError.self) { try reader.extract(to: root, policy: policy) }
        #expect(error?.code == .sizeLimitExceeded)
        #expect(
            error?.message == "Refusing member 'random.bin' of 'streamed.zip': extracting it would exceed the "
                + "policy's limit of 4194304 uncompressed bytes")
        #expect(reader.currentEntry?.size == nil)
        #expect(handedOut < 6 << 20, "read \(handedOut) of \(archiveSize) bytes before stopping")
        #expect(snapshotTree(root).isEmpty)  // the partial file is removed
    }

    @Test func compressionRatioBombIsStoppedWhileStreaming() throws {
        let directory = try TemporaryDirectory()
        let root = directory.sub("root")
        let archive = directory.sub("ratio.tar.gz")
        try writeZeros(to: archive, member: "zeros.bin", size: 32 << 20)
        var policy = ExtractionPolicy.default
        policy.maxCompressionRatio = 50
        let error = #expect(throws: ArchiveError.self) {
            try ArchiveReader.extract(archiveAt: archive, to: root, policy: policy)
        }
        #expect(error?.code == .compressionRatioExceeded)
        let message = try #require(error?.message)
        let prefix = "Refusing member 'zeros.bin' of '\(archive)': the archive expands more than 50 times ("
        #expect(message.hasPrefix(prefix) && message.hasSuffix("), the policy's limit"))
        // "(N bytes from M)": stopped soon after the 1 MiB grace, far from 32 MiB.
        let numbers = message.dropFirst(prefix.count).split(separator: " ").compactMap { Int($0.filter(\.isNumber)) }
        #expect(numbers.count == 2 && numbers[0] > 50 * numbers[1] && numbers[0] < 4 << 20)
        #expect(snapshotTree(root).isEmpty)
    }

    private func writeZeros(to path: String, member: String, size: Int) throws {
        let chunk = [UInt8](repeating: 0, count: 1 << 20)
        var remaining = size
        try withArchiveWriter(at: path) { writer in
            try writer.writeEntry(ArchiveEntry(path: member, kind: .file, size: Int64(size))) { () -> [UInt8]? in
                guard remaining > 0 else { return nil }
                remaining -= chunk.count
                return chunk
            }
        }
    }

    /// Paths are checked as the kernel reads them, byte by byte: `/` or `..` followed by a
    /// combining mark is still a root or a climb, though Swift sees one Character there.
    @Test(arguments: [
        (ArchiveEntry(path: "/\u{301}etc/x", kind: .file), "its path is absolute"),
        (ArchiveEntry(path: "a/../\u{301}x", kind: .file), "its path contains a '..' component"),
        (
            ArchiveEntry(path: "link", kind: .symlink, linkTarget: "../\u{301}x"),
            "it is a symbolic link to '../\u{301}x', which leaves the extraction root"
        ),
        (
            ArchiveEntry(path: "link", kind: .symlink, linkTarget: "/\u{301}etc"),
            "it is a symbolic link to the absolute path '/\u{301}etc'"
        ),
        (
            ArchiveEntry(path: "link", kind: .hardlink, linkTarget: "../\u{301}x"),
            "it is a hard link to '../\u{301}x', which leaves the extraction root"
        ),
        (
            ArchiveEntry(path: "link", kind: .hardlink, linkTarget: "/\u{301}etc"),
            "it is a hard link to the absolute path '/\u{301}etc'"
        ),
    ])
    func aCombiningMarkDoesNotHideARootOrAClimb(entry: ArchiveEntry, reason: String) {
        var checker = ExtractionGuard(policy: .default, archivePath: "x.tar")
        #expect {
            _ = try checker.admit(entry)
        } throws: { error in
            (error as? ArchiveError)?.message.hasSuffix(": \(reason)") == true
        }
    }
}
