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
}

/// First signal: stop gracefully. Second: exit at once; the journal is
/// append-only with a checksum per record, so it is consistent at any moment.
final class SignalEscalation: @unchecked Sendable {
    private let first: @Sendable () -> Void
    /// What the first signal prints: what the command does before it ends.
    private let notice: String
    private var count = 0
    private let lock = Lock()

    init(notice: String = "campaign send: stopping: proving what is in flight (signal again to exit at once)",
         first: @escaping @Sendable () -> Void) {
        (self.notice, self.first) = (notice, first)
    }

    @Sendable func handle() {
        lock.lock()
        count += 1
        let n = count
        lock.unlock()
        if n == 1 {
            printError(notice)
            first()
        } else {
            _exit(75)
        }
    }
}
