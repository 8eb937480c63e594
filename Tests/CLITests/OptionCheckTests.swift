import ArgumentParser
import Testing

@testable import assetcat

/// The unknown-option check reads only the commands a command line names: what it knows of
/// each is what ArgumentParser's description of the whole tool says of it.
@Suite struct OptionCheckTests {
    @Test func theCommandsNamedAreDescribedAsTheWholeToolDescribesThem() throws {
        let whole = try #require(OptionCheck.commands(of: AssetCat.self))
        let none = try #require(
            OptionCheck.commands(of: AssetCat.self, ownOptions: RootOptions.self, naming: ["--version"]))
        #expect(none.names == whole.names)
        #expect(none.valued == whole.valued)
        #expect(none.defaultSubcommand == whole.defaultSubcommand)
        #expect(none.subcommands == ["help": try #require(whole.subcommands["help"])])
        #expect(whole.subcommands.count == AssetCat.configuration.subcommands.count + 1)
        for (name, command) in whole.subcommands {
            let named = try #require(
                OptionCheck.commands(of: AssetCat.self, ownOptions: RootOptions.self, naming: [name, "--catalog"]))
            if name == "help" { continue }
            #expect(named.subcommands[name] == command, "\(name)")
        }
        // A name after `--` is an argument, not a command.
        let after = try #require(
            OptionCheck.commands(of: AssetCat.self, ownOptions: RootOptions.self, naming: ["--", "ls"]))
        #expect(after.subcommands.keys.sorted() == ["help"])
    }
}
