import CampaignIO
import CampaignTLS

/// Opens a worker's TLS connections to the gateway: backoff between failed
/// attempts, giving up (through ``SendShared/fail(_:)``) on a credential or
/// trust failure or after too many failures in a row, and a spare connection
/// opened ahead while the current one awaits its last answer. Every wait
/// watches ``SendShared/halt``. Transport-neutral: HTTP/2 dials the same way.
final class GatewayDialer {
    private let settings: SendSettings
    private let shared: SendShared
    private var backoff = ReconnectBackoff()
    /// The next connection, opened while a proof is awaited on this one.
    private var spare: PendingConnection?

    init(settings: SendSettings, shared: SendShared) {
        self.settings = settings
        self.shared = shared
    }

    /// A connection, or nil after a failed attempt (backed off already) or
    /// when the send stops or gives up.
    func connect() -> TLSConnection? {
        if let spare {
            self.spare = nil
            if case .success(let ready) = spare.wait() { return connected(ready) }
            // It failed: connect again the usual way, which counts and backs off.
        }
        do {
            return connected(try TLSConnection.connect(host: settings.gatewayHost, port: settings.gatewayPort,
                                                       context: shared.context, timeout: 30, cancellation: shared.halt))
        } catch {
            if error.kind == .cancelled { return nil }
            if error.isCredentialOrTrustFailure {
                shared.fail(.credentials(error))
                return nil
            }
            let delay = backoff.failed()
            if backoff.failures > shared.maxConnectAttempts {
                shared.fail(.unreachable(error))
                return nil
            }
            _ = sleep(until: .after(seconds: delay), cancellation: shared.halt)
            return nil
        }
    }

    /// Starts opening the next connection, unless one is on its way.
    func openSpare() {
        guard spare == nil else { return }
        spare = PendingConnection(host: settings.gatewayHost, port: settings.gatewayPort,
                                  context: shared.context, cancellation: shared.halt)
    }

    /// Closes a spare connection that will not be used.
    func dropSpare() {
        if let spare, case .success(let unused) = spare.wait() { unused.abort() }
        spare = nil
    }

    private func connected(_ connection: TLSConnection) -> TLSConnection {
        backoff.succeeded()
        shared.connected()
        return connection
    }
}
