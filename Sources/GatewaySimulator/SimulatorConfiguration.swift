import Foundation
import APNSWire

/// Faults the simulator injects, to exercise a sender's error handling.
public struct FaultPlan: Sendable {
    /// Tokens answered with status 8 (invalid token).
    public var badTokens: Set<[UInt8]> = []
    /// After this many notifications accepted on one connection, answer status 10
    /// (shutdown) naming the last accepted identifier, and close. Applies to every
    /// connection, like a gateway that keeps restarting.
    public var shutdownAfter: Int? = nil
    /// After this many notifications accepted on one connection, close it hard,
    /// without an error response.
    public var dropEvery: Int? = nil
    /// Tokens whose notification makes the gateway close the connection
    /// hard, without a response and without accepting it: a notification
    /// that kills every connection it is sent on.
    public var poisonTokens: Set<[UInt8]> = []
    /// Probability that a notification is answered with status 1 (processing error).
    public var errorRate: Double = 0
    /// Seed for `errorRate`; connection N draws from seed + N, so a run is reproducible.
    public var seed: UInt64 = 1
    /// HTTP/2: 503s say "Service Unavailable", with a space, as Apple's
    /// broadcast error list spells it (the device-push list: "ServiceUnavailable").
    public var spacedReasons = false
    /// Pause before each read from a connection: a slow gateway.
    public var readDelayMilliseconds: Int = 0

    // HTTP/2 only.
    /// Tokens answered 410 Unregistered, with when (UNIX seconds; the answer's `timestamp` is in milliseconds).
    public var unregistered: [[UInt8]: UInt32] = [:]
    /// Probability that a request is answered 429 TooManyRequests (with `retry-after: 1`).
    public var throttleRate: Double = 0
    /// After this many streams answered on a connection: GOAWAY naming the last, then close.
    public var goAwayAfter: Int? = nil
    /// SETTINGS_MAX_CONCURRENT_STREAMS (default 1000, as Apple's).
    public var maxStreams: Int? = nil
    /// After this many streams answered on a connection: stop reading and answering (a hung gateway).
    public var stallAfter: Int? = nil
    /// The first request of each of the first N connections is answered 429
    /// TooManyProviderTokenUpdates (as APNs answers a token renewed too often).
    public var tokenUpdateRefusals = 0

    public init() {}

    /// Whether any fault is configured.
    public var isEmpty: Bool {
        badTokens.isEmpty && shutdownAfter == nil && dropEvery == nil && poisonTokens.isEmpty && errorRate == 0 && readDelayMilliseconds == 0
            && unregistered.isEmpty && throttleRate == 0 && goAwayAfter == nil && maxStreams == nil && stallAfter == nil && tokenUpdateRefusals == 0
    }
}

/// How to run a ``GatewaySimulator``.
public struct SimulatorConfiguration: Sendable {
    /// Gateway port; 0 lets the kernel choose.
    public var port: Int = 0
    /// Feedback service port; 0 lets the kernel choose.
    public var feedbackPort: Int = 0
    /// Address to listen on. Keep it loopback.
    public var host: String = "127.0.0.1"
    /// Directory holding ca.pem (clients must be issued by it), server.pem and server.key.
    public var certificatesDirectory: String
    /// NDJSON file that receives one line per accepted notification.
    public var recordPath: String? = nil
    /// JSON file that receives the totals when the simulator stops.
    public var statisticsPath: String? = nil
    /// JSON file written as `{"port":P,"feedback_port":Q}` once both ports listen.
    public var readyPath: String? = nil
    /// Tuples served once, to the first feedback connection, then cleared.
    public var feedback: [FeedbackTuple] = []
    public var faults = FaultPlan()
    /// Payload limits for commands 0/1 and 2.
    public var limits = NotificationDecoder.Limits.apple
    /// The binary provider interface (and the feedback service), or the HTTP/2 provider API (ALPN h2; no feedback service).
    public var http2 = false
    /// HTTP/2: a directory of `<KID>.pem` public keys; when set, token
    /// authentication is checked and client certificates are optional.
    public var authKeysDirectory: String? = nil
    /// HTTP/2: tokens issued longer ago than this are refused (403 ExpiredProviderToken).
    public var tokenLifetimeSeconds = 3600
    /// HTTP/2 with keys: a key's new token sooner than this after its
    /// previous new one is answered 429 TooManyProviderTokenUpdates on
    /// any connection, as APNs does (nil: only per connection).
    public var tokenMinimumIntervalSeconds: Int?
    /// Every byte received and sent is held this long (one way) by a relay in
    /// front of the gateway: a round trip of twice this, as from far away.
    public var latencyMilliseconds = 0
    /// HTTP/2: the channel management API's port (0 lets the kernel choose);
    /// nil: no management listener. Broadcasts are served on `port` either way.
    public var managementPort: Int? = nil
    /// HTTP/2: live channels an app may have (Apple's limit is 10,000 per app and environment).
    public var channelLimit = Broadcast.channelLimit
    /// HTTP/2: bytes in each channel id issued, so clients meet ids of other sizes than the usual.
    public var channelIDBytes = ChannelStore.defaultIDBytes
    /// HTTP/2: the environment the simulator plays ("sandbox" or "production"):
    /// the key of its channels, which Apple keeps apart per environment.
    public var environment = "sandbox"
    /// HTTP/2: bundle ids whose broadcast capability is off (400 FeatureNotEnabled).
    public var broadcastDisabled: Set<String> = []
    /// HTTP/2: refuse broadcasts without `apns-priority` (BadPriority) or
    /// `apns-expiration` (BadExpirationDate) instead of taking 10 and 0.
    public var broadcastStrict = false
    /// HTTP/2: the faults of the management listener (429 and 500/503 rates,
    /// seed; the others apply too when set). Its own plan, so a device fault
    /// such as `goAwayAfter` does not cut channel management short.
    public var managementFaults = FaultPlan()
    /// HTTP/2: the first N valid channel management requests (over every
    /// connection) are answered 503 ServiceUnavailable, creating nothing.
    public var managementUnavailableFirst = 0

    public init(certificatesDirectory: String) {
        self.certificatesDirectory = certificatesDirectory
    }
}

/// A problem with the simulator's own inputs.
public struct SimulatorInputError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var line: Int?
    public var reason: String

    public var description: String {
        if let line { return "\(path), line \(line): \(reason)." }
        return "\(path): \(reason)."
    }
}

extension FaultPlan {
    /// Reads hex tokens, one per line; blank lines and lines starting with # are skipped.
    public static func readTokens(path: String) throws -> Set<[UInt8]> {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw SimulatorInputError(path: path, line: nil, reason: "cannot be read as UTF-8 text")
        }
        var tokens: Set<[UInt8]> = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let token = DeviceToken(hex: line) else {
                throw SimulatorInputError(path: path, line: index + 1, reason: "not a hex device token")
            }
            tokens.insert(token.bytes)
        }
        return tokens
    }
}

extension SimulatorConfiguration {
    /// Reads `--unregistered`: NDJSON lines `{"token":"hex","ts":UNIX}`.
    public static func readUnregistered(path: String) throws -> [[UInt8]: UInt32] {
        var out: [[UInt8]: UInt32] = [:]
        for tuple in try readFeedback(path: path) { out[tuple.token] = max(out[tuple.token] ?? 0, tuple.timestamp) }
        return out
    }

    /// Reads NDJSON lines `{"ts":UNIX,"token":"hex"}`.
    public static func readFeedback(path: String) throws -> [FeedbackTuple] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SimulatorInputError(path: path, line: nil, reason: "cannot be read")
        }
        var tuples: [FeedbackTuple] = []
        for (index, line) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x0D || $0 == 0x09 }) { continue }
            guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
                  let ts = (object["ts"] as? NSNumber)?.int64Value, ts >= 0, ts <= Int64(UInt32.max),
                  let hex = object["token"] as? String, let token = DeviceToken(hex: hex) else {
                throw SimulatorInputError(path: path, line: index + 1, reason: #"expected {"ts":UNIX seconds,"token":"hex"}"#)
            }
            tuples.append(FeedbackTuple(timestamp: UInt32(ts), token: token.bytes))
        }
        return tuples
    }
}
