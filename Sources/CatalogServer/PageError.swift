import HTTPTypes

/// A request the server refuses or cannot answer: its status and the one line the page
/// shows (a bad parameter, an asset that does not exist, a missing token).
struct PageError: Error, Sendable {
    /// The response's status.
    var status: HTTPResponse.Status
    /// What the page says, as a sentence.
    var message: String

    init(_ status: HTTPResponse.Status, _ message: String) {
        self.status = status
        self.message = message
    }

    static let notFound = PageError(.notFound, "Not found: no page has this address.")
}
