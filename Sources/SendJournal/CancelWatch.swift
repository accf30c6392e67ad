#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import SendJournal

/// How a running `send` notices `campaign cancel`: at once when `cancel`
/// signals it (``check()`` from the signal's handler), and otherwise
/// (`cancel` could not signal it: run on another machine over shared
/// storage, in another pid namespace, by another user) by looking for the
/// journal's cancel record once a second: one `access(2)`, not a busy loop.
/// `onCancel` runs once, on whichever thread noticed first.
public final class CancelWatch: @unchecked Sendable {
    /// How often the record is looked for when no signal comes.
    public static let intervalSeconds = 1.0

    private let directory: String
    private let onCancel: @Sendable () -> Void
    private let lock = Lock()
    private var fired = false
    private let stopPipe: CancellationPipe
    private var thread = pthread_t()

    public init(directory: String, onCancel: @escaping @Sendable () -> Void) throws {
        (self.directory, self.onCancel) = (directory, onCancel)
        stopPipe = try CancellationPipe()
        thread = startThread { [self] in
            while sleep(until: .after(seconds: Self.intervalSeconds), cancellation: stopPipe), !check() {}
        }
    }

    /// Whether the journal was cancelled; the first time it is, runs `onCancel`.
    @discardableResult
    public func check() -> Bool {
        guard JournalCancel.exists(directory: directory) else { return false }
        let first = lock.withLock { () -> Bool in
            defer { fired = true }
            return !fired
        }
        if first { onCancel() }
        return true
    }

    public func stop() {
        stopPipe.cancel()
        pthread_join(thread, nil)
    }
}
