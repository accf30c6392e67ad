/// How a send ended.
public enum SendOutcome: RawRepresentable, Hashable, Sendable {
    /// Every notification has a final outcome.
    case complete
    /// Stopped by a signal; `--resume` goes on.
    case interrupted
    /// The plan had no trailer (or was damaged): what it held was sent.
    case incompletePlan
    /// The gateway stayed unreachable; `--resume` goes on.
    case gaveUp
    /// A credential or trust failure.
    case credentials
    /// HTTP/2: too many requests in a row refused as malformed.
    case malformed
    /// A scheduled campaign: what was due is final; the rest waits for its
    /// moment (``SendReport/nextMoment``); `--resume` goes on.
    case scheduled
    /// `campaign cancel` stopped it for good: what was sent stays counted, nothing more is sent.
    case cancelled
    /// A word a journal holds that this version does not know (another
    /// version wrote it); no run of this version ends so. Shown as it is.
    case unrecognized(String)

    /// Every outcome a run of this version can end with.
    public static let known: [SendOutcome] = [.complete, .interrupted, .incompletePlan, .gaveUp, .credentials, .malformed, .scheduled, .cancelled]

    /// The word reports and journals use; any other word is ``unrecognized(_:)``.
    public init(rawValue: String) {
        self = Self.known.first { $0.rawValue == rawValue } ?? .unrecognized(rawValue)
    }

    public var rawValue: String {
        switch self {
        case .complete: "complete"
        case .interrupted: "interrupted"
        case .incompletePlan: "incomplete-plan"
        case .gaveUp: "gave-up"
        case .credentials: "credentials"
        case .malformed: "malformed"
        case .scheduled: "scheduled"
        case .cancelled: "cancelled"
        case .unrecognized(let word): word
        }
    }
}
