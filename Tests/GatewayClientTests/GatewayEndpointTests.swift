import Foundation
import Testing
import CampaignIO
import CampaignTLS
import CampaignTestSupport
@testable import GatewayClient

/// One way to open a gateway's connections, now or ahead of need, within one limit.
@Suite(.ownThreads) struct GatewayEndpointTests {
    static func endpoint(port: Int, handshakeSeconds: Double) throws -> GatewayEndpoint {
        let context = try TLSContext.client(identity: nil, trust: .file(TestCertificates.path("ca.pem")), http2: true)
        return GatewayEndpoint(host: "127.0.0.1", port: port, context: context, proxy: nil, handshakeSeconds: handshakeSeconds)
    }

    /// A server that accepts and never speaks TLS holds a connection opened
    /// ahead no longer than one opened now (a spare once waited 30 s).
    @Test(.timeLimit(.minutes(1))) func aConnectionOpenedAheadKeepsTheHandshakeLimit() throws {
        let server = try HostileHTTP2Server(.neverSpeaksTLS)
        defer { server.stop() }
        let endpoint = try Self.endpoint(port: server.port, handshakeSeconds: 0.5)
        let stop = try CancellationPipe()

        let start = Date()
        #expect(throws: TLSError.self) { try endpoint.dial(cancellation: stop) }
        let ahead = endpoint.dialAhead(cancellation: stop)
        guard case .failure(let error) = ahead.wait() else {
            Issue.record("a server that never speaks TLS gave a connection")
            return
        }
        if case .timedOut = error.kind {} else { Issue.record("not a timeout: \(error)") }
        #expect(Date().timeIntervalSince(start) < 10, "two attempts of 0.5 s each")
    }

    /// A connection on its way is ended by the stop.
    @Test(.timeLimit(.minutes(1))) func aStopEndsAConnectionOpenedAhead() throws {
        let server = try HostileHTTP2Server(.neverSpeaksTLS)
        defer { server.stop() }
        let endpoint = try Self.endpoint(port: server.port, handshakeSeconds: 30)
        let stop = try CancellationPipe()
        let ahead = endpoint.dialAhead(cancellation: stop)
        #expect(eventually(within: 10) { server.connections == 1 })
        let stopped = Date()
        stop.cancel()
        guard case .failure(let error) = ahead.wait() else {
            Issue.record("a stopped attempt gave a connection")
            return
        }
        #expect(error.kind == .cancelled)
        #expect(Date().timeIntervalSince(stopped) < 5)
    }
}
