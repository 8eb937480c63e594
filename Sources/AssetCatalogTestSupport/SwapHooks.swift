import AssetCatalog
import BagIt
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `body` with `hook` called each time a directory bag read by it has been listed and
/// not yet read, with the bag's root: a test swaps a file there, deterministically.
public func afterBagListing<T>(
    _ hook: @escaping @Sendable (_ root: String) -> Void, _ body: () async throws -> T
) async rethrows -> T {
    try await BagReader.$afterListing.withValue(hook) { try await body() }
}

/// ``afterBagListing(_:_:)`` for work that does not run in a task of its own (validation).
public func afterBagListing<T>(_ hook: @escaping @Sendable (_ root: String) -> Void, _ body: () throws -> T) rethrows
    -> T
{
    try BagReader.$afterListing.withValue(hook) { try body() }
}

/// Runs `body` with `hook` called each time an add run by it has found its files and opened
/// none yet, with their paths: a test swaps a file there, deterministically.
public func afterAddListing<T>(
    _ hook: @escaping @Sendable (_ paths: [String]) -> Void, _ body: () async throws -> T
) async rethrows -> T {
    try await Catalog.$afterExpanding.withValue(hook) { try await body() }
}
