import CampaignJSON
import CampaignTLS

/// What a send remembers so that `--resume` can go on where it stopped.
public struct SendSettings: Equatable, Sendable {
    /// The plan's path, or nil when it came from standard input and is spooled in the journal.
    public var planPath: String?
    public var gatewayHost: String
    public var gatewayPort: Int
    public var connections = 4
    /// HTTP/2: the pool starts with `connections` and may grow to this many
    /// (`--connections auto`); nil keeps `connections` fixed.
    public var maxConnections: Int?
    /// 256 KiB (16 TLS records) a write: per-write costs (poll, the
    /// write-ahead sent record, the simulator's wake-ups) made 16 KiB writes
    /// 15-20% slower on a fast stream; a slow one is flushed by the delay.
    public var batchBytes = 262_144
    public var batchDelayMilliseconds = 5
    /// Notifications per second over all connections; 0 for no limit.
    public var rate = 0
    /// `--rate-total`: notifications per second over every part of the campaign (overrides the job's throttle); nil: the job's.
    public var rateTotal: Int?
    /// Prove acceptance after this many notifications per connection; 0: only at the end
    /// (and when the window reaches `maxWindow`).
    public var checkpointEvery = 0
    /// Prove acceptance at least this often (milliseconds) while notifications
    /// are unproven; 0: only by count and at the end.
    public var checkpointMilliseconds = 2000
    /// The most notifications left unproven on one connection before a proof is forced.
    public var maxWindow = 100_000
    /// A connection that cannot write for this long is treated as lost (a
    /// gateway that stopped reading); three in a row end the send, resumable.
    public var stallSeconds: Double = 60
    /// The provider certificate; empty with token authentication (HTTP/2).
    public var certificate: String
    public var key: String?
    public var caFile: String?
    public var feedbackStore: String?
    /// `--token-cache DIR`: where the provider token is kept, shared by a fleet; nil: the journal.
    public var tokenCache: String?
    /// `--ledger DIR`: the app's send ledger, where accepted notifications are recorded (SendLedgerRecorder).
    public var ledger: String?
    /// HTTP/2: the most streams in flight per connection (never above the server's limit).
    public var streams = 1000
    /// HTTP/2: a connection with streams open and nothing read for this long
    /// gets a PING; unanswered within a third of it (at most 10 s), it is dropped.
    public var pingAfterSeconds = 30.0
    /// HTTP/2: how long a request may go unanswered (and a connection that
    /// allows no stream may stall) before its connection counts as silent:
    /// dropped, and what was open on it sent again as possible duplicates.
    /// Also the TLS handshake's limit, at most 10 s.
    public var answerTimeoutSeconds = 30.0
    /// How long the gateway may keep failing (HTTP/2: 5xx, 429, resets,
    /// refused streams, connections that achieve nothing; binary: status 1,
    /// 255, undefined codes) with nothing accepted before the send stops
    /// with 69, the rest left for `--resume`.
    public var outageLimitSeconds = 120.0
    /// The first backoff of a notification the server asked to send again
    /// (binary status 1, 255 and undefined codes; HTTP/2 429, 5xx, resets
    /// without a `retry-after`): doubling from it, with jitter, to 30 s.
    /// Neither an option nor journaled: tests shorten it.
    public var retryBackoffSeconds = 0.25
    /// HTTP/2 token authentication: the `.p8` key, its id and the team id.
    public var authKey: String?
    public var keyID: String?
    public var teamID: String?
    /// The HTTP proxy gateways are reached through (`CONNECT`); with its
    /// credentials in memory only: the journal keeps the URL without the
    /// password, and the name of the variable that holds `user:password`.
    public var proxy: HTTPProxy?
    /// `--proxy-user-env`: the variable that holds the proxy's `user:password`.
    public var proxyUserVariable: String?
    /// `--report` and `--metrics` as the send was started (absolute, or `-`):
    /// a resume rewrites them unless given others.
    public var reportPath: String?
    public var metricsPath: String?
    /// A scheduled plan: the longest wait for the next moment with the
    /// connections open (`--hold-open`); a resume keeps it.
    public var holdOpenSeconds = 60.0

    public init(gatewayHost: String, gatewayPort: Int, certificate: String) {
        self.gatewayHost = gatewayHost
        self.gatewayPort = gatewayPort
        self.certificate = certificate
    }

    /// As the journal's start record holds them.
    public var json: JSONValue {
        func s(_ v: String?) -> JSONValue { v.map { .string($0) } ?? .null }
        func n(_ v: Int) -> JSONValue { .number(String(v)) }
        return .object([
            ("plan", s(planPath)), ("host", .string(gatewayHost)), ("port", n(gatewayPort)),
            ("connections", n(connections)), ("batch_bytes", n(batchBytes)), ("batch_delay_ms", n(batchDelayMilliseconds)),
            ("rate", n(rate)), ("checkpoint_every", n(checkpointEvery)), ("checkpoint_ms", n(checkpointMilliseconds)), ("max_window", n(maxWindow)),
            ("cert", .string(certificate)), ("key", s(key)), ("ca", s(caFile)), ("feedback_store", s(feedbackStore)),
        ] + (authKey == nil && streams == 1000 ? [] : [
            ("streams", n(streams)), ("auth_key", s(authKey)), ("key_id", s(keyID)), ("team_id", s(teamID)),
        ]) + (maxConnections.map { [("max_connections", n($0))] } ?? [])
          + (proxy.map { [("proxy", .string($0.description)), ("proxy_user_env", s(proxyUserVariable))] } ?? [])
          + (reportPath.map { [("report", .string($0))] } ?? []) + (ledger.map { [("ledger", .string($0))] } ?? []) + (tokenCache.map { [("token_cache", .string($0))] } ?? []) + (rateTotal.map { [("rate_total", n($0))] } ?? []) + (metricsPath.map { [("metrics", .string($0))] } ?? [])
          + (holdOpenSeconds == 60 ? [] : [("hold_open", .number(String(holdOpenSeconds)))]) + (answerTimeoutSeconds == 30 && outageLimitSeconds == 120 ? [] : [
            ("answer_timeout", .number(String(answerTimeoutSeconds))), ("outage_limit", .number(String(outageLimitSeconds))),
        ]))
    }

    package init?(json v: JSONValue) {
        guard let host = v["host"]?.stringValue, let port = v["port"]?.integerValue, let cert = v["cert"]?.stringValue else { return nil }
        self.init(gatewayHost: host, gatewayPort: Int(port), certificate: cert)
        planPath = v["plan"]?.stringValue
        connections = Int(v["connections"]?.integerValue ?? 4)
        batchBytes = Int(v["batch_bytes"]?.integerValue ?? 262_144)
        batchDelayMilliseconds = Int(v["batch_delay_ms"]?.integerValue ?? 5)
        rate = Int(v["rate"]?.integerValue ?? 0)
        checkpointEvery = Int(v["checkpoint_every"]?.integerValue ?? 0)
        checkpointMilliseconds = Int(v["checkpoint_ms"]?.integerValue ?? 2000)
        maxWindow = Int(v["max_window"]?.integerValue ?? 100_000)
        key = v["key"]?.stringValue
        caFile = v["ca"]?.stringValue
        feedbackStore = v["feedback_store"]?.stringValue
        ledger = v["ledger"]?.stringValue
        tokenCache = v["token_cache"]?.stringValue
        rateTotal = v["rate_total"]?.integerValue.map { Int($0) }
        streams = Int(v["streams"]?.integerValue ?? 1000)
        authKey = v["auth_key"]?.stringValue
        keyID = v["key_id"]?.stringValue
        teamID = v["team_id"]?.stringValue
        answerTimeoutSeconds = v["answer_timeout"]?.doubleValue ?? 30
        outageLimitSeconds = v["outage_limit"]?.doubleValue ?? 120
        maxConnections = v["max_connections"]?.integerValue.map { Int($0) }
        // The URL as journaled: a user perhaps, never a password (see ``proxy``).
        proxy = v["proxy"]?.stringValue.flatMap { try? HTTPProxy(url: $0) }
        proxyUserVariable = v["proxy_user_env"]?.stringValue
        reportPath = v["report"]?.stringValue
        metricsPath = v["metrics"]?.stringValue
        holdOpenSeconds = v["hold_open"]?.doubleValue ?? 60
    }
}
