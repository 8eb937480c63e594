import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// The library's calls for programs: assets by typed ID, by exact name, and the file behind one.
@Suite struct AssetIDTests {
    @Test func anAssetIDIsABareNumberInJSONAndText() throws {
        let encoder = JSONEncoder()
        #expect(String(decoding: try encoder.encode(AssetID(7)), as: UTF8.self) == "7")
        #expect(String(decoding: try encoder.encode([AssetID(1), 42]), as: UTF8.self) == "[1,42]")
        #expect(try JSONDecoder().decode(AssetID.self, from: Data("7".utf8)) == AssetID(7))
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(AssetID.self, from: Data(#"{"rawValue":7}"#.utf8))
        }
        #expect("\(AssetID(7))" == "7" && AssetID(7).rawValue == 7)
        #expect(AssetID(2) < AssetID(10) && [AssetID(10), 2, 7].sorted() == [2, 7, 10])
    }

    @Test func recordsAndJobsEncodeTheirAssetIDsAsNumbers() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.addAndRunJobs([testAsset("archives/sample.tar")])
        let member = try #require(added.first { $0.storage == .member })
        let json = try #require(
            try JSONSerialization.jsonObject(with: JSONEncoder().encode(member)) as? [String: Any])
        #expect(json["id"] as? Int == Int(member.id.rawValue))
        #expect(json["archive"] as? Int == Int(added[0].id.rawValue))
        #expect(try JSONDecoder().decode(AssetRecord.self, from: JSONEncoder().encode(member)).id == member.id)
        let job = try #require(try catalog.jobs.list(asset: added[0].id).first)
        let jobJSON = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(job)) as? [String: Any])
        #expect(jobJSON["asset"] as? Int == Int(added[0].id.rawValue))
    }

    @Test func anIDNoAssetHasIsNotFoundWithWhatToDo() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        _ = try await catalog.add([try t.file("a.txt", "a")])
        let message = "No asset with ID 7; list assets with `assetcat ls`"
        let calls: [(String, () throws -> Void)] = [
            ("asset", { _ = try catalog.asset(7) }),
            ("remove", { _ = try catalog.remove(7) }),
            ("remove many", { _ = try catalog.remove([1, 7]) }),
            ("tag", { _ = try catalog.tag([1, 7], adding: ["x"]) }),
            ("setMetadata", { _ = try catalog.setMetadata(7, ["k": "v"]) }),
            ("read", { try catalog.read(7) { _ in } }),
            ("contentURL", { _ = try catalog.contentURL(of: 7) }),
        ]
        for (name, call) in calls {
            let error = try #require(throws: CatalogError.self, "\(name)") { try call() }
            #expect(error.code == .notFound && error.message == message, "\(name)")
        }
        // The refused calls changed nothing: asset 1 is still there, untagged.
        #expect(try catalog.assets().map(\.id) == [1] && catalog.asset(1).tags.isEmpty)
    }

    @Test func assetsNamedFindsEveryAssetWithExactlyThatName() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([
            try t.file("one/x.txt", "1"), try t.file("y.txt", "2"), try t.file("two/x.txt", "3"),
        ]).added
        #expect(try catalog.assets(named: "x.txt").map(\.id) == [added[0].id, added[2].id])
        #expect(try catalog.assets(named: "y.txt").map(\.name) == ["y.txt"])
        #expect(try catalog.assets(named: "X.TXT").isEmpty)
        #expect(try catalog.assets(named: "x").isEmpty)
        #expect(try catalog.assets(named: "3").isEmpty)  // a name, never an ID
    }

    @Test func removeTakesOneIDOrMany() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let added = try await catalog.add([
            try t.file("a.txt", "a"), try t.file("b.txt", "b"), try t.file("c.txt", "c"), try t.file("d.txt", "d"),
        ]).added
        let dry = try catalog.remove(added[0].id, dryRun: true)
        #expect(dry.wasDryRun && dry.removed.map(\.id) == [added[0].id] && t.hasObject(added[0].sha256))
        #expect(try catalog.assets().count == 4)

        let one = try catalog.remove(added[0].id)
        #expect(one.removed.map(\.name) == ["a.txt"] && !t.hasObject(added[0].sha256))

        let many = try catalog.remove(Set([added[3].id, added[1].id]))
        #expect(many.removed.map(\.name) == ["b.txt", "d.txt"] && many.filesRemoved.count == 2)
        #expect(try catalog.assets().map(\.name) == ["c.txt"])
    }

    @Test func contentURLIsTheManagedObjectOrTheReferencedFileAndNilForAMember() async throws {
        let t = try TestCatalog()
        let catalog = try t.create()
        defer { catalog.close() }
        let copied = try #require(try await catalog.add([try t.file("a.txt", "copied\n")]).added.first)
        let source = try t.file("ref.txt", "referenced\n")
        let referenced = try #require(
            try await catalog.add([source], options: .init(mode: .reference)).added.first)
        let archive = try await catalog.addAndRunJobs([testAsset("archives/sample.tar")])
        let member = try #require(archive.first { $0.storage == .member })

        let managedURL = try #require(try catalog.contentURL(of: copied.id))
        #expect(managedURL.path == t.objectPath(copied.sha256))
        #expect(try String(contentsOf: managedURL, encoding: .utf8) == "copied\n")
        #expect(try catalog.contentURL(of: referenced.id)?.path == source)
        #expect(try catalog.contentURL(of: member.id) == nil)
        let archiveURL = try #require(try catalog.contentURL(of: archive[0].id))
        #expect(archiveURL.path == t.objectPath(archive[0].sha256))
    }
}
