import HTTPTypes

/// The fields of a query string or of a form's body (`application/x-www-form-urlencoded`),
/// checked against the names a page takes: an unknown name, a bad escape or too many fields is
/// refused with a 400 naming it, never ignored.
struct FormFields: Sendable {
    /// The fields, in order; a name can repeat (`id=1&id=2`).
    private(set) var pairs: [(name: String, value: String)] = []

    /// The most fields one request may carry (the assets one export may name, a page's worth
    /// of checkboxes many times over).
    static let maximumCount = 10_000

    /// Parses `text` (without the `?`); `allowed` are the names the page takes.
    init(parsing text: Substring?, allowed: Set<String>) throws(PageError) {
        guard let text, !text.isEmpty else { return }
        for item in text.split(separator: "&", omittingEmptySubsequences: true) {
            guard pairs.count < Self.maximumCount else {
                throw PageError(.badRequest, "Bad request: more than \(Self.maximumCount) fields.")
            }
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = try URLText.decodeFormField(parts[0])
            let value = try parts.count > 1 ? URLText.decodeFormField(parts[1]) : ""
            guard allowed.contains(name) else {
                throw PageError(.badRequest, "Bad request: unknown parameter \(name.debugDescription).")
            }
            pairs.append((name, value))
        }
    }

    /// The first value of `name`, or `nil`.
    subscript(name: String) -> String? { pairs.first { $0.name == name }?.value }

    /// Every value of `name`, in order.
    func all(_ name: String) -> [String] { pairs.filter { $0.name == name }.map(\.value) }

    /// The value of `name` as a count or an ID: decimal digits only, at most 18 (below
    /// `Int64.max`); `nil` when absent or empty.
    ///
    /// - Throws: ``PageError`` (400): "Bad request: NAME must be a whole number from 0 to
    ///   999999999999999999."
    func number(_ name: String) throws(PageError) -> Int64? {
        guard let text = self[name], !text.isEmpty else { return nil }
        guard let value = Self.number(text) else {
            throw PageError(.badRequest, "Bad request: \(name) must be a whole number from 0 to 999999999999999999.")
        }
        return value
    }

    /// `text` as a number of decimal digits only, at most 18; `nil` otherwise.
    static func number(_ text: some StringProtocol) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 18,
            text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        return Int64(text)
    }
}
