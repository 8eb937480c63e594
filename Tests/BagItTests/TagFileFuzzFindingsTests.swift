import Testing

@testable import BagIt

/// Tag-file lines that the fuzz target `fuzz-bag-tagfiles` (Fuzz/) flags, fed to the parser.
struct TagFileFuzzFindingsTests {
    static func fields(_ text: String) throws -> [(label: String, value: String)] {
        try TagFile.parseFields(Array(text.utf8), file: "bag-info.txt")
    }

    /// Flagged by fuzz-bag-tagfiles' invariant (a label holds no colon): a colon followed by a
    /// combining mark is one Character, which a search for ":" passed over, so the label ran
    /// on to a later colon. The label ends at the first colon byte, as bagit-python splits it.
    @Test func aLabelEndsAtItsFirstColonWhatEverFollowsIt() throws {
        let parsed = try Self.fields("A:\u{301}b: c\nD :\u{301}\n")
        #expect(parsed.map { Array($0.label.utf8) } == [Array("A".utf8), Array("D".utf8)])
        #expect(parsed.map { Array($0.value.utf8) } == [Array("\u{301}b: c".utf8), Array("\u{301}".utf8)])
    }

    /// By the same token: a line that begins with a space or tab continues the field before
    /// it, whatever follows the space.
    @Test func aLineThatBeginsWithASpaceContinuesWhatEverFollowsIt() throws {
        let parsed = try Self.fields("A: 1\n \u{301}x\n")
        #expect(parsed.count == 1)
        #expect(parsed.first.map { Array($0.value.utf8) } == Array("1 \u{301}x".utf8))
    }

    /// bagit.txt: a space before the colon is refused when a combining mark follows the colon too.
    @Test func aSpaceBeforeTheColonOfTheDeclarationIsSeenWhatEverFollows() {
        let text = Array("BagIt-Version :\u{301}1.0\nTag-File-Character-Encoding: UTF-8\n".utf8)
        #expect(throws: BagError.self) { try TagFile.parseDeclaration(text) }
        do {
            _ = try TagFile.parseDeclaration(text)
        } catch {
            #expect(
                "\(error)"
                    == "bagit.txt: line 1 has a space before its colon; bagit.txt must hold 'BagIt-Version: M.N' and "
                    + "'Tag-File-Character-Encoding: ENCODING' exactly")
        }
    }
}
