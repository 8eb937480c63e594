import Foundation
import Persistence
import TestScratch
import Testing

@Test func twoProcessesWritingTheSameStoreLoseNothing() async throws {
    let store = try TestStore()
    let executable = fixtureExecutable()
    try #require(FileManager.default.isExecutableFile(atPath: executable.path), "missing \(executable.path)")
    let count = 150
    #expect(try store.container.storeChangedExternally() == false)  // sets the baseline
    var processes: [ChildProcess] = []
    for writer in ["left", "right"] {
        processes.append(
            try ChildProcess(
                executable.path, ["insert", store.storeURL.path, writer, String(count)], stdout: .inherit,
                stderr: .inherit))
    }
    // This process writes too, while the two others do.
    let context = store.context()
    for n in 0..<count {
        let tally = Tally(context: context)
        tally.writer = "test"
        tally.n = n
        try context.save()
    }
    for process in processes {
        #expect(try process.wait().status == 0)
    }
    let reader = store.context("reader")
    for writer in ["left", "right", "test"] {
        let rows = try reader.fetch(FetchRequest<Tally>(predicate: \.writer == writer, sortBy: [.init(\.n)]))
        #expect(rows.map(\.n) == Array(0..<count), "rows of \(writer)")
    }
    let ids = try reader.fetchObjectIDs(FetchRequest<Tally>())
    #expect(Set(ids).count == 3 * count)  // no ID was handed out twice
    // The other processes' commits are seen; this process's own are not.
    #expect(try store.container.storeChangedExternally() == true)
    #expect(try store.container.storeChangedExternally() == false)
}
