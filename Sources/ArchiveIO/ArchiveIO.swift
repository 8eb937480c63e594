import CArchive

/// The version of the libarchive library this module is linked against, such as
/// `"libarchive 3.6.2"`.
public var libarchiveVersion: String { String(cString: archive_version_string()) }
