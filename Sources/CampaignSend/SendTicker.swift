#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import SendJournal
import SendEngine

/// A run's timeline, on its own thread: twice a second, whether the pool
/// should grow or shrink (``PoolSizer``); once a second, the outage check,
/// the round trip, the counts journaled as a tick (for `status --html`) and
/// the variants'; every ``Sender/storeMergeSeconds``, the run's suppressions
/// merged into the store.
final class SendTicker {
    private let stop: CancellationPipe
    private var thread: pthread_t?
    private let journaled = JournaledSecond()

    /// The last second journaled as a tick (0: none yet).
    var lastJournaledSecond: Int { journaled.value }

    init(shared: SendShared, pool: ConnectionPool, settings: SendSettings, oneQueue: Bool, started: UInt64,
         logger: @escaping @Sendable (String) -> Void, mergeSuppressions: @escaping @Sendable () -> Void) throws {
        let stop = try CancellationPipe()
        self.stop = stop
        let growable = pool.maximum > settings.connections
        let (outageLimit, rateLimit, clock, journaled) = (settings.outageLimitSeconds, settings.rate, shared.clock, journaled)
        thread = startThread {
            var tick = 0
            var answeredBefore = 0
            var sizer = PoolSizer(maximum: pool.maximum)
            var secondsRoundTrip: UInt64?
            var cpuBefore = CPUTimes.now()
            var saidCPUIsSpent = false
            let every = PoolSizer.tickSeconds
            while clock.sleep(seconds: Double(tick + 1) * every - Double(clock.now - started) / 1e9, cancellation: stop) {
                tick += 1
                let c = shared.report
                let answered = c.accepted + c.presumed + c.failed
                var (sample, roundTrip, connectionsCPU) = pool.sample()
                sample.rate = Double(answered - answeredBefore) / every
                answeredBefore = answered
                sample.trouble = shared.inTrouble
                sample.rateCapped = rateLimit > 0 && sample.rate >= 0.9 * Double(rateLimit)
                let cpuNow = CPUTimes.now()
                (sample.cpuOwn, sample.cpuMachine) = cpuNow.share(since: cpuBefore)
                sample.cpuConnections = cpuNow.share(of: connectionsCPU, since: cpuBefore)
                cpuBefore = cpuNow
                if let r = roundTrip { secondsRoundTrip = min(secondsRoundTrip ?? r, r) }
                if growable, !shared.isStopping {
                    let change = sizer.next(sample)
                    if change == 0, !saidCPUIsSpent, sample.size < pool.maximum, sample.bound >= PoolSizer.boundShare, PoolSizer.cpuIsSpent(sample) {
                        saidCPUIsSpent = true
                        logger("connections: staying at \(sample.size) (the send uses \(Int((sample.cpuOwn ?? 0) * 100))% of its CPUs: more connections would only share them)")
                    }
                    if change < 0 {
                        pool.retire(-change)
                        shared.poolResized(to: pool.size)
                        logger("connections: \(sample.size) → \(pool.size) (the last step did not raise the rate: \(Int(sample.rate))/s; the connections it added finish what they hold and close)")
                    } else if change > 0, case let added = pool.add(change), added > 0 {
                        shared.poolResized(to: pool.size)
                        logger("connections: \(sample.size) → \(pool.size) (\(Int(sample.rate))/s, \(Int(sample.bound * 100))% of the time held back by the server's window or stream limit\(roundTrip.map { ", round trip \(Int((Double($0) / 1e6).rounded())) ms" } ?? "")\(sample.cpuOwn.map { ", the send using \(Int($0 * 100))% of its CPUs" } ?? ""))")
                    }
                }
                guard tick % Int((1 / every).rounded()) == 0 else { continue }
                let second = Int((Double(tick) * every).rounded())
                shared.checkOutage(limitSeconds: outageLimit)
                // 410s reach the store while the send runs, not only at its end
                // (they are journaled too, and any later run merges them all).
                if second % Sender.storeMergeSeconds == 0 { mergeSuppressions() }
                let milliseconds = secondsRoundTrip.map { Double($0) / 1e6 }
                secondsRoundTrip = nil
                if let milliseconds { shared.noteRoundTrip(milliseconds: milliseconds) }
                try? shared.journal.append(.tick(.init(second: second, counts: c, open: oneQueue ? min(pool.size, c.reconnects) : nil,
                                                        roundTripMilliseconds: milliseconds)))
                journaled.value = second
                if let tally = shared.variants { try? shared.journal.append(.variants(tally.counts)) }
            }
            // A send shorter than a second still tells its round trip: what its last, partial second measured.
            if let r = pool.sample().roundTrip { secondsRoundTrip = min(secondsRoundTrip ?? r, r) }
            if shared.roundTripMilliseconds == nil, let r = secondsRoundTrip { shared.noteRoundTrip(milliseconds: Double(r) / 1e6) }
        }
    }

    /// Stops the thread and waits for it (once; later calls do nothing).
    func finish() {
        guard let thread else { return }
        self.thread = nil
        stop.cancel()
        pthread_join(thread, nil)
    }

    deinit { finish() }
}

/// The ticker's last journaled second, written by its thread, read by the run's end.
private final class JournaledSecond: @unchecked Sendable {
    private let lock = Lock()
    private var second = 0
    var value: Int {
        get { lock.withLock { second } }
        set { lock.withLock { second = newValue } }
    }
}
