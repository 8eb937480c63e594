import CArchive

/// The version of the libarchive library this module is linked against.
public var libarchiveVersion: String { String(cString: archive_version_string()) }
