import ArgumentParser
import Testing

@testable import assetcat

/// Every command names itself. ArgumentParser otherwise makes each name from its type with
/// `String(describing:)`, for every command of the tree at every start: three look-ups a type
/// in the runtime's table of protocol conformances, each a scan of all 10,000 of the static
/// binary's, about 1.2 ms of every command's start.
@Suite struct CommandNamesTests {
    func tree(_ command: any ParsableCommand.Type) -> [any ParsableCommand.Type] {
        [command] + command.configuration.subcommands.flatMap(tree)
    }

    @Test func everyCommandOfTheToolNamesItself() {
        let commands = tree(AssetCat.self)
        #expect(commands.count > 20)
        for command in commands {
            #expect(command.configuration.commandName != nil, "\(command)")
        }
    }
}
