import Foundation
import Testing
import CampaignIO
import CampaignTLS
import CampaignTestSupport
@testable import GatewaySimulator

/// The relay that puts distance between a client and the simulator: what a
/// side sent before it reset the connection still arrives, as on a real path
/// (a server's last answers, written just before it drops a connection).
@Suite(.ownThreads) struct LatencyRelayTests {
    @Test(.timeLimit(.minutes(1))) func bytesSentBeforeAResetArriveBeforeIt() throws {
        let stop = try CancellationPipe()
        defer { stop.cancel() }
        let behind = try Listener(port: 0), front = try Listener(port: 0)
        let relayToServer = try Socket.connect(host: "127.0.0.1", port: behind.port, deadline: .after(seconds: 5))
        let server = try #require(try behind.accept(cancellation: stop))
        let client = try Socket.connect(host: "127.0.0.1", port: front.port, deadline: .after(seconds: 5))
        let relayToClient = try #require(try front.accept(cancellation: stop))
        let relay = LatencyRelay(delayNanoseconds: 50_000_000)
        let done = Thread { relay.run(client: relayToClient, server: relayToServer, cancellation: stop) }
        done.start()

        // The server's last words, then a reset (a dropped connection).
        let answers = [UInt8](repeating: 0x61, count: 1_000)
        #expect(answers.withUnsafeBytes { Glibc.write(server.fd, $0.baseAddress, $0.count) } == 1_000)
        server.abort()

        // The client reads until the connection ends (or 5 s, a backstop).
        var received: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(5)
        reading: while Date() < deadline {
            var fds = [pollfd(fd: client.fd, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 1, 100) > 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(client.fd, $0.baseAddress, $0.count) }
            switch n {
            case 1...: received += buffer[0..<n]
            case 0: break reading
            default: if errno != EAGAIN && errno != EINTR { break reading }
            }
        }
        #expect(received.count == answers.count, "\(received.count) of the 1,000 bytes written before the reset arrived")
    }
}
