/// HTML text built by string interpolation that escapes what it interpolates: a `String`
/// (a name, a tag, a message) is escaped, an `HTML` value is kept as it is. A page is made of
/// `HTML` literals, so user content cannot become markup unless a function says so by
/// returning `HTML`, and every such function escapes what it takes.
struct HTML: Sendable, ExpressibleByStringInterpolation {
    /// The markup.
    var text: String

    init(stringLiteral value: String) { text = value }

    init(stringInterpolation: Interpolation) { text = stringInterpolation.text }

    /// The markup of `parts`, one after the other.
    init(joining parts: some Sequence<HTML>) {
        text = ""
        for part in parts { text += part.text }
    }

    struct Interpolation: StringInterpolationProtocol {
        var text = ""

        init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + 16 * interpolationCount)
        }

        mutating func appendLiteral(_ literal: String) { text += literal }

        /// Text, escaped: it shows as written, whatever it holds.
        mutating func appendInterpolation(_ value: String) { text += HTML.escape(value) }

        /// Markup, kept.
        mutating func appendInterpolation(_ value: HTML) { text += value.text }

        /// Markup, kept, one part after the other.
        mutating func appendInterpolation(_ parts: [HTML]) { for part in parts { text += part.text } }

        /// A number, in decimal.
        mutating func appendInterpolation<Number: BinaryInteger>(_ value: Number) { text += String(value) }
    }

    /// `value` as text in an element or a quoted attribute: `&`, `<`, `>`, `"` and `'` become
    /// entities, and control characters (but tab, line feed and carriage return), which HTML
    /// does not allow, become U+FFFD.
    static func escape(_ value: String) -> String {
        var out = ""
        out.unicodeScalars.reserveCapacity(value.unicodeScalars.count)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
            case _ where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value):
                out.unicodeScalars.append("\u{FFFD}")
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
