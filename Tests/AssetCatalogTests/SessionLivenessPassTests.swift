import AssetCatalogTestSupport
import Foundation
import Locking
import Persistence
import PersistencePostgreSQL
import TestScratch
import Testing

@testable import AssetCatalog

/// ``SessionLiveness/pass(_:)``: a sweep of many journals asks the store for its sessions
/// once (and once more per owner its look did not list), not once per journal, and tells
/// the same owners alive. Run through Scripts/with-postgres.sh.
@Suite struct SessionLivenessPassTests {
    @Test func onePassOverManyRecordsAsksTheStoreOncePerUnlistedOwner() throws {
        let url = try PostgreSQLTestServer.newSchema().url!
        let mine = try PersistentContainer.open(url: url, schema: try Schema(Catalog.entities))
        defer { mine.close() }
        let other = try PersistentContainer.open(url: url, schema: try Schema(Catalog.entities))
        defer { other.close() }
        let session = try #require(try mine.openSession(label: "h1"))
        let live = try #require(try other.openSession(label: "h2"))
        let root = ScratchDirectory.path("liveness-pass")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let content = try ContentStore(root: root.path, session: SessionLiveness.owner(of: session.id))
        defer { content.release() }
        let liveness = SessionLiveness(content: content, session: session, host: "h1", container: mine)
        // Owners as a million journals would name them: a live session, and sessions whose
        // rows are gone (reaped), each many times over.
        let owners = (0..<300).map { i in
            switch i % 3 {
            case 0: SessionLiveness.owner(of: live.id)
            case 1: "s999999001"
            default: "s999999002"
            }
        }
        let told = liveness.pass { owners.map { liveness.isAlive($0) } }
        #expect(told == owners.map { $0 == SessionLiveness.owner(of: live.id) })
        // One look at the first question, one more for each of the two unlisted owners.
        #expect(liveness.sessionQueries.withLock { $0 } == 3)
        // Outside a pass, each question asks (an owner seen alive may since have died).
        #expect(liveness.isAlive(SessionLiveness.owner(of: live.id)))
        #expect(liveness.sessionQueries.withLock { $0 } == 4)
        // A session that ends after the pass's look: the next pass sees it dead.
        live.end()
        #expect(liveness.pass { liveness.isAlive(SessionLiveness.owner(of: live.id)) } == false)
    }
}
