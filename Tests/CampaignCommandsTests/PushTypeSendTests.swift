import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
import GatewaySimulator

/// Push types whose credentials APNs restricts: `send` refuses what APNs
/// would refuse request by request, before it connects or journals anything.
@Suite(.ownThreads) struct PushTypeSendTests {
    static let refusal = "location pushes need token authentication (--auth-key, --key-id and --team-id): APNs refuses them over a certificate."

    @Test(.timeLimit(.minutes(2))) func aLocationPlanOverACertificateExits64BeforeConnectingAndGoesWithAToken() throws {
        let dir = TemporaryDirectory("location")
        let (csv, tokens) = randomAudienceCSV(count: 20, seed: 7)
        try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        try #"{"campaign":"where","format":"h2","topic":"com.example.campaign","pushType":"location","messages":{"en":{"content-available":1}}}"#
            .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let validate = try PlanProcessTests.run(["validate", "job.json"], in: dir)
        #expect(validate.status == 0, "\(validate.err)")
        #expect(String(decoding: validate.out, as: UTF8.self).contains(Self.refusal), "validate tells the rule before any send")
        let plan = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--out", "plan.ndjson"], in: dir)
        #expect(plan.status == 0, "\(plan.err)")
        let simulator = try startHTTP2Simulator(in: dir, tokens: true)
        defer { simulator.stop() }

        let certificate = try H2SendTests.send(dir, simulator)
        #expect(certificate.wait(timeout: 60) == 64, "\(certificate.stderr)")
        #expect(certificate.stderr == "campaign send: \(Self.refusal)\n", "one sentence naming the rule")
        #expect(!FileManager.default.fileExists(atPath: dir.file("journal")), "nothing journaled")
        #expect(simulator.currentStatistics().connections.isEmpty, "nothing connected")

        let token = try H2SendTests.send(dir, simulator, credentials: H2SendTests.tokenAuth())
        #expect(token.wait(timeout: 60) == 0, "\(token.stderr)")
        simulator.stop()
        #expect(Set(try H2SendTests.recorded(dir).map(\.token)) == tokens, "the same plan goes with token authentication")
    }
}
