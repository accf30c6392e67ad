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
@testable import SendJournal
@testable import SendEngine

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

@Suite(.serialized, .ownThreads) struct SendTests {
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
        // Status 1 is retried after a backoff, never final: only the bad tokens fail.
        #expect(report.failed == bad.count)
        let store = try FeedbackStore.load(path: faulty.dir.file("store.ndjson"))
        #expect(Set(store.entries.keys.map { DeviceToken(bytes: $0).hex }) == bad)
        let state = try Journal.read(directory: faulty.dir.file("journal"))
        #expect(state.outcome == .complete)
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

    /// Status 1 (processing error) is the gateway's trouble, never the
    /// notification's: against a gateway that refuses every notification
    /// with it, nothing becomes final; each is retried after its backoff, and
    /// once the gateway has failed for the outage limit with nothing
    /// accepted, the send stops with 69, leaving them pending for a resume,
    /// which delivers each once from a healthy gateway.
    @Test(.timeLimit(.minutes(2))) func aGatewayThatRefusesEverythingWithStatusOneEndsTheSendWith69AndNothingFinal() throws {
        var faults = FaultPlan()
        faults.errorRate = 1
        let harness = try SendHarness(faults: faults)
        let tokens = try makePlan(count: 5, in: harness.dir)
        let outageLimit = 3.0
        let started = Deadline.now()
        let report = try harness.send(connections: 1) { $0.outageLimitSeconds = outageLimit }
        let seconds = Double(Deadline.now().nanoseconds - started.nanoseconds) / 1e9
        let statistics = harness.simulator.currentStatistics()
        #expect(report.outcome == .gaveUp, "\(report.outcome) \(report.message ?? "")")
        #expect(report.message?.contains("status 1") == true && report.message?.contains("--resume") == true, "\(report.message ?? "")")
        #expect(report.failed == 0 && report.accepted == 0, "\(report.failedByReason)")
        // Bounded: the outage limit, a tick of the check, a poll.
        #expect(seconds >= outageLimit && seconds < outageLimit + 10, "\(seconds) s")
        // Never faster than the backoff (0.25 s doubling, jitter down to half):
        // after k retries a notification has waited at least 0.125 × (2^k - 1) s,
        // so in under 13 s none is refused more than 7 times (the old rule: 4 each, then final).
        let refusals = statistics.rejected[1, default: 0]
        #expect(refusals >= 1 && refusals <= 7 * tokens.count, "\(refusals) refusals")
        let state = try Journal.read(directory: harness.dir.file("journal"))
        #expect(state.failures.isEmpty, "\(state.failures.map(\.reason))")
        #expect(state.outcome == .gaveUp)
        #expect(state.doneCount == 0)

        // The resume, against a gateway that works again, sends them all.
        let healthy = try SendHarness(faults: FaultPlan())
        try FileManager.default.copyItem(atPath: harness.dir.file("plan.ndjson"), toPath: healthy.dir.file("plan.ndjson"))
        try FileManager.default.copyItem(atPath: harness.dir.file("journal"), toPath: healthy.dir.file("journal"))
        let again = try healthy.send(connections: 1, resume: true)
        let recorded = try healthy.recordedTokens()
        #expect(again.outcome == .complete, "\(again.message ?? "")")
        #expect(again.accepted == tokens.count && again.failed == 0)
        #expect(recorded.sorted() == tokens.sorted())
    }

    /// The binary interface's replay, with a gateway that refuses half of
    /// everything with status 1: each refusal proves what came before it,
    /// what came after goes again at once, and the refused one again after
    /// its backoff. Every notification ends accepted; none is final otherwise.
    @Test(.timeLimit(.minutes(2)), arguments: ["enhanced", "frame"])
    func aGatewayThatRefusesHalfWithStatusOneStillGetsEveryNotification(format: String) throws {
        var faults = FaultPlan()
        faults.errorRate = 0.5
        faults.seed = 11
        let harness = try SendHarness(faults: faults)
        let tokens = try makePlan(count: 300, format: format, in: harness.dir)
        // A short backoff keeps the test short: the send lasts as long as
        // its unluckiest notification's backoffs, which double with each
        // refusal in a row (of 300, one is refused about 9 times, sometimes
        // 12 or more); from 0.25 s that is minutes, from 1 ms seconds.
        let report = try harness.send(connections: 4) { $0.retryBackoffSeconds = 0.001 }
        let recorded = try harness.recordedTokens()
        let statistics = harness.simulator.currentStatistics()
        #expect(report.outcome == .complete, "\(report.message ?? "")")
        #expect(report.failed == 0, "\(report.failedByReason)")
        #expect(report.accepted == tokens.count)
        #expect(Set(recorded) == Set(tokens), "\(Set(tokens).subtracting(recorded).count) never reached the gateway")
        #expect(recorded.count - Set(recorded).count <= report.duplicatesRisked)
        #expect(statistics.rejected[1, default: 0] >= tokens.count / 4, "\(statistics.rejected) refusals: the fault was not exercised")
        let state = try Journal.read(directory: harness.dir.file("journal"))
        #expect(state.failures.isEmpty, "\(state.failures.count) final: \(state.failures.prefix(3).map(\.reason))")
        #expect(state.outcome == .complete)
        #expect(state.doneCount == tokens.count)
    }

    /// A notification that kills every connection it heads (the gateway
    /// drops it without an answer) is not sent again in this run, and not
    /// final either: the others are delivered, the send ends with 69 naming
    /// it as left pending, and a resume against a healthy gateway delivers it.
    @Test(.timeLimit(.minutes(2))) func aNotificationThatKillsItsConnectionsIsLeftPendingAndTheSendEndsWith69() throws {
        let planning = try SendHarness(faults: FaultPlan())
        let tokens = try makePlan(count: 200, in: planning.dir)
        var faults = FaultPlan()
        let poison = tokens[100]
        faults.poisonTokens = [DeviceToken(hex: poison)!.bytes]
        let harness = try SendHarness(faults: faults)
        try FileManager.default.copyItem(atPath: planning.dir.file("plan.ndjson"), toPath: harness.dir.file("plan.ndjson"))
        // Proofs every 10, one connection: the poison heads its window (100…109).
        let report = try harness.send(connections: 1) { $0.checkpointEvery = 10 }
        let recorded = try harness.recordedTokens()
        #expect(report.outcome == .gaveUp, "\(report.outcome) \(report.message ?? "")")
        #expect(report.message?.contains("1 notification was") == true, "\(report.message ?? "")")
        #expect(report.failed == 0, "\(report.failedByReason)")
        #expect(report.accepted == tokens.count - 1)
        #expect(Set(recorded) == Set(tokens).subtracting([poison]))
        let state = try Journal.read(directory: harness.dir.file("journal"))
        #expect(state.failures.isEmpty, "\(state.failures.map(\.reason))")
        #expect(state.outcome == .gaveUp)
        #expect(state.doneCount == tokens.count - 1)

        let healthy = try SendHarness(faults: FaultPlan())
        try FileManager.default.copyItem(atPath: harness.dir.file("plan.ndjson"), toPath: healthy.dir.file("plan.ndjson"))
        try FileManager.default.copyItem(atPath: harness.dir.file("journal"), toPath: healthy.dir.file("journal"))
        let again = try healthy.send(connections: 1, resume: true)
        #expect(again.outcome == .complete, "\(again.message ?? "")")
        #expect(again.accepted == 1 && again.alreadyDone == tokens.count - 1)
        #expect(try healthy.recordedTokens() == [poison])
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
        #expect(state.outcome == .gaveUp)
    }
}
