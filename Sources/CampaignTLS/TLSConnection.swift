import CampaignIO
#if canImport(Glibc)
import Glibc
#endif
internal import COpenSSL
internal import COpenSSLShims

/// One TLS connection over a non-blocking socket.
///
/// Every wait also watches an optional ``CancellationPipe`` and deadline, so no
/// call can hang on a silent peer. Use it from one thread at a time; OpenSSL's
/// connection objects are not safe for concurrent use.
public final class TLSConnection: @unchecked Sendable {
    let ssl: OpaquePointer   // SSL*
    public let socket: Socket
    let context: TLSContext
    /// Name or address of the peer, for messages.
    public let peerName: String
    /// Set when the peer closed without a TLS close_notify (APNs does this after
    /// an error response; it is also what a hard drop looks like).
    public private(set) var closedWithoutNotify = false

    private init(context: TLSContext, socket: Socket, peerName: String) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        guard let ssl = SSL_new(context.pointer) else {
            throw TLSError(.openSSL(operation: "Creating a TLS connection", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        self.ssl = ssl
        self.socket = socket
        self.context = context
        self.peerName = peerName
        SSL_set_fd(ssl, socket.fd)
    }

    deinit { SSL_free(ssl) }

    /// The protocol ALPN chose in the handshake (`h2`), or nil.
    public var negotiatedProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var count: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &count)
        guard let data, count > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(count)), as: UTF8.self)
    }

    /// Connects to `host:port` (through `proxy`'s tunnel when given) and
    /// completes the handshake, verifying the server's certificate and name
    /// unless the context says otherwise: the gateway's, never the proxy's.
    public static func connect(
        host: String, port: Int, context: TLSContext,
        timeout: Double = 30, cancellation: CancellationPipe? = nil, proxy: HTTPProxy? = nil
    ) throws(TLSError) -> TLSConnection {
        let deadline = Deadline.after(seconds: timeout)
        let socket = if let proxy {
            try proxy.tunnel(to: host, port: port, deadline: deadline, cancellation: cancellation)
        } else {
            try Socket.connect(host: host, port: port, deadline: deadline, cancellation: cancellation)
        }
        let connection = try TLSConnection(context: context, socket: socket, peerName: "\(host):\(port)")
        let isAddress = host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
        if !isAddress { _ = campaign_ssl_set_tlsext_host_name(connection.ssl, host) }
        if context.verifiesPeer {
            if isAddress {
                _ = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(connection.ssl), host)
            } else {
                _ = SSL_set1_host(connection.ssl, host)
            }
        }
        SSL_set_connect_state(connection.ssl)
        try connection.handshake(deadline: deadline, cancellation: cancellation, host: host)
        return connection
    }

    /// Completes the server side of the handshake on an accepted socket.
    public static func accept(
        socket: Socket, context: TLSContext, timeout: Double = 10, cancellation: CancellationPipe? = nil
    ) throws(TLSError) -> TLSConnection {
        let connection = try TLSConnection(context: context, socket: socket, peerName: "client")
        SSL_set_accept_state(connection.ssl)
        try connection.handshake(deadline: .after(seconds: timeout), cancellation: cancellation, host: nil)
        return connection
    }

    private func handshake(deadline: Deadline, cancellation: CancellationPipe?, host: String?) throws(TLSError) {
        while true {
            OpenSSLErrorQueue.clear()
            let rc = SSL_do_handshake(ssl)
            if rc == 1 { return }
            let code = SSL_get_error(ssl, rc)
            let savedErrno = errno
            let events: Int16
            switch code {
            case SSL_ERROR_WANT_READ: events = Int16(POLLIN)
            case SSL_ERROR_WANT_WRITE: events = Int16(POLLOUT)
            default:
                throw handshakeError(code: code, errno: savedErrno, host: host)
            }
            switch waitFor(fd: socket.fd, events: events, cancellation: cancellation, deadline: deadline) {
            case .ready: continue
            case .cancelled: throw TLSError(.cancelled)
            case .timedOut: throw TLSError(.timedOut(operation: "completing the TLS handshake with \(host ?? peerName)"))
            }
        }
    }

    private func handshakeError(code: Int32, errno savedErrno: Int32, host: String?) -> TLSError {
        let errors = OpenSSLErrorQueue.drain()
        let verify = SSL_get_verify_result(ssl)
        if verify != X509_V_OK {
            let reason = String(cString: X509_verify_cert_error_string(verify))
            if let host {
                switch Int32(verify) {
                case X509_V_ERR_CERT_HAS_EXPIRED: return TLSError(.certificateExpired(subject: "the server \(host)"))
                case X509_V_ERR_CERT_NOT_YET_VALID: return TLSError(.certificateNotYetValid(subject: "the server \(host)"))
                case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH: return TLSError(.hostNameMismatch(host: host))
                default: return TLSError(.serverNotTrusted(host: host, reason: reason))
                }
            }
            return TLSError(.clientNotTrusted(reason: reason))
        }
        if let alert = Self.certificateAlert(errors) {
            return host != nil ? TLSError(.clientRefused(reason: alert)) : TLSError(.clientNotTrusted(reason: alert))
        }
        if code == SSL_ERROR_SYSCALL || (code == SSL_ERROR_SSL && errors.isEmpty) {
            let reason = savedErrno != 0 ? String(cString: strerror(savedErrno)) : "the peer closed the connection"
            return TLSError(.handshakeFailed(reason: reason))
        }
        if host == nil, errors.contains(where: { $0.reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE }) {
            return TLSError(.clientNotTrusted(reason: "no client certificate was presented"))
        }
        return TLSError(.handshakeFailed(reason: OpenSSLErrorQueue.summary(errors)))
    }

    /// Names the alert when the peer refused our certificate.
    static func certificateAlert(_ errors: [OpenSSLErrorQueue.Entry]) -> String? {
        for e in errors where e.library == ERR_LIB_SSL {
            switch e.reason {
            case SSL_R_TLSV1_ALERT_UNKNOWN_CA: return "its certificate authority is unknown to the server"
            case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE: return "bad certificate"
            case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED: return "the certificate has expired"
            case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED: return "the certificate was revoked"
            case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN: return "certificate unknown"
            case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE: return "unsupported certificate"
            case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED: return "a client certificate is required"
            case SSL_R_TLSV1_ALERT_ACCESS_DENIED: return "access denied"
            case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE: return "handshake failure; a client certificate is probably required"
            default: continue
            }
        }
        return nil
    }

    /// The outcome of one non-blocking read or write attempt.
    public enum IOResult: Equatable, Sendable {
        /// This many bytes moved.
        case bytes(Int)
        /// Nothing can move until the socket is readable (or writable) again.
        case wantRead
        case wantWrite
        /// The peer closed the connection.
        case closed
    }

    /// One read attempt that never waits.
    public func tryRead(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> IOResult {
        OpenSSLErrorQueue.clear()
        var n = 0
        let rc = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &n)
        if rc == 1 { return .bytes(n) }
        return try failure(SSL_get_error(ssl, rc), operation: "reading")
    }

    /// One write attempt that never waits. With partial writes enabled it may
    /// move fewer bytes than given; after `.wantRead`/`.wantWrite` retry with the
    /// same bytes.
    public func tryWrite(_ bytes: UnsafeRawBufferPointer) throws(TLSError) -> IOResult {
        guard bytes.count > 0 else { return .bytes(0) }
        OpenSSLErrorQueue.clear()
        var n = 0
        let rc = SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &n)
        if rc == 1 { return .bytes(n) }
        return try failure(SSL_get_error(ssl, rc), operation: "writing")
    }

    /// Writes `bytes` from `offset` until all are written or the socket
    /// would block, advancing `offset`. False when the peer has closed.
    public func writeAvailable(_ bytes: [UInt8], from offset: inout Int) throws(TLSError) -> Bool {
        while offset < bytes.count {
            let start = offset
            let attempt = bytes.withUnsafeBytes { raw in
                Result { () throws(TLSError) in try tryWrite(UnsafeRawBufferPointer(rebasing: raw[start...])) }
            }
            switch try attempt.get() {
            case .bytes(let n): offset += n
            case .wantRead, .wantWrite: return true
            case .closed: return false
            }
        }
        return true
    }

    private func failure(_ code: Int32, operation: String) throws(TLSError) -> IOResult {
        let savedErrno = errno
        switch code {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN: return .closed
        case SSL_ERROR_SYSCALL:
            let errors = OpenSSLErrorQueue.drain()
            if savedErrno == 0 || savedErrno == ECONNRESET || savedErrno == EPIPE || errors.isEmpty {
                closedWithoutNotify = true
                if savedErrno == ECONNRESET || savedErrno == EPIPE {
                    throw TLSError(.connectionReset(reason: String(cString: strerror(savedErrno))))
                }
                return .closed
            }
            throw TLSError(.connectionReset(reason: OpenSSLErrorQueue.summary(errors)))
        default:
            let errors = OpenSSLErrorQueue.drain()
            if let alert = Self.certificateAlert(errors) { throw TLSError(.clientRefused(reason: alert)) }
            // OpenSSL 3 reports an EOF without close_notify as an SSL error.
            if errors.contains(where: { $0.reason == SSL_R_UNEXPECTED_EOF_WHILE_READING }) {
                closedWithoutNotify = true
                return .closed
            }
            throw TLSError(.connectionReset(reason: "\(operation): \(OpenSSLErrorQueue.summary(errors))"))
        }
    }

    /// Waits until the socket can read or write, as a previous try asked.
    public func wait(for result: IOResult, cancellation: CancellationPipe?, deadline: Deadline?) -> WaitResult {
        let events = result == .wantWrite ? Int16(POLLOUT) : Int16(POLLIN)
        return waitFor(fd: socket.fd, events: events, cancellation: cancellation, deadline: deadline)
    }

    /// Reads at least one byte, waiting as needed. Returns 0 when the peer closed.
    public func read(
        into buffer: UnsafeMutableRawBufferPointer, cancellation: CancellationPipe? = nil, deadline: Deadline? = nil
    ) throws(TLSError) -> Int {
        while true {
            let result = try tryRead(into: buffer)
            switch result {
            case .bytes(let n): return n
            case .closed: return 0
            case .wantRead, .wantWrite:
                switch wait(for: result, cancellation: cancellation, deadline: deadline) {
                case .ready: continue
                case .cancelled: throw TLSError(.cancelled)
                case .timedOut: throw TLSError(.timedOut(operation: "reading from \(peerName)"))
                }
            }
        }
    }

    /// Reads at least one byte into the start of `buffer`, waiting as needed.
    /// Returns 0 when the peer closed.
    public func read(
        into buffer: inout [UInt8], cancellation: CancellationPipe? = nil, deadline: Deadline? = nil
    ) throws(TLSError) -> Int {
        var failure: TLSError? = nil
        let n = buffer.withUnsafeMutableBytes { raw in
            do throws(TLSError) { return try read(into: raw, cancellation: cancellation, deadline: deadline) } catch {
                failure = error
                return 0
            }
        }
        if let failure { throw failure }
        return n
    }

    /// Writes all of `bytes`, waiting as needed.
    public func write(
        _ bytes: UnsafeRawBufferPointer, cancellation: CancellationPipe? = nil, deadline: Deadline? = nil
    ) throws(TLSError) {
        var offset = 0
        while offset < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            let result = try tryWrite(rest)
            switch result {
            case .bytes(let n): offset += n
            case .closed: throw TLSError(.connectionReset(reason: "\(peerName) closed the connection"))
            case .wantRead, .wantWrite:
                switch wait(for: result, cancellation: cancellation, deadline: deadline) {
                case .ready: continue
                case .cancelled: throw TLSError(.cancelled)
                case .timedOut: throw TLSError(.timedOut(operation: "writing to \(peerName)"))
                }
            }
        }
    }

    public func write(_ bytes: [UInt8], cancellation: CancellationPipe? = nil, deadline: Deadline? = nil) throws(TLSError) {
        var failure: TLSError? = nil
        bytes.withUnsafeBytes { raw in
            do throws(TLSError) { try write(raw, cancellation: cancellation, deadline: deadline) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Sends close_notify and a TCP FIN but keeps reading: the peer sees the
    /// end of our data, while what it still sends is read (and may be thrown
    /// away) instead of triggering a reset that could destroy, at the peer,
    /// bytes we wrote last. Call ``close()`` after.
    public func finishWriting() {
        OpenSSLErrorQueue.clear()
        _ = SSL_shutdown(ssl)
        OpenSSLErrorQueue.clear()
        socket.shutdownWrite()
    }

    /// Sends close_notify without waiting for the peer's, then closes.
    public func close() {
        OpenSSLErrorQueue.clear()
        _ = SSL_shutdown(ssl)
        OpenSSLErrorQueue.clear()
        socket.shutdownWrite()
        socket.close()
    }

    /// Closes without close_notify: what a crashed or dropping peer does.
    public func abort() {
        socket.abort()
    }

    /// The subject of the certificate the peer's verified chain ends in (the
    /// trusted root), or nil when the chain was not verified.
    public var verifiedChainRoot: String? {
        guard let chain = SSL_get0_verified_chain(ssl) else { return nil }
        let n = OPENSSL_sk_num(chain)
        guard n > 0, let last = OPENSSL_sk_value(chain, n - 1) else { return nil }
        return Certificate.oneLine(X509_get_subject_name(OpaquePointer(last)))
    }

    /// The peer's certificate subject, if it presented one.
    public var peerSubject: String? {
        guard let cert = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(cert) }
        return Certificate.oneLine(X509_get_subject_name(cert))
    }
}
