@_spi(Testing) public import AssetCatalog
public import Foundation
public import TestScratch

/// A catalog in a fresh temporary directory, with helpers to make source
/// files, find the `assetcat` binary, and run it (for crash tests).
public struct TestCatalog: Sendable {
    /// The temporary directory holding the catalog (`catalog/`) and sources (`sources/`).
    public let directory: URL
    public var root: URL { directory.appending(path: "catalog") }
    public var sources: URL { directory.appending(path: "sources") }

    public init() throws {
        directory = ScratchDirectory.path("assetcat-tests")
        try FileManager.default.createDirectory(
            at: directory.appending(path: "sources"), withIntermediateDirectories: true)
    }

    /// Creates the catalog and returns it open.
    public func create() throws -> Catalog { try Catalog.create(at: root) }

    /// Opens the catalog (as a new process would).
    public func open() throws -> Catalog { try Catalog.open(at: root) }

    /// Creates the catalog and returns it open, with `testing`'s instrumentation.
    package func create(testing: CatalogTesting) throws -> Catalog {
        var options = Catalog.OpenOptions()
        options.testing = testing
        return try Catalog.create(at: root, options: options)
    }

    /// Opens the catalog (as a new process would), with `testing`'s instrumentation.
    package func open(testing: CatalogTesting) throws -> Catalog {
        var options = Catalog.OpenOptions()
        options.testing = testing
        return try Catalog.open(at: root, options: options)
    }

    /// Writes a source file and returns its path.
    @discardableResult
    public func file(_ relativePath: String, _ contents: String) throws -> String {
        try file(relativePath, Data(contents.utf8))
    }

    /// Writes a source file and returns its path.
    @discardableResult
    public func file(_ relativePath: String, _ contents: Data) throws -> String {
        let url = sources.appending(path: relativePath)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try contents.write(to: url)
        return url.path
    }

    /// The object file of `digest` in the catalog.
    public func objectPath(_ digest: String) -> String {
        root.appending(path: "objects").appending(path: String(digest.prefix(2)))
            .appending(path: String(digest.dropFirst(2))).path
    }

    /// Whether the object file of `digest` exists.
    public func hasObject(_ digest: String) -> Bool {
        FileManager.default.fileExists(atPath: objectPath(digest))
    }

    /// The entries of the catalog's `staging/` (owner folders and lock files).
    public func stagingEntries() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root.appending(path: "staging").path)) ?? []).sorted()
    }

    /// Sends `signal` to `process`, an `assetcat add` into this catalog, once its `staging/`
    /// holds at least `entries` entries (files being staged reach it with their batch), and
    /// says whether they were there: an add interrupted before it staged anything tests
    /// nothing. The staging folder is another process's, so it is watched by polling, from a
    /// thread of its own (the test's tasks share the concurrency pool with the whole suite
    /// and could notice too late); the deadline only meets a hang.
    public func signal(_ signal: Int32, to process: ChildProcess, onceStagingHolds entries: Int) async throws -> Bool {
        let staging = root.appending(path: "staging").path
        return try await TestCatalog.signal(signal, to: process, atMost: 120) {
            (try? FileManager.default.subpathsOfDirectory(atPath: staging).count) ?? 0 >= entries
        }
    }

    /// Sends `signal` to `process` as soon as `condition` holds (or after `seconds`, to meet a
    /// hang), and says whether it held. `condition` is polled every 2 ms from a thread of its
    /// own: the test's tasks share the concurrency pool with the whole suite, and under load
    /// a poll there can come seconds late — after the window the signal was meant for.
    public static func signal(
        _ signal: Int32, to process: ChildProcess, atMost seconds: TimeInterval = 300,
        once condition: @escaping @Sendable () throws -> Bool
    ) async throws -> Bool {
        try await offThePool {
            let deadline = Date().addingTimeInterval(seconds)
            var held = try condition()
            while !held, Date() < deadline {
                usleep(2_000)
                held = try condition()
            }
            process.signal(signal)
            return held
        }
    }

    /// The built `assetcat` executable, found beside the test bundle.
    public static func executable() -> URL {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appending(path: "assetcat").path), directory.path != "/"
        {
            directory = directory.deletingLastPathComponent()
        }
        return directory.appending(path: "assetcat")
    }

    /// What a run of `assetcat` printed and how it ended.
    public struct Run: Sendable {
        /// The exit status, or minus the signal that ended it (``ChildProcess/Outcome/status``).
        public var status: Int32
        public var stdout: String
        public var stderr: String
        /// How it ended: tells an exit with status 137 from a `SIGKILL`.
        public var termination: ChildProcess.Termination
    }

    /// Runs `assetcat ARGUMENTS` on this catalog (`--catalog` is added at the
    /// end unless it is `init` or `namesCatalog` is false), with
    /// extra environment variables and `stdin` as its standard input (`/dev/null` unless given).
    ///
    /// Async, and waiting on a thread of its own: a test blocked on a child
    /// process would otherwise hold one of the concurrency pool's threads
    /// (two on a two-core machine) and starve the job workers of other tests.
    @discardableResult
    public func run(
        _ arguments: [String], namesCatalog: Bool = true, environment: [String: String] = [:],
        in workingDirectory: URL? = nil, stdin: ChildProcess.Input = .null
    ) async throws -> Run {
        var args = arguments
        if namesCatalog, let first = args.first, first != "init", !args.contains("--catalog") {
            args += ["--catalog", root.path]
        }
        var env: [String: String?] = ["ASSETCAT_CATALOG": nil, "ASSETCAT_FAULT": nil]
        for (k, v) in environment { env[k] = v }
        // Both streams are read at once by the runner, so a run that fills one pipe's buffer
        // while the test reads the other cannot hang.
        let outcome = try await ChildProcess.run(
            Self.executable().path, args, environment: env, workingDirectory: (workingDirectory ?? directory).path,
            stdin: stdin)
        return Run(
            status: outcome.status, stdout: outcome.stdoutText, stderr: outcome.stderrText,
            termination: outcome.termination)
    }
}

/// A command stopped at a fault point (``TestCatalog/startPaused(_:at:environment:)``).
public struct PausedCommand: Sendable {
    /// The command's process.
    public let process: ChildProcess
    /// The file whose creation lets the command go on.
    let barrier: String

    /// Lets the command go on from where it stopped.
    public func resume() {
        _ = FileManager.default.createFile(atPath: barrier, contents: nil)
    }

    /// Lets a command stopped at several points
    /// (``TestCatalog/startPaused(_:at:environment:)-([String],_,_)``) go on from `point`.
    public func resume(from point: String) {
        _ = FileManager.default.createFile(atPath: barrier + "." + point, contents: nil)
    }

    /// Waits until a command stopped at several points has reached `point`; says whether
    /// it did (`false` if it ended first, or never got there).
    public func reached(_ point: String) async throws -> Bool {
        try await waitUntil { [barrier] in FileManager.default.fileExists(atPath: barrier + "." + point + ".reached") }
    }
}

extension TestCatalog {
    /// Starts `assetcat ARGUMENTS` on this catalog, stopping it at fault point `point`
    /// (`ASSETCAT_FAULT_PAUSE`), with `environment` added (a crash point further on, say);
    /// returns once the command has stopped there (it throws if it never does), so that a
    /// test can act at that instant and then ``PausedCommand/resume()`` it.
    public func startPaused(
        _ arguments: [String], at point: String, environment: [String: String] = [:]
    ) async throws -> PausedCommand {
        let barrier = directory.appending(path: "pause-\(UUID().uuidString)").path
        var env: [String: String?] = [
            "ASSETCAT_CATALOG": nil, "ASSETCAT_FAULT": nil, "ASSETCAT_FAULT_PAUSE": point,
            "ASSETCAT_FAULT_PAUSE_FILE": barrier,
        ]
        for (k, v) in environment { env[k] = v }
        let process = try ChildProcess(
            Self.executable().path, arguments + ["--catalog", root.path], environment: env,
            workingDirectory: directory.path)
        guard try await waitUntil({ FileManager.default.fileExists(atPath: barrier + ".reached") }) else {
            process.signal(SIGKILL)
            _ = try await process.finish()
            throw CatalogError(.io, "assetcat \(arguments.joined(separator: " ")) never reached \(point)")
        }
        return PausedCommand(process: process, barrier: barrier)
    }
}

extension TestCatalog {
    /// Starts `assetcat ARGUMENTS` on this catalog, to stop at each of `points` in turn
    /// (`ASSETCAT_FAULT_PAUSE=a,b`), with `environment` added; returns once it has stopped
    /// at the first. The test lets it go on from each point with
    /// ``PausedCommand/resume(from:)`` and waits for the next with
    /// ``PausedCommand/reached(_:)``.
    public func startPaused(
        _ arguments: [String], at points: [String], environment: [String: String] = [:]
    ) async throws -> PausedCommand {
        precondition(points.count > 1, "one point: startPaused(_:at:environment:) with a String")
        let barrier = directory.appending(path: "pause-\(UUID().uuidString)").path
        var env: [String: String?] = [
            "ASSETCAT_CATALOG": nil, "ASSETCAT_FAULT": nil, "ASSETCAT_FAULT_PAUSE": points.joined(separator: ","),
            "ASSETCAT_FAULT_PAUSE_FILE": barrier,
        ]
        for (k, v) in environment { env[k] = v }
        let process = try ChildProcess(
            Self.executable().path, arguments + ["--catalog", root.path], environment: env,
            workingDirectory: directory.path)
        let command = PausedCommand(process: process, barrier: barrier)
        guard try await command.reached(points[0]) else {
            process.signal(SIGKILL)
            _ = try await process.finish()
            throw CatalogError(.io, "assetcat \(arguments.joined(separator: " ")) never reached \(points[0])")
        }
        return command
    }
}

extension Catalog {
    /// Adds files, then runs the queued jobs (archive indexing, digests,
    /// metadata) to completion; returns the added assets followed by the
    /// archive members the jobs recorded, in ID order.
    public func addAndRunJobs(_ paths: [String], options: AddOptions = AddOptions()) async throws -> [AssetRecord] {
        let added = try await add(paths, options: options).added
        _ = try await jobs.runUntilIdle()
        let ids = Set(added.map(\.id))
        return try assets().filter { ids.contains($0.id) || $0.archive.map(ids.contains) == true }
    }
}

/// Polls until `condition` holds, and says whether it did. The deadline only guards
/// against a hang: it is generous because the whole suite shares the concurrency pool
/// (two threads on a two-core machine) with tests that block it, so under
/// AddressSanitizer the tasks a condition waits for have been seen to wait over a
/// minute for a thread. A passing run returns as soon as the condition holds.
public func waitUntil(
    atMost timeout: Duration = .seconds(300), _ condition: () throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(5))
    }
    return try condition()
}

/// Runs blocking work (waiting for a child process, polling a file) on a
/// thread of its own rather than on the concurrency pool, and awaits it.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

extension Catalog {
    /// The assets an import created (``ImportResult/importedIDs``), in ID order: archives
    /// and other top-level assets, then members.
    public func assets(importedBy result: ImportResult) throws -> [AssetRecord] {
        try assets().filter { record in result.importedIDs.contains { $0.contains(record.id) } }
    }
}
