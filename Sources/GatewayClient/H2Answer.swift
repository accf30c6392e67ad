import APNSWire
import CampaignIO
import CampaignJSON

/// An HTTP/2 APNs answer to one notification (status, the body's `reason`
/// and `timestamp`, the `retry-after` header) and what `send` does with it:
/// issue 15's outcome table, pure, for the HTTP/2 transport to apply.
public struct H2Answer: Equatable, Sendable {
    public var status: Int
    public var reason: APNsReason?
    /// 410 only: when the token stopped being valid, in milliseconds since the epoch.
    public var timestampMilliseconds: Int64?
    public var retryAfterSeconds: Int?
    /// A broadcast's 200: `apns-unique-id`, the id to quote when asking Apple about it.
    public var uniqueID: String?

    public init(status: Int, reason: APNsReason? = nil, timestampMilliseconds: Int64? = nil, retryAfterSeconds: Int? = nil) {
        (self.status, self.reason, self.timestampMilliseconds, self.retryAfterSeconds) = (status, reason, timestampMilliseconds, retryAfterSeconds)
    }

    /// Reads an answer from its `:status`, its body (`{"reason":…,"timestamp":…}`
    /// or empty) and its `retry-after` header.
    public init(status: Int, body: [UInt8], retryAfter: String? = nil) {
        let value = body.isEmpty ? nil : try? JSONValue.parse(body)
        self.init(status: status, reason: value?["reason"]?.stringValue.map { APNsReason(name: Self.boundedReason($0)) },
                  timestampMilliseconds: value?["timestamp"]?.integerValue,
                  retryAfterSeconds: retryAfter.flatMap { Int($0.trimmingWhitespace()) }.map { min(Self.maxRetryAfterSeconds, max(0, $0)) })
    }

    /// The longest `retry-after` obeyed: a longer one (a server asking for
    /// days) is read as this, and the outage limit decides when to stop.
    public static let maxRetryAfterSeconds = 60

    /// The longest reason kept. Apple's reasons are identifiers of a few
    /// dozen letters; anything else is the server's text, which must not
    /// reach a journal or a terminal as it came.
    public static let maxReasonLength = 64

    /// A reason as it may be journaled and printed: one of Apple's in its
    /// table's spelling (however the server spaced it: "Service Unavailable"
    /// is ServiceUnavailable), an identifier of at most ``maxReasonLength``
    /// printable ASCII characters, or a note of its length with the text
    /// escaped (control and non-ASCII characters as `\u{1B}`), cut at ``maxEscapedLength``
    /// (all printable ASCII, so a terminal or a metrics label shows it as it is).
    public static func boundedReason(_ text: String) -> String {
        let bytes = text.utf8
        if bytes.count <= maxReasonLength * 2, case let known = APNsReason(name: text), APNsReason.documented.contains(known) { return known.name }
        if bytes.count <= maxReasonLength, !bytes.isEmpty, bytes.allSatisfy({ (0x21...0x7E).contains($0) }) { return text }
        var escaped = ""
        for scalar in text.unicodeScalars {
            if escaped.utf8.count >= maxEscapedLength { escaped += "..."; break }
            switch scalar {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case " "..."~": escaped.unicodeScalars.append(scalar)
            default: escaped += "\\u{\(String(scalar.value, radix: 16, uppercase: true))}"
            }
        }
        return "(a reason of \(bytes.count) bytes: \"\(escaped)\")"
    }

    /// How much of a reason that is not an identifier is shown (escaped).
    public static let maxEscapedLength = 48

    /// What becomes of the notification.
    public enum Verdict: Equatable, Sendable {
        /// 200: proven accepted (no sentinels on HTTP/2).
        case accepted
        /// 410: final; the token goes into the suppression store at `unregisteredAt` (seconds).
        case unregistered(unregisteredAt: UInt32?)
        /// 400 BadDeviceToken, DeviceTokenNotForTopic: final and recorded, not
        /// suppressed (the token may belong to the other environment).
        case refusedForItsToken
        /// Another 400, or 404, 405, 413: final once the server has shown it is
        /// sane (it accepted something since), reported loudly (a bug in the
        /// plan or in us); many in a row stop the send and stay pending (the
        /// `--gateway` may be another HTTP/2 server that refuses everything).
        case refusedAsMalformed
        /// 403 (but an expired token) and TopicDisallowed: stop the send; a credential is wrong.
        case credentialRefused
        /// 403 ExpiredProviderToken: a new token (if the current one is old enough), then again.
        case providerTokenExpired
        /// 429 TooManyProviderTokenUpdates: a new connection with the same token, after a backoff.
        case tooManyTokenUpdates
        /// 429 TooManyRequests, 500, 503: the server's state, never final: again
        /// after its backoff, and not before `retry-after` when given (at most
        /// ``maxRetryAfterSeconds``); see ``RetryBackoff``.
        case retryLater(afterSeconds: Int?)
        /// A status the API does not define (or none): retried like a server error.
        case unknown
        /// A broadcast's 400 FeatureNotEnabled: the app's broadcast capability is off;
        /// stop the send (69), nothing final, until it is turned on.
        case accountRefused
    }

    public var verdict: Verdict { verdict(broadcast: false) }

    /// What becomes of the notification; a broadcast's answers are classed
    /// as `apns-broadcast.md` §3 says: a channel gone is final and goes to
    /// the dead-channel store (as a 410 does for a device), an id or an
    /// expiration the channel refuses is final for that channel, and the
    /// broadcast capability turned off stops the send.
    public func verdict(broadcast: Bool) -> Verdict {
        if broadcast {
            switch (status, reason) {
            case (400, .channelNotRegistered?): return .unregistered(unregisteredAt: nil)
            case (400, .badChannelId?), (400, .badExpirationDate?): return .refusedForItsToken
            case (400, .featureNotEnabled?): return .accountRefused
            default: break
            }
        }
        switch (status, reason) {
        case (200, _): return .accepted
        case (410, _): return .unregistered(unregisteredAt: timestampMilliseconds.map { UInt32(clamping: $0 / 1000) })
        case (_, .topicDisallowed?): return .credentialRefused
        case (400, .badDeviceToken?), (400, .deviceTokenNotForTopic?): return .refusedForItsToken
        case (400, _), (404, _), (405, _), (413, _): return .refusedAsMalformed
        case (403, .expiredProviderToken?): return .providerTokenExpired
        case (403, _): return .credentialRefused
        case (429, .tooManyProviderTokenUpdates?): return .tooManyTokenUpdates
        case (429, _), (500, _), (503, _): return .retryLater(afterSeconds: retryAfterSeconds)
        default: return .unknown
        }
    }

    /// "503 ServiceUnavailable", "500 (no reason)": how reports and metrics name an answer.
    public var label: String { "\(status) \(reason?.name ?? "(no reason)")" }

    /// "status 410 Unregistered" and the like, for reports.
    public var description: String { "status \(status)" + (reason.map { " \($0)" } ?? "") }
}
