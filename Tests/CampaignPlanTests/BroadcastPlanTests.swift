import Foundation
import Testing
import APNSWire
import AudienceIngest
import CampaignJSON
import CampaignPayload
import FeedbackStore
@testable import CampaignPlan
@testable import PlanStream

let matchNightJob = """
{"campaign": "match-night", "format": "h2", "broadcast": true, "pushType": "liveactivity", "topic": "com.example.scores",
 "priority": 5, "fallback": ["en"],
 "messages": {"en": {"event": "update", "timestamp": "{now:int}", "relevance-score": "{relevance:number|50}",
                     "content-state": {"home": "{home_score:int}", "away": "{away_score:int}", "minute": "{minute}"}}}}
"""

/// A broadcast job plans an audience of channels: one record per channel,
/// its id's bytes where a device token's go, its own score in its payload.
@Suite struct BroadcastPlanTests {
    /// Four channel ids of 16 bytes, as the simulator and (by length) APNs issue them.
    static let channels: [ChannelID] = (0..<4).map { (i: Int) -> ChannelID in
        ChannelID(bytes: (0..<16).map { (k: Int) -> UInt8 in UInt8(truncatingIfNeeded: k &* 37 &+ i &* 101 &+ 5) })
    }

    @Test func eachChannelGetsItsOwnContentStateAndTheHeaderNamesTheBundle() throws {
        var csv = "channel_id,home_score,away_score,minute\n"
        for (i, c) in Self.channels.enumerated() { csv += "\(c.base64),\(i),\(i + 1),\(60 + i)\n" }
        let run = try PlanRun(job: matchNightJob, audience: csv)
        #expect(run.reader.header.http2 == PlanHeader.HTTP2Fields(topic: "com.example.scores", pushType: "liveactivity", collapseId: nil, broadcast: true))
        #expect(run.reader.header.expiry == 0, "a broadcast is stored only when the job asks")
        #expect(run.reader.header.maxPayload == 5120)
        #expect(run.records.count == 4)
        for record in run.records {
            let i = Self.channels.firstIndex { $0.bytes == record.token }!
            let aps = try JSONValue.parse(record.payload)["aps"]!
            #expect(aps["content-state"]?["home"] == .number(String(i)))
            #expect(aps["content-state"]?["away"] == .number(String(i + 1)))
            #expect(aps["content-state"]?["minute"] == .string(String(60 + i)))
            #expect(aps["timestamp"] == .number("1700000000"))
            #expect(aps["event"] == .string("update"))
            #expect(aps["relevance-score"] == .number("50"))
        }
    }

    @Test func badChannelIdsAreRejectedWithTheirLineAndDuplicatesOnce() throws {
        let good = Self.channels[0].base64
        let csv = "channel_id,home_score,away_score,minute\n\(good),1,0,3\nnot base64!,1,0,3\nZh==,1,0,3\n,1,0,3\n\(good),2,0,9\n"
        let run = try PlanRun(job: matchNightJob, audience: csv)
        #expect(run.records.count == 1)
        #expect(run.reject(line: 3).code == "invalid_channel")
        #expect(run.reject(line: 4).code == "invalid_channel", "bits under the padding: not the id APNs issued")
        #expect(run.reject(line: 5).code == "missing_channel")
        #expect(run.reject(line: 6).code == "duplicate_token")
        #expect(run.reject(line: 6).reason == "duplicate channel: an earlier row has it (the first wins)")
        // Every reject of a broadcast names its channel: as base64, as the row had it, or null when it had none.
        func channel(_ line: Int) -> JSONValue? { run.rejects.first { $0["line"]?.integerValue == Int64(line) }?["channel"] }
        #expect(channel(3) == .string("not base64!") && channel(4) == .string("Zh==") && channel(5) == .null && channel(6) == .string(good))
        #expect(run.rejects.allSatisfy { $0["token"] == nil }, "no token field in a broadcast's rejects")
    }

    /// A content-state over the limit: said as what it is, not as an alert that could not be emptied.
    @Test func aBroadcastTooLargeIsRejectedWithoutTalkOfAnAlert() throws {
        let csv = "channel_id,home_score,away_score,minute\n\(Self.channels[0].base64),1,0,\(String(repeating: "9", count: 6000))\n"
        let run = try PlanRun(job: matchNightJob, audience: csv)
        #expect(run.records.isEmpty)
        let reject = run.reject(line: 2)
        #expect(reject.code == "cannot_fit")
        #expect(reject.reason?.contains("over a broadcast's 5120-byte limit (a broadcast has no alert to shorten)") == true, "\(reject.reason ?? "")")
        #expect(reject.reason?.contains("empty alert") == false)
    }

    @Test func aChannelThatStoresNothingRefusesAnExpiration() throws {
        let job = matchNightJob.replacingOccurrences(of: "\"priority\": 5,", with: "\"priority\": 5, \"expiresIn\": 3600,")
        let csv = "channel_id,storage,home_score,away_score,minute\n\(Self.channels[0].base64),none,1,0,3\n\(Self.channels[1].base64),most-recent,1,0,3\n\(Self.channels[2].base64),,1,0,3\n"
        let run = try PlanRun(job: job, audience: csv)
        #expect(Set(run.records.map { $0.token }) == [Self.channels[1].bytes, Self.channels[2].bytes], "most-recent and unknown storage may expire")
        #expect(run.reject(line: 2).code == "channel_stores_nothing")
        #expect(run.reject(line: 2).reason?.contains("expiresIn") == true)
        #expect(run.reader.header.expiry == 1_700_003_600)
    }

    @Test func aDeadChannelInTheStoreIsDropped() throws {
        var store = FeedbackStore()
        store.record(token: Self.channels[1].bytes, timestamp: 1_600_000_000)
        var csv = "channel_id,home_score,away_score,minute\n"
        for c in Self.channels { csv += "\(c.base64),1,0,3\n" }
        let run = try PlanRun(job: matchNightJob, audience: csv, store: store)
        #expect(run.records.count == 3)
        #expect(!run.records.contains { $0.token == Self.channels[1].bytes })
        #expect(run.reject(line: 3).code == "suppressed_by_feedback")
        #expect(run.rejects.first?["channel"]?.stringValue == Self.channels[1].base64, "rejects name channels as APNs issued them")
    }

    @Test func aMappedChannelColumnAndAMissingOne() throws {
        let job = matchNightJob.replacingOccurrences(of: "\"fallback\"", with: "\"columns\": {\"channel_id\": \"match_channel\"}, \"fallback\"")
        let run = try PlanRun(job: job, audience: "match_channel,home_score,away_score,minute\n\(Self.channels[0].base64),1,0,3\n")
        #expect(run.records.count == 1)
        let missing = #expect(throws: AudienceError.self) { try PlanRun(job: matchNightJob, audience: "token,home_score\nabc,1\n") }
        #expect(missing?.reason.sentence.hasPrefix("has no channel_id column (its columns are: token, home_score)") == true,
                "a broadcast's audience lacks channels, not tokens: \(missing.map { "\($0)" } ?? "")")
    }

    @Test func theJobRulesOfABroadcast() throws {
        func refusal(_ job: String) -> String? {
            do { _ = try CampaignJob(json: JSONValue.parse(job), path: "job.json"); return nil } catch let e as JobError { return e.description } catch { return "\(error)" }
        }
        #expect(refusal(matchNightJob) == nil)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"event\": \"update\"", with: "\"event\": \"start\""))?.contains("cannot go to a channel") == true)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"pushType\": \"liveactivity\"", with: "\"pushType\": \"alert\""))?.contains("liveactivity") == true)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"topic\": \"com.example.scores\",", with: ""))?.contains("needs \"topic\"") == true)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"format\": \"h2\",", with: ""))?.contains("\"broadcast\" goes with \"format\": \"h2\"") == true)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"format\": \"h2\",", with: "\"format\": \"enhanced\","))?
                    .contains("\"broadcast\" goes with \"format\": \"h2\"") == true, "not a complaint about topic")
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"priority\": 5,", with: "\"priority\": 5, \"collapseId\": \"x\","))?.contains("collapseId") == true)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"priority\": 5,", with: "\"priority\": 5, \"frequencyCap\": {\"max\": 1, \"per\": \"24h\", \"scope\": \"s\"},"))?
                    .contains("\"frequencyCap\" does not go with \"broadcast\"") == true, "refused when the job is read, not only by send")
        // Live Activity updates go at 5 or 10 (ActivityKit); 1 is refused with one sentence naming the key.
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"priority\": 5,", with: "\"priority\": 10,")) == nil)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"priority\": 5,", with: "\"priority\": 1,"))?
                    .contains("\"priority\" must be 10 (immediate) or 5 (conserve power) for a broadcast, not 1") == true)
        // The bundle id with the Live Activity suffix is taken, and the path gets the bare id (a suffix there is TopicDisallowed).
        let suffixed = try CampaignJob(json: JSONValue.parse(matchNightJob.replacingOccurrences(of: "com.example.scores\"", with: "com.example.scores.push-type.liveactivity\"")), path: "j")
        #expect(suffixed.topic == "com.example.scores")
        let end = matchNightJob.replacingOccurrences(of: "\"event\": \"update\"", with: "\"event\": \"end\", \"dismissal-date\": \"{ends:int}\"")
        #expect(refusal(end) == nil)
        #expect(refusal(matchNightJob.replacingOccurrences(of: "\"event\": \"update\"", with: "\"event\": \"end\", \"dismissal-date\": \"soon\""))?.contains("dismissal-date") == true)
    }
}
