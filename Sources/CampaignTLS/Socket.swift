import CampaignIO
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An owned, non-blocking TCP socket. Closed when released.
public final class Socket: @unchecked Sendable {
    public private(set) var fd: Int32

    init(fd: Int32) {
        self.fd = fd
    }

    deinit { close() }

    /// Closes now; later calls do nothing.
    public func close() {
        if fd >= 0 {
            _ = Glibc.close(fd)
            fd = -1
        }
    }

    /// Stops sending (a TCP FIN) while still reading, so the peer can read
    /// everything written before it.
    public func shutdownWrite() {
        if fd >= 0 { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }
    }

    /// Closes with a TCP reset instead of an orderly close: a hard drop.
    public func abort() {
        if fd >= 0 {
            var l = linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
            close()
        }
    }

    fileprivate func configure() throws(IOError) {
        let flags = try syscall("fcntl") { fcntl(fd, F_GETFL) }
        try syscall("fcntl") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var one: Int32 = 1
        // We batch frames ourselves; the kernel must not hold them back too.
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Throws unless `host` resolves (a name the resolver does not know, or
    /// no resolver at all): checked before a send creates its journal.
    public static func resolve(host: String, port: Int) throws(TLSError) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, list != nil else {
            throw TLSError(.connectionFailed(host: host, port: port, reason: String(cString: gai_strerror(rc))))
        }
        freeaddrinfo(list)
    }

    /// Connects to `host:port`, trying each resolved address in turn.
    public static func connect(
        host: String, port: Int, deadline: Deadline, cancellation: CancellationPipe? = nil
    ) throws(TLSError) -> Socket {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw TLSError(.connectionFailed(host: host, port: port, reason: String(cString: gai_strerror(rc))))
        }
        defer { freeaddrinfo(list) }
        var lastReason = "no address"
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let ai = node {
            node = ai.pointee.ai_next
            let fd = Glibc.socket(ai.pointee.ai_family, ai.pointee.ai_socktype, ai.pointee.ai_protocol)
            if fd < 0 { lastReason = String(cString: strerror(errno)); continue }
            let socket = Socket(fd: fd)
            do { try socket.configure() } catch { lastReason = error.description; continue }
            var result = Glibc.connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen)
            if result != 0 && errno == EINPROGRESS {
                switch waitFor(fd: fd, events: Int16(POLLOUT), cancellation: cancellation, deadline: deadline) {
                case .cancelled: throw TLSError(.cancelled)
                case .timedOut: lastReason = "timed out"; continue
                case .ready:
                    var err: Int32 = 0
                    var len = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
                    result = err == 0 ? 0 : -1
                    errno = err
                }
            }
            if result == 0 { return socket }
            lastReason = String(cString: strerror(errno))
        }
        throw TLSError(.connectionFailed(host: host, port: port, reason: lastReason))
    }
}

/// A listening TCP socket.
public final class Listener: @unchecked Sendable {
    let socket: Socket
    /// The port it listens on; the one the kernel chose when asked for port 0.
    public let port: Int

    /// Listens on `host` (an IPv4 literal; tests and the simulator use 127.0.0.1).
    public init(host: String = "127.0.0.1", port: Int) throws(IOError) {
        let fd = try syscall("socket") { Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0) }
        let socket = Socket(fd: fd)
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else {
            throw IOError(operation: "listen on \(host)", errno: EINVAL)
        }
        try syscall("bind to \(host):\(port)") {
            withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        try syscall("listen") { listen(fd, 128) }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        try syscall("getsockname") {
            withUnsafeMutablePointer(to: &bound) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
            }
        }
        try socket.configure()
        self.socket = socket
        self.port = Int(UInt16(bigEndian: bound.sin_port))
    }

    /// Waits for the next connection; nil when cancelled.
    public func accept(cancellation: CancellationPipe?) throws(IOError) -> Socket? {
        while true {
            switch waitFor(fd: socket.fd, events: Int16(POLLIN), cancellation: cancellation, deadline: nil) {
            case .cancelled: return nil
            case .timedOut: continue
            case .ready: break
            }
            let fd: Int32
            do {
                fd = try syscall("accept") { Glibc.accept(socket.fd, nil, nil) }
            } catch {
                // Another waiter took it, or the client gave up before we accepted: wait again.
                if let code = error.errno, [EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO].contains(code) { continue }
                throw error
            }
            let client = Socket(fd: fd)
            try client.configure()
            return client
        }
    }

    public func close() { socket.close() }
}
