@_spi(Testing) import AssetCatalog
import Foundation

extension CatalogTesting {
    /// What a command's catalog is opened with: in a debug build, the test switches of the
    /// environment (``TestSwitches``), with which the crash tests and `make demo` make a
    /// command die, pause or slow down at a fault point; in a release build, nothing: it
    /// reads no such switch.
    static var ofCommand: CatalogTesting {
        #if DEBUG
            TestSwitches.testing
        #else
            CatalogTesting()
        #endif
    }
}

extension Catalog.OpenOptions {
    /// These options with a command's test instrumentation (``CatalogTesting/ofCommand``).
    func withTestSwitches() -> Self {
        var options = self
        options.testing = .ofCommand
        return options
    }
}

#if DEBUG
    /// The test switches a debug `assetcat` reads from its environment.
    enum TestSwitches {
        /// One for the whole process, read once: a command that opens its catalog twice
        /// counts the reaches of a crash point across both (`ASSETCAT_FAULT_AT`).
        ///
        /// - `ASSETCAT_FAULT=name` (or several, `name,name`): the fault points chosen
        ///   (``FaultPoints``): crash points, where the process dies (`_exit(86)`), and the
        ///   others (`slow-jobs`, `skip-content-lock` …).
        /// - `ASSETCAT_FAULT_AT=n`: a crash point makes the process die the n-th time it is
        ///   reached (the first time by default).
        /// - `ASSETCAT_FAULT_PAUSE=name` and `ASSETCAT_FAULT_PAUSE_FILE=path`: the process stops
        ///   at that point: it creates `path.reached`, then waits until `path` exists. With
        ///   several points (`name,name`), each has files of its own: `path.name.reached` and
        ///   `path.name`.
        static let testing: CatalogTesting = {
            let environment = ProcessInfo.processInfo.environment
            let names = Set((environment["ASSETCAT_FAULT"] ?? "").split(separator: ",").map(String.init))
            let reachingAt = environment["ASSETCAT_FAULT_AT"].flatMap { Int($0) } ?? 1
            var pauses: [String: String] = [:]
            if let points = environment["ASSETCAT_FAULT_PAUSE"], let file = environment["ASSETCAT_FAULT_PAUSE_FILE"] {
                let names = points.split(separator: ",").map(String.init)
                pauses = Dictionary(names.map { ($0, names.count == 1 ? file : file + "." + $0) }) { first, _ in first }
            }
            return CatalogTesting(faults: FaultPoints(names: names, reachingAt: reachingAt, pauses: pauses))
        }()
    }
#endif
