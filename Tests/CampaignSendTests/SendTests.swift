import Foundation
import Testing
import APNSWire
import AudienceIngest
import CampaignIO
import CampaignJSON
import CampaignPayload
import CampaignPlan
import PlanStream
import CampaignTLS
import CampaignTestSupport
import FeedbackStore
import GatewaySimulator
@testable import CampaignSend

/// A plan of `count` notifications written into `dir`; returns the tokens by seq.
func makePlan(count: Int, format: String = "enhanced", in dir: TemporaryDirectory, name: String = "plan.ndjson", seed: UInt64 = 1) throws -> [String] {
    var rng = SplitMix64(seed: seed)
    var csv = "token,lang,n\n"
    var tokens: [String] = []
    for i in 0..<count {
        let hex = (0..<4).map { _ in String(format: "%016llx", rng.next()) }.joined()
        tokens.append(hex)
        csv += "\(hex),\(i % 3 == 0 ? "es" : "en"),\(i)\n"
    }
    try csv.write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
    let job = try CampaignJob(json: JSONValue.parse("""
    {"campaign":"test","format":"\(format)","maxPayload":256,"fallback":["en"],
     "messages":{"en":{"alert":"Hello number {n}"},"es":{"alert":"Hola número {n}"}}}
    """), path: "job.json")
    var options = PlanOptions(now: 1_700_000_000)
    options.shards = 16
    let summary = try Planner(job: job, options: options).run(
        reader: AudienceFile.open(dir.file("audience.csv")), plan: PlanWriter(path: dir.file(name)), rejects: nil)
    #expect(summary.planned == count)
    return tokens
}

final class SendHarness {
    let dir = TemporaryDirectory("send")
    let simulator: GatewaySimulator

    init(faults: FaultPlan) throws {
        var configuration = SimulatorConfiguration(certificatesDirectory: TestCertificates.directory)
        configuration.recordPath = dir.file("record.ndjson")
        configuration.faults = faults
        simulator = try GatewaySimulator(configuration: configuration)
        try simulator.start()
    }

    deinit { simulator.stop() }

    func settings(connections: Int) -> SendSettings {
        var s = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: simulator.port, certificate: TestCertificates.path("client.pem"))
        s.key = TestCertificates.path("client.key")
        s.caFile = TestCertificates.path("ca.pem")
        s.connections = connections
        s.planPath = dir.file("plan.ndjson")
        s.feedbackStore = dir.file("store.ndjson")
        return s
    }

    func send(connections: Int, journal name: String = "journal", resume: Bool = false, configure: (inout SendSettings) -> Void = { _ in }) throws -> SendReport {
        var s = settings(connections: connections)
        configure(&s)
        let plan = try PlanReader(path: s.planPath!)
        let journal: Journal
        var state: JournalState? = nil
        if resume {
            (journal, state) = try Journal.resume(directory: dir.file(name))
        } else {
            journal = try Journal.create(directory: dir.file(name), settings: s, planHeader: plan.header.json)
        }
        let sender = try Sender(settings: s, journal: journal, context: TestCertificates.clientContext(), resumeState: state,
                                cancellation: CancellationPipe())
        return try sender.run(plan: plan)
    }

    /// Tokens the simulator accepted, in order, with repeats.
    func recordedTokens() throws -> [String] {
        simulator.stop()
        let text = (try? String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8)) ?? ""
        return try text.split(separator: "\n").map { line in
            try #require(try JSONValue.parse(String(line))["token"]?.stringValue)
        }
    }
}

@Suite(.serialized) struct SendTests {
    @Test(arguments: ["enhanced", "frame"])
    func faultsAtRandomDeliverEveryValidNotificationExactlyOnce(format: String) throws {
        var rng = SplitMix64(seed: 99)
        var faults = FaultPlan()
        faults.shutdownAfter = 100
        faults.errorRate = 0.002
        faults.seed = 5
        let harness = try SendHarness(faults: FaultPlan())
        let tokens = try makePlan(count: 6000, format: format, in: harness.dir)
        let bad = Set((0..<25).map { _ in tokens[Int(rng.next() % UInt64(tokens.count))] })
        faults.badTokens = Set(bad.map { DeviceToken(hex: $0)!.bytes })
        let faulty = try SendHarness(faults: faults)
        try FileManager.default.copyItem(atPath: harness.dir.file("plan.ndjson"), toPath: faulty.dir.file("plan.ndjson"))

        let report = try faulty.send(connections: 4)
        let recorded = try faulty.recordedTokens()
        #expect(report.outcome == .complete)
        #expect(Set(recorded).count == recorded.count, "a notification was delivered twice")
        #expect(Set(recorded) == Set(tokens).subtracting(bad))
        #expect(report.failedByStatus[8] == bad.count)
        #expect(report.accepted == tokens.count - bad.count - (report.failed - bad.count))
        #expect(report.duplicatesRisked == 0)
        // Status 1 is retried; giving up needs four in a row, which at 0.2% does not happen.
        #expect(report.failed == bad.count)
        let store = try FeedbackStore.load(path: faulty.dir.file("store.ndjson"))
        #expect(Set(store.entries.keys.map { DeviceToken(bytes: $0).hex }) == bad)
        let state = try Journal.read(directory: faulty.dir.file("journal"))
        #expect(state.outcome == "complete")
        #expect(state.doneCount == tokens.count)
        #expect(state.planChecksum != nil)
    }

    @Test func shutdownsResendOnlyWhatFollowedTheLastAccepted() throws {
        var faults = FaultPlan()
        faults.shutdownAfter = 500      // each of the 4 connections owns ~750 of 3000: every one is shut down
        let harness = try SendHarness(faults: faults)
        let tokens = try makePlan(count: 3000, in: harness.dir)
        let report = try harness.send(connections: 4)
        let recorded = try harness.recordedTokens()
        #expect(report.outcome == .complete)
        #expect(report.shutdowns >= 4)
        #expect(report.failed == 0)
        #expect(recorded.count == tokens.count && Set(recorded) == Set(tokens))
    }

    @Test func hardDropsLoseNothingAndCountDuplicates() throws {
        var faults = FaultPlan()
        faults.dropEvery = 2500
        let harness = try SendHarness(faults: faults)
        let tokens = try makePlan(count: 30_000, in: harness.dir)
        let report = try harness.send(connections: 4)
        let recorded = try harness.recordedTokens()
        #expect(report.outcome == .complete)
        #expect(Set(recorded) == Set(tokens), "a notification was lost")
        let duplicates = recorded.count - Set(recorded).count
        #expect(duplicates <= report.duplicatesRisked)
        #expect(report.drops > 0)
        #expect(report.accepted == tokens.count)
    }

    @Test func aTornJournalTailIsIgnoredAndTheResumeFinishes() throws {
        let harness = try SendHarness(faults: FaultPlan())
        let tokens = try makePlan(count: 500, in: harness.dir)
        _ = try harness.send(connections: 2)
        let log = harness.dir.file("journal/journal.log")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log))
        bytes.append(contentsOf: Array("1234abcd {\"t\":\"do".utf8))   // a record cut by power loss
        try bytes.write(to: URL(fileURLWithPath: log))
        let state = try Journal.read(directory: harness.dir.file("journal"))
        #expect(state.tornTail)
        #expect(state.doneCount == 500)
        let again = try harness.send(connections: 2, resume: true)
        #expect(again.alreadyDone == 500)
        #expect(again.accepted == 0)
        #expect(try harness.recordedTokens().count == tokens.count)
        #expect(try Journal.read(directory: harness.dir.file("journal")).tornTail == false)
    }

    @Test func aCredentialFailureStopsAtOnce() throws {
        let harness = try SendHarness(faults: FaultPlan())
        _ = try makePlan(count: 50, in: harness.dir)
        let stranger = try CertificateAuthority(commonName: "stranger")
        let identity = try stranger.issue(subject: [("CN", "intruder")], role: .client)
        let context = try TLSContext.client(identity: identity, trust: .file(TestCertificates.path("ca.pem")))
        let s = harness.settings(connections: 2)
        let plan = try PlanReader(path: s.planPath!)
        let journal = try Journal.create(directory: harness.dir.file("j"), settings: s, planHeader: plan.header.json)
        let report = try Sender(settings: s, journal: journal, context: context, cancellation: CancellationPipe()).run(plan: plan)
        #expect(report.outcome == .credentials)
        #expect(report.message?.hasPrefix("The server refused our client certificate") == true)
    }

    /// Status 1 is retried at most 3 times, as the README says: given up on
    /// at the fourth refusal of the same notification, never sooner, never later.
    @Test func aNotificationRefusedWithStatusOneIsRetriedThreeTimesThenGivenUp() throws {
        var faults = FaultPlan()
        faults.errorRate = 1
        let harness = try SendHarness(faults: faults)
        let tokens = try makePlan(count: 5, in: harness.dir)
        let report = try harness.send(connections: 1)
        let statistics = harness.simulator.currentStatistics()
        #expect(report.outcome == .complete)
        #expect(report.failedByStatus == [1: tokens.count])
        #expect(report.accepted == 0)
        #expect(statistics.rejected[1] == 4 * tokens.count, "1 attempt and 3 retries each")
        let state = try Journal.read(directory: harness.dir.file("journal"))
        #expect(state.failures.count == tokens.count && state.failures.allSatisfy { $0.gaveUp && $0.status == 1 })
        #expect(Set(state.failures.map { DeviceToken(bytes: $0.token).hex }) == Set(tokens))
    }

    @Test func aSlowGatewayAppliesBackpressureAndEverythingArrivesOnce() throws {
        var faults = FaultPlan()
        faults.readDelayMilliseconds = 2
        let harness = try SendHarness(faults: faults)
        let tokens = try makePlan(count: 3000, in: harness.dir)
        let report = try harness.send(connections: 2) { $0.batchBytes = 2048 }
        let recorded = try harness.recordedTokens()
        #expect(report.outcome == .complete)
        #expect(recorded.count == tokens.count && Set(recorded) == Set(tokens))
    }

    @Test func aGatewayThatNeverReadsEndsTheSendInsteadOfHanging() throws {
        var faults = FaultPlan()
        faults.readDelayMilliseconds = 600_000   // it accepts connections, then never reads
        let harness = try SendHarness(faults: faults)
        _ = try makePlan(count: 20_000, in: harness.dir)
        let report = try harness.send(connections: 1) { $0.stallSeconds = 0.5 }
        #expect(report.outcome == .gaveUp)
        #expect(report.message?.contains("stopped reading") == true)
        #expect(report.accepted == 0)
        let state = try Journal.read(directory: harness.dir.file("journal"))
        #expect(state.outcome == "gave-up")
    }
}
