import Foundation
import Testing
import CampaignIO
import CampaignJSON
import CampaignTestSupport
@testable import CampaignSend
@testable import SendJournal

extension HostileHTTP2Tests {
    /// A gateway that accepts TCP but never speaks TLS: the send tries for
    /// some seconds (its journal ticks meanwhile), ends 69, and `status` says
    /// no connection was ever open: the pool's size is not an open connection.
    @Test(.timeLimit(.minutes(2))) func aGatewayNeverReachedLeavesNoConnectionInTheStatus() throws {
        let dir = TemporaryDirectory("h2never")
        _ = try H2SendTests.plan(count: 50, in: dir)
        let server = try HostileHTTP2Server(.neverSpeaksTLS)
        defer { server.stop() }
        let run = try Self.send(dir, port: server.port, ["--connections", "4"] + Self.quick)
        let status = run.wait(timeout: 60)
        if status == nil { run.kill9() }
        #expect(status == 69, "\(run.stderr.suffix(1000))")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.reconnects == 0)
        let listed = try PlanProcessTests.run(["status", dir.file("journal"), "--json"], in: dir)
        let value = try JSONValue.parse(String(decoding: listed.out, as: UTF8.self))
        #expect(value["pool_connections"] != nil, "\(value)")
        let open = value["pool_connections"]?.integerValue ?? 0, peak = value["pool_connections_peak"]?.integerValue ?? 0
        #expect(open == 0 && peak == 0, "status counts connections never opened: \(value)")
    }
}
