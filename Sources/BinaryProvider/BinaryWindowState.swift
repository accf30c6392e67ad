/// Where a binary connection's window stands (its notifications are in the
/// ``UnprovenWindow``): each case holds what exists in it, every event
/// switches on it exhaustively, and its timer returns an action.
package enum BinaryWindowState: Equatable, Sendable {
    /// Notifications may join: none yet, or some waiting for their proof to be due.
    case filling
    /// The proof of acceptance is framed after the window: nothing more joins;
    /// its answer's clock starts once every byte is written.
    case proofFramed
    /// The proof is on the wire since `at`: the gateway's answer (it closes
    /// the connection) ends the window; silence past the stall limit loses it.
    case proofWritten(at: UInt64)

    /// What a binary connection's timer asks of its worker.
    package enum TimerAction: Equatable, Sendable {
        case none
        /// No answer to the proof within `seconds`: the connection is silent.
        case silent(seconds: Double)
    }

    package init() { self = .filling }

    /// Whether notifications may still join the window.
    package var takesMore: Bool {
        switch self {
        case .filling: true
        case .proofFramed, .proofWritten: false
        }
    }

    /// The proof was framed after the window.
    package mutating func proofFramed() {
        switch self {
        case .filling: self = .proofFramed
        case .proofFramed, .proofWritten: break
        }
    }

    /// Everything framed is on the wire at `t`.
    package mutating func wroteAll(at t: UInt64) {
        switch self {
        case .proofFramed: self = .proofWritten(at: t)
        case .filling, .proofWritten: break
        }
    }

    /// The proof's answer is late when nothing came `stallSeconds` after it was written.
    package func timer(at t: UInt64, stallSeconds: Double) -> TimerAction {
        switch self {
        case .proofWritten(let at) where Double(t - min(t, at)) / 1e9 > stallSeconds: .silent(seconds: stallSeconds)
        case .filling, .proofFramed, .proofWritten: .none
        }
    }

    /// The window ended with its connection: the next starts empty.
    package mutating func reset() { self = .filling }
}
