import CampaignIO
internal import COpenSSL

/// A failure of TLS set-up or transport, printed as one sentence that says
/// which file or peer and what to do.
public struct TLSError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        case fileMissing(path: String)
        case fileUnreadable(path: String, reason: String)
        case invalidCertificate(path: String)
        case invalidKey(path: String)
        /// A key that cannot sign provider tokens (not P-256).
        case notAProviderTokenKey(path: String)
        case wrongPassphrase(path: String)
        case passphraseNeeded(path: String)
        case keyDoesNotMatchCertificate(certificate: String, key: String)
        case certificateExpired(subject: String)
        case certificateNotYetValid(subject: String)
        case serverNotTrusted(host: String, reason: String)
        case hostNameMismatch(host: String)
        /// The peer refused our certificate during or right after the handshake.
        case clientRefused(reason: String)
        /// A client presented no certificate, or one we do not trust (server side).
        case clientNotTrusted(reason: String)
        case connectionFailed(host: String, port: Int, reason: String)
        case handshakeFailed(reason: String)
        case connectionReset(reason: String)
        case timedOut(operation: String)
        /// The HTTP proxy (`--proxy`, `HTTPS_PROXY`) cannot be reached.
        case proxyUnreachable(proxy: String, reason: String)
        /// The proxy answered CONNECT with 407 (or 401): credentials missing or wrong.
        case proxyAuthenticationFailed(proxy: String, status: Int, sent: Bool)
        /// The proxy answered CONNECT with another status (403, 502, 503…), or not in HTTP.
        case proxyRefused(proxy: String, status: Int, reason: String)
        /// The proxy closed the connection before the tunnel was open.
        case proxyClosed(proxy: String, when: String)
        case cancelled
        case openSSL(operation: String, reason: String)
    }

    public var kind: Kind

    public init(_ kind: Kind) { self.kind = kind }

    /// Whether the failure is about credentials or trust: retrying will not help.
    public var isCredentialOrTrustFailure: Bool {
        switch kind {
        case .fileMissing, .fileUnreadable, .invalidCertificate, .invalidKey, .notAProviderTokenKey, .wrongPassphrase,
             .passphraseNeeded, .keyDoesNotMatchCertificate, .certificateExpired,
             .certificateNotYetValid, .serverNotTrusted, .hostNameMismatch, .clientRefused, .clientNotTrusted,
             .proxyAuthenticationFailed:
            true
        default:
            false
        }
    }

    public var description: String {
        switch kind {
        case .fileMissing(let path): "The file \(path) does not exist."
        case .fileUnreadable(let path, let reason): "The file \(path) cannot be read: \(reason)."
        case .invalidCertificate(let path): "The file \(path) holds no PEM certificate that OpenSSL can read."
        case .invalidKey(let path): "The file \(path) holds no private key that OpenSSL can read."
        case .notAProviderTokenKey(let path): "The key in \(path) is not a P-256 (ES256) key, as an APNs .p8 key is: give --auth-key the AuthKey_<KEY ID>.p8 file from the developer account's Keys page."
        case .wrongPassphrase(let path): "The passphrase for \(path) is wrong."
        case .passphraseNeeded(let path): "The file \(path) is encrypted: give its passphrase with --passphrase-env or --passphrase-file."
        case .keyDoesNotMatchCertificate(let cert, let key): "The private key in \(key) does not match the certificate in \(cert)."
        case .certificateExpired(let subject): "The certificate of \(subject) has expired."
        case .certificateNotYetValid(let subject): "The certificate of \(subject) is not valid yet."
        case .serverNotTrusted(let host, let reason): "The server \(host) is not trusted: \(reason)."
        case .hostNameMismatch(let host): "The server's certificate is not valid for the name \(host)."
        case .clientRefused(let reason): "The server refused our client certificate (\(reason))."
        case .clientNotTrusted(let reason): "The client's certificate was refused: \(reason)."
        case .connectionFailed(let host, let port, let reason): "Cannot connect to \(host):\(port): \(reason)."
        case .handshakeFailed(let reason): "The TLS handshake failed: \(reason)."
        case .connectionReset(let reason): "The connection was lost: \(reason)."
        case .timedOut(let operation): "Timed out while \(operation)."
        case .proxyUnreachable(let proxy, let reason): "Cannot connect to the proxy \(proxy): \(reason)."
        case .proxyAuthenticationFailed(let proxy, let status, let sent):
            sent ? "The proxy \(proxy) refused our credentials (\(status)): check the user and password (in --proxy, or the variable --proxy-user-env names)."
                 : "The proxy \(proxy) wants credentials (\(status)): give them as --proxy http://user:password@host:port or with --proxy-user-env VAR."
        case .proxyRefused(let proxy, let status, let reason):
            status == 0 ? "The proxy \(proxy) did not open a tunnel to the gateway: \(reason)."
                        : "The proxy \(proxy) refused to open a tunnel to the gateway (\(status)\(reason.isEmpty ? "" : " \(reason)"))."
        case .proxyClosed(let proxy, let when): "The proxy \(proxy) closed the connection \(when)."
        case .cancelled: "The operation was cancelled."
        case .openSSL(let operation, let reason): "\(operation) failed: \(reason)."
        }
    }
}

/// Reads and clears this thread's OpenSSL error queue.
enum OpenSSLErrorQueue {
    struct Entry {
        var library: Int32
        var reason: Int32
        var text: String
    }

    static func drain() -> [Entry] {
        var entries: [Entry] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            entries.append(Entry(library: ERR_GET_LIB(code), reason: ERR_GET_REASON(code), text: text))
        }
        return entries
    }

    /// The reason strings of the queue, most specific last; "unknown error" when empty.
    static func summary(_ entries: [Entry]) -> String {
        guard let last = entries.last else { return "unknown error" }
        // "error:0A000086:SSL routines::certificate verify failed" → "certificate verify failed"
        return last.text.split(separator: ":", omittingEmptySubsequences: false).last.map(String.init) ?? last.text
    }

    static func clear() { ERR_clear_error() }
}
