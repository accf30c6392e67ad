import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import SendJournal

/// A league's night of broadcasts against the simulator, with the commands a
/// user runs: channels made before kick-off, one update per channel with its
/// own score (a kill -9 mid-send, then `--resume`), the final whistle's end
/// with a dismissal date, every channel deleted.
@Suite(.ownThreads) struct MatchNightTests {
    static let bundle = "com.example.campaign"

    static func updateJob(event: String = "update", extra: String = "") -> String {
        """
        {"campaign": "match-night-\(event)", "format": "h2", "broadcast": true, "pushType": "liveactivity", "topic": "\(bundle)",
         "priority": 10,
         "messages": {"en": {"event": "\(event)", "timestamp": "{now:int}",\(extra)
                             "content-state": {"home": "{home:int}", "away": "{away:int}", "minute": "{minute:int}"}}}}
        """
    }

    @Test(.timeLimit(.minutes(3))) func aWholeNightCreateUpdateKillResumeEndDelete() throws {
        let dir = TemporaryDirectory("match-night")
        let simulator = try startHTTP2Simulator(in: dir) { $0.managementPort = 0 }
        defer { simulator.stop() }
        let credentials = SendProcessTests.credentials()
        let manage = ["--bundle-id", Self.bundle, "--gateway", "127.0.0.1:\(simulator.managementPort)"] + credentials
        func channels(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
            let run = try PlanProcessTests.run(["channels"] + arguments + manage, in: dir)
            return (run.status, String(decoding: run.out, as: UTF8.self), run.err)
        }

        // Before kick-off: 300 channels, one per match, kept in an audience file.
        let created = try channels(["create", "--count", "300", "--storage", "most-recent", "--out", "channels.csv"])
        #expect(created.status == 0, "\(created.err)")
        let lines = try String(contentsOfFile: dir.file("channels.csv"), encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.first == "channel_id,storage")
        #expect(lines.dropFirst().allSatisfy { $0.hasSuffix(",most-recent") })
        let ids = lines.dropFirst().map { String($0.prefix { $0 != "," }) }
        #expect(ids.count == 300 && Set(ids).count == 300)
        #expect(ids.allSatisfy { ChannelID(base64: $0) != nil })

        // Each match's own score.
        func score(_ i: Int) -> (home: Int, away: Int, minute: Int) { (i % 5, (i / 5) % 4, 45 + i % 45) }
        var audience = "channel_id,home,away,minute\n"
        for (i, id) in ids.enumerated() { audience += "\(id),\(score(i).home),\(score(i).away),\(score(i).minute)\n" }
        try audience.write(toFile: dir.file("scores.csv"), atomically: true, encoding: .utf8)
        try Self.updateJob().write(toFile: dir.file("update.json"), atomically: true, encoding: .utf8)
        let planned = try PlanProcessTests.run(["plan", "update.json", "scores.csv", "--out", "update.plan"], in: dir)
        #expect(planned.status == 0, "\(planned.err)")

        // Sent slowly (6 s at its rate), killed once 60 updates are recorded, then resumed.
        let gateway = ["--gateway", "127.0.0.1:\(simulator.port)"]
        let first = try CampaignProcess(["send", "update.plan", "--journal", "update-journal", "--rate", "50"] + gateway + credentials, in: dir.path)
        let sixty = waitForEvent(of: first) { simulator.currentStatistics().broadcasts >= 60 }
        #expect(sixty == .came, "the send ended, or hung, before 60 updates were recorded: \(first.stderr)")
        first.kill9()
        let killedAt = try BroadcastSendTests.broadcasts(dir).count
        #expect(killedAt < 300, "the kill came after the send had ended")
        let resumed = try CampaignProcess(["send", "--resume", "update-journal"] + credentials, in: dir.path)
        #expect(resumed.wait(timeout: 90) == 0, "\(resumed.stderr)")
        let updates = try BroadcastSendTests.broadcasts(dir)
        #expect(Set(updates.map(\.channel)) == Set(ids), "every channel updated")
        let state = try Journal.read(directory: dir.file("update-journal"))
        let duplicates = updates.count - Set(updates.map(\.channel)).count
        #expect(duplicates <= state.duplicatesRisked, "\(duplicates) duplicates but \(state.duplicatesRisked) reported")
        #expect(state.outcome == .complete)
        #expect(state.doneCount == 300, "each channel's update final once")
        for (i, id) in ids.enumerated() {
            let payloads = updates.filter { $0.channel == id }.map(\.payload)
            #expect(!payloads.isEmpty)
            for payload in payloads {
                let stateValue = payload["aps"]?["content-state"]
                #expect(stateValue?["home"] == .number(String(score(i).home)) && stateValue?["away"] == .number(String(score(i).away))
                        && stateValue?["minute"] == .number(String(score(i).minute)), "channel \(i) got another match's score")
                #expect(payload["aps"]?["event"] == .string("update"))
            }
        }

        // The final whistle: end every activity, dismissed at once.
        try Self.updateJob(event: "end", extra: #" "dismissal-date": "{now:int}","#).write(toFile: dir.file("end.json"), atomically: true, encoding: .utf8)
        #expect(try PlanProcessTests.run(["plan", "end.json", "scores.csv", "--out", "end.plan"], in: dir).status == 0)
        let ended = try CampaignProcess(["send", "end.plan", "--journal", "end-journal"] + gateway + credentials, in: dir.path)
        #expect(ended.wait(timeout: 90) == 0, "\(ended.stderr)")
        let ends = try BroadcastSendTests.broadcasts(dir).dropFirst(updates.count)
        #expect(ends.count == 300 && Set(ends.map(\.channel)) == Set(ids))
        #expect(ends.allSatisfy { $0.payload["aps"]?["event"] == .string("end") && $0.payload["aps"]?["dismissal-date"]?.integerValue != nil })

        // After the night: every channel deleted, none left.
        let deleted = try channels(["delete", "--from", "channels.csv"])
        #expect(deleted.status == 0, "\(deleted.err)")
        let listed = try channels(["list"])
        #expect(listed.status == 0, "\(listed.err)")
        #expect(listed.out.split(separator: "\n").isEmpty, "channels left: \(listed.out)")
    }
}
