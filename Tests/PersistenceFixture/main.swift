// A second process for the persistence tests: writes to a store while the
// test process (or another instance of this tool) writes to it too.
//
//   persistence-fixture insert STORE WRITER COUNT
//       inserts COUNT Tally rows, one save (one transaction) each
import Foundation
import Persistence

final class Tally: ManagedObject {
    @Attribute var writer = ""
    @Attribute var n = 0
}

let arguments = CommandLine.arguments
guard arguments.count == 5, arguments[1] == "insert", let count = Int(arguments[4]) else {
    FileHandle.standardError.write(Data("usage: persistence-fixture insert STORE WRITER COUNT\n".utf8))
    exit(2)
}
do {
    let container = try PersistentContainer(
        storeURL: URL(fileURLWithPath: arguments[2]), schema: try Schema([Tally.self]))
    let context = container.newBackgroundContext()
    for n in 0..<count {
        let tally = Tally(context: context)
        tally.writer = arguments[3]
        tally.n = n
        try context.save()
    }
    container.close()
    print("inserted \(count)")
} catch {
    FileHandle.standardError.write(Data("persistence-fixture: \(error)\n".utf8))
    exit(1)
}
