import APNSWire
import CampaignIO
import CampaignJSON
import ByteStreams

/// Apple's rules for the newer device push types (`../shared/reference/
/// apns-broadcast.md` §2 and §4), checked when the job is loaded so that a
/// job APNs would refuse request by request is refused once, naming the key.
extension CampaignJob {
    /// What `controls` and `widgets` pushes carry: nothing but this, which
    /// makes the system reload the control or widget (Apple's [CTL], [WID]).
    public static let contentChangedBody = #"{"aps":{"content-changed":true}}"#

    /// The `aps` keys of push-to-start into a channel (iOS 18), which only a
    /// Live Activity's `start` may carry.
    static let pushToStartKeys = ["input-push-channel", "input-push-token"]

    /// `expiresIn` when the job gives none. Apple requires `apns-expiration: 0`
    /// for push-to-talk (a voice message that waits is worthless), and its one
    /// controls example sends 0; every other type keeps a day, so a device that
    /// is offline for a while still gets the newest notification.
    static func defaultExpiresIn(pushType: String) -> Int {
        pushType == "pushtotalk" || pushType == "controls" ? 0 : 86_400
    }

    /// The rules on the request as a whole: push-to-talk goes at priority 10
    /// and is never stored; a controls or widgets body is exactly
    /// ``contentChangedBody``, so no `custom` key may join it.
    static func checkPushTypeHeaders(
        _ pushType: String, priority: Int, expiresIn: Int, custom: JSONValue?, fail: (String) -> JobError
    ) throws(JobError) {
        switch pushType {
        case "pushtotalk":
            if priority != 10 { throw fail("\"priority\" \(priority) is refused for pushtotalk pushes: Apple requires 10 (with \"expiresIn\": 0)") }
            if expiresIn != 0 { throw fail("\"expiresIn\" must be 0 for pushtotalk pushes: Apple requires apns-expiration 0 (leave it out and 0 is used)") }
        case "controls", "widgets":
            if let members = custom?.objectMembers, let first = members.first {
                throw fail("custom.\(first.key) is not allowed in a \(pushType) push: its body must be exactly \(contentChangedBody)")
            }
        default: break
        }
    }

    /// The rules on each message's `aps` for `pushType`.
    static func checkPushType(_ pushType: String, aps: [(key: String, value: JSONValue)], at path: String,
                              fail: (String) -> JobError) throws(JobError) {
        switch pushType {
        case "liveactivity":
            try checkLiveActivity(aps, at: path, fail: fail)
        case "controls", "widgets":
            // The aps is not empty (checked before): every key is content-changed, and it is true.
            for (key, value) in aps {
                guard key == "content-changed" else {
                    throw fail("\(path).\(key) is not allowed in a \(pushType) push: its aps must be exactly {\"content-changed\": true}")
                }
                // The JSON literal: a string "true" would be sent as a string, which is not Apple's body.
                guard value == .bool(true) else { throw fail("\(path).content-changed must be the JSON literal true, not \(String(decoding: value.serialized(), as: UTF8.self))") }
            }
        default:
            if let key = aps.first(where: { pushToStartKeys.contains($0.key) })?.key {
                throw fail("\(path).\(key) goes with \"pushType\": \"liveactivity\" and \"event\": \"start\" (push-to-start)")
            }
        }
    }

    /// Push-to-start's keys (iOS 18): `input-push-channel`, the channel the
    /// new activity listens on, is a channel id or one `{variable}` holding
    /// one (each row's value is checked at plan time); `input-push-token` is 1.
    /// Both mean nothing to an activity that exists, so only `start` may carry them.
    static func checkPushToStart(_ aps: [(key: String, value: JSONValue)], event: String, at path: String,
                                 fail: (String) -> JobError) throws(JobError) {
        for (key, value) in aps where pushToStartKeys.contains(key) {
            guard event == "start" else {
                throw fail("\(path).\(key) is for push-to-start (\"event\": \"start\"): an activity that is updated or ended already listens where it listens")
            }
            if key == "input-push-token" {
                guard value == .number("1") else { throw fail("\(path).input-push-token must be 1") }
                continue
            }
            let refusal = fail("\(path).input-push-channel must be a channel id (canonical base64, as `campaign channels create` prints it) or one \"{variable}\" holding one")
            guard case .string(let text) = value, let template = try? Template(text) else { throw refusal }
            switch template.parts.first {
            case .literal? where template.isLiteral:
                guard ChannelID(base64: text)?.base64 == text else { throw refusal }
            case .variable(let v)? where template.parts.count == 1 && v.type == .text && v.name != Template.planTimeVariable:
                if let d = v.defaultValue, ChannelID(base64: d)?.base64 != d {
                    throw fail("\(path).input-push-channel: the default of \(v.source) must be a channel id (canonical base64)")
                }
            default: throw refusal
            }
        }
    }
}

extension PayloadRenderer {
    /// Appends a row's channel id in canonical base64 (blanks around it
    /// dropped); false when the value is not one, and the row is rejected.
    static func appendChannelID(_ value: UnsafeBufferPointer<UInt8>, to out: ByteArena) -> Bool {
        guard let id = ChannelID(base64: String(decoding: value, as: UTF8.self)) else { return false }
        out.append(Base64.encode(id.bytes))
        return true
    }
}
