extension Catalog {
    /// Called by ``add(_:options:progress:)`` with the paths of the files it found, before it
    /// opens any: the tests swap a file there, to show that what is read is what was found or
    /// nothing (``AssetCatalogTestSupport``'s `afterAddListing`).
    @TaskLocal package static var afterExpanding: (@Sendable (_ paths: [String]) -> Void)?
}
