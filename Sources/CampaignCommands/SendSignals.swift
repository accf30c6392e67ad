import Foundation
import CampaignIO
import CampaignSend

/// The send a signal stops (none while a scheduled send waits between runs).
final class RunningSender: @unchecked Sendable {
    private var current: Sender?
    private let lock = Lock()
    var sender: Sender? {
        get { lock.lock(); defer { lock.unlock() }; return current }
        set { lock.lock(); current = newValue; lock.unlock() }
    }

    /// What a send does once asked to stop: prove what it has in flight, or
    /// nothing (waiting for a moment, or between runs).
    var stoppingWords: String { Self.stoppingWords(inFlight: sender?.progress().inFlight ?? 0) }

    static func stoppingWords(inFlight n: Int) -> String {
        n == 0 ? "stopping: nothing is in flight" : "stopping: proving the \(n) notification\(n == 1 ? "" : "s") in flight"
    }
}

/// First signal: stop gracefully. Second: exit at once; the journal is
/// append-only with a checksum per record, so it is consistent at any moment.
final class SignalEscalation: @unchecked Sendable {
    private let first: @Sendable () -> Void
    /// What the first signal prints: what the command does before it ends (asked when it comes).
    private let notice: @Sendable () -> String
    private var count = 0
    private let lock = Lock()

    init(notice: @escaping @Sendable () -> String, first: @escaping @Sendable () -> Void) {
        (self.notice, self.first) = (notice, first)
    }

    @Sendable func handle() {
        lock.lock()
        count += 1
        let n = count
        lock.unlock()
        if n == 1 {
            printError(notice())
            first()
        } else {
            _exit(75)
        }
    }
}
