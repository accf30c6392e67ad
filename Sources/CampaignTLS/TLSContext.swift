import CampaignIO
#if canImport(Glibc)
import Glibc
#endif
internal import COpenSSL
internal import COpenSSLShims

/// Where a client looks for the certificate authorities it trusts.
public enum TrustRoots: Sendable, Equatable {
    /// The system's store (Debian: /etc/ssl/certs).
    case system
    /// The certificates in one PEM file.
    case file(String)
}

/// An OpenSSL `SSL_CTX`: the settings shared by many connections.
public final class TLSContext: @unchecked Sendable {
    let pointer: OpaquePointer   // SSL_CTX*
    public let isServer: Bool
    /// Whether clients verify the server's certificate and name.
    public let verifiesPeer: Bool

    /// OpenSSL writes to sockets with write(2); a peer that has closed would
    /// kill the process with SIGPIPE. Ignored once, so the write fails with
    /// EPIPE and the caller handles a lost connection like any other.
    private static let ignoreBrokenPipes: Void = { signal(SIGPIPE, SIG_IGN) }()

    private init(server: Bool, verifiesPeer: Bool) throws(TLSError) {
        Self.ignoreBrokenPipes
        OpenSSLErrorQueue.clear()
        guard let ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()) else {
            throw TLSError(.openSSL(operation: "Creating a TLS context", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        pointer = ctx
        isServer = server
        self.verifiesPeer = verifiesPeer
        _ = campaign_ssl_ctx_set_min_proto_version(ctx, TLS1_2_VERSION)
        // Partial writes let a non-blocking writer make progress with part of a
        // batch; moving buffers let it retry from a buffer that has grown.
        _ = campaign_ssl_ctx_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = SSL_CTX_set_options(ctx, UInt64(campaign_ssl_op_no_renegotiation()))
    }

    deinit { SSL_CTX_free(pointer) }

    private func use(_ identity: TLSIdentity) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        guard SSL_CTX_use_certificate(pointer, identity.certificate.pointer) == 1,
              SSL_CTX_use_PrivateKey(pointer, identity.key.pointer) == 1 else {
            throw TLSError(.openSSL(operation: "Using \(identity.source)", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
        }
        for extra in identity.chain {
            X509_up_ref(extra.pointer)
            if SSL_CTX_ctrl(pointer, SSL_CTRL_EXTRA_CHAIN_CERT, 0, UnsafeMutableRawPointer(extra.pointer)) != 1 {
                X509_free(extra.pointer)
            }
        }
        guard SSL_CTX_check_private_key(pointer) == 1 else {
            OpenSSLErrorQueue.clear()
            throw TLSError(.keyDoesNotMatchCertificate(certificate: identity.source, key: identity.source))
        }
    }

    private func trust(_ roots: TrustRoots) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        switch roots {
        case .system:
            guard SSL_CTX_set_default_verify_paths(pointer) == 1 else {
                throw TLSError(.openSSL(operation: "Loading the system's trusted certificates", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
            }
        case .file(let path):
            // Read it ourselves first, for a clear message when it is missing or not PEM.
            let certs = try Certificate.load(pemFile: path)
            let store = SSL_CTX_get_cert_store(pointer)
            for cert in certs { _ = X509_STORE_add_cert(store, cert.pointer) }
            OpenSSLErrorQueue.clear()
        }
    }

    /// A context for connecting to the gateway or the feedback service:
    /// presents `identity`, and verifies the server against `trust` unless
    /// `verifyServer` is false.
    ///
    /// With `http2`, the client offers ALPN `h2` (the HTTP/2 provider API
    /// requires it); ``TLSConnection/negotiatedProtocol`` tells what the server chose.
    public static func client(identity: TLSIdentity?, trust: TrustRoots, verifyServer: Bool = true, http2: Bool = false) throws(TLSError) -> TLSContext {
        let context = try TLSContext(server: false, verifiesPeer: verifyServer)
        if http2 {
            // A length-prefixed list; OpenSSL copies it.
            var protocols: [UInt8] = [2] + Array("h2".utf8)
            guard SSL_CTX_set_alpn_protos(context.pointer, &protocols, UInt32(protocols.count)) == 0 else {
                throw TLSError(.openSSL(operation: "Offering ALPN h2", reason: OpenSSLErrorQueue.summary(OpenSSLErrorQueue.drain())))
            }
        }
        if let identity {
            try identity.checkValidity()
            try context.use(identity)
        }
        try context.trust(trust)
        SSL_CTX_set_verify(context.pointer, verifyServer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nil)
        return context
    }

    /// A context for the simulator: presents `identity` and requires client
    /// certificates issued by an authority in `clientAuthorities`.
    ///
    /// It offers at most TLS 1.2, as Apple's binary gateway did. That also makes
    /// a refused client certificate fail the client's own handshake; under TLS
    /// 1.3 the client would learn of it only at its first read.
    ///
    /// With `http2`, the server selects ALPN `h2` when the client offers it
    /// (and no protocol otherwise); with `requireClientCertificate` false, a
    /// client may connect without one (token authentication), but one it
    /// presents must still be issued by `clientAuthorities`.
    public static func server(identity: TLSIdentity, clientAuthorities: String, http2: Bool = false,
                              requireClientCertificate: Bool = true) throws(TLSError) -> TLSContext {
        let context = try TLSContext(server: true, verifiesPeer: true)
        _ = campaign_ssl_ctx_set_max_proto_version(context.pointer, TLS1_2_VERSION)
        try context.use(identity)
        try context.trust(.file(clientAuthorities))
        SSL_CTX_set_verify(context.pointer, SSL_VERIFY_PEER | (requireClientCertificate ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nil)
        if http2 {
            SSL_CTX_set_alpn_select_cb(context.pointer, { _, out, outCount, offered, offeredCount, _ in
                // `offered` is the client's length-prefixed list; OpenSSL keeps
                // it for the handshake, so the choice may point into it.
                guard let offered, let out, let outCount else { return SSL_TLSEXT_ERR_NOACK }
                var i = 0
                while i < Int(offeredCount) {
                    let n = Int(offered[i])
                    if n == 2, i + 2 < Int(offeredCount), offered[i + 1] == UInt8(ascii: "h"), offered[i + 2] == UInt8(ascii: "2") {
                        out.pointee = offered + i + 1
                        outCount.pointee = 2
                        return SSL_TLSEXT_ERR_OK
                    }
                    i += 1 + n
                }
                return SSL_TLSEXT_ERR_NOACK
            }, nil)
        }
        var sessionContext: [UInt8] = Array("campaign".utf8)
        _ = SSL_CTX_set_session_id_context(context.pointer, &sessionContext, UInt32(sessionContext.count))
        return context
    }
}
