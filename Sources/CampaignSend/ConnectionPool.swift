#if canImport(Glibc)
import Glibc
#endif
import CampaignIO

/// What one HTTP/2 connection tells the pool about itself: whether it has
/// had an answer, how its time was spent while work was waiting (limited
/// by the server's flow-control window, by its stream limit, or by
/// neither), and the shortest round trip it saw (a PING, or an answer).
/// A worker adds to its own tally and publishes it a few times a second.
final class ConnectionGauge: @unchecked Sendable {
    struct Tally {
        /// Nanoseconds with a connection open.
        var open: UInt64 = 0
        /// Of them, with work waiting and no room in the server's window.
        var windowBound: UInt64 = 0
        /// Of them, with work waiting and every stream the server allows open.
        var streamBound: UInt64 = 0
        /// The shortest round trip seen, in nanoseconds.
        var roundTrip: UInt64?

        mutating func add(_ other: Tally) {
            open += other.open
            windowBound += other.windowBound
            streamBound += other.streamBound
            if let r = other.roundTrip { roundTrip = min(roundTrip ?? r, r) }
        }
    }

    private let mutex = Lock()
    private var tally = Tally()
    private var productive = false

    func publish(_ local: inout Tally, productive: Bool) {
        mutex.lock()
        tally.add(local)
        self.productive = productive
        mutex.unlock()
        local = Tally()
    }

    /// The tally since the last call (which it resets), and whether the connection has had an answer.
    func takeInterval() -> (Tally, productive: Bool) {
        mutex.lock(); defer { mutex.unlock() }
        let t = tally
        tally = Tally()
        return (t, productive)
    }
}

/// One second of the pool, as the sizer sees it.
struct PoolSample: Equatable {
    /// Connections in the pool, and of them those that have had an answer.
    var size: Int
    var productive: Int
    /// Notifications answered (accepted or final) per second over the last second.
    var rate: Double
    /// The share of the pool's open time spent with work waiting on the
    /// server's window or stream limit: more connections would carry more.
    var bound: Double
    /// The server is in trouble (5xx, 429, resets): not the time to add load.
    var trouble = false
    /// `--rate` is what limits the send.
    var rateCapped = false
    /// The shortest round trip the connections measured, in milliseconds.
    var roundTripMilliseconds: Double?
}

/// Decides, twice a second, how many connections to add: the pool grows
/// while connections are held back by the server's window or stream limit
/// with work waiting, and each step raised the rate by at least ``gain``;
/// after a step that did not, it grows no more. A step doubles the pool,
/// or quadruples it when the connections are nearly always held back and
/// the last step paid almost in full (or, for the first step, the round
/// trip is long: far away with a backlog, every connection adds its window's
/// worth per round trip). It never closes a
/// connection to open another: Apple treats rapid connecting and
/// disconnecting as abuse.
///
/// From far away each HTTP/2 connection carries about one window (65,535
/// bytes) per round trip, so the connections a send needs grow with the
/// distance and the payload size; on loopback the first connections are
/// rarely held back by the server and the pool stays as it started.
struct PoolSizer {
    let maximum: Int

    enum Phase: Equatable {
        /// Waiting (at most ``readyTicks``) for every connection to have an
        /// answer; `baseline` is the rate before the step being judged.
        case warming(ticks: Int, baseline: Double?, factor: Double?)
        /// Every connection answers: the next tick's rate is the measurement,
        /// compared with `baseline`, the rate before the last step (nil when
        /// no step is being judged).
        case measuring(baseline: Double?, factor: Double?)
        /// No step is being judged and the last tick could have made one:
        /// one more tick must agree before the pool grows (a rate taken as
        /// connections warm up, or a single noisy tick, is no baseline).
        case confirming(rate: Double)
        /// The last step did not pay: the pool keeps its size.
        case settled
    }

    private(set) var phase = Phase.warming(ticks: 0, baseline: nil, factor: nil)
    /// How much the last step raised the rate, per doubling.
    private var lastGain: Double?
    /// A doubling must raise the rate by this factor to be followed by another step.
    static let gain = 1.25
    /// After a quadrupling, the gain per doubling the next step needs.
    static let quadruplingGain = 1.5
    /// Share of connection time held back by the server above which more connections are tried.
    static let boundShare = 0.5
    /// A round trip from which a window-bound pool's first step is a quadrupling.
    static let farMilliseconds = 20.0
    /// Ticks to wait for new connections to answer before measuring anyway.
    static let readyTicks = 6
    /// Seconds between two decisions: a new connection answers within
    /// about two round trips, and half a second is enough to measure a rate.
    static let tickSeconds = 0.5

    init(maximum: Int) { self.maximum = maximum }

    /// Connections to add now.
    mutating func next(_ s: PoolSample) -> Int {
        switch phase {
        case .settled:
            return 0
        case .warming(let ticks, let baseline, let factor):
            if s.productive >= s.size || ticks + 1 >= Self.readyTicks {
                phase = .measuring(baseline: baseline, factor: factor)
            } else {
                phase = .warming(ticks: ticks + 1, baseline: baseline, factor: factor)
            }
            return 0
        case .measuring(let baseline, let factor):
            if let baseline {
                // Per doubling: a quadrupling that doubled the rate paid as a
                // doubling that paid 1.41, which says the pool is past the
                // point where connections carry their share: enough.
                let ratio = s.rate / max(baseline, 1)
                let perDoubling = factor == 4 ? ratio.squareRoot() : ratio
                if perDoubling < (factor == 4 ? Self.quadruplingGain : Self.gain) {
                    phase = .settled
                    return 0
                }
                lastGain = perDoubling
            }
            guard mayGrow(s) else {
                phase = .measuring(baseline: nil, factor: nil)   // not now; perhaps in a later tick
                return 0
            }
            if baseline == nil {
                phase = .confirming(rate: s.rate)
                return 0
            }
            return step(s, baseline: s.rate)
        case .confirming(let rate):
            guard mayGrow(s) else {
                phase = .measuring(baseline: nil, factor: nil)
                return 0
            }
            return step(s, baseline: max(rate, s.rate))
        }
    }

    private func mayGrow(_ s: PoolSample) -> Bool {
        s.size < maximum && s.bound >= Self.boundShare && !s.trouble && !s.rateCapped
    }

    /// Grows the pool from `s.size`, judged next against `baseline`.
    private mutating func step(_ s: PoolSample, baseline: Double) -> Int {
        // Far away and always held back: each connection is carrying its
        // window per round trip, so more connections carry more, as the
        // last step showed or as the distance says.
        let far = (s.roundTripMilliseconds ?? 0) >= Self.farMilliseconds
        let factor = ((lastGain ?? 0) >= 1.7 || (lastGain == nil && far)) && s.bound >= 0.9 ? 4 : 2
        phase = .warming(ticks: 0, baseline: baseline, factor: Double(factor))
        return min(s.size * factor - s.size, maximum - s.size)
    }
}

/// The send's connections, each a worker on a thread of its own; more can
/// be added while it runs, up to ``maximum``.
final class ConnectionPool: @unchecked Sendable {
    let maximum: Int
    private let make: (Int) -> any GatewayConnectionWorker
    private let mutex = Lock()
    private var threads: [pthread_t] = []
    private var workers: [any GatewayConnectionWorker] = []
    private var closed = false

    init(maximum: Int, make: @escaping (Int) -> any GatewayConnectionWorker) {
        self.maximum = maximum
        self.make = make
    }

    var size: Int { mutex.lock(); defer { mutex.unlock() }; return workers.count }

    /// Starts `n` more connections (fewer at the maximum, none once the
    /// pool is closed); returns how many it started.
    @discardableResult
    func add(_ n: Int) -> Int {
        mutex.lock(); defer { mutex.unlock() }
        var started = 0
        // Under the lock, so `joinAll` never misses a thread.
        while started < n, !closed, workers.count < maximum {
            let worker = make(workers.count)
            workers.append(worker)
            threads.append(startThread { worker.run() })
            started += 1
        }
        return started
    }

    /// What the connections' gauges (HTTP/2) say since the last call: the
    /// pool's sample without its rate, and the shortest round trip seen.
    func sample() -> (PoolSample, roundTrip: UInt64?) {
        mutex.lock()
        let gauges = workers.compactMap(\.gauge)
        let size = workers.count
        mutex.unlock()
        var sample = PoolSample(size: size, productive: 0, rate: 0, bound: 0)
        var tally = ConnectionGauge.Tally()
        for gauge in gauges {
            let (t, productive) = gauge.takeInterval()
            tally.add(t)
            if productive { sample.productive += 1 }
        }
        if tally.open > 0 { sample.bound = Double(tally.windowBound + tally.streamBound) / Double(tally.open) }
        return (sample, tally.roundTrip)
    }

    /// Waits for every connection to end (those added meanwhile too), then closes the pool.
    func joinAll() {
        while true {
            mutex.lock()
            let pending = threads
            threads = []
            if pending.isEmpty { closed = true }
            mutex.unlock()
            if pending.isEmpty { return }
            for t in pending { pthread_join(t, nil) }
        }
    }
}
