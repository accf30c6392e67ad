import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
import GatewaySimulator

/// `:authority` names the gateway as HTTP/2 does: the host, with the port
/// whenever it is not HTTPS's 443 (Apple's 2197, a simulator's, a test's).
@Suite(.ownThreads) struct RequestAuthorityTests {
    @Test(.timeLimit(.minutes(2))) func eachRequestNamesTheGatewaysHostAndPort() throws {
        let dir = TemporaryDirectory("authority")
        _ = try H2SendTests.plan(count: 20, in: dir)
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let run = try H2SendTests.send(dir, simulator)
        #expect(run.wait(timeout: 120) == 0, "\(run.stderr)")
        simulator.stop()
        let lines = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n").map { try JSONValue.parse(String($0)) }
        #expect(lines.count == 20)
        #expect(lines.allSatisfy { $0["authority"]?.stringValue == "127.0.0.1:\(simulator.port)" }, "\(lines.first.map { "\($0)" } ?? "no record")")
    }
}
