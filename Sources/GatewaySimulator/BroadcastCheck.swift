import APNSWire
import CampaignJSON

/// The routes of the channel management API and the broadcast route
/// (reference §5.4): exactly these, each with its methods.
public enum ChannelRoute: Equatable, Sendable {
    /// `/1/apps/{b}/channels`: POST creates, GET reads, DELETE deletes.
    case channels(bundleID: String)
    /// `/1/apps/{b}/all-channels`: GET lists.
    case allChannels(bundleID: String)
    /// `/4/broadcasts/apps/{b}`: POST sends.
    case broadcast(bundleID: String)

    /// The route `path` names, or nil (404 BadPath). A bundle id is one
    /// non-empty path segment; a query string is not part of any route.
    public init?(path: String) {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.first == "", parts.dropFirst().allSatisfy({ !$0.isEmpty }) else { return nil }
        let p = Array(parts.dropFirst())
        if p.count == 4, p[0] == "1", p[1] == "apps", p[3] == "channels" {
            self = .channels(bundleID: p[2])
        } else if p.count == 4, p[0] == "1", p[1] == "apps", p[3] == "all-channels" {
            self = .allChannels(bundleID: p[2])
        } else if p.count == 4, p[0] == "4", p[1] == "broadcasts", p[2] == "apps" {
            self = .broadcast(bundleID: p[3])
        } else {
            return nil
        }
        guard !bundleID.contains("?") else { return nil }
    }

    public var bundleID: String {
        switch self {
        case .channels(let b), .allChannels(let b), .broadcast(let b): b
        }
    }

    /// The methods the route takes; another is 405 MethodNotAllowed.
    public var methods: Set<String> {
        switch self {
        case .channels: ["POST", "GET", "DELETE"]
        case .allChannels: ["GET"]
        case .broadcast: ["POST"]
        }
    }

    /// Whether `bundleID` carries a push-type suffix (`.push-type.liveactivity`,
    /// `.voip`, …): such a "bundle id" is a topic, and the path wants the app's
    /// own id (§2, TopicDisallowed).
    static func hasPushTypeSuffix(_ bundleID: String) -> Bool {
        PushTopic.pushType(suffixOf: bundleID) != nil || bundleID.contains(".push-type.")
    }

    /// The bundle id without a push-type suffix: what a certificate must cover.
    static func appID(_ bundleID: String) -> String {
        if let type = PushTopic.pushType(suffixOf: bundleID) { return String(bundleID.dropLast(PushTopic.suffix(for: type).count)) }
        if let range = bundleID.range(of: ".push-type.") { return String(bundleID[..<range.lowerBound]) }
        return bundleID
    }
}

/// A check's outcome: what it found, or the answer that refuses the request.
public enum Checked<Value> {
    case passed(Value)
    case refused(H2Reply)
}

extension Checked: Equatable where Value: Equatable {}

/// What the simulator knows of the apps it serves broadcasts for, and how strictly it reads their broadcasts.
public struct BroadcastApps: Sendable {
    /// Bundle ids whose broadcast capability is off (400 FeatureNotEnabled).
    public var disabled: Set<String> = []
    /// Refuse a broadcast without `apns-priority` or `apns-expiration` (§5.10's strict mode).
    public var strict = false
    public init(disabled: Set<String> = [], strict: Bool = false) { (self.disabled, self.strict) = (disabled, strict) }
}

/// A broadcast the checks let through: what the record keeps of it.
public struct AcceptedBroadcast: Equatable, Sendable {
    public var bundleID: String
    public var channel: ChannelID
    public var priority: Int
    public var expiration: UInt64
    public var payload: JSONValue
    /// `aps.event` as sent; "start" is accepted yet flagged (§5.15).
    public var event: String?
}

extension H2Request {
    /// The checks every channel and broadcast request passes first, in the
    /// reference's order (§5.3–5.6): authentication, route and method, the
    /// certificate's topic, the suffix, the capability, the request id.
    /// Returns the route, or the refusal.
    public func checkChannelRequest(authentication: Authentication, apps: BroadcastApps) -> Checked<ChannelRoute> {
        if case .token(let refusal?) = authentication { return .refused(refusal) }
        guard let route = path.flatMap(ChannelRoute.init(path:)) else { return .refused(.refuse(404, "BadPath")) }
        guard let method, route.methods.contains(method) else { return .refused(.refuse(405, "MethodNotAllowed")) }
        if case .certificate(let topic) = authentication, ChannelRoute.appID(route.bundleID) != topic {
            return .refused(.refuse(403, "TopicMismatch"))
        }
        if ChannelRoute.hasPushTypeSuffix(route.bundleID) { return .refused(.refuse(400, "TopicDisallowed")) }
        if apps.disabled.contains(route.bundleID) { return .refused(.refuse(400, "FeatureNotEnabled")) }
        // Apple describes `apns-request-id` and `apns-id` with one sentence
        // ("lowercase"), and /3/device takes an `apns-id` in either case: so
        // does every route, for either header (answers echo it lowercased).
        if let id = field("apns-request-id"), !Self.isUUID(id) { return .refused(.refuse(400, "BadMessageId")) }
        // The broadcast page's own example sends `apns-id`.
        if case .broadcast = route, let id = field("apns-id"), !Self.isUUID(id) { return .refused(.refuse(400, "BadMessageId")) }
        return .passed(route)
    }

    /// The request id to answer with: the one sent (`apns-request-id`, or a
    /// broadcast's `apns-id`), lowercased, when well formed; else nil, and the
    /// server makes one up.
    public var requestID: String? {
        if let id = field("apns-request-id"), Self.isUUID(id) { return id.lowercased() }
        if let id = field("apns-id"), Self.isUUID(id), path?.hasPrefix("/4/") == true { return id.lowercased() }
        return nil
    }

    /// `apns-channel-id`: missing, not canonical base64 of at most
    /// ``ChannelID/maxBytes``, or not a live channel of this app (§5.8).
    public func checkChannelID(bundleID: String, lookup: (ChannelID) -> ChannelStore.Channel?) -> Checked<(ChannelID, ChannelStore.Channel)> {
        guard let text = field("apns-channel-id") else { return .refused(.refuse(400, "MissingChannelId")) }
        guard let id = ChannelID(base64: text), id.base64 == text else { return .refused(.refuse(400, "BadChannelId")) }
        guard let channel = lookup(id) else { return .refused(.refuse(400, "ChannelNotRegistered")) }
        return .passed((id, channel))
    }

    /// A broadcast after ``checkChannelRequest(authentication:apps:)``, in
    /// §5.9's order; the first failure wins. Absent priority and expiration
    /// default to 10 and 0 (§5.10: Apple's own curl example omits expiration),
    /// unless `strict`, which refuses them as [BC]'s table (both "required") reads.
    public func checkBroadcast(bundleID: String, strict: Bool = false, lookup: (ChannelID) -> ChannelStore.Channel?) -> Checked<AcceptedBroadcast> {
        let (id, channel): (ChannelID, ChannelStore.Channel)
        switch checkChannelID(bundleID: bundleID, lookup: lookup) {
        case .passed(let found): (id, channel) = found
        case .refused(let refusal): return .refused(refusal)
        }
        guard let pushType = field("apns-push-type") else { return .refused(.refuse(400, "MissingPushType")) }
        // Apple's pages spell it liveactivity, Liveactivity and LiveActivity.
        guard pushType.lowercased() == Broadcast.pushType else { return .refused(.refuse(400, "InvalidPushType")) }
        if strict && field("apns-priority") == nil { return .refused(.refuse(400, "BadPriority")) }
        let priorityText = field("apns-priority") ?? "10"
        guard let priority = Int(priorityText), [10, 5, 1].contains(priority), String(priority) == priorityText else {
            return .refused(.refuse(400, "BadPriority"))
        }
        if strict && field("apns-expiration") == nil { return .refused(.refuse(400, "BadExpirationDate")) }
        let expirationText = field("apns-expiration") ?? "0"
        guard expirationText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let expiration = UInt64(expirationText) else { return .refused(.refuse(400, "BadExpirationDate")) }
        // A channel that stores nothing cannot keep a message until a later time.
        if channel.policy == .noneStored && expiration != 0 { return .refused(.refuse(400, "BadExpirationDate")) }
        guard !body.isEmpty else { return .refused(.refuse(400, "PayloadEmpty")) }
        guard body.count <= Broadcast.maxPayloadBytes else { return .refused(.refuse(413, "PayloadTooLarge")) }
        guard let payload = try? JSONValue.parse(body), payload.objectMembers != nil else { return .refused(.refuse(400, "BadRequestPayload")) }
        return .passed(AcceptedBroadcast(bundleID: bundleID, channel: id, priority: priority, expiration: expiration,
                                          payload: payload, event: payload["aps"]?["event"]?.stringValue))
    }

    /// A create's body (§5.7): a JSON object holding exactly
    /// `message-storage-policy` (0 or 1) and `push-type` ("LiveActivity").
    public func checkCreateBody() -> Checked<Broadcast.StoragePolicy> {
        guard let value = try? JSONValue.parse(body), let members = value.objectMembers else {
            return .refused(.refuse(400, "BadRequestPayload"))
        }
        if members.contains(where: { $0.key != "message-storage-policy" && $0.key != "push-type" }) {
            return .refused(.refuse(400, "BadRequestParams"))
        }
        guard let pushType = value["push-type"] else { return .refused(.refuse(400, "MissingPushType")) }
        // Apple's pages spell it LiveActivity (the body), liveactivity (the header) and Liveactivity: one push type, in any case.
        guard pushType.stringValue?.lowercased() == Broadcast.channelPushType.lowercased() else { return .refused(.refuse(400, "InvalidPushType")) }
        // No Apple page names the reason for a missing or unknown policy; BadRequestParams is nearest (§5.7).
        guard let raw = value["message-storage-policy"]?.integerValue, let policy = Broadcast.StoragePolicy(rawValue: Int(raw)) else {
            return .refused(.refuse(400, "BadRequestParams"))
        }
        return .passed(policy)
    }

    /// 8-4-4-4-12 lowercase hex digits: the canonical form the channel API asks of `apns-request-id` (§1).
    static func isCanonicalUUID(_ text: String) -> Bool {
        isUUID(text) && !text.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "F") }
    }
}
