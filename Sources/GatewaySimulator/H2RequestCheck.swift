import APNSWire
import CampaignJSON

/// An HTTP/2 APNs answer the simulator gives: a status and, unless 200, a reason.
public struct H2Reply: Equatable, Sendable {
    public var status: Int
    public var reason: APNsReason?
    /// 410 only: when the token stopped being valid, milliseconds since the epoch.
    public var timestampMilliseconds: Int64? = nil
    /// 429 TooManyRequests: the `retry-after` header, seconds.
    public var retryAfter: Int? = nil
    /// The reason as written on the wire, when it is not the table's spelling
    /// (`--spaced-reasons`: "Service Unavailable", as Apple's broadcast list writes it).
    public var spelling: String? = nil

    public init(status: Int, reason: APNsReason? = nil, timestampMilliseconds: Int64? = nil, retryAfter: Int? = nil) {
        (self.status, self.reason, self.timestampMilliseconds, self.retryAfter) = (status, reason, timestampMilliseconds, retryAfter)
    }

    public static let accepted = H2Reply(status: 200)
    static func refuse(_ status: Int, _ reason: APNsReason) -> H2Reply { H2Reply(status: status, reason: reason) }

    /// The body APNs sends: `{"reason":…}` (with `timestamp` for 410), or none for 200.
    public var body: [UInt8] {
        guard let reason else { return [] }
        var out: [UInt8] = Array(#"{"reason":"#.utf8)
        JSONText.appendString(Array((spelling ?? reason.name).utf8), to: &out)
        if let timestampMilliseconds {
            out.append(contentsOf: #","timestamp":"#.utf8)
            JSONText.appendDecimal(timestampMilliseconds, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// "200", "400 BadDeviceToken": how `--stats` counts answers.
    public var key: String { reason.map { "\(status) \($0)" } ?? String(status) }
}

/// A request as the simulator validates it, the way APNs does (the reference's
/// status and reason table), before any fault applies.
public struct H2Request: Sendable, CustomStringConvertible {
    public var method: String?
    public var path: String?
    /// `:authority`: the host the client named (with the port, when it is not 443).
    public var authority: String?
    /// Every header but the pseudo-headers, in order, names lowercase.
    public var fields: [(name: String, value: String)] = []
    public var body: [UInt8]

    public init(headers: [(name: String, value: String)], body: [UInt8]) {
        for (name, value) in headers {
            switch name {
            case ":method": method = value
            case ":path": path = value
            case ":authority": authority = value
            case _ where name.hasPrefix(":"): break
            default: fields.append((name, value))
            }
        }
        self.body = body
    }

    public func field(_ name: String) -> String? { fields.first { $0.name == name }?.value }

    /// Short, for logs and test names: method, path, the header names, the body's size.
    public var description: String {
        "\(method ?? "-") \((path ?? "-").prefix(40)) [\(fields.map(\.name).joined(separator: ", "))] \(body.count) bytes"
    }

    /// The device token the path names, once the request is valid.
    public var tokenHex: String? {
        guard let path, path.hasPrefix("/3/device/") else { return nil }
        return String(path.dropFirst("/3/device/".count))
    }

    public static let pushTypes: Set<String> = ["alert", "background", "voip", "location", "complication", "fileprovider",
                                                "mdm", "liveactivity", "pushtotalk", "widgets", "controls"]

    /// What authenticates the request.
    public enum Authentication: Sendable {
        /// A client certificate for this topic (its UID).
        case certificate(topic: String)
        /// Token authentication, with the token check's answer (nil: valid);
        /// the topic is then required.
        case token(refusal: H2Reply?)
    }

    /// APNs' answer to the request as sent, or nil when it is valid.
    public func validate(authentication: Authentication) -> H2Reply? {
        var seen = Set<String>()
        for (name, _) in fields where name.hasPrefix("apns-") || name == "authorization" {
            if !seen.insert(name).inserted { return .refuse(400, "DuplicateHeaders") }
        }
        guard method == "POST" else { return .refuse(405, "MethodNotAllowed") }
        guard let tokenHex else { return .refuse(404, "BadPath") }
        guard !tokenHex.isEmpty else { return .refuse(400, "MissingDeviceToken") }
        guard tokenHex.count == 64, DeviceToken(hex: tokenHex) != nil else { return .refuse(400, "BadDeviceToken") }
        let topic = field("apns-topic")
        switch authentication {
        case .certificate(let own):
            // A certificate's topics: its bundle id and the suffixed ones of the same app.
            if let topic, topic != own, !(PushTopic.suffixes.contains { topic == own + $0.suffix }) {
                return .refuse(400, "TopicDisallowed")
            }
        case .token(let refusal):
            if let refusal { return refusal }
            guard topic != nil else { return .refuse(400, "MissingTopic") }
        }
        let pushType = field("apns-push-type") ?? "alert"
        guard Self.pushTypes.contains(pushType) else { return .refuse(400, "InvalidPushType") }
        // A push type whose topic needs a suffix, sent to a topic without it
        // (or with another type's): the topic is wrong for the request, as
        // Apple's BadTopic says; see docs/protocol.md.
        if let topic, PushTopic.resolve(topic, for: pushType) != .topic(topic) { return .refuse(400, "BadTopic") }
        if let p = field("apns-priority") {
            guard ["10", "5", "1"].contains(p) else { return .refuse(400, "BadPriority") }
            if p == "10" && pushType == "background" { return .refuse(400, "BadPriority") }
        }
        if let e = field("apns-expiration"), !(UInt64(e) != nil) { return .refuse(400, "BadExpirationDate") }
        if let id = field("apns-id"), !Self.isUUID(id) { return .refuse(400, "BadMessageId") }
        if let c = field("apns-collapse-id"), c.utf8.count > 64 { return .refuse(400, "BadCollapseId") }
        guard !body.isEmpty else { return .refuse(400, "PayloadEmpty") }
        guard body.count <= (pushType == "voip" ? 5120 : 4096) else { return .refuse(413, "PayloadTooLarge") }
        // Not in Apple's table of reasons; APNs refuses such a body with a 400 too.
        guard let payload = try? JSONValue.parse(body), payload["aps"]?.objectMembers != nil else { return .refuse(400, "BadPayload") }
        return nil
    }

    /// 8-4-4-4-12 hex digits.
    static func isUUID(_ text: String) -> Bool {
        var i = 0
        for b in text.utf8 {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard b == UInt8(ascii: "-") else { return false }
            } else {
                guard (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x66) else { return false }
            }
            i += 1
        }
        return i == 36
    }
}
