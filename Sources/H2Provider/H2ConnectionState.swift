import CampaignHTTP2
import CampaignTLS

/// One HTTP/2 connection's own state, as its protocol sees it: closed, or
/// open with what exists only while it is (the session, the token and
/// request template, where it stands with its server); closing drops them at
/// once and the next connection starts from nothing (the engine's
/// ``ConnectionState`` holds the link and its bytes).
package enum H2ConnectionState {
    case closed
    case open(H2OpenConnection)
}

/// Where an open connection stands with its server.
package enum H2Phase: Equatable, Sendable {
    /// The server's SETTINGS are not read yet: at most 100 streams (RFC 9113's
    /// floor), and no PING to measure the round trip. No new stream before
    /// `pausedUntil` (a `retry-after`; 0 when none).
    case awaitingSettings(pausedUntil: UInt64)
    /// New streams may start, not before `pausedUntil`.
    case open(pausedUntil: UInt64)
    /// GOAWAY read, a token APNs will not renew on it, or the session starts
    /// no more streams: what is open finishes, then it closes.
    case goingAway
}

/// The connection's PING: it measures the round trip and proves a quiet server alive.
package enum H2Ping: Equatable, Sendable {
    /// None in flight; the last was sent at `lastSentAt` (0: none yet).
    case idle(lastSentAt: UInt64)
    /// Sent at `since`, not acknowledged yet.
    case inFlight(since: UInt64)
}

/// What a connection's timers ask of its worker.
package enum H2TimerAction: Equatable, Sendable {
    case none
    case sendPing
    /// Nothing at all came for `seconds` after a PING, with requests open: the server is silent.
    case silent(seconds: Double)
}

/// An open connection's phase and PING, as one machine: events move it, and
/// what it decides comes back as answers and actions; every event switches
/// on both enums exhaustively. Pure (times are the caller's monotonic nanoseconds).
package struct H2ConnectionMachine: Equatable, Sendable {
    package private(set) var phase: H2Phase = .awaitingSettings(pausedUntil: 0)
    package private(set) var ping: H2Ping = .idle(lastSentAt: 0)
    /// PINGs measure the round trip once a second, from the server's SETTINGS on (17 bytes each way).
    package static let roundTripEvery: UInt64 = 1_000_000_000

    package init() {}

    // MARK: - Events

    /// The server's SETTINGS: its stream limit holds from now on.
    package mutating func settingsArrived() {
        switch phase {
        case .awaitingSettings(let until): phase = .open(pausedUntil: until)
        case .open, .goingAway: break
        }
    }

    /// GOAWAY, or no new stream can start on it: nothing new, what is open finishes.
    package mutating func goAway() {
        switch phase {
        case .awaitingSettings, .open: phase = .goingAway
        case .goingAway: break
        }
    }

    /// The server asked this connection to wait (`retry-after`): no new stream before `until`.
    package mutating func pause(until: UInt64) {
        switch phase {
        case .awaitingSettings(let before): phase = .awaitingSettings(pausedUntil: max(before, until))
        case .open(let before): phase = .open(pausedUntil: max(before, until))
        case .goingAway: break
        }
    }

    /// The PING came back: its round trip, or nil when none was in flight.
    package mutating func pingAcknowledged(at t: UInt64) -> UInt64? {
        switch ping {
        case .inFlight(let since):
            ping = .idle(lastSentAt: since)
            return t - min(t, since)
        case .idle:
            return nil
        }
    }

    /// Once a second: a PING to measure the round trip (after SETTINGS,
    /// once a second) or to wake a quiet connection with requests open
    /// (nothing read for `pingAfterSeconds`, S). Silence is what `--ping-after`
    /// promises: nothing read for S and then a third of S more (10 s at
    /// most), with a PING unanswered that long and nothing at all read since
    /// it. A PING that went to measure the round trip and found the server
    /// quiet does not make it silent sooner. A server that answers, but late
    /// (a loaded machine), is slow, not dead: its requests have the answer
    /// timeout, and a new PING measures again.
    package mutating func timers(at t: UInt64, requestsOpen: Bool, lastReadAt: UInt64?, pingAfterSeconds: Double) -> H2TimerAction {
        switch ping {
        case .idle(let last):
            let measuring: Bool
            switch phase {
            case .awaitingSettings: measuring = false
            case .open, .goingAway: measuring = t - min(t, last) >= Self.roundTripEvery
            }
            let quiet = requestsOpen && Double(t - min(t, lastReadAt ?? t)) / 1e9 > pingAfterSeconds
            guard measuring || quiet else { return .none }
            ping = .inFlight(since: t)
            return .sendPing
        case .inFlight(let since):
            let timeout = min(10, pingAfterSeconds / 3)
            guard requestsOpen, Double(t - min(t, since)) / 1e9 > timeout else { return .none }
            let read = lastReadAt ?? since
            guard read > since else {
                let quietFor = Double(t - min(t, read)) / 1e9
                return quietFor > pingAfterSeconds + timeout ? .silent(seconds: timeout) : .none
            }
            ping = .idle(lastSentAt: since)
            return .none
        }
    }

    // MARK: - Questions

    /// Whether a new stream may start at `t`.
    package func mayStartStreams(at t: UInt64) -> Bool {
        switch phase {
        case .awaitingSettings(let until), .open(let until): t >= until
        case .goingAway: false
        }
    }

    package var isGoingAway: Bool {
        switch phase {
        case .goingAway: true
        case .awaitingSettings, .open: false
        }
    }

    package var pingInFlight: Bool {
        switch ping {
        case .inFlight: true
        case .idle: false
        }
    }

    /// Streams it may have open: `wanted`, never above the server's limit, and
    /// until the server's SETTINGS at most 100.
    package func streamLimit(server: Int, wanted: Int) -> Int {
        switch phase {
        case .awaitingSettings: min(wanted, server, 100)
        case .open, .goingAway: min(wanted, server)
        }
    }

    /// When a pause ends, if it is still ahead of `t`.
    package func pauseEnds(after t: UInt64) -> UInt64? {
        switch phase {
        case .awaitingSettings(let until), .open(let until): until > t ? until : nil
        case .goingAway: nil
        }
    }
}

/// What exists only while an HTTP/2 connection is open.
package struct H2OpenConnection {
    package let session: H2Session
    /// The provider token its requests carry (token auth).
    package var token: ProviderToken? { didSet { template = nil } }
    /// The request fields; rebuilt when the token changes.
    package var template: RequestTemplate?
    package var machine = H2ConnectionMachine()
    /// A request succeeded on it (a token connection then gets more than one stream).
    package var acceptedOnConnection = false
    /// It got an answer about a notification (accepted or finally refused).
    package var productive = false
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
    package var open: H2OpenConnection? {
        switch connectionState {
        case .open(let c): c
        case .closed: nil
        }
    }

    /// Changes the open connection's state; returns what `change` returns,
    /// or nil when the connection is closed (an event for a connection gone).
    @discardableResult
    package func withOpen<T>(_ change: (inout H2OpenConnection) -> T) -> T? {
        switch connectionState {
        case .open(var c):
            let result = change(&c)
            connectionState = .open(c)
            return result
        case .closed:
            return nil
        }
    }

    package var session: H2Session? { open?.session }
    package var connectionToken: ProviderToken? { open?.token }
    package var goingAway: Bool { open?.machine.isGoingAway ?? false }
    package var acceptedOnConnection: Bool { open?.acceptedOnConnection ?? false }
    package var productive: Bool { open?.productive ?? false }
}
