import CampaignIO
import CampaignTLS
import SendJournal
import GatewayClient

/// Opens a worker's TLS connections to the gateway: backoff between failed
/// attempts, giving up (through ``SendShared/fail(_:)``) on a credential or
/// trust failure or after too many failures in a row, and a spare connection
/// opened ahead while the current one awaits its last answer. Every wait
/// watches ``SendShared/halt``. Transport-neutral: HTTP/2 dials the same way.
package final class GatewayDialer: LinkDialer {
    private let settings: SendSettings
    private let shared: SendShared
    private let endpoint: GatewayEndpoint
    /// The pause before the next attempt: it grows with failed attempts and
    /// with connections that achieved nothing, and shrinks only when a
    /// connection gets an answer about a notification (a handshake alone
    /// proves nothing: a server that drops every connection after it would
    /// otherwise be dialled in a tight loop).
    private var backoff = ReconnectBackoff()
    /// Failed connection attempts in a row (a handshake that succeeds ends the run).
    private var failedAttempts = 0
    /// The next connection, opened while a proof is awaited on this one.
    private var spare: PendingConnection?
    /// Failed attempts in a row after which a gateway never reached in this run is given up on (about 1.5 s of backoff).
    package static let firstContactAttempts = 5

    package init(settings: SendSettings, shared: SendShared) {
        self.settings = settings
        self.shared = shared
        endpoint = GatewayEndpoint(host: settings.gatewayHost, port: settings.gatewayPort, context: shared.context, proxy: settings.proxy,
                                   handshakeSeconds: Self.handshakeSeconds(settings))
    }

    /// A connection, or nil after a failed attempt (backed off already) or
    /// when the send stops or gives up.
    package func connect() -> ConnectionLink? {
        if let spare {
            self.spare = nil
            if case .success(let ready) = spare.wait() { return connected(ready) }
            // It failed: connect again the usual way, which counts and backs off.
        }
        do {
            return connected(try endpoint.dial(cancellation: shared.halt))
        } catch {
            if error.kind == .cancelled { return nil }
            if error.isCredentialOrTrustFailure {
                shared.fail(.credentials(error))
                return nil
            }
            let delay = backoff.failed()
            failedAttempts += 1
            // A gateway never reached in this run (no such name, refused,
            // unreachable, silent) is given up on after a few quick tries, not
            // after minutes of backoff: it is most likely the wrong address.
            let neverReached = !shared.hasConnected && {
                switch error.kind {
                case .connectionFailed, .timedOut, .proxyUnreachable, .proxyRefused, .proxyClosed: true
                default: false
                }
            }()
            if failedAttempts > shared.maxConnectAttempts || (neverReached && failedAttempts >= Self.firstContactAttempts) {
                shared.fail(.unreachable(error))
                return nil
            }
            let via = settings.proxy.map { " through \($0)" } ?? ""
            // The error's own sentence when it already names the gateway ("Cannot connect to H:P: refused.").
            let why = if case .connectionFailed(_, _, let reason) = error.kind { "\(reason)." } else { "\(error)" }
            shared.logFailedAttempt("cannot connect to \(settings.gatewayHost):\(settings.gatewayPort)\(via): \(why) Trying again in \(waitText(delay)).")
            _ = shared.clock.sleep(seconds: delay, cancellation: shared.halt)
            return nil
        }
    }

    /// Starts opening the next connection, unless one is on its way.
    package func openSpare() {
        guard spare == nil else { return }
        spare = endpoint.dialAhead(cancellation: shared.halt)
    }

    /// Closes a spare connection that will not be used.
    package func dropSpare() {
        if let spare, case .success(let unused) = spare.wait() { unused.abort() }
        spare = nil
    }

    private func connected(_ connection: TLSConnection) -> TLSConnection {
        failedAttempts = 0
        shared.connected()
        return connection
    }

    /// The TLS handshake's limit: the answer timeout, at most 10 s (Apple's
    /// handshake takes a few round trips; a server that never speaks TLS
    /// must not hold a send for minutes).
    package static func handshakeSeconds(_ settings: SendSettings) -> Double { min(10, settings.answerTimeoutSeconds) }

    /// A connection got an answer about a notification: the next pause starts small.
    package func productive() { backoff.succeeded() }

    /// A connection ended having achieved nothing: pause before the next, as
    /// after a failed attempt (watching the stop).
    package func backOffAfterFruitlessConnection() {
        _ = shared.clock.sleep(seconds: backoff.failed(), cancellation: shared.halt)
    }
}
