import Foundation
import Testing
import APNSWire
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import FeedbackStore
import GatewaySimulator
import SendJournal

/// `send` of a broadcast plan: each answer class of the reference's §3 that
/// a broadcast can earn, with what it leaves in the journal, the dead-channel
/// store and the exit code.
@Suite(.ownThreads) struct BroadcastSendTests {
    static let bundle = "com.example.campaign"

    /// Channels made in the simulator's store, and a plan of one update per channel.
    static func plan(_ simulator: GatewaySimulator, in dir: TemporaryDirectory, count: Int, policy: Broadcast.StoragePolicy = .mostRecent,
                     expiresIn: Int = 0) throws -> [ChannelID] {
        var ids: [ChannelID] = []
        for _ in 0..<count {
            guard case .created(let id) = simulator.channelStore.create(environment: "sandbox", bundleID: bundle, policy: policy) else {
                Issue.record("the simulator made no channel"); return []
            }
            ids.append(id)
        }
        var csv = "channel_id,home\n"
        for (i, id) in ids.enumerated() { csv += "\(id.base64),\(i)\n" }
        try csv.write(toFile: dir.file("channels.csv"), atomically: true, encoding: .utf8)
        try """
        {"campaign": "night", "format": "h2", "broadcast": true, "pushType": "liveactivity", "topic": "\(bundle)", "expiresIn": \(expiresIn),
         "messages": {"en": {"event": "update", "timestamp": "{now:int}", "content-state": {"home": "{home:int}"}}}}
        """.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let run = try PlanProcessTests.run(["plan", "job.json", "channels.csv", "--out", "plan.ndjson"], in: dir)
        #expect(run.status == 0, "\(run.err)")
        return ids
    }

    /// The simulator's broadcast record lines: channel and payload of each accepted broadcast, in order.
    static func broadcasts(_ dir: TemporaryDirectory) throws -> [(channel: String, payload: JSONValue)] {
        guard let text = try? String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8) else { return [] }
        return try text.split(separator: "\n").compactMap {
            let v = try JSONValue.parse(String($0))
            guard v["kind"]?.stringValue == "broadcast" else { return nil }
            return (try #require(v["channel"]?.stringValue), try #require(v["payload"]))
        }
    }

    static func send(_ dir: TemporaryDirectory, _ simulator: GatewaySimulator, _ extra: [String] = []) throws -> CampaignProcess {
        try CampaignProcess(["send", "plan.ndjson", "--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)"]
                            + SendProcessTests.credentials() + extra, in: dir.path)
    }

    @Test(.timeLimit(.minutes(2))) func aChannelGoneIsFinalAndTheNextPlanDropsIt() throws {
        let dir = TemporaryDirectory("broadcast-gone")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        let ids = try Self.plan(simulator, in: dir, count: 20)
        let gone = Array(ids[3..<6])
        for id in gone { #expect(simulator.channelStore.delete(environment: "sandbox", bundleID: Self.bundle, id: id)) }
        let run = try Self.send(dir, simulator, ["--feedback-store", "dead-channels.store"])
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        #expect(run.stderr.contains("400 ChannelNotRegistered: 3"), "\(run.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.outcome == .complete && state.doneCount == 20 && state.failures.count == 3)
        #expect(Set(state.suppressions.map(\.0)) == Set(gone.map(\.bytes)), "the dead channels go to the store")
        let store = try FeedbackStore.load(path: dir.file("dead-channels.store"))
        #expect(Set(store.entries.map(\.0)) == Set(gone.map(\.bytes)))
        // The journal quotes each accepted broadcast's ids.
        let log = try String(contentsOfFile: dir.file("journal/journal.log"), encoding: .utf8)
        #expect(log.components(separatedBy: "\"t\":\"ids\"").count - 1 == 17)
        #expect(log.contains("\"unique_id\":"))
        let failures = try PlanProcessTests.run(["status", "journal", "--failures"], in: dir)
        let named = String(decoding: failures.out, as: UTF8.self).split(separator: "\n").compactMap { try? JSONValue.parse(String($0))["channel"]?.stringValue }
        #expect(Set(named) == Set(gone.map(\.base64)), "status names dead channels as APNs issued them")

        let replan = try PlanProcessTests.run(["plan", "job.json", "channels.csv", "--out", "again.ndjson", "--feedback-store", "dead-channels.store"], in: dir)
        #expect(replan.status == 0, "\(replan.err)")
        let rejects = try String(contentsOfFile: dir.file("again.ndjson.rejects.ndjson"), encoding: .utf8).split(separator: "\n")
            .map { try JSONValue.parse(String($0)) }
        #expect(Set(rejects.compactMap { $0["channel"]?.stringValue }) == Set(gone.map(\.base64)))
        #expect(rejects.allSatisfy { $0["code"]?.stringValue == "suppressed_by_feedback" })
    }

    @Test(.timeLimit(.minutes(2))) func theCapabilityTurnedOffStopsTheSendWith69AndLeavesEverythingPending() throws {
        let dir = TemporaryDirectory("broadcast-disabled")
        let simulator = try startHTTP2Simulator(in: dir) { $0.broadcastDisabled = [Self.bundle] }
        defer { simulator.stop() }
        _ = try Self.plan(simulator, in: dir, count: 10)
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 60) == 69, "\(run.stderr)")
        #expect(run.stderr.contains("FeatureNotEnabled") && run.stderr.contains("developer.apple.com"), "\(run.stderr)")
        #expect(run.stderr.contains("then resume with `campaign send --resume ") && run.stderr.contains("journal`."), "the command to run, whole: \(run.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty, "the account's state is not the notification's")
        #expect(state.doneCount == 0)
    }

    @Test(.timeLimit(.minutes(2))) func anExpirationOnAChannelThatStoresNothingIsFinalForThatChannel() throws {
        let dir = TemporaryDirectory("broadcast-expiry")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        // The audience does not say the channels store nothing, so the plan cannot refuse it; APNs does.
        _ = try Self.plan(simulator, in: dir, count: 5, policy: .noneStored, expiresIn: 3600)
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 60) == 0, "\(run.stderr)")
        #expect(run.stderr.contains("400 BadExpirationDate: 5"), "\(run.stderr)")
        #expect(run.stderr.components(separatedBy: "\"expiresIn\": 0").count - 1 == 1, "the advice once, however many connections: \(run.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func serverTroubleIsNeverFinalForABroadcast() throws {
        let dir = TemporaryDirectory("broadcast-throttled")
        var faults = FaultPlan()
        faults.throttleRate = 0.3
        let simulator = try startHTTP2Simulator(in: dir, faults: faults)
        defer { simulator.stop() }
        let ids = try Self.plan(simulator, in: dir, count: 40)
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 90) == 0, "\(run.stderr)")
        let recorded = try Self.broadcasts(dir).map { $0.channel }
        #expect(Set(recorded) == Set(ids.map(\.base64)), "every 429 sent again until accepted")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty && state.doneCount == 40)
    }

    @Test(.timeLimit(.minutes(2))) func aBundleTheCertificateDoesNotCoverStopsWith77NamingIt() throws {
        let dir = TemporaryDirectory("broadcast-topic")
        let simulator = try startHTTP2Simulator(in: dir)
        defer { simulator.stop() }
        _ = try Self.plan(simulator, in: dir, count: 3)
        // The same plan for another app (the certificate is com.example.campaign's).
        let text = try String(contentsOfFile: dir.file("job.json"), encoding: .utf8).replacingOccurrences(of: Self.bundle, with: "com.example.other")
        try text.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        try? FileManager.default.removeItem(atPath: dir.file("plan.ndjson"))
        let replanned = try PlanProcessTests.run(["plan", "job.json", "channels.csv", "--out", "plan.ndjson"], in: dir)
        #expect(replanned.status == 0, "\(replanned.err)")
        let run = try Self.send(dir, simulator)
        #expect(run.wait(timeout: 60) == 77, "\(run.stderr)")
        #expect(run.stderr.contains("403 TopicMismatch") && run.stderr.contains("com.example.other"), "\(run.stderr)")
        let state = try Journal.read(directory: dir.file("journal"))
        #expect(state.failures.isEmpty && state.doneCount == 0, "a credential refused is not the notification's fault")
    }
}
