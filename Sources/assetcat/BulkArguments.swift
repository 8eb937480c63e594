import Synchronization

/// The asset references past the first of `rm ID...`, `tag ID...` and `verify ID...`, taken
/// out of the command line before ArgumentParser parses it.
///
/// ArgumentParser (1.8.2) parses the values of one array argument in O(n²): each value merges
/// the input positions of all the values before it into a set, twice (`ParsedValues.set`), and
/// every parsing strategy (`.remaining`, `.allUnrecognized`, `.captureForPassthrough`,
/// `.postTerminator`) goes through the same update — 10,000 IDs took seconds to parse. So
/// these commands are handed their first reference and their options as typed (help,
/// validation and error messages stay ArgumentParser's), and the command reads the rest here,
/// in their order. A command line of up to ``parsedWhole`` arguments is parsed whole.
enum BulkArguments {
    private static let taken = Mutex<[String]>([])

    /// The commands whose references past the first are taken: each takes asset references
    /// as its one array argument.
    static let commands: Set<String> = ["rm", "tag", "verify"]

    /// The most arguments a command line of ``commands`` may have to be parsed whole, its
    /// references left to ArgumentParser (a few do not cost what thousands do).
    static let parsedWhole = 64

    /// Whether `arguments` name one of ``commands``.
    static func names(_ arguments: [String]) -> Bool { commandIndex(in: arguments) != nil }

    /// Where `arguments` name one of ``commands``: the subcommand is the first argument that
    /// is not an option (the root takes no values).
    private static func commandIndex(in arguments: [String]) -> Int? {
        guard let command = arguments.firstIndex(where: { !$0.hasPrefix("-") }), commands.contains(arguments[command])
        else { return nil }
        return command
    }

    /// The references after the first taken from the command line of one of ``commands``
    /// (empty for another command).
    static func rest() -> [String] {
        taken.withLock { $0 }
    }

    /// `arguments` without the references past the first of one of ``commands``; those are
    /// kept for ``rest()``. `valued` are, by command name, the option names that take a value
    /// as the next argument (`--tag T`); `--name=value` is one argument. After `--`, every
    /// argument is a reference.
    static func take(from arguments: [String], valued: [String: Set<String>]) -> [String] {
        guard let command = commandIndex(in: arguments) else { return arguments }
        let valued = valued[arguments[command]] ?? []
        var kept = Array(arguments[...command])
        var rest: [String] = []
        var hasFirst = false
        var afterTerminator = false
        var i = command + 1
        while i < arguments.count {
            let argument = arguments[i]
            i += 1
            if !afterTerminator && argument == "--" {
                afterTerminator = true
                kept.append(argument)
            } else if !afterTerminator && argument.hasPrefix("-") && argument != "-" {
                kept.append(argument)
                if valued.contains(argument) && i < arguments.count {
                    kept.append(arguments[i])  // the option's value, whatever it looks like
                    i += 1
                }
            } else if !hasFirst {
                hasFirst = true
                kept.append(argument)
            } else {
                rest.append(argument)
            }
        }
        taken.withLock { $0 = rest }
        return kept
    }
}
