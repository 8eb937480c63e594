extension String {
    /// Whether the UTF-8 bytes begin with `prefix`'s. Paths are compared as bytes, everywhere
    /// in a read: as Characters, `data/` followed by a combining mark would not begin with
    /// `data/`, and one file could count as payload in one place and as a tag file in another.
    func hasBytePrefix(_ prefix: String) -> Bool { utf8.starts(with: prefix.utf8) }

    /// The string after `prefix`, which must begin it (``hasBytePrefix(_:)``) and end with an
    /// ASCII byte.
    func droppingBytePrefix(_ prefix: String) -> String { String(Substring(utf8.dropFirst(prefix.utf8.count))) }
}
