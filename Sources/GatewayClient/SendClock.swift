#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import LocalTime

/// Where a send's connections read the time and wait: the system's clocks
/// and poll(2) in a send, a clock that moves only when a wait would block in
/// a test (as swift-nio's `EmbeddedEventLoop.advanceTime(by:)`), so an
/// answer timeout of 30 s or a backoff is tested in microseconds.
package protocol SendClock: AnyObject, Sendable {
    /// Monotonic nanoseconds (only differences mean anything).
    var now: UInt64 { get }
    /// Seconds since the Unix epoch, to the fraction (schedules, expiries, suppressions).
    var wallSeconds: Double { get }
    /// Waits until one of `fds` (the first `count`) is ready, or `milliseconds` pass.
    func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32)
    /// Sleeps `seconds` unless `cancellation` fires first: false when it did.
    func sleep(seconds: Double, cancellation: CancellationPipe?) -> Bool
}

/// The system's clocks and poll(2).
package final class SystemClock: SendClock {
    package static let shared = SystemClock()
    package var now: UInt64 { Deadline.now().nanoseconds }
    package var wallSeconds: Double { wallClockSeconds() }
    package func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32) {
        _ = Glibc.poll(&fds, nfds_t(count), milliseconds)
    }
    package func sleep(seconds: Double, cancellation: CancellationPipe?) -> Bool {
        CampaignIO.sleep(until: .after(seconds: seconds), cancellation: cancellation)
    }
}
