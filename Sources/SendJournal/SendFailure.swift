import APNSWire

/// Why a gateway refused a notification for good, as it said it.
public enum FailureCause: Hashable, Sendable, CustomStringConvertible {
    /// The binary interface's error-response status (1–255).
    case binary(ErrorResponse.Status)
    /// An HTTP/2 answer: its status (400 and up) and the body's reason, if any.
    case http(status: Int, reason: APNsReason?)
    /// HTTP/2: the stream was reset without an answer (the RST_STREAM code's
    /// name). Journals of earlier versions hold these; a reset is now always retried.
    case streamReset(String)

    /// The number journals and reports key by: the binary status, the HTTP status, 0 for a reset.
    public var status: Int {
        switch self {
        case .binary(let s): Int(s.rawValue)
        case .http(let status, _): status
        case .streamReset: 0
        }
    }

    /// The journal's `http_reason`: the reason or code name over HTTP/2 ("" for an answer without one), nil for the binary interface.
    public var journaledReason: String? {
        switch self {
        case .binary: nil
        case .http(_, let reason): reason?.name ?? ""
        case .streamReset(let code): code
        }
    }

    /// The interface that gave a cause, as a journal's `fail` record names it
    /// in `protocol`, so the cause is read back as it was, not guessed.
    public enum Interface: String, Sendable {
        case binary
        case http2 = "h2"
    }

    public var interface: Interface {
        switch self {
        case .binary: .binary
        case .http, .streamReset: .http2
        }
    }

    /// Reads the cause from a journal's `status`, `http_reason` and
    /// `protocol`. A journal written before `protocol` was journaled (nil)
    /// is read as it always was: see ``init(status:journaledReason:)``.
    public init(status: Int, journaledReason: String?, interface: Interface?) {
        switch interface {
        case .binary?: self = .binary(ErrorResponse.Status(rawValue: UInt8(clamping: max(0, status))))
        // A reset is journaled with status 0 and its code's name.
        case .http2? where status == 0: self = .streamReset(journaledReason ?? "")
        case .http2?: self = .http(status: status, reason: journaledReason.flatMap { $0.isEmpty ? nil : APNsReason(name: $0) })
        case nil: self.init(status: status, journaledReason: journaledReason)
        }
    }

    /// Reads the cause from `status` and `http_reason` alone, as journals
    /// without `protocol` must be: a reason names HTTP/2, and so does a
    /// status the binary interface cannot send (256 and up).
    public init(status: Int, journaledReason: String?) {
        switch (status, journaledReason) {
        case (0, let code?): self = .streamReset(code)
        case (let s, let reason?): self = .http(status: s, reason: reason.isEmpty ? nil : APNsReason(name: reason))
        case (let s, nil) where s >= 256: self = .http(status: s, reason: nil)
        case (let s, nil): self = .binary(ErrorResponse.Status(rawValue: UInt8(clamping: max(0, s))))
        }
    }

    /// The status and the reason by name, as reports, `status` and metrics
    /// label failures: "410 Unregistered", "400 BadDeviceToken", "8 invalid token".
    public var label: String {
        switch self {
        case .binary(let s): "\(s.rawValue) \(s.meaning)"
        case .http(let status, let reason): "\(status) \(reason?.name ?? "(no reason)")"
        case .streamReset(let code): "reset \(code)"
        }
    }

    /// The reason alone, for a metrics label: "Unregistered", "invalid token".
    public var reasonName: String {
        switch self {
        case .binary(let s): s.meaning
        case .http(_, let reason): reason?.name ?? ""
        case .streamReset(let code): code
        }
    }

    /// In words: "invalid token (status 8)"'s meaning, "HTTP 410 Unregistered".
    public var description: String {
        switch self {
        case .binary(let s): s.meaning
        case .http(let status, let reason): "HTTP \(status)" + (reason.map { " \($0.name)" } ?? "")
        case .streamReset(let code): "no answer: the server reset the stream (\(code))"
        }
    }
}

/// One notification the gateway refused for good.
public struct SendFailure: Equatable, Sendable {
    public var seq: UInt64
    public var shard: Int
    public var ordinal: Int
    public var cause: FailureCause
    public var token: [UInt8]
    /// Whether the sender gave up after retries rather than on the first
    /// answer. Only journals of earlier versions hold such failures: the
    /// gateway's trouble (status 1, 255, lost connections) is never final now.
    public var gaveUp: Bool
    /// Times it was sent: 1, or more after retries (in journals of earlier
    /// versions, 4 for status 1 given up, 5 for one quarantined for heading
    /// lost connections).
    public var attempts: Int
    /// When the token stopped being valid (UNIX seconds), for the suppression
    /// store: HTTP/2 410 (its timestamp, never later than the answer) and
    /// binary status 8 (when it came). Journaled, so a kill loses none.
    public var unregisteredAt: UInt32?

    public init(seq: UInt64, shard: Int, ordinal: Int, cause: FailureCause, token: [UInt8], gaveUp: Bool, attempts: Int = 1,
                unregisteredAt: UInt32? = nil) {
        (self.seq, self.shard, self.ordinal, self.cause, self.token, self.gaveUp, self.attempts) =
            (seq, shard, ordinal, cause, token, gaveUp, attempts)
        self.unregisteredAt = unregisteredAt
    }

    /// A failure as a journal records it (`status`, `http_reason` over
    /// HTTP/2, and `protocol`: nil in journals written before it was).
    public init(seq: UInt64, shard: Int, ordinal: Int, status: Int, httpReason: String? = nil, interface: FailureCause.Interface? = nil,
                token: [UInt8], gaveUp: Bool, attempts: Int = 1, unregisteredAt: UInt32? = nil) {
        self.init(seq: seq, shard: shard, ordinal: ordinal, cause: FailureCause(status: status, journaledReason: httpReason, interface: interface),
                  token: token, gaveUp: gaveUp, attempts: attempts, unregisteredAt: unregisteredAt)
    }

    /// The binary status, the HTTP status, or 0 for a reset (see ``FailureCause/status``).
    public var status: Int { cause.status }

    /// A status in words, for counts kept by status alone (a binary status's meaning, or "HTTP 410").
    /// Connections in a row lost without an answer, each headed by the same
    /// notification, after which that notification is quarantined (binary).
    package static let quarantineAfterLostConnections = 5

    public static func meaning(status: Int) -> String {
        FailureCause(status: status, journaledReason: nil).description
    }

    /// What the failure means, in words. (The given-up wordings are for
    /// journals of earlier versions, which made the gateway's trouble final.)
    public var reason: String {
        if gaveUp, cause == .binary(.unknown), attempts >= Self.quarantineAfterLostConnections {
            return "quarantined: it headed \(attempts) connections in a row that were lost without an answer"
        }
        return gaveUp ? "\(cause), given up after \(attempts) attempts" : cause.description
    }
}

extension Sequence where Element == SendFailure {
    /// The failures counted by status and reason ("410 Unregistered": n, ``FailureCause/label``),
    /// as reports, `status` and its page list them.
    public var countedByReason: [String: Int] {
        reduce(into: [:]) { counts, f in counts[f.cause.label, default: 0] += 1 }
    }

    /// The failures counted by status alone (binary statuses, HTTP statuses, 0 for a reset).
    public var countedByStatus: [Int: Int] {
        reduce(into: [:]) { counts, f in counts[f.status, default: 0] += 1 }
    }
}

/// A scheduled notification recorded as skipped (`late: skip`): its moment
/// had passed by more than the job's window when the send came to it.
public struct SkippedNotification: Equatable, Sendable {
    public var seq: UInt64
    public var shard: Int
    public var ordinal: Int
    public var token: [UInt8]
    /// Its moment and when it was skipped (UNIX seconds).
    public var moment: Int64
    public var skippedAt: Int64
    /// Skipped by a campaign rule at release (`frequency_capped`), not for being late.
    public var rule: String? = nil

    public init(seq: UInt64, shard: Int, ordinal: Int, token: [UInt8], moment: Int64, skippedAt: Int64) {
        (self.seq, self.shard, self.ordinal, self.token, self.moment, self.skippedAt) = (seq, shard, ordinal, token, moment, skippedAt)
    }

    /// Why, as a word a script matches: the campaign rule that stopped it (`frequency_capped`), or `late`.
    public var code: String { rule ?? "late" }

    /// "late by 4 h 10 min (its moment was 2026-12-01T14:00:00Z)".
    public var reason: String {
        if let rule { return "skipped: \(rule) as it was about to go (the send ledger shows the device at the job's frequencyCap)" }
        let late = max(0, skippedAt - moment)
        let words = late >= 3600 ? "\(late / 3600) h \(late % 3600 / 60) min" : "\(late / 60) min \(late % 60) s"
        return "skipped: late by \(words), past the job's window (late: skip)"
    }
}
