#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import GatewayClient

/// A ``SendClock`` on which pauses pass at once and are written down: a
/// test asserts the backoffs a client chose, to the digit, instead of timing
/// them on the wall clock. Monotonic time is the real clock's plus every
/// pause so far; a poll is a real poll.
package final class PauseRecordingClock: SendClock, @unchecked Sendable {
    private let lock = Lock()
    private var slept: UInt64 = 0
    private var recorded: [Double] = []

    package init() {}

    /// Every pause asked for, in order, in seconds.
    package var pauses: [Double] { lock.withLock { recorded } }

    package var now: UInt64 { Deadline.now().nanoseconds + lock.withLock { slept } }
    package var wallSeconds: Double { SystemClock.shared.wallSeconds + Double(lock.withLock { slept }) / 1e9 }

    package func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32) {
        _ = Glibc.poll(&fds, nfds_t(count), milliseconds)
    }

    package func sleep(seconds: Double, cancellation: CancellationPipe?) -> Bool {
        if cancellation?.isCancelled == true { return false }
        lock.withLock {
            recorded.append(seconds)
            slept += UInt64(max(0, seconds) * 1e9)
        }
        return true
    }
}

/// A ``SendClock`` that stands still until the test moves it: a rate or a
/// timer is judged at exact moments. A poll returns at once, moving nothing.
package final class ManualClock: SendClock, @unchecked Sendable {
    private let lock = Lock()
    private var nanoseconds: UInt64

    package init(startingAt nanoseconds: UInt64 = 1_000_000_000) { self.nanoseconds = nanoseconds }

    package var now: UInt64 { lock.withLock { nanoseconds } }
    package var wallSeconds: Double { 1_700_000_000 + Double(now) / 1e9 }

    package func advance(nanoseconds delta: UInt64) { lock.withLock { nanoseconds += delta } }

    package func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32) {
        _ = Glibc.poll(&fds, nfds_t(count), 0)
    }

    package func sleep(seconds: Double, cancellation: CancellationPipe?) -> Bool {
        if cancellation?.isCancelled == true { return false }
        advance(nanoseconds: UInt64(max(0, seconds) * 1e9))
        return true
    }
}

/// A ``SendClock`` for a client talking to a real server on loopback: a
/// poll looks at its descriptors for up to 20 ms of real time, and when
/// nothing came, the rest of the wait passes at once; pauses pass at once
/// and are written down. A silent server's answer timeout of 30 s is then
/// judged by this clock in well under a second of real time, while a
/// server that does answer is read as it would be.
package final class FastForwardClock: SendClock, @unchecked Sendable {
    private let lock = Lock()
    private var skipped: UInt64 = 0
    private var recorded: [Double] = []
    private let start = Deadline.now().nanoseconds

    package init() {}

    /// Every pause asked for, in order, in seconds.
    package var pauses: [Double] { lock.withLock { recorded } }
    /// Seconds of this clock since it was made (real time and what passed at once).
    package var elapsedSeconds: Double { Double(now - start) / 1e9 }

    package var now: UInt64 { Deadline.now().nanoseconds + lock.withLock { skipped } }
    package var wallSeconds: Double { SystemClock.shared.wallSeconds + Double(lock.withLock { skipped }) / 1e9 }

    package func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32) {
        let looked = min(max(0, milliseconds), 20)
        let ready = Glibc.poll(&fds, nfds_t(count), looked)
        if ready == 0 { lock.withLock { skipped += UInt64(max(0, milliseconds) - looked) * 1_000_000 } }
    }

    package func sleep(seconds: Double, cancellation: CancellationPipe?) -> Bool {
        if cancellation?.isCancelled == true { return false }
        lock.withLock {
            recorded.append(seconds)
            skipped += UInt64(max(0, seconds) * 1e9)
        }
        return true
    }
}
