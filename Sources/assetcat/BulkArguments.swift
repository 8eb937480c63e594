import Synchronization

/// The asset references of `rm ID...` past the first, taken out of the command line before
/// ArgumentParser parses it.
///
/// ArgumentParser (1.8.2) parses the values of one array argument in O(n²): each value merges
/// the input positions of all the values before it into a set, twice (`ParsedValues.set`), and
/// every parsing strategy (`.remaining`, `.allUnrecognized`, `.captureForPassthrough`,
/// `.postTerminator`) goes through the same update — 10,000 IDs took seconds to parse. So
/// `rm` is handed its first reference and its options as typed (help, validation and error
/// messages stay ArgumentParser's), and the command reads the rest here, in their order.
enum BulkArguments {
    private static let taken = Mutex<[String]>([])

    /// The references after the first taken from `rm`'s command line (empty for another command).
    static func rest() -> [String] {
        taken.withLock { $0 }
    }

    /// `arguments` without `rm`'s references past the first; those are kept for ``rest()``.
    /// `valued` are the option names of `rm` that take a value as the next argument
    /// (`--tag T`); `--name=value` is one argument. After `--`, every argument is a reference.
    static func take(from arguments: [String], valued: Set<String>) -> [String] {
        // The subcommand: the first argument that is not an option (the root takes no values).
        guard let command = arguments.firstIndex(where: { !$0.hasPrefix("-") }), arguments[command] == "rm" else {
            return arguments
        }
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
