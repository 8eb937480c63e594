import AssetCatalog
import AssetCatalogTestSupport
import Foundation
import Testing

/// `ls --jsonl` and `ls --fields`: the record's own JSON form, one object per line or a
/// subset of its fields.
@Suite struct ListFormatCLITests {
    /// A catalog with a.txt (tagged demo) and photo.jpg (not a picture: its jobs are left
    /// queued, its thumbnail's would fail).
    func populated() async throws -> TestCatalog {
        let t = try TestCatalog()
        #expect(try await t.run(["init", t.root.path]).status == 0)
        let a = try t.file("a.txt", "hello\n")
        let photo = try t.file("photo.jpg", "JFIF")
        #expect(try await t.run(["add", a, "--tag", "demo"]).status == 0)
        #expect(try await t.run(["add", "--queue-only", photo]).status == 0)
        return t
    }

    @Test func jsonlPrintsOneCompactObjectPerLineWithTheFieldsOfJSON() async throws {
        let t = try await populated()
        let jsonl = try await t.run(["ls", "--jsonl"])
        #expect(jsonl.status == 0)
        let lines = jsonl.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 3 && lines[2].isEmpty)  // two objects, each ending its line
        let array = try #require(
            try JSONSerialization.jsonObject(with: Data(try await t.run(["ls", "--json"]).stdout.utf8)) as? [Any])
        let objects = try lines.dropLast().map { try JSONSerialization.jsonObject(with: Data($0.utf8)) }
        #expect((objects as NSArray).isEqual(to: array))
        #expect(lines[0].hasPrefix("{\"archive\":null,\"created\":\""))
        #expect(try await t.run(["ls", "--jsonl", "--tag", "nope"]).stdout == "")
    }

    @Test func fieldsChoosesFieldsForJSONAndJSONL() async throws {
        let t = try await populated()
        let digest = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        #expect(
            try await t.run(["ls", "--jsonl", "--fields", "name,id,tags,archive"]).stdout == """
                {"archive":null,"id":1,"name":"a.txt","tags":["demo"]}
                {"archive":null,"id":2,"name":"photo.jpg","tags":[]}

                """)
        #expect(
            try await t.run(["ls", "--json", "--fields", "id,sha256,size,storage", "--kind", "text"]).stdout == """
                [
                  {
                    "id" : 1,
                    "sha256" : "\(digest)",
                    "size" : 6,
                    "storage" : "managed"
                  }
                ]

                """)
        #expect(try await t.run(["ls", "--json", "--fields", "id", "--tag", "nope"]).stdout == "[]\n")
    }

    @Test func badFieldsAreRefusedWithTheValidNames() async throws {
        let t = try await populated()
        let valid = "id, name, kind, size, sha256, storage, path, archive, member, tags, created, modified, metadata"
        let unknown = try await t.run(["ls", "--jsonl", "--fields", "id,colour"])
        #expect(unknown.status == 64)
        #expect(unknown.stdout == "")
        #expect(unknown.stderr.hasPrefix("Error: Unknown field 'colour' in --fields; valid fields: \(valid)\n"))
        let empty = try await t.run(["ls", "--json", "--fields", "id,"])
        #expect(empty.stderr.hasPrefix("Error: Unknown field an empty name in --fields; valid fields: \(valid)\n"))
        let alone = try await t.run(["ls", "--fields", "id"])
        #expect(alone.status == 64)
        #expect(alone.stderr.hasPrefix("Error: --fields goes with --json or --jsonl.\n"))
        let both = try await t.run(["ls", "--json", "--jsonl"])
        #expect(both.stderr.hasPrefix("Error: Give --json or --jsonl, not both.\n"))
    }
}
