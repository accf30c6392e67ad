import APNSWire
import CampaignHTTP2
import CampaignJSON
import GatewayClient

/// One request of the channel management API (`apns-broadcast.md` §1): what
/// it does, and the HTTP/2 fields and body it travels as. Pure: the client
/// in ``ChannelManagementClient`` moves the bytes.
public enum ChannelOperation: Equatable, Sendable {
    case create(Broadcast.StoragePolicy)
    case read(ChannelID)
    case delete(ChannelID)
    case list

    public var method: String {
        switch self {
        case .create: "POST"
        case .read, .list: "GET"
        case .delete: "DELETE"
        }
    }

    public func path(bundleID: String) -> String {
        self == .list ? Broadcast.allChannelsPath(bundleID: bundleID) : Broadcast.channelsPath(bundleID: bundleID)
    }

    /// The channel named in `apns-channel-id` (read and delete only: §1 names the channel in a header, not the path).
    public var channel: ChannelID? {
        switch self {
        case .read(let id), .delete(let id): id
        case .create, .list: nil
        }
    }

    /// §1's create body, both fields required: the policy as 0 or 1 and the push type spelt `LiveActivity`.
    public var body: [UInt8] {
        guard case .create(let policy) = self else { return [] }
        return JSONValue.object([("message-storage-policy", .number(String(policy.rawValue))),
                                 ("push-type", .string(Broadcast.channelPushType))]).serialized()
    }

    /// "create a channel", "read channel X": what a sentence about it says.
    public var what: String {
        switch self {
        case .create: "create a channel"
        case .read(let id): "read the channel \(id)"
        case .delete(let id): "delete the channel \(id)"
        case .list: "list the channels"
        }
    }

    /// The request's header fields. `authorization` is the whole value
    /// (`bearer <JWT>`), nil with a client certificate (APNs ignores it then).
    /// The request id is sent never-indexed: each is used once.
    public func headers(bundleID: String, authority: String, requestID: String, authorization: String?) -> [H2Session.Header] {
        var fields = [H2Session.Header(":method", method), H2Session.Header(":scheme", "https"),
                      H2Session.Header(":path", path(bundleID: bundleID)), H2Session.Header(":authority", authority),
                      H2Session.Header("apns-request-id", requestID, neverIndexed: true)]
        if let channel { fields.append(H2Session.Header("apns-channel-id", channel.base64, neverIndexed: true)) }
        if let authorization { fields.append(H2Session.Header("authorization", authorization)) }
        if self.method == "POST" {
            fields.append(H2Session.Header("content-type", "application/json"))
            fields.append(H2Session.Header("content-length", String(body.count)))
        }
        return fields
    }
}

/// `apns-request-id` values: §1 wants a canonical UUID, lowercase hex
/// 8-4-4-4-12; a random (version 4) one per request, so each answer can be
/// quoted to Apple on its own.
public enum RequestID {
    public static func make<G: RandomNumberGenerator>(using generator: inout G) -> String {
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[6] = bytes[6] & 0x0F | 0x40   // version 4
        bytes[8] = bytes[8] & 0x3F | 0x80   // RFC 9562 variant
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for (i, b) in bytes.enumerated() {
            if [4, 6, 8, 10].contains(i) { text.append(UInt8(ascii: "-")) }
            text.append(hex[Int(b >> 4)])
            text.append(hex[Int(b & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    public static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return make(using: &generator)
    }

    /// Whether `text` is a UUID as §1 wants it.
    public static func isCanonical(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (i, c) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(i) { guard c == UInt8(ascii: "-") else { return false } } else {
                guard (0x30...0x39).contains(c) || (0x61...0x66).contains(c) else { return false }
            }
        }
        return true
    }
}

/// A channel as `read` describes it.
public struct ChannelInfo: Equatable, Sendable {
    public var id: ChannelID
    public var storage: Broadcast.StoragePolicy
    /// As the server spelt it (§1: `LiveActivity`).
    public var pushType: String

    public init(id: ChannelID, storage: Broadcast.StoragePolicy, pushType: String) {
        (self.id, self.storage, self.pushType) = (id, storage, pushType)
    }
}

/// What a management request achieved.
public enum ChannelOutcome: Equatable, Sendable {
    case created(ChannelID)
    case channel(ChannelInfo)
    case deleted
    case channels([ChannelID])
}

/// One answer of the management API as it came: `:status`, the fields that
/// matter, and the body (`{"reason":…}` on an error).
public struct ChannelAnswer: Equatable, Sendable {
    public var status: Int
    /// `apns-request-id` (or, as some of Apple's pages write it, `apns-id`); every answer carries one.
    public var requestID: String?
    public var channelID: String?
    public var retryAfterSeconds: Int?
    public var body: [UInt8]

    public init(status: Int, requestID: String? = nil, channelID: String? = nil, retryAfterSeconds: Int? = nil, body: [UInt8] = []) {
        (self.status, self.requestID, self.channelID, self.retryAfterSeconds, self.body) = (status, requestID, channelID, retryAfterSeconds, body)
    }

    public init(headers: [H2Session.Header], body: [UInt8]) {
        func field(_ name: String) -> String? { headers.first { $0.name == name }?.value }
        self.init(status: field(":status").flatMap { Int($0) } ?? 0,
                  requestID: (field("apns-request-id") ?? field("apns-id")).map(H2Answer.boundedReason),
                  channelID: field("apns-channel-id"),
                  retryAfterSeconds: field("retry-after").flatMap { Int($0.trimmingWhitespace()) }
                      .map { min(H2Answer.maxRetryAfterSeconds, max(0, $0)) },
                  body: body)
    }

    /// The body's `reason`, bounded as a printable identifier (it reaches the terminal).
    public var reason: APNsReason? {
        guard !body.isEmpty, let value = try? JSONValue.parse(body), let text = value["reason"]?.stringValue else { return nil }
        return APNsReason(name: H2Answer.boundedReason(text))
    }

    /// What the answer means for `operation`: its outcome, or the error to
    /// report (its class decides retry and exit code).
    public func outcome(of operation: ChannelOperation) -> Result<ChannelOutcome, ChannelError> {
        let success: Int = switch operation {
        case .create: 201
        case .delete: 204
        case .read, .list: 200
        }
        guard status == success else {
            // 2xx but not the documented one is a server that is not the management API.
            if (200...299).contains(status) { return .failure(ChannelError(.unexpectedAnswer(operation.what, "status \(status)"), requestID: requestID)) }
            return .failure(ChannelError(.refused(operation: operation, status: status, reason: reason), requestID: requestID))
        }
        switch operation {
        case .create:
            guard let text = channelID, let id = ChannelID(base64: text) else {
                let what = if case .tooLong? = channelID.flatMap({ ChannelID.problem(with: $0) }) {
                    "201 with an apns-channel-id of \(ChannelID.problem(with: channelID!)!)"
                } else { "201 without a base64 apns-channel-id" }
                return .failure(ChannelError(.unexpectedAnswer(operation.what, what), requestID: requestID))
            }
            return .success(.created(id))
        case .delete:
            return .success(.deleted)
        case .read(let id):
            guard let value = try? JSONValue.parse(body), let policy = value["message-storage-policy"]?.integerValue,
                  let storage = Broadcast.StoragePolicy(rawValue: Int(policy)), let pushType = value["push-type"]?.stringValue else {
                return .failure(ChannelError(.unexpectedAnswer(operation.what, "200 without {\"message-storage-policy\":0|1,\"push-type\":…}"), requestID: requestID))
            }
            return .success(.channel(ChannelInfo(id: id, storage: storage, pushType: H2Answer.boundedReason(pushType))))
        case .list:
            // §4: Apple's prose says the body is empty, its table shows `channels`; read it when present.
            if body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return .success(.channels([])) }
            guard let value = try? JSONValue.parse(body), case .array(let items)? = value["channels"] else {
                return .failure(ChannelError(.unexpectedAnswer(operation.what, "200 without {\"channels\":[…]}"), requestID: requestID))
            }
            var ids: [ChannelID] = []
            for (index, item) in items.enumerated() {
                guard let text = item.stringValue, let id = ChannelID(base64: text) else {
                    let problem = item.stringValue.flatMap { ChannelID.problem(with: $0)?.description } ?? "not a string"
                    return .failure(ChannelError(.unexpectedAnswer(operation.what, "listed channel id \(index + 1) of \(items.count) is \(problem)"), requestID: requestID))
                }
                ids.append(id)
            }
            return .success(.channels(ids))
        }
    }
}
