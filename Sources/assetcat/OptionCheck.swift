import ArgumentParser
import AssetCatalog
import Foundation

/// Refuses an option no command knows before ArgumentParser sees it. ArgumentParser reads
/// `-dash.txt` as the short flags `-d -a -s -h …` and, finding `-h`, prints help and exits 0;
/// and when a command's required argument is missing, it reports that instead of the unknown
/// option that took its place (`rm --foo`). A name that begins with `-` goes after `--`.
enum OptionCheck {
    /// One command's option names, as they are typed (`--catalog`, `-h`), and its subcommands.
    struct Command: Equatable {
        var names: Set<String> = []
        /// The names of the options that take a value (`--tag T`), not flags.
        var valued: Set<String> = []
        var subcommands: [String: Command] = [:]
        var defaultSubcommand: String?
    }

    /// ArgumentParser's own options of the root command, which its description of the
    /// commands does not list: shell completions (`--generate-completion-script`, and
    /// `---completion`, which the scripts call back), and `--experimental-dump-help`, which
    /// the generate-manual plugin reads to write the man page.
    static let builtInRootOptions: Set<String> = [
        "--generate-completion-script", "---completion", "--experimental-dump-help",
    ]

    /// The message for the first argument before `--` that looks like an option but is none
    /// of the chosen command's, or `nil`.
    static func unknownOption(in arguments: [String], root: Command) -> String? {
        var command = root
        var path: [String] = []
        var names = root.names.union(builtInRootOptions)
        for (index, argument) in arguments.enumerated() {
            if argument == "--" { break }
            if argument.hasPrefix("-") && argument != "-" {
                let name = argument.hasPrefix("--") ? String(argument.prefix { $0 != "=" }) : argument
                if !names.contains(name) && !isGroupOfFlags(name, of: names, valued: command.valued) {
                    let quoted = DisplayText.quoted(argument)
                    // An option of the command named after it (`assetcat -q ls`).
                    let later = laterCommand(arguments[(index + 1)...], from: command)
                    if !later.path.isEmpty, later.names.contains(name) {
                        let named = (["assetcat"] + path + later.path).joined(separator: " ")
                        return
                            "'\(quoted)' is an option of '\(named)': it goes after the command's name: \(named) \(quoted)"
                    }
                    let example = (["assetcat"] + path + ["--", quoted]).joined(separator: " ")
                    return "unknown option '\(quoted)'; a name that begins with '-' goes after '--': \(example)"
                }
            } else if let next = command.subcommands[argument] {
                command = next
                path.append(argument)
                names = next.names.union(next.defaultSubcommand.flatMap { next.subcommands[$0]?.names } ?? [])
            }
        }
        return nil
    }

    /// Whether `argument` is short flags typed together (`-rq` for `-r -q`), each one a flag
    /// `names` holds: ArgumentParser reads it so. `-dash.txt` is not (no `-d` flag).
    static func isGroupOfFlags(_ argument: String, of names: Set<String>, valued: Set<String>) -> Bool {
        guard argument.count > 2, argument.hasPrefix("-"), !argument.hasPrefix("--") else { return false }
        return argument.dropFirst().allSatisfy { letter in
            let flag = "-\(letter)"
            return names.contains(flag) && !valued.contains(flag)
        }
    }

    /// The subcommands `arguments` name below `command` (options skipped), and the option
    /// names of the last.
    static func laterCommand(
        _ arguments: ArraySlice<String>, from command: Command
    ) -> (path: [String], names: Set<String>) {
        var command = command
        var path: [String] = []
        for argument in arguments {
            if argument == "--" { break }
            guard let next = command.subcommands[argument] else { continue }
            command = next
            path.append(argument)
        }
        return (path, command.names.union(command.defaultSubcommand.flatMap { command.subcommands[$0]?.names } ?? []))
    }

    /// Whether an argument before `--` looks like an option (most do not: then nothing is checked).
    static func hasOptions(_ arguments: [String]) -> Bool {
        arguments.prefix { $0 != "--" }.contains { $0.hasPrefix("-") && $0 != "-" }
    }

    /// The commands of `tool` that `arguments` name, with their option names: the root's
    /// own options (`ownOptions`: `tool`'s configuration without its subcommands), and each
    /// subcommand the arguments name, with the commands below it. Describing every command
    /// took a fifth of a short command's run; the check needs only the ones typed.
    static func commands(
        of tool: any ParsableCommand.Type, ownOptions: any ParsableCommand.Type, naming arguments: [String]
    ) -> Command? {
        guard var root = commands(of: ownOptions) else { return nil }
        let named = Set(arguments.prefix { $0 != "--" })
        // Described alone, a subcommand is a root: it gets a `help` subcommand of its own, and
        // not the real root's `--version`, which every command below the root accepts.
        func belowTheRoot(_ command: inout Command) {
            command.names.formUnion(root.names.intersection(["--version"]))
            for name in command.subcommands.keys { belowTheRoot(&command.subcommands[name]!) }
        }
        for subcommand in tool.configuration.subcommands where named.contains(subcommand._commandName) {
            guard var described = commands(of: subcommand) else { return nil }
            described.subcommands["help"] = nil
            belowTheRoot(&described)
            root.subcommands[subcommand._commandName] = described
        }
        root.defaultSubcommand = tool.configuration.defaultSubcommand?._commandName
        return root
    }

    /// The commands of `tool` and their option names, from ArgumentParser's own description
    /// of them (what `--experimental-dump-help` prints); `nil` if it cannot be read.
    static func commands(of tool: any ParsableCommand.Type) -> Command? {
        guard let json = try? JSONSerialization.jsonObject(with: Data(tool._dumpHelp().utf8)) as? [String: Any],
            let root = json["command"] as? [String: Any]
        else { return nil }
        func command(_ info: [String: Any]) -> Command {
            var result = Command()
            for argument in info["arguments"] as? [[String: Any]] ?? [] {
                for name in argument["names"] as? [[String: Any]] ?? [] {
                    guard let kind = name["kind"] as? String, let text = name["name"] as? String else { continue }
                    let typed = (kind == "long" ? "--" : "-") + text
                    result.names.insert(typed)
                    if argument["kind"] as? String == "option" { result.valued.insert(typed) }
                }
            }
            for sub in info["subcommands"] as? [[String: Any]] ?? [] {
                if let name = sub["commandName"] as? String { result.subcommands[name] = command(sub) }
            }
            result.defaultSubcommand = info["defaultSubcommand"] as? String
            return result
        }
        return command(root)
    }
}
