import HTTPTypes

/// Percent-encoding and -decoding of the parts of a URL the pages make and read: a query's
/// fields, a form's fields, a download's file name.
enum URLText {
    /// `value` percent-encoded but for RFC 3986's unreserved characters (letters, digits,
    /// `-._~`): safe in a query's value, a path segment, or RFC 5987's `filename*`.
    static func encode(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out +=
                    "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 15, radix: 16, uppercase: true)
            }
        }
        return out
    }

    /// A query string from fields, in order (`a=1&b=x%20y`); empty values are left out.
    static func query(_ fields: [(String, String)]) -> String {
        fields.filter { !$0.1.isEmpty }.map { encode($0.0) + "=" + encode($0.1) }.joined(separator: "&")
    }

    /// A field of `application/x-www-form-urlencoded` text (a query, a form's body) decoded:
    /// `+` is a space, `%XX` a byte, and the bytes must be UTF-8.
    ///
    /// - Throws: ``PageError`` (400) for a `%` not followed by two hex digits, or bytes that
    ///   are not UTF-8.
    static func decodeFormField(_ text: Substring) throws(PageError) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "+"): bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                    throw PageError(.badRequest, "Bad request: a % in the query is not followed by two hex digits.")
                }
                bytes.append(high << 4 | low)
            default: bytes.append(byte)
            }
        }
        guard let string = String(validating: bytes, as: UTF8.self) else {
            throw PageError(.badRequest, "Bad request: the query's percent-escapes are not UTF-8.")
        }
        return string
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
