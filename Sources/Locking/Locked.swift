#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value behind a lock: the state that threads share, touched only inside
/// ``withLock(_:)``.
///
/// The lock is a `pthread_mutex_t`, which ThreadSanitizer sees. (The standard
/// library's `Synchronization.Mutex` waits on futexes directly on Linux, and
/// ThreadSanitizer reports every access made under it from two threads as a
/// race: a sanitizer whose every run prints false reports is one nobody reads.)
public final class Locked<Value>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock; `body` must not let the value escape.
    @inline(__always)
    public func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
