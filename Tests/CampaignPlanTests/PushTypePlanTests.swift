import Foundation
import Testing
import APNSWire
import CampaignJSON
@testable import CampaignPlan
@testable import PlanStream

/// Plans of the newer device push types: what the header and each record
/// carry is what APNs requires of the type (reference apns-broadcast.md §4).
@Suite struct PushTypePlanTests {
    static func job(_ pushType: String, aps: String, extra: String = "") -> String {
        #"{"campaign":"types","format":"h2","topic":"com.example.app","pushType":"\#(pushType)"\#(extra),"fallback":["en"],"messages":{"en":\#(aps)}}"#
    }

    static let audience = "token,lang\n\(tokenHex(1)),en\n\(tokenHex(2)),en-GB\n"

    @Test(arguments: [("controls", ".push-type.controls", UInt32(0)), ("widgets", ".push-type.widgets", UInt32(1_700_086_400))])
    func controlsAndWidgetsPlanApplesBodyToTheSuffixedTopic(pushType: String, suffix: String, expiry: UInt32) throws {
        let run = try PlanRun(job: Self.job(pushType, aps: #"{"content-changed":true}"#), audience: Self.audience)
        #expect(run.summary.planned == 2)
        #expect(run.records.map { String(decoding: $0.payload, as: UTF8.self) } == Array(repeating: #"{"aps":{"content-changed":true}}"#, count: 2),
                "every record's bytes are exactly Apple's body")
        let header = run.reader.header
        #expect(header.http2?.topic == "com.example.app" + suffix && header.http2?.pushType == pushType)
        #expect(header.priority == .immediate)
        #expect(header.expiry == expiry, "controls: 0 as Apple's example; widgets: a day after plan time (1_700_000_000)")
    }

    @Test func aPushToTalkPlanGoesAtPriorityTenAndExpiresAtOnce() throws {
        let run = try PlanRun(job: Self.job("pushtotalk", aps: #"{"alert":"Dispatch: {unit}"}"#, extra: #","custom":{"unit":"{unit}"}"#),
                              audience: "token,unit\n\(tokenHex(3)),7\n")
        let header = run.reader.header
        #expect(header.http2?.topic == "com.example.app.voip-ptt" && header.http2?.pushType == "pushtotalk")
        #expect(header.priority == .immediate && header.expiry == 0, "apns-priority 10 and apns-expiration 0")
        #expect(run.records.map { String(decoding: $0.payload, as: UTF8.self) } == [#"{"aps":{"alert":"Dispatch: 7"},"unit":"7"}"#])
    }

    @Test func eachRowsInputPushChannelIsAChannelIdOrTheRowIsRejected() throws {
        let aps = #"{"timestamp":"{now:int}","event":"start","content-state":{"home":0},"attributes-type":"Match","attributes":{"match":"{match}"},"#
            + #""alert":{"title":"Kick-off"},"input-push-channel":"{channel}","input-push-token":1}"#
        let audience = "token,match,channel\n" + [
            "\(tokenHex(1)),m1,bWF0Y2gtMQ==",         // line 2: "match-1"
            "\(tokenHex(2)),m2,match-2",              // line 3: the id's text, not its base64
            "\(tokenHex(3)),m3,bWF0Y2gtMw",           // line 4: unpadded
            "\(tokenHex(4)),m4,",                     // line 5: none
            "\(tokenHex(5)),m5, bWF0Y2gtNQ== ",       // line 6: blanks around it
        ].joined(separator: "\n") + "\n"
        let run = try PlanRun(job: Self.job("liveactivity", aps: aps), audience: audience)
        #expect(run.summary.planned == 2)
        let payloads = run.records.map { try? JSONValue.parse($0.payload) }
        #expect(Set(payloads.map { $0?["aps"]?["input-push-channel"]?.stringValue }) == ["bWF0Y2gtMQ==", "bWF0Y2gtNQ=="])
        #expect(payloads.allSatisfy { $0?["aps"]?["input-push-token"] == .number("1") && $0?["aps"]?["timestamp"] == .number("1700000000") })
        #expect(run.reject(line: 3) == ("invalid_channel_id", "{channel} \"match-2\" is not a channel id (canonical base64) for input-push-channel"))
        #expect(run.reject(line: 4) == ("invalid_channel_id", "{channel} \"bWF0Y2gtMw\" is not a channel id (canonical base64) for input-push-channel"))
        #expect(run.reject(line: 5).code == "missing_variable")
        #expect(run.rejects.count == 3)
    }
}
