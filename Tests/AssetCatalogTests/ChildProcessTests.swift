import AssetCatalogTestSupport
import Foundation
import Synchronization
import TestScratch
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The tests' child-process runner (TestScratch's `ChildProcess`, on `posix_spawn`), which
/// replaced Foundation's `Process` in every test.
@Suite struct ChildProcessTests {
    /// 4 MiB on each stream, stderr first and then interleaved: a runner that read one pipe
    /// to its end before the other would wait forever on a child blocked writing the other.
    @Test func aChildWritingALotToBothStreamsNeverBlocks() async throws {
        let run = try await ChildProcess.run(
            "/bin/sh",
            [
                "-c",
                "head -c 2097152 /dev/zero >&2; head -c 2097152 /dev/zero; head -c 2097152 /dev/zero >&2; "
                    + "head -c 2097152 /dev/zero",
            ])
        #expect(run.termination == .exited(0))
        #expect(run.stdout.count == 4 << 20 && run.stdout.allSatisfy { $0 == 0 })
        #expect(run.stderr.count == 4 << 20 && run.stderr.allSatisfy { $0 == 0 })
    }

    @Test func exitStatusAndOutputsAreReportedApart() async throws {
        let run = try await ChildProcess.run("/bin/sh", ["-c", "printf out; printf err >&2; exit 3"])
        #expect(run.termination == .exited(3))
        #expect(run.status == 3)
        #expect(run.stdoutText == "out")
        #expect(run.stderrText == "err")
    }

    /// Killed by a signal is not an exit: not with the signal's number, nor with 128 + it
    /// (what a child that handles the signal exits with).
    @Test func aChildKilledByASignalIsToldFromOneThatExited() async throws {
        let killed = try ChildProcess("/bin/sleep", ["60"])
        killed.signal(SIGKILL)
        let run = try await killed.finish()
        #expect(run.termination == .signalled(SIGKILL))
        #expect(run.status == -SIGKILL)
        #expect("\(run.termination)" == "signal 9 (Killed)")

        let handled = try ChildProcess(
            "/bin/sh", ["-c", "trap 'exit 143' TERM; echo ready; while :; do sleep 0.01; done"])
        // Only once the trap is set: a SIGTERM before it would kill the shell.
        #expect(try await offThePool { handled.stdout(within: 60) { $0.contains(0x0A) } } == Data("ready\n".utf8))
        handled.signal(SIGTERM)
        #expect(try await handled.finish().termination == .exited(143))

        let term = try await ChildProcess.run("/bin/sh", ["-c", "kill -TERM $$"])
        #expect(term.termination == .signalled(SIGTERM) && term.status == -15)
    }

    /// A child still running at its deadline is killed with its process group (here a
    /// grandchild that holds the pipes too), and the wait fails loudly, naming the command.
    @Test func aChildPastItsDeadlineIsKilledWithItsGroupAndReported() async throws {
        let folder = try ScratchDirectory.make("child-deadline")
        let pidFile = folder.appending(path: "grandchild").path
        let child = try ChildProcess(
            "/bin/sh", ["-c", "sleep 600 & echo $! > \"$0\"; echo started; wait", pidFile])
        #expect(try await offThePool { child.stdout(within: 60) { $0.contains(0x0A) } } == Data("started\n".utf8))
        let error = await #expect(throws: ChildProcess.Failure.self) { try await child.finish(within: 0.5) }
        #expect(
            error?.description
                == "/bin/sh -c sleep 600 & echo $! > \"$0\"; echo started; wait \(pidFile) (pid \(child.pid)) was still "
                + "running after 0.5 s, so it was killed (SIGKILL to its process group); stdout so far: \"started\\n\", "
                + "stderr so far: \"\"")
        // The grandchild is gone (or a zombie its new parent has yet to reap).
        let grandchild = try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines)
        let stat = (try? String(contentsOfFile: "/proc/\(grandchild)/stat", encoding: .utf8)) ?? ""
        #expect(stat.isEmpty || stat.contains(") Z "), "\(stat)")
        // A signal after the reaping is not sent (the process ID may be another's by now).
        child.signal(SIGKILL)
    }

    /// The environment is this process's with the changes given; the working directory and
    /// standard input are the ones given.
    @Test func environmentWorkingDirectoryAndInput() async throws {
        let inherited = try #require(ProcessInfo.processInfo.environment.keys.sorted().first)
        let run = try await ChildProcess.run(
            "/usr/bin/env", ["-0"], environment: [inherited: nil, "CHILD_PROCESS_TEST": "a=b\nc"])
        var expected = ProcessInfo.processInfo.environment
        expected[inherited] = nil
        expected["CHILD_PROCESS_TEST"] = "a=b\nc"
        #expect(Set(run.stdoutText.split(separator: "\0").map(String.init)) == Set(expected.map { "\($0)=\($1)" }))

        let folder = try ScratchDirectory.make("child-directory")
        let resolved = try #require(realpath(folder.path, nil))
        defer { free(resolved) }
        let pwd = try await ChildProcess.run("/bin/pwd", [], workingDirectory: folder.path)
        #expect(pwd.stdoutText == String(cString: resolved) + "\n")

        let input = folder.appending(path: "input").path
        try Data("given\n".utf8).write(to: URL(fileURLWithPath: input))
        #expect(try await ChildProcess.run("/bin/cat", stdin: .file(input)).stdoutText == "given\n")
        // By default the child reads /dev/null: it ends at once instead of waiting for input.
        #expect(try await ChildProcess.run("/bin/cat").stdoutText == "")

        let output = folder.appending(path: "output").path
        let toFile = try await ChildProcess.run("/bin/sh", ["-c", "echo to-file"], stdout: .file(output))
        #expect(toFile.stdout.isEmpty)
        #expect(try String(contentsOfFile: output, encoding: .utf8) == "to-file\n")
    }

    /// The child inherits descriptors 0, 1 and 2 only, even one this process opened without
    /// close-on-exec.
    @Test func theChildInheritsOnlyItsStandardDescriptors() async throws {
        let leaky = open("/dev/null", O_RDONLY)  // no O_CLOEXEC, as careless code would
        try #require(leaky >= 0)
        defer { close(leaky) }
        let script = """
            import os
            for fd in range(1024):
                try:
                    os.fstat(fd)
                    print(fd)
                except OSError:
                    pass
            """
        let run = try await ChildProcess.run("/usr/bin/env", ["python3", "-c", script])
        #expect(run.stdoutText == "0\n1\n2\n", "\(run.stderrText)")
    }

    /// What crashed Foundation's `Process`: starting children from many tasks while other
    /// threads open and close descriptors (none close-on-exec). Every child still sees only
    /// 0, 1, 2 (and the directory `ls` opens, 3) and every output arrives whole.
    @Test func manyChildrenStartedWhileOtherThreadsOpenAndCloseDescriptors() async throws {
        let stop = Atomic<Bool>(false)
        let churners = (0..<2).map { _ in
            let done = DispatchSemaphore(value: 0)
            Thread {
                while !stop.load(ordering: .relaxed) {
                    let fds = (0..<16).map { _ in open("/dev/null", O_RDONLY) }
                    for fd in fds where fd >= 0 { close(fd) }
                }
                done.signal()
            }.start()
            return done
        }
        defer {
            stop.store(true, ordering: .relaxed)
            for done in churners { done.wait() }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for n in 0..<10 {
                        let listing = try await ChildProcess.run("/bin/ls", ["/proc/self/fd"])
                        #expect(listing.stdoutText == "0\n1\n2\n3\n", "\(listing.stderrText)")
                        let echo = try await ChildProcess.run("/bin/sh", ["-c", "echo \"$0\"", "\(task)-\(n)"])
                        #expect(echo.stdoutText == "\(task)-\(n)\n" && echo.termination == .exited(0))
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func aChildThatCannotStartIsAnError() async throws {
        let missing = #expect(throws: ChildProcess.Failure.self) { try ChildProcess("/nonexistent/tool", ["x"]) }
        #expect(missing?.description == "cannot start /nonexistent/tool x: No such file or directory")
        let nowhere = #expect(throws: ChildProcess.Failure.self) {
            try ChildProcess("/bin/true", workingDirectory: "/nonexistent/folder")
        }
        #expect(nowhere?.description == "cannot start /bin/true in /nonexistent/folder: No such file or directory")
        let noInput = #expect(throws: ChildProcess.Failure.self) {
            try ChildProcess("/bin/cat", stdin: .file("/nonexistent/input"))
        }
        #expect(
            noInput?.description
                == "cannot start /bin/cat: standard input /nonexistent/input: No such file or directory")
    }

    /// No test starts a child through Foundation's `Process` again: its `run()` reads
    /// /proc/self/fd racily and crashed whole test runs on this toolchain.
    @Test func noTestUsesFoundationsProcess() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        var offenders: [String] = []
        for folder in ["Tests", "Sources/AssetCatalogTestSupport", "Sources/TestScratch"] {
            let base = root.appending(path: folder)
            let files = FileManager.default.enumerator(atPath: base.path)?.compactMap { $0 as? String } ?? []
            for file in files where file.hasSuffix(".swift") {
                let text = try String(contentsOf: base.appending(path: file), encoding: .utf8)
                let uses = text.split(separator: "\n").filter { line in
                    line.contains("Process") && !line.trimmingCharacters(in: .whitespaces).hasPrefix("//")
                        && line.contains(/\bProcess\s*\(\)|\bProcess\.run\(|:\s*Process\b|\[Process\]/)
                }
                offenders += uses.map { "\(folder)/\(file): \($0.trimmingCharacters(in: .whitespaces))" }
            }
        }
        #expect(offenders == [], "use TestScratch's ChildProcess")
    }
}
