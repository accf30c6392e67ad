import CampaignIO
import CampaignTLS

/// Where a client's connections go and how each is opened: one TLS setup and
/// one proxy path for a send's connections, the spares it opens ahead, and
/// the channel management API's client, all bounded by the same handshake
/// limit and watching the caller's stop.
package struct GatewayEndpoint: Sendable {
    package var host: String
    package var port: Int
    package var context: TLSContext
    package var proxy: HTTPProxy?
    /// The limit of the TCP connect, the proxy's tunnel and the TLS handshake together.
    package var handshakeSeconds: Double

    package init(host: String, port: Int, context: TLSContext, proxy: HTTPProxy?, handshakeSeconds: Double) {
        (self.host, self.port, self.context, self.proxy, self.handshakeSeconds) = (host, port, context, proxy, handshakeSeconds)
    }

    /// A connection, now; `cancellation` ends the attempt (``TLSError/Kind/cancelled``).
    package func dial(cancellation: CancellationPipe) throws(TLSError) -> TLSConnection {
        try TLSConnection.connect(host: host, port: port, context: context, timeout: handshakeSeconds,
                                  cancellation: cancellation, proxy: proxy)
    }

    /// A connection opened on a thread of its own, for later.
    package func dialAhead(cancellation: CancellationPipe) -> PendingConnection {
        PendingConnection(host: host, port: port, context: context, timeout: handshakeSeconds, cancellation: cancellation, proxy: proxy)
    }
}
