import Testing
import Foundation
import APNSWire
import AudienceIngest
import CampaignJSON
@testable import CampaignPayload

/// Apple's rules for the newer device push types (reference apns-broadcast.md
/// §2 and §4): controls and widgets, push-to-talk, and push-to-start into a
/// channel. Each refusal is the job's one sentence, naming the key.
@Suite struct PushTypeRulesTests {
    /// An h2 job of `pushType`; `extra` is more top-level members (with their leading comma).
    static func h2(_ pushType: String, aps: String, extra: String = "", topic: String = "com.example.app") throws -> CampaignJob {
        try job(#"{"campaign":"c","format":"h2","topic":"\#(topic)","pushType":"\#(pushType)"\#(extra),"messages":{"en":\#(aps)}}"#)
    }

    static func refusal(_ pushType: String, aps: String, extra: String = "") -> String? {
        do { _ = try h2(pushType, aps: aps, extra: extra); return nil } catch let error as JobError { return error.reason.sentence } catch { return "\(error)" }
    }

    static let contentChanged = #"{"content-changed":true}"#
    /// "two-channel-id" in base64, as `channels create` prints an id.
    static let channel = "dHdvLWNoYW5uZWwtaWQ="
    static func start(_ extra: String) -> String {
        #"{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"Match","attributes":{"home":"A"},"alert":{"title":"Kick-off"},\#(extra)}"#
    }

    @Test(arguments: [("controls", ".push-type.controls"), ("widgets", ".push-type.widgets")])
    func controlsAndWidgetsGoToTheirSuffixedTopicAndRenderApplesBodyExactly(pushType: String, suffix: String) throws {
        let j = try Self.h2(pushType, aps: Self.contentChanged)
        #expect(j.topic == "com.example.app" + suffix)
        let (payload, outcome) = render(PayloadRenderer(job: j, now: 1_700_000_000), [:])
        #expect(payload == #"{"aps":{"content-changed":true}}"#, "the JSON literal true, not a string")
        #expect(outcome == .fitted)
        #expect(try Self.h2(pushType, aps: Self.contentChanged, topic: "com.example.app" + suffix).topic == "com.example.app" + suffix, "already suffixed: as given")
    }

    @Test func controlsDefaultToApplesExampleAndWidgetsKeepTheUsualDefaults() throws {
        let controls = try Self.h2("controls", aps: Self.contentChanged)
        #expect(controls.priority == .immediate && controls.expiresIn == 0, "Apple's controls example: priority 10, expiration 0")
        let widgets = try Self.h2("widgets", aps: Self.contentChanged)
        #expect(widgets.priority == .immediate && widgets.expiresIn == 86_400)
        // Neither is Apple's requirement: a job may say otherwise.
        let told = try Self.h2("controls", aps: Self.contentChanged, extra: #","priority":5,"expiresIn":3600"#)
        #expect(told.priority.rawValue == 5 && told.expiresIn == 3600)
    }

    @Test(arguments: ["controls", "widgets"], [
        (#"{"content-changed":true,"alert":"Hi"}"#, "", "messages.en.alert is not allowed in a PT push: its aps must be exactly {\"content-changed\": true}"),
        (#"{"badge":1}"#, "", "messages.en.badge is not allowed in a PT push: its aps must be exactly {\"content-changed\": true}"),
        (#"{"content-changed":"true"}"#, "", "messages.en.content-changed must be the JSON literal true, not \"true\""),
        (#"{"content-changed":1}"#, "", "messages.en.content-changed must be the JSON literal true, not 1"),
        (#"{"content-changed":false}"#, "", "messages.en.content-changed must be the JSON literal true, not false"),
        (#"{"content-changed":true}"#, #","custom":{"campaign":"spring"}"#,
         "custom.campaign is not allowed in a PT push: its body must be exactly {\"aps\":{\"content-changed\":true}}"),
    ])
    func controlsAndWidgetsRefuseAnythingButContentChanged(pushType: String, refused: (aps: String, extra: String, sentence: String)) {
        let expected = refused.sentence.replacingOccurrences(of: "PT", with: pushType)
        #expect(Self.refusal(pushType, aps: refused.aps, extra: refused.extra) == expected)
    }

    @Test func pushToTalkGoesAtPriorityTenAndIsNeverStored() throws {
        let j = try Self.h2("pushtotalk", aps: #"{"alert":"Dispatch"}"#, extra: #","custom":{"channel":"{team}"}"#)
        #expect(j.topic == "com.example.app.voip-ptt")
        #expect(j.priority == .immediate && j.expiresIn == 0, "defaulted: Apple requires 10 and apns-expiration 0")
        #expect(j.custom.map(\.key) == ["channel"], "custom keys are allowed [PTT]")
        _ = try Self.h2("pushtotalk", aps: #"{"alert":"x"}"#, extra: #","priority":10,"expiresIn":0"#)
        #expect(Self.refusal("pushtotalk", aps: #"{"alert":"x"}"#, extra: #","priority":5"#)
            == "\"priority\" 5 is refused for pushtotalk pushes: Apple requires 10 (with \"expiresIn\": 0)")
        #expect(Self.refusal("pushtotalk", aps: #"{"alert":"x"}"#, extra: #","expiresIn":60"#)
            == "\"expiresIn\" must be 0 for pushtotalk pushes: Apple requires apns-expiration 0 (leave it out and 0 is used)")
        // Apple's Push to Talk payloads are custom keys ({"activeSpeaker": …}): an empty aps goes with them, not alone.
        let speaker = try Self.h2("pushtotalk", aps: "{}", extra: #","custom":{"activeSpeaker":"{speaker}"}"#)
        #expect(render(PayloadRenderer(job: speaker, now: 1), ["speaker": "Ana"]).0 == #"{"aps":{},"activeSpeaker":"Ana"}"#)
        #expect(Self.refusal("pushtotalk", aps: "{}")?.contains("must have at least one aps key") == true)
    }

    @Test func pushToStartMayNameAChannelOrAskForAToken() throws {
        let literal = try Self.h2("liveactivity", aps: Self.start(#""input-push-channel":"\#(Self.channel)","input-push-token":1"#))
        let (payload, _) = render(PayloadRenderer(job: literal, now: 1), [:])
        #expect(payload.hasSuffix(#""input-push-channel":"dHdvLWNoYW5uZWwtaWQ=","input-push-token":1}}"#))
        let templated = try Self.h2("liveactivity", aps: Self.start(#""input-push-channel":"{channel}""#))
        #expect(templated.mappableNames.contains("channel"), "a variable like any other, mappable by columns")
        let renderer = PayloadRenderer(job: templated, now: 1)
        let (ok, outcome) = render(renderer, ["channel": " bWF0Y2gtNDI= "])
        #expect(outcome == .fitted)
        #expect(ok.hasSuffix(#""input-push-channel":"bWF0Y2gtNDI="}}"#), "blanks around the id dropped")
        for bad in ["match-42", "bWF0Y2gtNDI", "Zh==", "bWF0Y2gtNDI=\" ,\"x\":\"", ""] {
            let (_, refused) = render(renderer, ["channel": bad])
            #expect(refused == (bad.isEmpty ? .missingVariable("channel") : .invalidChannelID(variable: "channel", value: bad)), "\(bad)")
        }
        let defaulted = try Self.h2("liveactivity", aps: Self.start(#""input-push-channel":"{channel|\#(Self.channel)}""#))
        #expect(render(PayloadRenderer(job: defaulted, now: 1), [:]).0.hasSuffix(#""input-push-channel":"dHdvLWNoYW5uZWwtaWQ="}}"#))
    }

    static let notAChannel = "messages.en.input-push-channel must be a channel id (canonical base64, as `campaign channels create` prints it) or one \"{variable}\" holding one"

    @Test(arguments: [
        ("liveactivity", #"{"timestamp":1,"event":"update","content-state":{},"input-push-channel":"dHdvLWNoYW5uZWwtaWQ="}"#,
         "messages.en.input-push-channel is for push-to-start (\"event\": \"start\"): an activity that is updated or ended already listens where it listens"),
        ("liveactivity", #"{"timestamp":1,"event":"end","content-state":{},"input-push-token":1}"#,
         "messages.en.input-push-token is for push-to-start (\"event\": \"start\"): an activity that is updated or ended already listens where it listens"),
        ("liveactivity", start(#""input-push-token":2"#), "messages.en.input-push-token must be 1"),
        ("liveactivity", start(#""input-push-channel":"two-channel-id""#), notAChannel),
        ("liveactivity", start(#""input-push-channel":"dHdvLWNoYW5uZWwtaWR=""#), notAChannel),
        ("liveactivity", start(#""input-push-channel":" dHdvLWNoYW5uZWwtaWQ=""#), notAChannel),
        ("liveactivity", start(#""input-push-channel":"id-{channel}""#), notAChannel),
        ("liveactivity", start(#""input-push-channel":"{channel:int}""#), notAChannel),
        ("liveactivity", start(#""input-push-channel":"{now}""#), notAChannel),
        ("liveactivity", start(#""input-push-channel":7"#), notAChannel),
        ("liveactivity", start(#""input-push-channel":"{channel|abc}""#),
         "messages.en.input-push-channel: the default of {channel|abc} must be a channel id (canonical base64)"),
        ("alert", #"{"alert":"x","input-push-channel":"dHdvLWNoYW5uZWwtaWQ="}"#,
         "messages.en.input-push-channel goes with \"pushType\": \"liveactivity\" and \"event\": \"start\" (push-to-start)"),
    ])
    func pushToStartKeysAreRefusedElsewhereOrMalformed(pushType: String, aps: String, sentence: String) {
        #expect(Self.refusal(pushType, aps: aps) == sentence)
    }
}
