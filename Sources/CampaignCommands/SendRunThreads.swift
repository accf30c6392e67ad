import Foundation
import CampaignIO
import Synchronization
import CampaignSend

/// "sent 120000 of 1000000 (52000/s), 3 failed, ETA 16 s" on a terminal, once a second.
final class ProgressLine: @unchecked Sendable {
    private let sender: Sender
    private let stopPipe = try! CancellationPipe()
    private var thread = pthread_t()

    init(sender: Sender) {
        self.sender = sender
        thread = startThread { [self] in
            let start = Date()
            while sleep(until: .after(seconds: 1), cancellation: stopPipe) {
                let line = sender.progress().line(seconds: Date().timeIntervalSince(start))
                FileHandleWriter.write("\r\u{1B}[K" + line, fd: 2)
            }
            FileHandleWriter.write("\r\u{1B}[K", fd: 2)
        }
    }

    func stop() {
        stopPipe.cancel()
        pthread_join(thread, nil)
    }
}

/// `--metrics FILE`: the send's metrics rewritten atomically once a second,
/// and a last time when the run ends: `up 0`, or `up 1` for a scheduled
/// send that goes on waiting for its next run.
final class MetricsFile: @unchecked Sendable {
    private let stopPipe = try! CancellationPipe()
    private var thread = pthread_t()
    private let sender: Sender
    private let path: String
    private let journal: String
    private let start = Date()
    /// What the last write says of the send once the run is over (set on
    /// the send's thread, read on the metrics thread: the stop pipe orders
    /// them in the kernel, where ThreadSanitizer cannot see it).
    private let upAfterTheRun = Atomic<Bool>(false)

    init(sender: Sender, path: String, journal: String) {
        (self.sender, self.path, self.journal) = (sender, path, journal)
        thread = startThread { [self] in
            while sleep(until: .after(seconds: 1), cancellation: stopPipe) { write(running: true) }
            write(running: upAfterTheRun.load(ordering: .acquiring))   // the run is over: it says whether the send is
        }
    }

    /// One write of the metrics; `running`: whether the send is alive (sending, or waiting between runs).
    func write(running: Bool) {
        let text = SendMetrics.text(journal: journal, counts: sender.counts(), totals: sender.wholeSendCounts(), progress: sender.progress(),
                                    seconds: Date().timeIntervalSince(start), running: running)
        do { try SecureFile.write(Array(text.utf8), to: path, mode: SecureFile.publicMode) } catch {
            printError("campaign send: cannot write metrics: \(error)")
        }
    }

    /// The run is over; `waiting`: the send waits for its next run (still up).
    func stop(waiting: Bool = false) {
        upAfterTheRun.store(waiting, ordering: .releasing)
        stopPipe.cancel()
        pthread_join(thread, nil)
    }
}
