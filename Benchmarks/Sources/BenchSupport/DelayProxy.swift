// A TCP proxy on loopback that delays every byte by a fixed time each way: hosts that talk to
// a server "across a network" on a machine that has only loopback (~30 µs a round trip).
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Listens on 127.0.0.1 (a port of the kernel's choosing) and relays each connection to
/// `target`, holding every chunk read, in each direction, for `delay` before writing it on.
///
/// Bytes are not slowed down as a whole: a chunk read is forwarded `delay` after it was read,
/// whatever follows it, so pipelined statements stay pipelined and bandwidth is loopback's. A
/// request and its answer thus pay `2 × delay` more than on loopback: one round trip. TLS
/// passes through untouched (the proxy never looks inside the bytes).
///
/// It also counts the **round trips** it saw: a turn of a connection is a chunk from the server
/// that follows bytes from the client sent since the server last spoke — a request answered.
/// Pipelined requests answered at once count as one, as they cost one round trip.
///
/// Each connection has four threads (a reader and a writer each way); the proxy lives until
/// ``stop()``, which closes its listening socket and every connection.
public final class DelayProxy: Sendable {
    /// The port it listens on (127.0.0.1).
    public let port: UInt16
    private let listener: Int32
    private let state = Mutex(State())

    private struct State {
        var stopped = false
        var sockets: [Int32] = []
        var turns = 0
        var connections = 0
    }

    /// Starts relaying to `targetPort` on 127.0.0.1, each chunk held `delay` each way.
    public init(targetPort: UInt16, delay: Duration) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw DelayProxyError("socket: \(String(cString: strerror(errno)))") }
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(listener, 128) == 0 else {
            close(listener)
            throw DelayProxyError("bind/listen: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.listener = listener
        self.port = UInt16(bigEndian: address.sin_port)
        let nanoseconds =
            UInt64(delay.components.seconds) * 1_000_000_000
            + UInt64(delay.components.attoseconds / 1_000_000_000)
        Thread { [self] in accept(targetPort: targetPort, delay: nanoseconds) }.start()
    }

    /// Round trips seen since the proxy started, over every connection.
    public var roundTrips: Int { state.withLock { $0.turns } }

    /// Connections accepted since the proxy started.
    public var connections: Int { state.withLock { $0.connections } }

    /// Closes the listening socket and every connection.
    public func stop() {
        let sockets = state.withLock { s -> [Int32] in
            s.stopped = true
            return s.sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for socket in sockets { shutdown(socket, Int32(SHUT_RDWR)) }
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func accept(targetPort: UInt16, delay: UInt64) {
        while true {
            let client = Glibc.accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return  // stopped
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                close(client)
                close(server)
                continue
            }
            var one: Int32 = 1
            for socket in [client, server] {
                setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            }
            let stopped = state.withLock { s -> Bool in
                s.sockets += [client, server]
                s.connections += 1
                return s.stopped
            }
            if stopped {
                close(client)
                close(server)
                return
            }
            let link = Link()
            let upstream = Pipe(from: client, to: server, delay: delay)
            let downstream = Pipe(from: server, to: client, delay: delay)
            for (pipe, fromClient) in [(upstream, true), (downstream, false)] {
                Thread { [self] in
                    pipe.read { [self] in
                        if fromClient {
                            link.clientSpoke.store(true, ordering: .relaxed)
                        } else if link.clientSpoke.exchange(false, ordering: .relaxed) {
                            state.withLock { $0.turns += 1 }
                        }
                    }
                }.start()
                Thread { [self] in
                    pipe.write()
                    // One side closed: the other one ends too, and both sockets go.
                    shutdown(pipe.from, Int32(SHUT_RDWR))
                    shutdown(pipe.to, Int32(SHUT_RDWR))
                    if link.ended.add(1, ordering: .acquiringAndReleasing).newValue == 2 {
                        state.withLock { s in s.sockets.removeAll { $0 == client || $0 == server } }
                        close(client)
                        close(server)
                    }
                }.start()
            }
        }
    }
}

/// What the two directions of one connection share.
private final class Link: Sendable {
    /// The client sent bytes since the server last spoke.
    let clientSpoke = Atomic(false)
    /// How many of the two writers have ended.
    let ended = Atomic(0)
}

/// One direction of a connection: chunks read from `from`, each written to `to` once its
/// time has come.
private final class Pipe: @unchecked Sendable {
    let from: Int32
    let to: Int32
    let delay: UInt64
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var chunks: [(due: UInt64, bytes: [UInt8])] = []
    private var next = 0
    private var closed = false

    init(from: Int32, to: Int32, delay: UInt64) {
        self.from = from
        self.to = to
        self.delay = delay
    }

    static func monotonic() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Reads until the end of `from`, queueing each chunk with the time it is due.
    func read(onChunk: () -> Void) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(from, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            onChunk()
            let chunk = (due: Self.monotonic() + delay, bytes: Array(buffer[0..<n]))
            condition.withLock {
                chunks.append(chunk)
                condition.signal()
            }
        }
        condition.withLock {
            closed = true
            condition.signal()
        }
    }

    /// Writes each chunk to `to` once it is due, until `from` has ended and every chunk is written.
    func write() {
        while true {
            condition.lock()
            while next == chunks.count && !closed { condition.wait() }
            if next == chunks.count {
                condition.unlock()
                return
            }
            let chunk = chunks[next]
            next += 1
            if next == chunks.count {
                chunks.removeAll(keepingCapacity: true)
                next = 0
            }
            condition.unlock()
            let now = Self.monotonic()
            if chunk.due > now {
                var wait = timespec(
                    tv_sec: Int((chunk.due - now) / 1_000_000_000), tv_nsec: Int((chunk.due - now) % 1_000_000_000))
                var left = timespec()
                while nanosleep(&wait, &left) != 0 && errno == EINTR { wait = left }
            }
            var offset = 0
            while offset < chunk.bytes.count {
                let n = chunk.bytes.withUnsafeBytes {
                    Glibc.write(to, $0.baseAddress! + offset, $0.count - offset)
                }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                offset += n
            }
        }
    }
}

/// A proxy that could not start.
public struct DelayProxyError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
