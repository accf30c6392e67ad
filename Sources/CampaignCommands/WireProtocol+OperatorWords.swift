import APNSWire

/// What `send`, `status` and the status page say of a protocol, asked of it
/// rather than tested for by name: a new protocol answers these here.
extension WireProtocol {
    /// Whose words `status` and its page use for a journal whose plan header
    /// this version cannot read (none it wrote): the binary interface's, as
    /// they always have.
    static let toldForAnUnreadableHeader = WireProtocol.binary(.enhanced)

    /// The gateway of an APNs environment ("sandbox", "production") that takes this protocol.
    func gateway(environment name: String) -> (String, Int)? {
        switch self {
        case .binary: GatewayAddress.environment(name, feedback: false)
        case .http2: GatewayAddress.http2Environment(name)
        }
    }

    /// Whether the TLS handshake offers `h2` (ALPN).
    var negotiatesHTTP2InTLS: Bool {
        switch self {
        case .binary: false
        case .http2: true
        }
    }

    /// Why the credentials given cannot send a plan of this protocol, or nil when they can.
    func missingCredential(certificate: Bool, providerTokenKey: Bool) -> String? {
        switch self {
        case .binary:
            certificate ? nil : "The binary interface (a \(self) plan) needs --cert: provider tokens (--auth-key) are for h2 plans."
        case .http2:
            certificate || providerTokenKey ? nil : "An h2 plan needs --cert or --auth-key."
        }
    }

    /// `status`: what was resent, and what the possible duplicates are, in brackets after their counts.
    var resentMeaning: (resent: String, duplicates: String) {
        switch self {
        case .binary:
            ("discarded by the gateway after a refusal or shutdown, refused for the gateway's own trouble (status 1, 255) and retried after a backoff, or unproven on a lost connection",
             "unproven when a connection was lost or the send stopped")
        case .http2:
            ("refused unprocessed, asked to retry, or open on a lost connection", "requests open when a connection was lost or the send stopped")
        }
    }

    /// The status page's name of the protocol, in its title and in full.
    var pageName: (short: String, full: String) {
        switch self {
        case .binary(let format): ("binary interface", "binary interface (\(format) format)")
        case .http2: ("HTTP/2", "HTTP/2 provider API")
        }
    }

    /// The status page's heading over the send rate: what makes a notification count.
    var rateChartHeading: String {
        switch self {
        case .binary: "Send rate (notifications made final per second: they become final when a proof of acceptance is answered, about every 2 s)"
        case .http2: "Send rate (notifications answered per second; each run drawn on its own)"
        }
    }

    /// Whether the page charts resends by why: HTTP/2's retries have kinds
    /// worth telling apart (429, 5xx, refused streams, lost connections).
    var chartsResendsByKind: Bool {
        switch self {
        case .binary: false
        case .http2: true
        }
    }

    /// The status page's note on what "resent" covers.
    var resentNote: String {
        switch self {
        case .binary:
            "Resent: notifications the gateway discarded after a refusal or shutdown on their connection, or left unproven when one was lost. The gateway confirms nothing, so a connection ends with a proof of acceptance: a notification it must refuse."
        case .http2:
            "Resent: requests the server refused unprocessed (REFUSED_STREAM, above a GOAWAY) or asked to retry (429 TooManyRequests, 500, 503), and requests open on a lost connection (possible duplicates). None of them is final: only an answer about the notification itself is."
        }
    }
}
