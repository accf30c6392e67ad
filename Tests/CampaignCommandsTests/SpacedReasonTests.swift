import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
import GatewaySimulator

/// Apple's broadcast error list spells 503's reason "Service Unavailable":
/// a send against a gateway that spells it so names it ServiceUnavailable in
/// its log, its report and `status`, and retries it as the server's trouble.
@Suite(.ownThreads) struct SpacedReasonTests {
    @Test(.timeLimit(.minutes(2))) func aSpacedServiceUnavailableIsServiceUnavailableEverywhere() throws {
        let dir = TemporaryDirectory("spaced-reason")
        let tokens = Set(try H2SendTests.plan(count: 300, in: dir))
        var faults = FaultPlan()
        faults.errorRate = 0.2
        faults.spacedReasons = true
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let run = try H2SendTests.send(dir, simulator, ["--report", "report.json"])
        #expect(run.wait(timeout: 120) == 0, "\(run.stderr)")
        simulator.stop()
        #expect(Set(try H2SendTests.recorded(dir).map(\.token)) == tokens, "every notification delivered: the 503s were retried")
        #expect(!run.stderr.contains("not an identifier") && !run.stderr.contains("Service Unavailable"), "\(run.stderr)")
        let report = try JSONValue.parse(Array(Data(contentsOf: URL(fileURLWithPath: dir.file("report.json")))))
        #expect((report["resent_by_kind"]?["503 ServiceUnavailable"]?.integerValue ?? 0) > 0, "\(report)")
        #expect(report["resent_by_kind"]?.objectMembers?.allSatisfy { !$0.key.contains("reason of") } == true, "\(report)")
        let status = String(decoding: try PlanProcessTests.run(["status", "journal"], in: dir).out, as: UTF8.self)
        #expect(status.contains("503 ServiceUnavailable"), "\(status)")
    }
}
