/// Where a send is: running, stopping on a signal, failed (it gives up:
/// 69, 77, …), or unable to journal (74). Every way out of running starts
/// the grace for answers to what is in flight (``SendShared/stopGraceSeconds``).
package enum SendRunState {
    case running
    case stopping(since: UInt64)
    case failed(SendFailureReason, since: UInt64)
    /// Nothing more can be journaled: it outranks a failure (what the
    /// journal holds is what a resume knows).
    case journalBroken(any Error, since: UInt64)

    package enum Event {
        case stopRequested
        case failed(SendFailureReason)
        case journalBroke(any Error)
    }

    /// When the stop began; nil while running.
    package var since: UInt64? {
        switch self {
        case .running: nil
        case .stopping(let t), .failed(_, let t), .journalBroken(_, let t): t
        }
    }

    /// The state after `event` at monotonic time `t`: the first failure is
    /// kept, a broken journal outranks everything, and the stop's start never moves.
    package func next(_ event: Event, at t: UInt64) -> SendRunState {
        let since = self.since ?? t
        switch (self, event) {
        case (.journalBroken, _): return self
        case (_, .journalBroke(let error)): return .journalBroken(error, since: since)
        case (.failed, _): return self
        case (_, .failed(let reason)): return .failed(reason, since: since)
        case (.running, .stopRequested): return .stopping(since: t)
        case (.stopping, .stopRequested): return self
        }
    }
}
