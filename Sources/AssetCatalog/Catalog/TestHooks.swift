extension Catalog {
    /// Called by ``add(_:options:progress:)`` with the paths of the first files it found (the
    /// walk's first page: all of them in a small tree), before it opens any: the tests swap a
    /// file there, to show that what is read is what was found or nothing
    /// (``AssetCatalogTestSupport``'s `afterAddListing`).
    @TaskLocal package static var afterExpanding: (@Sendable (_ paths: [String]) -> Void)?

    /// Called by ``add(_:options:progress:)`` once it has counted the files it will add, before
    /// it walks them again to add them: the tests make a file there.
    @TaskLocal package static var afterCounting: (@Sendable () -> Void)?

    /// Called by an import once the plan made during the read (from the bundle's records, on
    /// another task) is made, before the payload is read to its end: the tests change the
    /// catalog after it, to show that a stale plan is made again.
    @TaskLocal package static var afterEarlyPlan: (@Sendable () -> Void)?
}

/// The test instrumentation of one open catalog, given when it is opened
/// (``Catalog/OpenOptions/testing``): the points where its process dies, pauses or slows
/// down (``FaultPoints``), how its job queue paces itself, and the calls it makes to a test
/// at chosen instants. A catalog opened without it has none; the shipped `assetcat` never
/// gives one.
@_spi(Testing) public struct CatalogTesting: Sendable {
    /// Where the catalog's process dies, pauses or slows down.
    public var faults: FaultPoints
    /// How the catalog's job queue paces its claims, commits and looks at the store.
    public var jobs: JobQueue.Tuning
    /// What the catalog's job queue calls at chosen instants.
    public var jobHooks: JobQueue.Hooks

    /// Instrumentation that changes nothing.
    public init(
        faults: FaultPoints = FaultPoints(), jobs: JobQueue.Tuning = JobQueue.Tuning(),
        jobHooks: JobQueue.Hooks = JobQueue.Hooks()
    ) {
        self.faults = faults
        self.jobs = jobs
        self.jobHooks = jobHooks
    }
}
