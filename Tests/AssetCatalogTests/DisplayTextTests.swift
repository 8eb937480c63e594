import AssetCatalog
import Testing

/// Names and paths printed for a person: one line each, quoted as git
/// quotes paths when they hold what a terminal would act on.
@Suite struct DisplayTextTests {
    @Test func anOrdinaryNameIsUnchanged() {
        for name in ["a.txt", "with space.txt", "-dash.txt", "日本/é 100%.bin", "e\u{301}.txt", ""] {
            #expect(DisplayText.quoted(name) == name)
            #expect(DisplayText.escapingControls(name) == name)
        }
    }

    @Test func aNameWithControlCharactersIsQuotedWithCEscapes() {
        #expect(DisplayText.quoted("a\nb") == #""a\nb""#)
        #expect(DisplayText.quoted("tab\there\r") == #""tab\there\r""#)
        #expect(DisplayText.quoted("\u{1B}[31mred") == #""\033[31mred""#)
        #expect(DisplayText.quoted("nul\u{0}del\u{7F}") == #""nul\000del\177""#)
        #expect(DisplayText.quoted("bell\u{7}\u{8}\u{B}\u{C}") == #""bell\a\b\v\f""#)
        // A C1 control and a right-to-left override, by their UTF-8 bytes.
        #expect(DisplayText.quoted("c1\u{85}") == #""c1\302\205""#)
        #expect(DisplayText.quoted("evil\u{202E}txt.exe") == #""evil\342\200\256txt.exe""#)
    }

    @Test func quotesAndBackslashesAreQuotedSoThatAQuotedNameReadsBackUnambiguously() {
        #expect(DisplayText.quoted(#""a\nb""#) == #""\"a\\nb\"""#)
        #expect(DisplayText.quoted(#"back\slash"#) == #""back\\slash""#)
    }

    @Test func aMessageKeepsItsTextAndLosesItsLineBreaks() {
        #expect(DisplayText.escapingControls("No asset named a\nb") == #"No asset named a\nb"#)
        #expect(DisplayText.escapingControls(#"already "a\nb" quoted"#) == #"already "a\nb" quoted"#)
    }
}
