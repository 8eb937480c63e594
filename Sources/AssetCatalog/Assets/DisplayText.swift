/// Names and paths made safe to print for a person: a file name can hold a newline (and forge
/// a row of a listing), an escape sequence (and drive the terminal), or a bidirectional
/// override (and reorder what is shown). Human output quotes them as git quotes paths; JSON
/// output keeps them exact.
///
/// ```swift
/// DisplayText.quoted("photo.jpg")   // photo.jpg
/// DisplayText.quoted("a\nb.txt")    // "a\nb.txt"
/// ```
public enum DisplayText {
    /// `name` as it can be printed: unchanged when it holds no control character, no
    /// bidirectional control, no `"` and no `\`; otherwise between double quotes, with C
    /// escapes (`\n`, `\t`, `\"`, `\\`, and octal UTF-8 bytes such as `\033` for the rest), as
    /// git quotes paths. A quoted name never holds a line break, and reads back unambiguously.
    public static func quoted(_ name: String) -> String {
        guard name.unicodeScalars.contains(where: { needsEscape($0) || $0 == "\"" || $0 == "\\" }) else {
            return name
        }
        var result = "\""
        for scalar in name.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            default: append(scalar, to: &result)
            }
        }
        return result + "\""
    }

    /// `text` (a message that may hold names) with every control character and bidirectional
    /// control escaped as in ``quoted(_:)``, and nothing else changed: it stays one line and
    /// cannot drive the terminal. Names already passed through ``quoted(_:)`` are left as they
    /// are.
    public static func escapingControls(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        for scalar in text.unicodeScalars { append(scalar, to: &result) }
        return result
    }

    /// C0 and C1 controls, DEL, the line and paragraph separators, and the bidirectional
    /// embeddings, overrides and isolates.
    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    private static func append(_ scalar: Unicode.Scalar, to result: inout String) {
        guard needsEscape(scalar) else {
            result.unicodeScalars.append(scalar)
            return
        }
        switch scalar {
        case "\u{07}": result += "\\a"
        case "\u{08}": result += "\\b"
        case "\t": result += "\\t"
        case "\n": result += "\\n"
        case "\u{0B}": result += "\\v"
        case "\u{0C}": result += "\\f"
        case "\r": result += "\\r"
        default:
            for byte in String(scalar).utf8 {
                let octal = String(byte, radix: 8)
                result += "\\" + String(repeating: "0", count: 3 - octal.count) + octal
            }
        }
    }
}
