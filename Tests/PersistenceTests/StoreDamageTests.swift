import Foundation
import Persistence
import TestScratch
import Testing

/// Rows of about 2 KB each, no index: the pages of a store of them are the table's.
final class Bulk: ManagedObject {
    @Attribute var n = 0
    @Attribute var payload = ""
}

/// An open reads the store's header and schema, not its every page: damage in the middle
/// of a large store is found by the read that reaches it, and by ``PersistentContainer/checkIntegrity()``.
@Suite struct StoreDamageTests {
    /// A closed store of ``Bulk`` rows larger than the size an open checks in full.
    func largeStore() throws -> (directory: URL, url: URL) {
        let directory = try ScratchDirectory.make("persistence-damage")
        let url = directory.appending(path: "store.sqlite")
        let container = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        let context = container.newBackgroundContext()
        let rows = 2 * PersistentContainer.Options.smallStoreCheckLimit / 2_000
        let payload = String(repeating: "p", count: 1_900)
        try context.insertRows(Bulk.self, count: rows) { i, row in
            row[\.n] = i
            row[\.payload] = payload
        }
        try context.save()
        container.close()
        return (directory, url)
    }

    /// Overwrites the page in the middle of the file (never the header) with 0xFF; returns
    /// its number and the page size.
    @discardableResult
    func damageMiddlePage(of url: URL) throws -> (page: Int, size: Int) {
        let handle = try FileHandle(forUpdating: url)
        defer { try? handle.close() }
        let header = try #require(try handle.read(upToCount: 100))
        let pageSize = Int(header[16]) << 8 | Int(header[17])
        let pages = Int(try handle.seekToEnd()) / pageSize
        let page = pages / 2  // 1-based: the header is on page 1
        try handle.seek(toOffset: UInt64((page - 1) * pageSize))
        try handle.write(contentsOf: Data(repeating: 0xFF, count: pageSize))
        return (page, pageSize)
    }

    @Test func anOpenDoesNotReadEveryPageAndTheReadThatReachesTheDamageSaysWhatToDo() throws {
        let (directory, url) = try largeStore()
        let (page, pageSize) = try damageMiddlePage(of: url)

        let container = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        defer { container.close() }
        #expect(!container.storeWasResetOnLoad)
        #expect(!FileManager.default.fileExists(atPath: directory.appending(path: "quarantine").path))
        let context = container.newBackgroundContext()
        // A row on a sound page reads.
        let first = ManagedObjectID(entityName: Bulk.entityName, rowID: 1)
        #expect(try context.existingObject(with: first, as: Bulk.self).n == 0)
        // A read that reaches the damaged page fails, naming the file; nothing is moved.
        let error = #expect(throws: PersistenceError.self) { try context.fetch(FetchRequest<Bulk>()) }
        #expect(error?.code == .storeDamaged)
        #expect(
            error?.message
                == "The store \(url.path) is damaged (database disk image is malformed); nothing was changed")
        // So does a write that reaches it, and it writes nothing.
        context.reset()
        let write = #expect(throws: PersistenceError.self) { try context.batchDelete(FetchRequest<Bulk>()) }
        #expect(write?.code == .storeDamaged)
        // The full check finds it.
        let findings = try container.checkIntegrity()
        #expect(!findings.isEmpty)
        #expect(
            findings.contains("table \"Bulk\" cannot be read whole (database disk image is malformed)"), "\(findings)")
        container.close()
        // Never moved, never deleted, and the damage is left for a restore to replace.
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64((page - 1) * pageSize))
        #expect(try handle.read(upToCount: pageSize) == Data(repeating: 0xFF, count: pageSize))
        #expect(!FileManager.default.fileExists(atPath: directory.appending(path: "quarantine").path))
    }

    @Test func theFullCheckOfASoundStoreFindsNothing() throws {
        let (_, url) = try largeStore()
        let container = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        defer { container.close() }
        #expect(try container.checkIntegrity() == [])
        var options = PersistentContainer.Options()
        options.readOnly = true
        let reader = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]), options: options)
        defer { reader.close() }
        #expect(try reader.checkIntegrity() == [])
    }

    /// What a kill leaves: the store and a `-wal` holding commits, and no process with it open.
    /// The open after it checks every page, and quarantines a damaged store as before.
    @Test func anOpenAfterAnUncleanShutdownChecksEveryPage() throws {
        let (directory, url) = try largeStore()
        let container = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        let context = container.newBackgroundContext()
        Bulk(context: context).n = -1  // a commit in the -wal, on the last pages
        try context.save()
        // The files as they are while it is open: a copy of them is what a kill leaves.
        let left = directory.appending(path: "left")
        try FileManager.default.createDirectory(at: left, withIntermediateDirectories: true)
        let copy = left.appending(path: "store.sqlite")
        try FileManager.default.copyItem(at: url, to: copy)
        try FileManager.default.copyItem(
            at: URL(fileURLWithPath: url.path + "-wal"), to: URL(fileURLWithPath: copy.path + "-wal"))
        container.close()
        #expect(try FileManager.default.attributesOfItem(atPath: copy.path + "-wal")[.size] as? Int ?? 0 > 0)
        try damageMiddlePage(of: copy)

        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: copy, schema: try Schema([Bulk.self]))
        }
        #expect(error?.code == .storeUnreadable)
        #expect(
            error?.message.hasPrefix("The store \(copy.path) is unusable (") == true, "\(String(describing: error))")
        #expect(error?.quarantine != nil)
        #expect(!FileManager.default.fileExists(atPath: copy.path))
    }

    /// A clean close leaves no commit in the `-wal`, whichever connection closes last: the
    /// next open is not taken for one after a crash, and does not check every page.
    @Test func aCleanCloseLeavesNoCommitInTheWal() throws {
        let (_, url) = try largeStore()
        let container = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        let context = container.newBackgroundContext()
        Bulk(context: context).n = -1
        try context.save()
        #expect(try context.count(for: FetchRequest<Bulk>(predicate: \.n == -1)) == 1)  // a reader connection
        container.close()
        let wal = (try? FileManager.default.attributesOfItem(atPath: url.path + "-wal"))?[.size] as? Int
        #expect(wal ?? 0 == 0)
        try damageMiddlePage(of: url)
        let again = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        again.close()
        #expect(!again.storeWasResetOnLoad)
    }

    /// Another process with the store open (python3's sqlite3): the `-wal` it keeps is no
    /// sign of a crash, and an open does not check every page. Once it is killed with
    /// commits in the `-wal`, the next open does, and quarantines the damaged store.
    @Test func aWalAnotherProcessKeepsIsACrashOnlyOnceThatProcessIsKilled() throws {
        let (_, url) = try largeStore()
        try damageMiddlePage(of: url)
        // It commits a row each time it is sent SIGUSR1, and says so.
        let holder = try ChildProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                """
                import signal, sqlite3, sys
                c = sqlite3.connect(sys.argv[1])
                def commit(*_):
                    c.execute('INSERT INTO "Bulk" ("n", "payload") VALUES (-1, \\'\\')')
                    c.commit()
                    print("committed", flush=True)
                signal.signal(signal.SIGUSR1, commit)
                print("ready", flush=True)
                while True:
                    signal.pause()
                """,
                url.path,
            ])
        defer { holder.signal(SIGKILL) }
        func said(_ text: String) -> Bool {
            holder.stdout(within: 60) { String(decoding: $0, as: UTF8.self).hasSuffix(text) } != nil
        }
        #expect(said("ready\n"))
        holder.signal(SIGUSR1)
        #expect(said("ready\ncommitted\n"))
        let open = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        #expect(!open.storeWasResetOnLoad)
        open.close()

        holder.signal(SIGUSR1)  // frames in the -wal again, then the process dies without closing
        #expect(said("ready\ncommitted\ncommitted\n"))
        #expect(try FileManager.default.attributesOfItem(atPath: url.path + "-wal")[.size] as? Int ?? 0 > 0)
        holder.signal(SIGKILL)
        #expect(try holder.wait(within: 60).termination == .signalled(SIGKILL))
        let error = #expect(throws: PersistenceError.self) {
            try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        }
        #expect(error?.code == .storeUnreadable)
        #expect(error?.quarantine != nil)
    }

    /// A process killed after it only read (`ls | head`) leaves no sign of a crash, though
    /// its open wrote to the `-wal` (GRDB makes sure of a non-empty one): the open copied
    /// that into the file, so the next open does not check every page. One killed after a
    /// commit still does. The files a killed process leaves are copies, here, of those of
    /// a store open in this process (which no process holds open).
    @Test(arguments: [false, true]) func aProcessKilledAfterItReadLeavesNoSignOfACrash(committed: Bool) throws {
        let (directory, url) = try largeStore()
        let container = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        defer { container.close() }
        let context = container.newBackgroundContext()
        #expect(try context.count(for: FetchRequest<Bulk>()) > 0)
        if committed {
            Bulk(context: context).n = -1
            try context.save()
        }
        let copy = directory.appending(path: "copy.sqlite")
        for suffix in ["", "-wal", "-shm"] {
            try FileManager.default.copyItem(atPath: url.path + suffix, toPath: copy.path + suffix)
        }
        #expect(try FileManager.default.attributesOfItem(atPath: copy.path + "-wal")[.size] as? Int ?? 0 > 0)
        try damageMiddlePage(of: copy)
        if committed {
            let error = #expect(throws: PersistenceError.self) {
                try PersistentContainer(storeURL: copy, schema: try Schema([Bulk.self]))
            }
            #expect(error?.code == .storeUnreadable)
        } else {
            let again = try PersistentContainer(storeURL: copy, schema: try Schema([Bulk.self]))
            again.close()
            #expect(!again.storeWasResetOnLoad)
        }
    }

    /// A `-wal` that a store open in this process keeps is no sign of an unclean shutdown:
    /// a second open does not check every page.
    @Test func aWalThatAnOpenStoreKeepsIsNotAnUncleanShutdown() throws {
        let (_, url) = try largeStore()
        try damageMiddlePage(of: url)
        let first = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        defer { first.close() }
        let context = first.newBackgroundContext()
        Bulk(context: context).n = -1
        try context.save()
        #expect(try FileManager.default.attributesOfItem(atPath: url.path + "-wal")[.size] as? Int ?? 0 > 0)
        let second = try PersistentContainer(storeURL: url, schema: try Schema([Bulk.self]))
        second.close()
        #expect(!second.storeWasResetOnLoad)
    }
}
