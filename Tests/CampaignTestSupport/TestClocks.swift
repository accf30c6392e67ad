#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import GatewayClient

/// A ``SendClock`` on which pauses pass at once and are written down: a
/// test asserts the backoffs a client chose, to the digit, instead of timing
/// them on the wall clock. Monotonic time is the real clock's plus every
/// pause so far. A poll is a real poll, or with `skippingSilentPolls` one
/// that looks at its descriptors for up to 20 ms and, when nothing came,
/// lets the rest of its wait pass at once: a client of a real server on
/// loopback is then judged against a silent server's answer timeout of
/// 30 s in well under a second, while a server that answers is read as usual.
package final class PauseRecordingClock: SendClock, @unchecked Sendable {
    private let lock = Lock()
    private var skipped: UInt64 = 0
    private var recorded: [Double] = []
    private let skippingSilentPolls: Bool
    private let start = Deadline.now().nanoseconds

    package init(skippingSilentPolls: Bool = false) { self.skippingSilentPolls = skippingSilentPolls }

    /// Every pause asked for, in order, in seconds.
    package var pauses: [Double] { lock.withLock { recorded } }
    /// Seconds of this clock since it was made (real time and what passed at once).
    package var elapsedSeconds: Double { Double(now - start) / 1e9 }

    package var now: UInt64 { Deadline.now().nanoseconds + lock.withLock { skipped } }
    package var wallSeconds: Double { SystemClock.shared.wallSeconds + Double(lock.withLock { skipped }) / 1e9 }

    package func poll(_ fds: inout [pollfd], count: Int, milliseconds: Int32) {
        let looked = skippingSilentPolls ? min(max(0, milliseconds), 20) : milliseconds
        if Glibc.poll(&fds, nfds_t(count), looked) == 0, looked < milliseconds {
            lock.withLock { skipped += UInt64(milliseconds - looked) * 1_000_000 }
        }
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

