import CampaignHTTP2
import CampaignTLS

/// One HTTP/2 connection's own state, as its protocol sees it: the session,
/// the token and request template, the PING in flight, the GOAWAY, a pause
/// the server asked for; all exist only while it is open, so closing drops
/// them at once and the next connection starts from nothing (the engine's
/// ``ConnectionState`` holds the link and its bytes).
package enum H2ConnectionState {
    case closed
    case open(H2OpenConnection)
}

/// What exists only while an HTTP/2 connection is open.
package struct H2OpenConnection {
    package let session: H2Session
    /// The provider token its requests carry (token auth).
    package var token: ProviderToken? { didSet { template = nil } }
    /// The request fields; rebuilt when the token changes.
    package var template: RequestTemplate?
    /// The server sent GOAWAY (or the connection must start no new stream): what is open finishes, then it closes.
    package var goingAway = false
    package var settingsReceived = false
    /// A request succeeded on it (a token connection then gets more than one stream).
    package var acceptedOnConnection = false
    /// It got an answer about a notification (accepted or finally refused).
    package var productive = false
    /// The PING in flight, sent at this monotonic time.
    package var pingSentAt: UInt64?
    /// No request is submitted on it before this (a `retry-after`).
    package var pausedUntil: UInt64 = 0
    /// Since when work has waited on it while the server allows no stream.
    package var stalledSince: UInt64?
    /// When in-flight requests were last checked against the answer timeout.
    package var lastAnswerCheck: UInt64

    package init(session: H2Session, token: ProviderToken?, openedAt t: UInt64) {
        self.session = session
        self.token = token
        lastAnswerCheck = t
    }
}

extension H2ConnectionWorker {
    /// The open connection's state, if any.
    package var open: H2OpenConnection? { if case .open(let c) = connectionState { c } else { nil } }

    /// Changes the open connection's state (nothing when closed).
    package func withOpen(_ change: (inout H2OpenConnection) -> Void) {
        guard case .open(var c) = connectionState else { return }
        change(&c)
        connectionState = .open(c)
    }

    package var session: H2Session? { open?.session }
    // What the rest of the protocol reads and sets: the open connection's, or nothing while closed.
    package var connectionToken: ProviderToken? { get { open?.token } set { withOpen { $0.token = newValue } } }
    package var template: RequestTemplate? { get { open?.template } set { withOpen { $0.template = newValue } } }
    package var goingAway: Bool { get { open?.goingAway ?? false } set { withOpen { $0.goingAway = newValue } } }
    package var settingsReceived: Bool { get { open?.settingsReceived ?? false } set { withOpen { $0.settingsReceived = newValue } } }
    package var acceptedOnConnection: Bool { get { open?.acceptedOnConnection ?? false } set { withOpen { $0.acceptedOnConnection = newValue } } }
    package var productive: Bool { get { open?.productive ?? false } set { withOpen { $0.productive = newValue } } }
    package var pingSentAt: UInt64? { get { open?.pingSentAt } set { withOpen { $0.pingSentAt = newValue } } }
    package var pausedUntil: UInt64 { get { open?.pausedUntil ?? 0 } set { withOpen { $0.pausedUntil = newValue } } }
    package var stalledSince: UInt64? { get { open?.stalledSince } set { withOpen { $0.stalledSince = newValue } } }
    package var lastAnswerCheck: UInt64 { get { open?.lastAnswerCheck ?? 0 } set { withOpen { $0.lastAnswerCheck = newValue } } }
}
