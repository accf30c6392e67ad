#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// fsyncs the journal on a thread of its own, so that a proof of acceptance
/// does not hold its connection while the disk catches up.
///
/// A proof's records are written (handed to the kernel: they survive a killed
/// process) before the connection goes on; their fsync (which makes them
/// survive a power loss) follows within one disk flush. It took 5–7 ms a
/// proof, during which the connection sent nothing. The end of a send still
/// fsyncs synchronously. A power loss in between can only lose proofs whose
/// notifications the journal already marked as sent: a resume sends them
/// again and counts them as possible duplicates, as for any unproven window.
package final class JournalSyncer: @unchecked Sendable {
    private let journal: Journal
    private let mutex = Lock()
    private let wake = Condition()
    private var requested = 0
    private var completed = 0
    private var stopping = false
    private var failure: Error?
    private var thread = pthread_t()
    private var running = false

    package init(journal: Journal) {
        self.journal = journal
    }

    // The thread holds the syncer until ``stop()``: whoever starts it stops it.

    package func start() {
        guard !running else { return }
        running = true
        thread = startThread { [self] in loop() }
    }

    /// Asks for an fsync of everything written so far. Returns at once; a
    /// failure of an earlier fsync is thrown here.
    package func request() throws {
        mutex.lock()
        defer { mutex.unlock() }
        if let failure { throw failure }
        requested += 1
        wake.signal()
    }

    /// Waits for the requested fsyncs and ends the thread; ``error`` then
    /// tells whether any failed.
    package func stop() {
        guard running else { return }
        mutex.lock()
        stopping = true
        wake.signal()
        mutex.unlock()
        pthread_join(thread, nil)
        running = false
    }

    /// The first fsync that failed, if any.
    package var error: Error? {
        mutex.lock()
        defer { mutex.unlock() }
        return failure
    }

    private func loop() {
        mutex.lock()
        while true {
            while requested == completed && !stopping { wake.wait(mutex) }
            if requested == completed && stopping { break }
            // One fsync covers every request made before it starts.
            let target = requested
            mutex.unlock()
            var error: Error? = nil
            do { try journal.syncWritten() } catch let e { error = e }
            mutex.lock()
            if let error, failure == nil { failure = error }
            completed = target
        }
        mutex.unlock()
    }
}
