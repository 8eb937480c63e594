import Foundation
import GRDB

/// RFC 8493 §2.2.3: `fetch.txt` lists payload files to fetch from elsewhere, each of them in
/// every payload manifest. This reader does not fetch: a bag that lacks them is valid but
/// incomplete.
extension BagValidation {
    /// Parses the root's `fetch.txt` from its lines in the index, into the index by key (for
    /// the completeness check to tell a file to fetch from one that is missing), up to the
    /// first line that cannot be read.
    func readFetchList() throws {
        guard let failure = scan.fetchLists[root + "fetch.txt"] else { return }
        if let failure { problems.append(failure) }
        var after = 0
        while true {
            let page = try Row.fetchAll(
                mdb.cachedStatement(
                    sql: "SELECT number, line FROM fetchline WHERE file = ? AND number > ? ORDER BY number LIMIT 1000"),
                arguments: [root + "fetch.txt", after])
            for row in page {
                let number: Int = row[0]
                let line: Data = row[1]
                do {
                    guard let path = try Scan.parseStreamedFetchLine(line, number: number, version: version)
                    else { continue }
                    try mdb.run(
                        "INSERT OR IGNORE INTO fetch(key, path) VALUES (?, ?)",
                        [.text(BagIndex.key(root + path)), .text(path)])
                    fetchListed += 1
                } catch let error as BagError {
                    problems.append(error)  // the first line that cannot be read; the rest is moot
                    return
                }
            }
            guard page.count == 1000, let last = page.last else { return }
            after = last[0]
        }
    }

    /// Reports the files `fetch.txt` lists that the first payload manifest does not, and
    /// warns that the bag lists files to fetch.
    func checkFetchList() throws {
        guard fetchListed > 0 else { return }
        if let (algorithm, id) = payloadManifests.min(by: { $0.key < $1.key }) {
            for path in try String.fetchAll(
                mdb,
                sql: "SELECT path FROM fetch WHERE key NOT IN (SELECT key FROM manifest WHERE manifest = ?) "
                    + "ORDER BY key LIMIT ?",
                arguments: [id, max(1, options.maxProblems)])
            {
                problems.append(
                    BagError(
                        .malformedTagFile, file: "fetch.txt",
                        "lists \(path), which manifest-\(algorithm.rawValue).txt does not list"))
            }
        }
        let files = fetchListed == 1 ? "1 file" : "\(fetchListed) files"
        warnings.append(
            BagError(
                .fetchUnsupported, file: "fetch.txt",
                filesToFetch == 0
                    ? "lists \(files) to fetch from elsewhere, all of them in the bag already"
                    : "lists \(files) to fetch from elsewhere, \(filesToFetch) of them not in the bag: it is "
                        + "incomplete until they are fetched (fetching is not supported)"))
    }
}
