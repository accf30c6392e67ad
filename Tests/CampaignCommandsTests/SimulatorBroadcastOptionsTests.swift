import Foundation
import Testing
import CampaignJSON
import CampaignTestSupport
@testable import CampaignCommands
import GatewaySimulator

/// `campaign simulator`'s broadcast and channel options: parsed into the
/// configuration, refused where they do not apply, and the ready file's key.
@Suite(.ownThreads) struct SimulatorBroadcastOptionsTests {
    @Test func theOptionsReachTheConfiguration() throws {
        let command = try Campaign.parseAsRoot(["simulator", "--protocol", "h2", "--certs", "c", "--management-port", "0", "--channel-limit", "5",
                                                "--environment", "production", "--broadcast-disabled", "com.a", "--broadcast-disabled", "com.b",
                                                "--broadcast-strict", "--management-throttle-rate", "0.25", "--management-error-rate", "0.5", "--seed", "9",
                                                "--management-unavailable-first", "2"])
        let configuration = try #require(command as? Simulator).configuration()
        #expect(configuration.managementPort == 0 && configuration.channelLimit == 5 && configuration.environment == "production")
        #expect(configuration.broadcastDisabled == ["com.a", "com.b"] && configuration.broadcastStrict)
        #expect(configuration.managementFaults.throttleRate == 0.25 && configuration.managementFaults.errorRate == 0.5 && configuration.managementFaults.seed == 9)
        #expect(configuration.managementUnavailableFirst == 2)
        #expect(configuration.faults.throttleRate == 0 && configuration.faults.errorRate == 0, "the device listener's faults are its own")
        let plain = try #require(try Campaign.parseAsRoot(["simulator", "--protocol", "h2", "--certs", "c"]) as? Simulator).configuration()
        #expect(plain.managementPort == nil && plain.channelLimit == 10_000 && plain.environment == "sandbox" && !plain.broadcastStrict)
    }

    @Test(.timeLimit(.minutes(2))) func theReadyFileNamesTheManagementPort() throws {
        let dir = TemporaryDirectory("ready")
        let run = try PlanProcessTests.run(["simulator", "--protocol", "h2", "--certs", TestCertificates.directory, "--management-port", "0",
                                            "--ready-file", dir.file("ready.json"), "--stats", "-", "--max-seconds", "0.5"], in: dir)
        #expect(run.status == 0, "\(run.err)")
        let ready = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: dir.file("ready.json")))))
        let (port, management) = (ready["port"]?.integerValue ?? 0, ready["management_port"]?.integerValue ?? 0)
        #expect(port > 0 && management > 0 && port != management, "\(ready)")
        #expect(run.err.contains("channel management API on 127.0.0.1:\(management)"), "\(run.err)")
    }
}
