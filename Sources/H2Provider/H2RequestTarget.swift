import APNSWire
import CampaignHTTP2
import PlanStream
import GatewayClient

/// What an HTTP/2 request names, chosen once when the plan's header is read
/// (a broadcast job or not): a device, by its token in `:path`
/// (`/3/device/<token>`, `apns-id`), or a channel, by `apns-channel-id` on a
/// path fixed for the app (`/4/broadcasts/apps/<bundle id>`,
/// `apns-request-id`, `apns-unique-id` in each 200). A connection asks its
/// target for these, and never which kind it is.
package enum H2RequestTarget: Sendable {
    case device
    case channel(path: String)

    package init(header: PlanHeader) {
        if header.http2?.broadcast == true, let bundle = header.http2?.topic {
            self = .channel(path: Broadcast.broadcastPath(bundleID: bundle))
        } else {
            self = .device
        }
    }

    /// The request's `:path` when it is the same for every request, and the room for one written per request.
    package var path: (value: String?, room: Int) {
        switch self {
        case .device: (nil, 10 + 200)
        case .channel(let path): (path, 0)
        }
    }

    /// The template slot the target is written in, per request.
    package var slot: H2ConnectionWorker.TemplateSlot {
        switch self {
        case .device: .path
        case .channel: .channel
        }
    }

    /// A field carrying the target beside `:path` (the channel id, base64), with its room.
    package var targetField: (name: String, room: Int)? {
        switch self {
        case .device: nil
        case .channel: ("apns-channel-id", Base64.encodedCount(ChannelID.maxBytes))
        }
    }

    /// The request's own id header: `apns-id` for a device push, `apns-request-id` for a broadcast.
    package var idHeader: String {
        switch self {
        case .device: "apns-id"
        case .channel: "apns-request-id"
        }
    }

    /// Answer headers kept beyond `:status` and `retry-after`.
    package var keptAnswerHeaders: [[UInt8]] {
        switch self {
        case .device: []
        case .channel: [Array("apns-unique-id".utf8)]
        }
    }

    /// Whether a refusal of the app's account (the broadcast capability off) is possible: the answers' verdict table.
    package var answersAsBroadcast: Bool {
        switch self {
        case .device: false
        case .channel: true
        }
    }

    /// The `apns-unique-id` of a broadcast's 200 (Apple's id of the delivery, journaled); none for a device push.
    package func uniqueID(status: Int, headers: [H2Session.Header]) -> String? {
        guard case .channel = self, status == 200 else { return nil }
        return headers.first { $0.name == "apns-unique-id" }.map { H2Answer.boundedReason($0.value) }
    }

    /// Whether an accepted request's ids are journaled (`{"t":"ids",…}`): a broadcast's, to find it at Apple.
    package var journalsAnswerIDs: Bool { answersAsBroadcast }

    /// Advice for a refusal of the request itself, said once per send; nil when the reason says it all.
    package func advice(for reason: APNsReason?) -> (key: String, sentence: String)? {
        guard case .channel = self, reason == .badExpirationDate else { return nil }
        return ("BadExpirationDate", "APNs refused a broadcast's apns-expiration (400 BadExpirationDate): its channel stores no messages, so only 0 is allowed; plan the job with \"expiresIn\": 0 (or give the audience the storage column `channels create --out x.csv` writes, and plan refuses such rows)")
    }
}
