import Foundation
import Persistence

/// One tag of one asset: the rows that ``AssetQuery``'s tags are answered from, in
/// O(matches + log n) — a unique index on (tag, asset) finds an asset by tag, and the index
/// the store gives every to-one relationship finds (and cascades) an asset's tags.
///
/// ``Asset/tags`` reads the asset's own `tagText` column, which the catalog keeps in step
/// with these rows: a listing reads its tags with the asset, never a query per asset. The
/// rows are written only by ``AssetRules/tagsChanged(asset:added:removed:)``, in the same
/// transaction as the change of `tagText` (an object's save, or rows inserted by an add or
/// an import); deleting an asset — an object, a batch delete, a cascade from its archive —
/// deletes its rows (`onDestinationDelete: .cascade`).
final class AssetTag: ManagedObject {
    @Attribute var tag = ""
    @ToOne(onDestinationDelete: .cascade) var asset: Asset?

    override class var compositeIndexes: [CompositeIndex] {
        [CompositeIndex(\AssetTag.tag, \AssetTag.asset, unique: true)]
    }

    /// The count of assets per tag that ``Catalog/stats()`` reads, kept by the store in every
    /// transaction that writes these rows.
    override class var tallies: [Tally] { [Tally(tagTally, by: \AssetTag.tag)] }

    /// The name of the count of assets per tag.
    static let tagTally = "tag"

    /// The assets with `tag`: in the store, through the rows; an asset with unsaved
    /// changes, through its own `tagText` (its rows are written when it saves).
    static func tagged(_ tag: String) -> FetchPredicate<Asset> {
        .related(AssetTag.self, via: \.asset, where: \.tag == tag, unsaved: .contains(\.tagText, "\n\(tag)\n"))
    }

    /// Drops the index of release 0.1.0 on `tagText`: no query uses it now (tags are matched
    /// through the rows), and every write paid for it.
    static let dropTagTextIndex = Migration("2026-11-drop-tagText-index") { db in
        try db.execute("DROP INDEX IF EXISTS \"Asset_tagText_index\"")
    }

    /// Fills the tag rows from the `tagText` of a catalog made before they existed (release
    /// 0.1.0), `pageSize` assets at a time: the memory it takes does not grow with the
    /// catalog. It runs in the transaction that extends the schema: a process killed
    /// during it leaves the catalog as it was, and the next open runs it again.
    ///
    /// Each store gets its own SQL (``MigrationDatabase/dialect``). On PostgreSQL the rows
    /// name their `"id"`s (after the highest one there), as a migration's rows must there.
    /// No PostgreSQL catalog of release 0.1.0 exists, but a store copied from one would
    /// run it.
    static func fromTagText(pageSize: Int64 = 10_000) -> Migration {
        Migration("2026-11-asset-tags-as-rows", phase: .afterSchema) { db in
            let last = try db.integer(#"SELECT MAX("id") FROM "Asset""#) ?? 0
            var start: Int64 = 0
            while start < last {
                switch db.dialect {
                case .sqlite:
                    try db.execute(
                        """
                        WITH RECURSIVE split(asset, rest, tag) AS (
                            SELECT id, substr(tagText, 2), NULL FROM Asset
                            WHERE id > \(start) AND id <= \(start + pageSize) AND tagText != char(10)
                            UNION ALL
                            SELECT asset, substr(rest, instr(rest, char(10)) + 1), substr(rest, 1, instr(rest, char(10)) - 1)
                            FROM split WHERE instr(rest, char(10)) > 0
                        )
                        INSERT OR IGNORE INTO AssetTag (tag, asset)
                        SELECT tag, asset FROM split WHERE tag IS NOT NULL AND tag != ''
                        """)
                case .postgresql:
                    // The tags are the parts of `tagText` after its first character, each one
                    // ended by a newline: every part of the split but the last.
                    try db.execute(
                        #"""
                        INSERT INTO "AssetTag" ("id", "tag", "asset")
                        SELECT (SELECT COALESCE(MAX("id"), 0) FROM "AssetTag") + row_number() OVER (ORDER BY asset, tag),
                            tag, asset
                        FROM (
                            SELECT DISTINCT a."id" AS asset, parts.p[i] AS tag
                            FROM "Asset" a
                            CROSS JOIN LATERAL (SELECT string_to_array(substr(a."tagText", 2), E'\n') AS p) AS parts
                            CROSS JOIN LATERAL generate_series(1, cardinality(parts.p) - 1) AS i
                            WHERE a."id" > \#(start) AND a."id" <= \#(start + pageSize)
                        ) AS tags
                        WHERE tag <> ''
                        ON CONFLICT DO NOTHING
                        """#)
                }
                start += pageSize
            }
        }
    }
}
