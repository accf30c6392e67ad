#if canImport(Glibc)
import Glibc
#endif
import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignJSON

/// What the device and management listeners share about broadcast channels.
struct ChannelService: Sendable {
    let store: ChannelStore
    /// The simulator's environment: the key of its channels in the store.
    let environment: String
    let apps: BroadcastApps
    /// `--management-unavailable-first`: shared by every management connection.
    let outage: Outage

    func lookup(bundleID: String) -> (ChannelID) -> ChannelStore.Channel? {
        { store.channel(environment: environment, bundleID: bundleID, id: $0) }
    }
}

/// The first N valid management requests, over all connections, answered
/// 503: a deterministic outage, so a client's retry is tested without
/// hunting for a seed.
final class Outage: @unchecked Sendable {
    private let lock = Lock()
    private var remaining: Int

    init(requests: Int) { remaining = requests }

    /// 503 ServiceUnavailable while the outage lasts, then nil.
    func take() -> H2Reply? {
        lock.withLock {
            guard remaining > 0 else { return nil }
            remaining -= 1
            return H2Reply(status: 503, reason: "ServiceUnavailable")
        }
    }
}

/// An answer as a session writes it: the status and reason, the headers a
/// route adds, a JSON body on success, and what it counts as.
struct H2Response {
    enum Kind: Equatable {
        /// `/3/device` (and any path that is neither a broadcast nor a channel route).
        case device
        /// `/4/broadcasts`: counted apart from device pushes.
        case broadcast
        /// The management listener.
        case management
    }

    var reply: H2Reply
    var kind: Kind
    var headers: [H2Session.Header] = []
    /// A success's JSON (read, list); errors carry `reply.body`.
    var json: [UInt8]? = nil
    /// The `--record` line of an accepted broadcast.
    var recordLine: [UInt8] = []

    var body: [UInt8] { json ?? reply.body }
    var isJSON: Bool { json != nil || reply.reason != nil }
}

extension H2GatewaySession {
    /// The answer to one request, by listener and route.
    mutating func respond(_ request: H2Request, stream: Int32) -> H2Response {
        switch port {
        case .management:
            return manage(request)
        case .device where request.path?.hasPrefix("/4/") == true:
            return broadcast(request, stream: stream)
        case .device:
            let reply = answer(request)
            // Echoed lowercased, as APNs does; never indexed, since each is new.
            let echo = request.field("apns-id").map { [H2Session.Header("apns-id", $0.lowercased(), neverIndexed: true)] } ?? []
            return H2Response(reply: reply, kind: .device, headers: echo)
        }
    }

    /// Authentication, the first check on every route (§5.3): the connection's
    /// certificate, or the request's provider token.
    mutating func authenticate(_ request: H2Request) -> H2Request.Authentication {
        if let certificateTopic { return .certificate(topic: certificateTopic) }
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME, &clock)
        return .token(refusal: tokens!.check(request.field("authorization"), now: Int64(clock.tv_sec)))
    }

    /// The channel management API (§1, §5.7, §5.8).
    private mutating func manage(_ request: H2Request) -> H2Response {
        let requestID = request.requestID ?? Self.randomUUID()
        func reply(_ reply: H2Reply, _ headers: [H2Session.Header] = [], json: [UInt8]? = nil) -> H2Response {
            H2Response(reply: reply, kind: .management, headers: [.init("apns-request-id", requestID, neverIndexed: true)] + headers, json: json)
        }
        let route: ChannelRoute
        switch request.checkChannelRequest(authentication: authenticate(request), apps: channels.apps) {
        case .refused(let refusal): return reply(refusal)
        case .passed(let found): route = found
        }
        let (store, environment) = (channels.store, channels.environment)
        switch (route, request.method) {
        case (.channels(let bundleID), "POST"):
            let policy: Broadcast.StoragePolicy
            switch request.checkCreateBody() {
            case .refused(let refusal): return reply(refusal)
            case .passed(let p): policy = p
            }
            // A refused create creates nothing: a client may retry it safely.
            if let fault = managementFault() { return reply(fault) }
            switch store.create(environment: environment, bundleID: bundleID, policy: policy) {
            case .limitReached: return reply(.refuse(400, "CannotCreateChannelConfig"))
            case .created(let id): return reply(H2Reply(status: 201), [.init("apns-channel-id", id.base64)])
            }
        case (.channels(let bundleID), let method):
            let id: ChannelID, channel: ChannelStore.Channel
            switch request.checkChannelID(bundleID: bundleID, lookup: channels.lookup(bundleID: bundleID)) {
            case .refused(let refusal): return reply(refusal)
            case .passed(let found): (id, channel) = found
            }
            if let fault = managementFault() { return reply(fault) }
            if method == "DELETE" {
                // Another connection may have deleted it since the lookup.
                guard store.delete(environment: environment, bundleID: bundleID, id: id) else { return reply(.refuse(400, "ChannelNotRegistered")) }
                return reply(H2Reply(status: 204))
            }
            var json: [UInt8] = Array(#"{"message-storage-policy":"#.utf8)
            JSONText.appendDecimal(channel.policy.rawValue, to: &json)
            json.append(contentsOf: #","push-type":"LiveActivity"}"#.utf8)
            return reply(H2Reply(status: 200), json: json)
        case (.allChannels(let bundleID), _):
            if let fault = managementFault() { return reply(fault) }
            var json: [UInt8] = Array(#"{"channels":["#.utf8)
            for (i, id) in store.list(environment: environment, bundleID: bundleID).enumerated() {
                if i > 0 { json.append(UInt8(ascii: ",")) }
                JSONText.appendString(Array(id.base64.utf8), to: &json)
            }
            json.append(contentsOf: "]}".utf8)
            return reply(H2Reply(status: 200), json: json)
        case (.broadcast, _):
            // Broadcasts go to the device listener, as at Apple (§5.1).
            return reply(.refuse(404, "BadPath"))
        }
    }

    /// The outage first, then the fault plan's draws.
    private mutating func managementFault() -> H2Reply? {
        channels.outage.take() ?? transientFault()
    }

    /// `POST /4/broadcasts/apps/{b}` on the device listener (§2, §5.9).
    private mutating func broadcast(_ request: H2Request, stream: Int32) -> H2Response {
        let requestID = request.requestID ?? Self.randomUUID()
        func reply(_ reply: H2Reply, _ headers: [H2Session.Header] = []) -> H2Response {
            H2Response(reply: reply, kind: .broadcast, headers: [.init("apns-request-id", requestID, neverIndexed: true)] + headers)
        }
        if index <= faults.tokenUpdateRefusals && streamsAnswered == 0 { return reply(.refuse(429, "TooManyProviderTokenUpdates")) }
        let bundleID: String
        switch request.checkChannelRequest(authentication: authenticate(request), apps: channels.apps) {
        case .refused(let refusal): return reply(refusal)
        case .passed(.broadcast(let b)): bundleID = b
        case .passed: return reply(.refuse(404, "BadPath"))   // a channel route, which lives on the management listener
        }
        let accepted: AcceptedBroadcast
        switch request.checkBroadcast(bundleID: bundleID, strict: channels.apps.strict, lookup: channels.lookup(bundleID: bundleID)) {
        case .refused(let refusal): return reply(refusal)
        case .passed(let a): accepted = a
        }
        if let fault = transientFault() { return reply(fault) }
        // Apple returns `apns-unique-id` (for its delivery log) in development only.
        let uniqueID = channels.environment == "production" ? nil : Self.randomUUID()
        var response = reply(.accepted, uniqueID.map { [.init("apns-unique-id", $0, neverIndexed: true)] } ?? [])
        if recording {
            appendBroadcastRecord(accepted, requestID: requestID, uniqueID: uniqueID, authority: request.authority, stream: stream, to: &response.recordLine)
        }
        return response
    }

    /// A fresh lowercase version-4 UUID, from the system's generator (not the
    /// fault plan's seeded one: ids must differ from run to run).
    static func randomUUID() -> String {
        var rng = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for (i, b) in bytes.enumerated() {
            if [4, 6, 8, 10].contains(i) { out.append(UInt8(ascii: "-")) }
            out.append(hex[Int(b >> 4)])
            out.append(hex[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `{"kind":"broadcast","conn":N,"received_ms":T,"stream":S,"authority":…,"request_id":…,"unique_id":…|null,"bundle":…,"channel":…,
    /// "priority":P,"expiration":E,"event":…|null,"event_start_flagged":B,"payload":{…}}`: the payload as a JSON value,
    /// so a reader checks each channel's own content-state.
    private func appendBroadcastRecord(_ b: AcceptedBroadcast, requestID: String, uniqueID: String?, authority: String?, stream: Int32,
                                       to out: inout [UInt8]) {
        func string(_ key: String, _ value: String?) {
            out.append(contentsOf: ",\"\(key)\":".utf8)
            if let value { JSONText.appendString(Array(value.utf8), to: &out) } else { out.append(contentsOf: "null".utf8) }
        }
        out.append(contentsOf: #"{"kind":"broadcast","conn":"#.utf8)
        JSONText.appendDecimal(index, to: &out)
        out.append(contentsOf: #","received_ms":"#.utf8)
        JSONText.appendDecimal(NotificationRecordFile.nowMilliseconds(), to: &out)
        out.append(contentsOf: #","stream":"#.utf8)
        JSONText.appendDecimal(stream, to: &out)
        string("authority", authority)
        string("request_id", requestID)
        string("unique_id", uniqueID)
        string("bundle", b.bundleID)
        string("channel", b.channel.base64)
        out.append(contentsOf: #","priority":"#.utf8)
        JSONText.appendDecimal(b.priority, to: &out)
        out.append(contentsOf: #","expiration":"#.utf8)
        JSONText.appendDecimal(b.expiration, to: &out)
        string("event", b.event)
        // Apple names no error for `event: start` on a broadcast (§5.15): accepted, and marked here.
        out.append(contentsOf: (b.event == "start" ? #","event_start_flagged":true"# : #","event_start_flagged":false"#).utf8)
        out.append(contentsOf: #","payload":"#.utf8)
        // Re-serialized compactly: a pretty-printed body would break the one-line-per-record format.
        b.payload.serialize(into: &out)
        out.append(contentsOf: "}\n".utf8)
    }
}
