import CampaignIO
import LocalTime
import SendJournal
import GatewayClient
import SendEngine

/// A scheduled send that waits between its runs (without `--due-only`):
/// when it starts the next run, and the wait itself.
public enum ScheduledRunWait {
    /// How long before a scheduled moment a waiting send opens its connections again.
    public static let openBeforeMomentSeconds = 10.0

    /// When to start the run after `report`, which ended before the moment
    /// `next` (UNIX seconds): connections open a little before the moment and
    /// the run then waits for it with them open, but never earlier than
    /// `holdOpenSeconds` allows (a run that began too early would end at
    /// once, empty). A moment that ends some device's quiet hours is checked
    /// again only by a run that starts once they are over: at the moment.
    /// A run that made nothing final waits at least a second past `now`:
    /// never a tight loop of empty runs.
    public static func wake(after report: SendReport, next: Int64, holdOpenSeconds: Double, now: Double) -> Double {
        var wake = Double(next) - (report.nextMomentEndsQuietHours ? 0 : min(openBeforeMomentSeconds, holdOpenSeconds))
        let progressed = report.accepted + report.failed + report.skipped > 0
        if !progressed { wake = max(wake, now + 1) }
        return wake
    }

    /// Journals the wait (`status` tells a waiting send, the journal's lock
    /// held and its pid alive, from one killed while waiting), then sleeps
    /// until `wake`. False when `stop` ended the wait first.
    public static func wait(until wake: Double, journal: Journal, stop: CancellationPipe) throws -> Bool {
        try wait(until: wake, journal: journal, stop: stop, clock: SystemClock.shared)
    }

    static func wait(until wake: Double, journal: Journal, stop: CancellationPipe, clock: SendClock) throws -> Bool {
        try journal.append(.wait(untilUnixSeconds: Int(wake.rounded(.up))))
        try journal.checkpoint()
        let wait = wake - clock.wallSeconds
        return !((wait > 0 && !clock.sleep(seconds: wait, cancellation: stop)) || stop.isCancelled)
    }

    /// A signal ended the wait: the send ends interrupted, in its journal as
    /// in its report and exit status (`status` then tells a send stopped
    /// while waiting, not one that vanished while scheduled).
    public static func stopped(journal: Journal, waitingFor next: Int64) throws -> String {
        try journal.append(.end(outcome: .interrupted))
        try journal.checkpoint()
        return "stopped while waiting for \(utcText(next)); `campaign send --resume \(journal.directory)` goes on"
    }
}
