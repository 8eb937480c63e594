// A second process for the persistence tests: writes to a store while the
// test process (or another instance of this tool) writes to it too.
//
//   persistence-fixture insert STORE WRITER COUNT
//       inserts COUNT Tally rows, one save (one transaction) each
//   persistence-fixture session URL LABEL
//       opens the store at URL (PostgreSQL too), opens a session labelled LABEL, prints
//       "session ID" and waits to be killed
import Foundation
import Persistence
import PersistencePostgreSQL

final class Tally: ManagedObject {
    @Attribute var writer = ""
    @Attribute var n = 0
}

let arguments = CommandLine.arguments
if arguments.count == 4, arguments[1] == "session" {
    guard let url = URL(string: arguments[2]) else {
        FileHandle.standardError.write(Data("persistence-fixture: \(arguments[2]) is not a URL\n".utf8))
        exit(2)
    }
    do {
        let container = try PersistentContainer.open(url: url, schema: try Schema([Tally.self]))
        guard let session = try container.openSession(label: arguments[3]) else {
            FileHandle.standardError.write(Data("persistence-fixture: the store has no sessions\n".utf8))
            exit(1)
        }
        FileHandle.standardOutput.write(Data("session \(session.id)\n".utf8))
        while true { pause() }  // until the test kills it
    } catch {
        FileHandle.standardError.write(Data("persistence-fixture: \(error)\n".utf8))
        exit(1)
    }
}
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
