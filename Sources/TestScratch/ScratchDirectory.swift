public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Temporary directories for tests: all under one folder per test process,
/// removed when that process exits — and, for a process that crashed or was
/// killed, by the next test process — so that test runs do not fill the disk.
public enum ScratchDirectory {
    /// A new, empty directory named `prefix-<UUID>`.
    public static func make(_ prefix: String) throws -> URL {
        let url = path(prefix)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// A new path named `prefix-<UUID>`, not created, in a directory that exists.
    public static func path(_ prefix: String) -> URL {
        root.appending(path: "\(prefix)-\(UUID().uuidString)")
    }

    private static let folderPrefix = "assetcat-test-run-"

    private static func folder(of pid: pid_t) -> String {
        FileManager.default.temporaryDirectory.appending(path: folderPrefix + String(pid)).path
    }

    /// This process's folder, made on first use, after removing the folders of test
    /// processes that are gone.
    private static let root: URL = {
        let temporary = FileManager.default.temporaryDirectory.path
        for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []
        where name.hasPrefix(folderPrefix) {
            guard let pid = pid_t(name.dropFirst(folderPrefix.count)), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { try? FileManager.default.removeItem(atPath: folder(of: pid)) }
        }
        let path = folder(of: getpid())
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: ScratchDirectory.folder(of: getpid())) }
        return URL(fileURLWithPath: path)
    }()
}
