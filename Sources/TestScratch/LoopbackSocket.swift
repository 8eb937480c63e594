public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP connection to a server of the tests on 127.0.0.1, for requests written by hand (a
/// client that stops reading, or that leaves mid-response).
public enum LoopbackSocket {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// A socket connected to 127.0.0.1:`port` (the caller closes it), with a receive buffer of
    /// `receiveBuffer` bytes when given (a small one makes a server's writes wait on the client).
    public static func connect(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let error = errno
            close(fd)
            throw Failure(description: "connect to 127.0.0.1:\(port): errno \(error)")
        }
        return fd
    }

    /// Writes `request` to 127.0.0.1:`port` on a connection of its own, then reads until the
    /// server closes it: the whole response (a request with `Connection: close`).
    public static func exchange(_ request: Data, port: Int) throws -> Data {
        let fd = try connect(port: port)
        defer { close(fd) }
        try request.withUnsafeBytes { bytes in
            var sent = 0
            while sent < bytes.count {
                let count = send(fd, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { throw Failure(description: "send: errno \(errno)") }
                sent += count
            }
        }
        var response = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw Failure(description: "recv: errno \(errno)") }
            if count == 0 { return response }
            response.append(contentsOf: buffer[0..<count])
        }
    }
}
