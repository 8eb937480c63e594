import Persistence

/// What keeps a file of `objects/`: an asset that uses it — a managed asset whose content it
/// is, or any asset whose thumbnail it is. The sweep removes a file only when neither is left
/// (``CatalogRuntime/carryOut(_:in:)``); `gc` reports a file as unreferenced on the same terms.
enum ContentUse {
    /// The assets that use any of `digests`: as managed content, and as a thumbnail.
    static func users(of digests: [String]) -> (managed: FetchRequest<Asset>, thumbnails: FetchRequest<Asset>) {
        (
            FetchRequest<Asset>(predicate: .in(\.sha256, digests) && \.storage == Storage.managed),
            FetchRequest<Asset>(predicate: .in(\.thumbnail, digests.map(Optional.some)))
        )
    }
}

/// The pins of content a save stores before it commits (digest → the staged link that keeps
/// its bytes): a save that certifies such content links it back from its pin should a sweep
/// have removed it from `objects/` meanwhile (``ContentStore/requireObject(_:for:pin:)``).
/// Set on the saving context, as an add's ``ContentAdoption`` is.
enum ContentPins: ContextKey {
    typealias Value = [String: String]
}
