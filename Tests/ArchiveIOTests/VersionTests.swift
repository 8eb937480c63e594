import ArchiveIO
import Testing

@Test func linksLibarchive() {
    #expect(libarchiveVersion.hasPrefix("libarchive 3."))
}
