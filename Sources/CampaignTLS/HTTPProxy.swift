import CampaignIO
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP proxy that gateways are reached through, with `CONNECT host:port`
/// (RFC 9110 §9.3.6): TLS, its SNI and the check of the gateway's
/// certificate and name run through the tunnel as over a direct connection;
/// the proxy resolves the gateway's name.
public struct HTTPProxy: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// `user:password` for `Proxy-Authorization: Basic`; never printed.
    public var credentials: String?

    public init(host: String, port: Int, credentials: String? = nil) {
        (self.host, self.port, self.credentials) = (host, port, credentials)
    }

    /// Why a proxy URL cannot be used.
    public struct URLError: Error, Equatable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// Reads `http://[user:password@]host:port` (a bare `host:port` too, as
    /// curl does; port 1080 when none is given, as curl does). The user and
    /// password may be percent-encoded.
    public init(url text: String) throws(URLError) {
        var rest = Substring(text.trimmingWhitespace())
        if let scheme = rest.range(of: "://") {
            let name = rest[..<scheme.lowerBound].lowercased()
            guard name == "http" else {
                throw URLError(reason: "the proxy \(Self.redacted(text)) is \(name)://; campaign speaks to HTTP proxies (http://host:port)")
            }
            rest = rest[scheme.upperBound...]
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        var credentials: String? = nil
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            credentials = Self.percentDecoded(String(userInfo))
        }
        var host = String(rest), port = 1080
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {   // [::1]:3128
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                guard let p = Int(after.dropFirst()), (1...65535).contains(p) else { throw URLError(reason: "the proxy \(Self.redacted(text)) has no valid port") }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let p = Int(rest[rest.index(after: colon)...]), (1...65535).contains(p) else {
                throw URLError(reason: "the proxy \(Self.redacted(text)) has no valid port")
            }
            port = p
        }
        guard !host.isEmpty else { throw URLError(reason: "the proxy \(Self.redacted(text)) names no host") }
        self.init(host: host, port: port, credentials: credentials)
    }

    /// `http://user@host:port`: what may be logged and journaled (no password).
    public var description: String {
        let user = credentials.map { String($0.prefix { $0 != ":" }) + "@" } ?? ""
        return "http://\(user)\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// A URL as given, with any password replaced by `***`.
    public static func redacted(_ url: String) -> String {
        guard let at = url.lastIndex(of: "@") else { return url }
        let start = url.range(of: "://").map(\.upperBound) ?? url.startIndex
        guard start < at else { return url }
        let userInfo = url[start..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }

    static func percentDecoded(_ text: String) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let b = utf8.first {
            utf8 = utf8.dropFirst()
            if b == UInt8(ascii: "%"), utf8.count >= 2,
               let v = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(v)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: - The environment, as curl reads it

    /// The proxy `HTTPS_PROXY` (or `https_proxy`) names for a connection to
    /// `host`, unless `NO_PROXY` (or `no_proxy`) matches it; nil without one.
    public static func fromEnvironment(for host: String, environment: [String: String]) throws(URLError) -> HTTPProxy? {
        guard let url = environment["https_proxy"] ?? environment["HTTPS_PROXY"], !url.isEmpty else { return nil }
        if let list = environment["no_proxy"] ?? environment["NO_PROXY"], bypasses(host, list: list) { return nil }
        return try HTTPProxy(url: url)
    }

    /// curl's `NO_PROXY` (7.86 and later): `*` matches every host; otherwise
    /// a comma-separated list, without case. For a host name, an entry is a
    /// name matching the host or any name that ends in `.name` (a leading dot
    /// is ignored). For a host that is an IP address (`[::1]` or `::1`), an
    /// entry counts only if it is the same address or a CIDR block holding
    /// it (`127.0.0.0/8`, `::1/128`); no suffix matching. As in curl, `/0`
    /// is read as the address alone.
    public static func bypasses(_ host: String, list: String) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let address = IPAddress(host)
        for entry in list.split(separator: ",") {
            var name = entry.trimmingWhitespace().lowercased()
            if name == "*" { return true }
            if let address {
                if address.isIn(name) { return true }
                continue
            }
            if name.hasPrefix(".") { name.removeFirst() }
            guard !name.isEmpty else { continue }
            if host == name || host.hasSuffix("." + name) { return true }
        }
        return false
    }

    /// An IPv4 or IPv6 address as its bytes (4 or 16).
    struct IPAddress: Equatable {
        var bytes: [UInt8]

        init?(_ text: String) {
            if text.contains(":") {
                var a = in6_addr()
                guard inet_pton(AF_INET6, text, &a) == 1 else { return nil }
                bytes = withUnsafeBytes(of: &a) { Array($0) }
            } else {
                var a = in_addr()
                guard inet_pton(AF_INET, text, &a) == 1 else { return nil }
                bytes = withUnsafeBytes(of: &a) { Array($0) }
            }
        }

        /// Whether `entry` (`address`, `[address]` or `address/bits`, of
        /// this address's family) names this address.
        func isIn(_ entry: String) -> Bool {
            var text = Substring(entry), bits = bytes.count * 8
            if let slash = text.firstIndex(of: "/") {
                guard let n = Int(text[text.index(after: slash)...]), (0...bytes.count * 8).contains(n) else { return false }
                if n > 0 { bits = n }
                text = text[..<slash]
            }
            if text.hasPrefix("["), text.hasSuffix("]") { text = text.dropFirst().dropLast() }
            guard let network = IPAddress(String(text)), network.bytes.count == bytes.count else { return false }
            for i in 0..<bytes.count where bits > 0 {
                let take = min(bits, 8)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
                if bytes[i] & mask != network.bytes[i] & mask { return false }
                bits -= take
            }
            return true
        }
    }

    // MARK: - The tunnel

    /// The most a proxy's answer to CONNECT may hold before its blank line.
    static let maxAnswerBytes = 16 * 1024

    /// Connects to the proxy and asks it for a tunnel to `host:port`; returns
    /// the socket once the proxy answered 2xx, ready for TLS.
    func tunnel(to host: String, port: Int, deadline: Deadline, cancellation: CancellationPipe?) throws(TLSError) -> Socket {
        let socket: Socket
        do {
            socket = try Socket.connect(host: self.host, port: self.port, deadline: deadline, cancellation: cancellation)
        } catch {
            if case .connectionFailed(_, _, let reason) = error.kind { throw TLSError(.proxyUnreachable(proxy: description, reason: reason)) }
            throw error
        }
        let authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        var request = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        if let credentials { request += "Proxy-Authorization: Basic \(Self.base64(Array(credentials.utf8)))\r\n" }
        request += "\r\n"
        try write(Array(request.utf8), to: socket, deadline: deadline, cancellation: cancellation)
        let answer = try readAnswer(from: socket, deadline: deadline, cancellation: cancellation)
        let statusLine = answer.prefix { !$0.isNewline }   // "\r\n" is one Character: comparing with "\r" never stops at it
        let fields = statusLine.split(separator: " ", maxSplits: 2)
        guard fields.count >= 2, fields[0].hasPrefix("HTTP/1."), let status = Int(fields[1]) else {
            throw TLSError(.proxyRefused(proxy: description, status: 0, reason: "it did not answer CONNECT in HTTP (\(String(statusLine.prefix(60))))"))
        }
        let reason = fields.count > 2 ? String(fields[2].prefix(60)) : ""
        switch status {
        case 200..<300: return socket
        // 407 is the standard answer; some proxies (tinyproxy) answer 401 to wrong credentials.
        case 407, 401: throw TLSError(.proxyAuthenticationFailed(proxy: description, status: status, sent: credentials != nil))
        default: throw TLSError(.proxyRefused(proxy: description, status: status, reason: reason))
        }
    }

    private func write(_ bytes: [UInt8], to socket: Socket, deadline: Deadline, cancellation: CancellationPipe?) throws(TLSError) {
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.send(socket.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 { written += n; continue }
            guard n < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else {
                throw TLSError(.proxyClosed(proxy: description, when: "before it read the CONNECT request"))
            }
            switch waitFor(fd: socket.fd, events: Int16(POLLOUT), cancellation: cancellation, deadline: deadline) {
            case .ready: continue
            case .cancelled: throw TLSError(.cancelled)
            case .timedOut: throw TLSError(.timedOut(operation: "sending CONNECT to the proxy \(description)"))
            }
        }
    }

    /// Reads the answer up to its blank line, one byte at a time past the
    /// first read's peek, so that nothing of the tunnel is consumed.
    private func readAnswer(from socket: Socket, deadline: Deadline, cancellation: CancellationPipe?) throws(TLSError) -> String {
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while !(answer.count >= 4 && answer.suffix(4) == [13, 10, 13, 10]) && !(answer.count >= 2 && answer.suffix(2) == [10, 10]) {
            guard answer.count < Self.maxAnswerBytes else {
                throw TLSError(.proxyRefused(proxy: description, status: 0, reason: "its answer to CONNECT ran past \(Self.maxAnswerBytes / 1024) KB"))
            }
            let n = Glibc.recv(socket.fd, &byte, 1, 0)
            if n == 1 { answer.append(byte); continue }
            if n == 0 { throw TLSError(.proxyClosed(proxy: description, when: "before it answered CONNECT")) }
            guard errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else {
                throw TLSError(.proxyClosed(proxy: description, when: "before it answered CONNECT (\(String(cString: strerror(errno))))"))
            }
            switch waitFor(fd: socket.fd, events: Int16(POLLIN), cancellation: cancellation, deadline: deadline) {
            case .ready: continue
            case .cancelled: throw TLSError(.cancelled)
            case .timedOut: throw TLSError(.timedOut(operation: "waiting for the proxy \(description) to answer CONNECT"))
            }
        }
        return String(decoding: answer, as: UTF8.self)
    }

    static func base64(_ bytes: [UInt8]) -> String {
        let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(table[Int(b0 >> 2)])
            out.append(table[Int((b0 & 3) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? table[Int((b1 & 15) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? table[Int(b2 & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
