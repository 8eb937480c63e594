import ArchiveIO
import Persistence

/// The version of AssetCatalog, and of the SQLite and libarchive libraries it runs on.
///
/// The library versions are those of the libraries loaded at run time, which may differ
/// from the headers the package was built with: report them with a bug.
public enum CatalogVersion {
    /// The version of AssetCatalog and of `assetcat`, such as `"0.1.0"`.
    public static let number = "0.1.0"

    /// The version of the SQLite library the catalog's store runs on, such as `"3.40.1"`.
    public static var sqlite: String { PersistentContainer.sqliteVersion }

    /// The version of the libarchive library archives and bundles are read and written with,
    /// such as `"3.6.2"`.
    public static var libarchive: String {
        let text = ArchiveIO.libarchiveVersion
        let prefix = "libarchive "
        return text.hasPrefix(prefix) ? String(text.dropFirst(prefix.count)) : text
    }

    /// The three versions, one a line, as `assetcat --version` prints them:
    ///
    /// ```
    /// assetcat 0.1.0
    /// SQLite 3.40.1
    /// libarchive 3.6.2
    /// ```
    public static var summary: String {
        "assetcat \(number)\nSQLite \(sqlite)\nlibarchive \(libarchive)"
    }
}
